"""Several SAEs measured on the same held-out images of a dataset index, one row each: what `vitviz sae evaluate`
prints. Any SAE ``vitviz.sae.load_sae`` reads takes part (vitviz's own, saev's, SAELens's, ViT-Prisma's, sparsify's).

    rows = evaluate_on_index("my-index", ["runs/sae", "hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K"])
    print(table(rows))

The held-out images are the index's split (``vitviz.sae.indexed.held_out``: a hash of each image_id with ``seed``,
below ``holdout``), the same for every SAE; a vitviz SAE trained on this index with another split gets a warning,
since some of "held-out" would then be its training images. Each SAE reads its own block's stored tokens (the patch
tokens, or all of them for an SAE trained on all tokens). The columns, with the anchors' definitions and thresholds
(``vitviz.sae.metrics``):

- L0: non-zero codes per token;
- EV: explained variance, 1 - sum |x - x̂|² / sum |x - mean(x)|²;
- NMSE: saev's normalised MSE, sum |x - x̂|² / sum |x - mean(x)|² (so 1 - EV);
- dead: share of latents that never fire on the held-out tokens (saev: frequency 0);
- dense: share of latents firing on more than 1 % of them (saev's dense_lim 1e-2);
- CE rec: ViT-Prisma's CE loss recovered, (CE_zero - CE_sae) / (CE_zero - CE_clean) against the labels (else the
  clean model's top class), the block's patch tokens replaced by the reconstruction or zeroed (prefix tokens kept);
- top-1: how often the top class is unchanged with the reconstruction.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from vitviz.sae.errors import SAEError
from vitviz.sae.files import load_sae
from vitviz.sae.metrics import DENSE, evaluate, prefix_nmse, top1_agreement

COLUMNS = (  # metric -> heading, in the printed order
    ("l0", "L0"),
    ("explained_variance", "EV"),
    ("normalised_mse", "NMSE"),
    ("dead_fraction", "dead"),
    ("dense_fraction", "dense"),
    ("ce_loss_recovered", "CE rec"),
    ("top1_agreement", "top-1"),
)


def training_record(spec: str | Path) -> dict:
    """The training record of a vitviz SAE folder (its config.json's ``training``), else {}."""
    path = Path(spec)
    folder = path if path.is_dir() else path.parent
    try:
        header = json.loads((folder / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    record = header.get("training") if isinstance(header, dict) and header.get("format") == "vitviz-sae" else None
    return record if isinstance(record, dict) else {}


def evaluate_on_index(
    index: str | Path,
    specs: Sequence[str | Path],
    *,
    block: int | None = None,
    holdout: float = 0.1,
    seed: int = 0,
    max_images: int | None = None,
    model: str | None = None,
    source: str | None = None,
    device: str = "auto",
    batch: int = 64,
) -> list[dict]:
    """One row per SAE spec: its name, block, tokens and the metrics of the module docstring on the index's held-out
    images. ``block`` overrides the block each SAE says it reads. Bad input raises ``SAEError``."""
    from vitviz.dataset import open_index
    from vitviz.sae.indexed import index_data, index_labels, index_model, index_pixels, label_batches
    from vitviz.sae.training import device_of

    if not 0 < holdout < 1:
        raise SAEError(f"--holdout must be in (0, 1): the metrics need held-out images; got {holdout}")
    if not specs:
        raise SAEError("give at least one SAE")
    opened = open_index(Path(index))
    vit = index_model(opened, model).to(device_of(device))
    width, layers = int(opened.manifest["activations"]["width"]), vit.config.num_layers
    rows = []
    for spec in specs:
        sae = load_sae(spec, d_in=width).to(device_of(device))
        chosen = block if block is not None else sae.block_for(layers)
        if chosen is None:
            raise SAEError(f"{spec} does not say which block it reads: give --block")
        tokens = getattr(sae, "tokens", "patches")
        if tokens not in ("patches", "all"):
            raise SAEError(f"{spec} reads only the {tokens} token; vitviz evaluates SAEs on patch or all tokens")
        record = training_record(spec)
        split = record.get("data") or {}
        if split.get("index") == str(opened.folder) and (split.get("holdout"), split.get("split_seed")) != (
            holdout,
            seed,
        ):
            print(
                f"warning: {spec} was trained on {opened.folder} with --holdout {split.get('holdout')} --seed "
                f"{split.get('split_seed')}: with another split some held-out images are its training images",
                file=sys.stderr,
            )
        data = index_data(Path(index), chosen, holdout, seed, tokens, max_images)
        metrics = evaluate(sae, data.held)
        prefixes = (record.get("train") or {}).get("matryoshka")
        if prefixes:
            metrics["prefix_nmse"] = dict(zip(map(str, prefixes), prefix_nmse(sae, data.held, tuple(prefixes))))
        pixels = index_pixels(data.index, vit, data.held_images, batch, source)
        labels = label_batches(vit, index_labels(data.index, data.held_images), batch)
        metrics |= top1_agreement(vit, sae, chosen, pixels, labels)
        name = str(spec)
        rows.append({"sae": name, "block": chosen, "token_kind": tokens, "labels": labels is not None} | metrics)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as an aligned text table, the definitions below it."""
    headings = ["SAE", "block", "tokens", "images", *(heading for _, heading in COLUMNS)]
    cells = [
        [row["sae"], str(row["block"]), row["token_kind"], str(row["images"])]
        + [f"{row[key]:.1f}" if key == "l0" else f"{row[key]:.4f}" for key, _ in COLUMNS]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [headings, *cells]) for i in range(len(headings))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
        for line in [headings, *cells]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    against = "the labels" if all(row["labels"] for row in rows) else "the clean model's top class where unlabelled"
    note = (
        "Held-out tokens of the index. NMSE: saev's, SSE over the mean baseline's (= 1 - EV); dead: never fires;"
        f" dense: fires on more than {DENSE:.0%} of the tokens (saev); CE rec: ViT-Prisma's, cross-entropy against"
        f" {against}, the block's patch tokens replaced or zeroed (above 1 when the reconstruction's is below the"
        " clean model's)."
    )
    lines += ["", *textwrap.wrap(note, 110)]
    return "\n".join(lines)
