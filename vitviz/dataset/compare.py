"""Two indexes of the same images compared: two models (or two runs) over one dataset, as LIT's side-by-side models.

Images are matched by the sha256 of their file's bytes (the ``images`` table's ``sha256``), so two indexes of one
folder match whatever order, folder name or path each was read in, and an image copied twice matches once (its
lowest image_id in each index). Only images both indexes could read are compared.

Pure pandas over the two ``images`` tables: nothing here draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from vitviz.dataset.index import DatasetIndex

SIDES = ("a", "b")  # the open index, then the other one: suffixes of the matched table's columns
PER_SIDE = ("image_id", "path", "label", "prediction", "probability", "correct")
MAX_IMAGES = 5_000_000  # rows of each images table read


class NothingShared(ValueError):
    """The two indexes hold no image in common (no sha256 of a readable image in both)."""


def readable_images(index: DatasetIndex) -> pd.DataFrame:
    """The readable images of ``index`` with their sha256 and what PER_SIDE it stores, one row per sha256 (the lowest
    image_id of a file stored twice)."""
    stored = set(index.query("SELECT * FROM images", limit=1).columns)
    wanted = ["sha256", *(c for c in PER_SIDE if c in stored)]
    frame = index.query(
        f"SELECT {', '.join(wanted)} FROM images WHERE error IS NULL AND sha256 IS NOT NULL ORDER BY image_id",
        limit=max(1, min(index.count, MAX_IMAGES)),
    )
    for column in PER_SIDE:  # a backbone's index has no prediction columns
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame.drop_duplicates("sha256", keep="first")


def match_indexes(first: DatasetIndex, second: DatasetIndex) -> pd.DataFrame:
    """The images both indexes hold, matched by sha256, one row each in the first index's image_id order.

    Columns: sha256; image_id_a, path_a, label_a, prediction_a, probability_a, correct_a (the first index's), the
    same with _b (the second's); ``label`` (the first's label, else the second's); ``agree`` (the two top-class
    predictions are equal; missing when either has none). Raises NothingShared, one line, when they share no image.
    """
    a, b = readable_images(first), readable_images(second)
    matched = a.merge(b, on="sha256", how="inner", suffixes=("_a", "_b"))
    if matched.empty:
        raise NothingShared(
            f"the indexes {first.folder} ({len(a):,} readable images) and {second.folder} ({len(b):,}) share no "
            "image (matched by sha256 of the file's bytes): index the same images with both models"
        )
    matched = matched.sort_values("image_id_a", kind="stable").reset_index(drop=True)
    matched["label"] = matched["label_a"].where(matched["label_a"].notna(), matched["label_b"])
    both = matched["prediction_a"].notna() & matched["prediction_b"].notna()
    agree = (matched["prediction_a"].astype("string") == matched["prediction_b"].astype("string")).astype("boolean")
    matched["agree"] = agree.where(both, pd.NA)
    order = ["sha256", *(f"{c}_{side}" for side in SIDES for c in PER_SIDE), "label", "agree"]
    return matched[order]


def agreement_counts(matched: pd.DataFrame) -> dict[str, int]:
    """Counts of a ``match_indexes`` table: shared images, predictions that agree and disagree (images with both
    predictions), and over the labelled ones how many each side gets right, with the four ways two models can be
    right or wrong together."""
    predicted = matched["agree"].notna()
    ca = matched["correct_a"].astype("boolean")
    cb = matched["correct_b"].astype("boolean")
    labelled = (ca.notna() & cb.notna()).to_numpy(bool)
    ra, rb = ca.fillna(False).to_numpy(bool), cb.fillna(False).to_numpy(bool)
    return {
        "shared": len(matched),
        "agree": int((matched["agree"].fillna(False).astype(bool)).sum()),
        "disagree": int((predicted & ~matched["agree"].fillna(True).astype(bool)).sum()),
        "labelled": int(labelled.sum()),
        "a_right": int((labelled & ra).sum()),
        "b_right": int((labelled & rb).sum()),
        "both_right": int((labelled & ra & rb).sum()),
        "only_a_right": int((labelled & ra & ~rb).sum()),
        "only_b_right": int((labelled & ~ra & rb).sum()),
        "both_wrong": int((labelled & ~ra & ~rb).sum()),
    }


def disagreements(matched: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``match_indexes`` table whose two predictions differ, the most confident disagreement first (by
    the larger of the two probabilities), ties in image_id order."""
    rows = matched[matched["agree"].notna() & ~matched["agree"].fillna(True).astype(bool)]
    confidence = rows[["probability_a", "probability_b"]].astype("float64").max(axis=1)
    order = pd.DataFrame({"c": -confidence, "i": rows["image_id_a"]}).sort_values(["c", "i"], kind="stable").index
    return rows.loc[order].reset_index(drop=True)


__all__ = ["NothingShared", "agreement_counts", "disagreements", "match_indexes", "readable_images"]
