"""One latent edited over a whole dataset: per-class accuracy of the model before and after, as a table.

    table = ablate(model, sae, block, batches, latent=12, scale=0.0)
    table = ablate(model, sae, block, batches, latent=12, set_to=-2 * largest)   # saev's protocol

Each batch of images goes through the model and through ``with_sae(model, sae, block, scale={latent: scale})``, or
``set_to={latent: value}`` (the same weights; the edit keeps the SAE's reconstruction error, so scale 1 changes
nothing). The table has one row per class, in the model's class order (labels that are not classes of the model
follow, sorted):

    label                 string    the class
    images                int64     labelled images of that class
    correct               int64     of them, predicted right by the unedited model
    correct_edited        int64     ... by the edited model
    accuracy              float64   correct / images
    accuracy_edited       float64   correct_edited / images
    accuracy_change       float64   accuracy_edited - accuracy
    predictions_changed   int64     images whose top class the edit changed
    latent, scale, set_to, block  int32, float64, float64, int32   the edit, the same on every row so tables
                          concatenate: scale is null when the codes were set to set_to, set_to null when scaled
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import torch

from vitviz.model import ViT
from vitviz.sae.editing import with_sae
from vitviz.sae.errors import SAEError
from vitviz.sae.model import TopKSAE

SCHEMA = pa.schema(
    [
        ("label", pa.string()),
        ("images", pa.int64()),
        ("correct", pa.int64()),
        ("correct_edited", pa.int64()),
        ("accuracy", pa.float64()),
        ("accuracy_edited", pa.float64()),
        ("accuracy_change", pa.float64()),
        ("predictions_changed", pa.int64()),
        ("latent", pa.int32()),
        ("scale", pa.float64()),
        ("set_to", pa.float64()),
        ("block", pa.int32()),
    ]
)


@torch.no_grad()
def ablate(
    model: ViT,
    sae: TopKSAE,
    block: int,
    batches: Iterable[tuple[torch.Tensor, list[str]]],
    latent: int,
    scale: float = 0.0,
    progress: Callable[[int], None] | None = None,
    about: dict | None = None,
    set_to: float | None = None,
) -> pa.Table:
    """The per-class table of the module docstring over ``batches`` of (pixels (B, C, H, W), their B labels): the
    latent's codes times ``scale``, or set to ``set_to`` on every patch when it is given (in the SAE's normalised
    units). ``about`` goes into the table's metadata (key "vitviz"), with the edit."""
    model = model.eval()
    edit = {"set_to": {latent: set_to}} if set_to is not None else {"scale": {latent: scale}}
    edited = with_sae(model, sae, block, **edit)  # checks the width and the latent's range
    scale = None if set_to is not None else float(scale)
    names = list(model.class_names or [])
    if not names:
        raise SAEError("this model has no classes (a backbone): there is no accuracy to compare")
    device = next(model.parameters()).device
    counts: dict[str, list[int]] = {}  # label -> [images, correct, correct_edited, predictions_changed]
    for pixels, labels in batches:
        pixels = pixels.to(device)
        before = model(pixels).logits.argmax(dim=-1).tolist()
        after = edited(pixels).logits.argmax(dim=-1).tolist()
        for label, b, a in zip(labels, before, after, strict=True):
            row = counts.setdefault(label, [0, 0, 0, 0])
            row[0] += 1
            row[1] += names[b] == label
            row[2] += names[a] == label
            row[3] += a != b
        if progress is not None:
            progress(len(labels))
    order = [n for n in names if n in counts] + sorted(set(counts) - set(names))
    rows = []
    for label in order:
        images, correct, correct_edited, changed = counts[label]
        rows.append(
            {
                "label": label,
                "images": images,
                "correct": correct,
                "correct_edited": correct_edited,
                "accuracy": correct / images,
                "accuracy_edited": correct_edited / images,
                "accuracy_change": (correct_edited - correct) / images,
                "predictions_changed": changed,
                "latent": latent,
                "scale": scale,
                "set_to": set_to,
                "block": block % len(model.blocks),
            }
        )
    metadata = {"latent": latent, "scale": scale, "set_to": set_to, "block": block % len(model.blocks)} | (about or {})
    return pa.Table.from_pylist(rows, schema=SCHEMA).replace_schema_metadata({"vitviz": json.dumps(metadata)})


def ablation_tables(folder: str | Path) -> dict[Path, pa.Table]:
    """The tables `vitviz sae ablate` wrote into ``folder`` (``ablate-*.parquet``) by path, sorted; files with another
    schema are left out."""
    import pyarrow.parquet as pq

    found = {}
    for path in sorted(Path(folder).glob("ablate-*.parquet")):
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException):  # a damaged file is not an ablation
            continue
        if table.schema.remove_metadata().equals(SCHEMA):
            found[path] = table
    return found
