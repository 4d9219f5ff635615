"""What the feature browser shows of an SAE: each latent's statistics over a dataset index, its top images, the
classes it raises, and the latents that fire on one photo.

- ``latent_statistics``: one pass over the index's stored activations of the SAE's block, shard by shard and a few
  images at a time (never all in memory): per latent, how often it fires (the share of patch tokens with a non-zero
  code), its mean code when firing, its largest code, a histogram of its non-zero codes on fixed log-spaced bins, and
  its top images: (value, image_id, patch), the image's largest code and the patch where it is, the top-k kept by a
  running merge. Codes are in the SAE's normalised units (vitviz.sae.model).
- ``write_latent_tables`` / ``read_latent_tables``: the result as two Parquet tables written once next to the SAE
  (``latents.parquet``: one row per latent; ``top_images.parquet``: one row per (latent, rank)), so a page reads them
  instead of computing them again. Their metadata names the index and block they were computed on;
  ``latent_tables`` reads them, or computes and writes them first.
- ``latent_image_maxima``: each image's largest code of one latent, for the images where it fires.
- ``latent_logit_effects``: the change in every class's logit a latent makes, by direct logit attribution of its
  decoder column (see its docstring); ``raised_classes``: the classes it raises (a positive change), most first;
  ``latent_effects``: that, and the later heads that attend to where it fires
  (``attention_to_firing_patches``), from one pass of the model over a latent's top images.
- ``image_codes`` / ``top_latents``: the codes of one photo's patch tokens, and its strongest latents.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from vitviz.dataset import DatasetIndex
from vitviz.dataset.analysis import image_maxima
from vitviz.dataset.index import check_activations
from vitviz.explain.facets import patch_features
from vitviz.explain.logit_attribution import linear_readout
from vitviz.model import ViT
from vitviz.preprocessing import ImageError, load_image
from vitviz.sae.errors import SAEError
from vitviz.sae.indexed import readable_images
from vitviz.sae.model import TopKSAE

LATENTS_FILE, TOP_FILE = "latents.parquet", "top_images.parquet"
HISTOGRAM_EDGES = np.logspace(-3, 2, 41)  # codes of 0.001 to 100 normalised units; smaller and larger are clipped in


@dataclass(frozen=True)
class LatentStatistics:
    """Per latent j (N of them), over ``tokens`` patch tokens of ``images`` images."""

    frequency: np.ndarray  # (N,) share of tokens where latent j's code is > 0
    mean_activation: np.ndarray  # (N,) its mean code where > 0 (0 if it never fires)
    max_activation: np.ndarray  # (N,) its largest code
    histogram: np.ndarray  # (N, bins) counts of its non-zero codes on HISTOGRAM_EDGES
    top_values: np.ndarray  # (N, k) the largest code in each top image, largest first (0: fewer images fired)
    top_images: np.ndarray  # (N, k) their image_ids (-1 where no image)
    top_patches: np.ndarray  # (N, k) the patch (row-major index) where that code is
    tokens: int
    images: int
    about: dict  # the index, block and images the statistics come from


def check_block(index: DatasetIndex, sae: TopKSAE, block: int | None = None) -> int:
    """The block the SAE reads (``check_fit`` against the index's model), checked against what the index stores:
    an SAEError when the index has no activations of that block."""
    model = index.manifest["model"]  # checked when the index was opened: its config has num_layers
    width = index.manifest["activations"]["width"]
    block = check_fit(sae, model["config"]["num_layers"], width, model.get("spec"), block)
    check_activations(index, block, SAEError, reader=f"the SAE reads block {block}, but ")
    return block


def check_fit(sae: TopKSAE, num_layers: int, width: int, model: str | None, block: int | None = None) -> int:
    """The block the SAE reads in a model of ``num_layers`` blocks of ``width``-wide tokens named ``model``: its
    file's (resolved when counted from the end, as saev's layer -2 is) or ``block``. An SAEError (one line) when it
    names no block, a block the model lacks, or another width; a warning naming both when its file names another
    model."""
    if block is None:
        block = sae.block_for(num_layers)
    if block is None:
        raise SAEError("the SAE's config names no block: say which block's output it reads")
    if not 0 <= block < num_layers:
        raise SAEError(f"the SAE reads block {block}; this model has blocks 0 to {num_layers - 1}")
    warn_other_model(getattr(sae, "model", None), model)
    if width != sae.config.d_in:
        raise SAEError(
            f"the SAE reads {sae.config.d_in}-wide tokens, but block {block} of this model is {width} wide: "
            "it was trained on another model"
        )
    return block


def warn_other_model(trained_on: str | None, model: str | None) -> None:
    """A warning when the SAE's file names the model it was trained on and that is not ``model`` (compared without
    a library prefix, case and separators: "open-clip:laion/X" and "open_clip:laion/x" are the same)."""

    def plain(name: str) -> str:
        return "".join(ch for ch in name.rpartition(":")[2].lower() if ch.isalnum())

    if trained_on and model and plain(trained_on) != plain(model):
        warnings.warn(f"the SAE was trained on {trained_on}; this model is {model}", UserWarning, stacklevel=3)


@torch.no_grad()
def latent_statistics(
    sae: TopKSAE,
    index: DatasetIndex,
    image_ids: np.ndarray,
    block: int | None = None,
    top: int = 12,
    images_per_chunk: int = 32,
) -> LatentStatistics:
    """The statistics of the module docstring over these images' patch tokens, read shard after shard."""
    block = check_block(index, sae, block)
    N, bins = sae.config.latents, len(HISTOGRAM_EDGES) - 1
    skip = index.manifest["activations"]["prefix_tokens"]
    wanted = np.zeros(index.count, dtype=bool)
    wanted[np.asarray(image_ids, dtype=np.int64)] = True
    firing = np.zeros(N, np.int64)
    sums = np.zeros(N, np.float64)
    largest = np.zeros(N, np.float32)
    histogram = np.zeros(N * bins, np.int64)
    best_values = torch.zeros(0, N)  # (kept, N) the running top images, per latent down the first axis
    best_images = torch.zeros(0, N, dtype=torch.long)
    best_patches = torch.zeros(0, N, dtype=torch.long)
    tokens = images = 0
    device = sae.W_enc.device  # the SAE's: a GPU encodes a large index many times faster
    for shard, values in index.activation_shards(block):  # values: (count, T, D) memory-mapped fp16
        keep = wanted[shard["start"] : shard["start"] + shard["count"]]
        for first in range(0, shard["count"], images_per_chunk):
            rows = np.flatnonzero(keep[first : first + images_per_chunk])
            if not len(rows):
                continue
            patches = torch.from_numpy(np.asarray(values[first : first + images_per_chunk][rows, skip:], np.float32))
            codes = sae.encode(patches.to(device))  # (m, P, N)
            m, P = codes.shape[:2]
            tokens, images = tokens + m * P, images + m
            fired = codes > 0
            firing += fired.sum(dim=(0, 1)).cpu().numpy()
            sums += codes.sum(dim=(0, 1)).double().cpu().numpy()
            per_image, where = (t.cpu() for t in codes.max(dim=1))  # (m, N) each image's largest code and its patch
            largest = np.maximum(largest, per_image.max(dim=0).values.numpy())
            token, latent = fired.reshape(-1, N).nonzero(as_tuple=True)
            value = codes.reshape(-1, N)[token, latent].cpu().numpy()
            bin_ = np.clip(np.searchsorted(HISTOGRAM_EDGES, value, side="right") - 1, 0, bins - 1)
            histogram += np.bincount(latent.cpu().numpy() * bins + bin_, minlength=N * bins)
            ids = torch.from_numpy(shard["start"] + first + rows).long()[:, None].expand(m, N)
            best_values = torch.cat([best_values, per_image])  # merge, then keep the top ones again
            best_images = torch.cat([best_images, ids])
            best_patches = torch.cat([best_patches, where])
            if len(best_values) > top:
                best_values, order = best_values.topk(top, dim=0)  # (top, N)
                best_images, best_patches = best_images.gather(0, order), best_patches.gather(0, order)
    if not images:
        raise SAEError("none of the chosen images has stored activations: nothing to compute statistics on")
    best_values, order = best_values.sort(dim=0, descending=True)
    best_images, best_patches = best_images.gather(0, order), best_patches.gather(0, order)
    missing = best_values <= 0  # fewer than `top` images where the latent fires at all
    best_images[missing], best_patches[missing] = -1, -1
    pad = top - len(best_values)  # fewer images than `top`
    top_values = np.pad(best_values.T.numpy(), ((0, 0), (0, pad)))
    top_images = np.pad(best_images.T.numpy(), ((0, 0), (0, pad)), constant_values=-1)
    top_patches = np.pad(best_patches.T.numpy(), ((0, 0), (0, pad)), constant_values=-1)
    about = {"index": str(index.folder), "created": index.manifest.get("created"), "block": block}
    return LatentStatistics(
        firing / tokens,
        np.divide(sums, firing, out=np.zeros(N), where=firing > 0),
        largest,
        histogram.reshape(N, bins),
        top_values,
        top_images,
        top_patches,
        tokens,
        images,
        about | {"images": images, "tokens": tokens},
    )


def write_latent_tables(statistics: LatentStatistics, folder: str | Path) -> tuple[Path, Path]:
    """``latents.parquet`` (latent, frequency, mean_activation, max_activation, histogram) and ``top_images.parquet``
    (latent, rank, value, image_id, patch) in ``folder``; the statistics' ``about`` and the histogram's edges in the
    metadata (key "vitviz"). Written to a temporary name and renamed: a half-written table never reads as whole."""
    folder = Path(folder)
    s = statistics
    N, k = s.top_values.shape
    metadata = {"vitviz": json.dumps(s.about | {"histogram_edges": HISTOGRAM_EDGES.tolist()})}
    latents = pa.table(
        {
            "latent": pa.array(np.arange(N, dtype=np.int32)),
            "frequency": s.frequency,
            "mean_activation": s.mean_activation,
            "max_activation": s.max_activation.astype(np.float64),
            "histogram": pa.array(list(s.histogram.astype(np.int64))),
        }
    ).replace_schema_metadata(metadata)
    found = s.top_images.reshape(-1) >= 0
    tops = pa.table(
        {
            "latent": np.repeat(np.arange(N, dtype=np.int32), k)[found],
            "rank": np.tile(np.arange(k, dtype=np.int32), N)[found],
            "value": s.top_values.reshape(-1).astype(np.float64)[found],
            "image_id": s.top_images.reshape(-1).astype(np.int64)[found],
            "patch": s.top_patches.reshape(-1).astype(np.int32)[found],
        }
    ).replace_schema_metadata(metadata)
    paths = folder / LATENTS_FILE, folder / TOP_FILE
    for table, path in zip((latents, tops), paths):
        partial = path.with_suffix(".partial")
        pq.write_table(table, partial)
        partial.replace(path)
    return paths


def read_latent_tables(folder: str | Path, index: DatasetIndex | None = None, block: int | None = None):
    """(latents, top_images) as pandas frames with their metadata dict, or None when the tables are missing or were
    computed on another index or block (then they are computed again)."""
    folder = Path(folder)
    paths = folder / LATENTS_FILE, folder / TOP_FILE
    if not all(p.is_file() for p in paths):
        return None
    latents, tops = (pq.read_table(p) for p in paths)
    about = json.loads((latents.schema.metadata or {}).get(b"vitviz", b"{}"))
    if index is not None and (about.get("index"), about.get("created")) != (
        str(index.folder),
        index.manifest.get("created"),
    ):
        return None
    if block is not None and about.get("block") != block:
        return None
    return latents.to_pandas(), tops.to_pandas(), about


def latent_tables(sae: TopKSAE, index: DatasetIndex, block: int, folder: str | Path):
    """(latents, top images, about) of ``read_latent_tables``: read from ``folder`` (beside the SAE), or computed over
    every readable image of the index (``latent_statistics``) and written there first. ``block`` is the SAE's block
    resolved for the index's model (``check_block``); an OSError when the folder cannot be written."""
    tables = read_latent_tables(folder, index, block)
    if tables is not None:
        return tables
    write_latent_tables(latent_statistics(sae, index, readable_images(index), block), folder)
    return read_latent_tables(folder, index, block)


def latent_image_maxima(index: DatasetIndex, sae: TopKSAE, block: int, latent: int) -> np.ndarray:
    """Each image's largest code of ``latent`` over its stored patch tokens of ``block``, (count,) in image_id order
    (0 where it never fires, and for an unreadable image)."""
    device = sae.W_enc.device

    def codes(tokens: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return sae.encode(torch.from_numpy(tokens).to(device))[..., latent].cpu().numpy()

    return image_maxima(index, block, codes)


@torch.no_grad()
def latent_logit_effects(model: ViT, sae: TopKSAE, latent: int, last: torch.Tensor, value: float = 1.0) -> torch.Tensor:
    """(C,) the change in every class's logit when latent ``latent``'s decoder column, at code ``value`` (in model
    units: value x W_dec[latent] x scale), is added to every token of the last block's output ``last`` (B, T, D), with
    the final norm's scale frozen at its value on each image; the mean over the B images. Adding it to every token
    adds it to whatever the head pools ([CLS], the mean patch, ...). This is direct logit attribution of the decoder
    column: for an SAE on a block before the last, it is the direct path only, as if the column were written straight
    into the last block's output; what the later blocks make of it is left out."""
    if not 0 <= latent < sae.config.latents:
        raise SAEError(f"latent {latent} is out of range: this SAE has latents 0 to {sae.config.latents - 1}")
    if sae.config.d_in != model.config.hidden_size:
        raise SAEError(f"the SAE reads {sae.config.d_in}-wide tokens; this model's are {model.config.hidden_size}")
    classes = model.config.num_classes
    if not classes:
        raise SAEError("this model has no classes (a backbone): there are no logits to attribute to")
    device = next(model.parameters()).device
    last = last.to(device, torch.float32)
    direction = (value * sae.W_dec[latent] * sae.scale).to(device, torch.float32)  # (D,) in model units
    effects = torch.zeros(classes, device=device)
    targets = torch.arange(classes, device=device)
    for image in last:  # one image at a time: the readout is (classes, T, D)
        readout, _ = linear_readout(model, image[None].expand(classes, -1, -1), targets)
        effects += readout.sum(dim=1) @ direction
    return (effects / len(last)).cpu()


def raised_classes(effects: np.ndarray, names: Sequence[str], top: int) -> list[tuple[str, float]]:
    """The (name, logit change) of at most ``top`` classes whose logit ``effects`` (C,) raises, largest first (tied
    ones in class order); a class whose change is zero or negative is never listed, so the list may be short or
    empty. A class without a name in ``names`` is "class k"."""
    effects = np.asarray(effects, dtype=np.float64)
    order = [int(k) for k in np.argsort(-effects, kind="stable")[:top] if effects[k] > 0]
    return [(names[k] if k < len(names) else f"class {k}", float(effects[k])) for k in order]


@torch.no_grad()
def latent_effects(
    model: ViT,
    sae: TopKSAE,
    index: DatasetIndex,
    block: int,
    latent: int,
    largest: float,
    photos: Sequence[tuple[int, bytes]],
) -> tuple[np.ndarray | None, np.ndarray] | None:
    """What a latent does downstream, over its top images (``photos``: (image_id, the image file's bytes)): each
    class's logit change at its largest code (``latent_logit_effects`` on the last block's output; None for a
    backbone), and the (later blocks, heads) attention shares on the patches where it fires, its codes read from the
    index's stored activations of ``block`` (``attention_to_firing_patches``). One pass of the model over the photos
    that decode (one that does not is left out); None when none does."""
    prefix = index.manifest["activations"]["prefix_tokens"]
    pixels, codes = [], []
    for image_id, data in photos:
        try:
            pixels.append(model.transform(load_image(data)))
        except ImageError:
            continue
        stored = torch.from_numpy(index.activations(int(image_id), block)[0])
        codes.append(image_codes(sae, stored, prefix)[:, latent])
    if not pixels:
        return None
    device = next(model.parameters()).device
    output = model(torch.stack(pixels).to(device), output_hidden_states=True, output_attentions=True)
    effects = None
    if model.config.num_classes:
        effects = latent_logit_effects(model, sae, latent, output.hidden_states[-1], largest).numpy()
    heads = attention_to_firing_patches(list(output.attentions), torch.stack(codes), block, prefix).numpy()
    return effects, heads


@torch.no_grad()
def image_codes(sae: TopKSAE, hidden: torch.Tensor, prefix_tokens: int) -> torch.Tensor:
    """The codes (P, N) of one photo's patch tokens: ``hidden`` (T, D) is the SAE's block output, prefix first."""
    return sae.encode(hidden[prefix_tokens:].float().to(sae.W_enc.device)).cpu()


def photo_codes(model: ViT, sae: TopKSAE, pixel_values: torch.Tensor, block: int) -> torch.Tensor:
    """The codes (P, N) of one photo's patch tokens at the output of ``block`` (pixel values (1, C, H, W)): the
    blocks up to it run, no further (explain.patch_features), in fp32."""
    tokens = patch_features(model, pixel_values[:1], block, "token")[0]  # (P, D)
    with torch.no_grad():
        return sae.encode(tokens.to(sae.W_enc.device)).cpu()


def top_latents(codes: torch.Tensor, count: int = 12) -> list[tuple[int, float, int]]:
    """The latents with the largest codes on this photo, largest first: (latent, its largest code, patches where it
    fires), only latents that fire."""
    largest = codes.max(dim=0).values  # (N,)
    firing = (codes > 0).sum(dim=0)
    order = torch.argsort(largest, descending=True, stable=True)[:count]
    return [(int(j), float(largest[j]), int(firing[j])) for j in order if largest[j] > 0]


def patch_latents(codes: torch.Tensor, patch: int) -> list[tuple[int, float]]:
    """The latents that fire on one patch (row-major index), largest first: (latent, code)."""
    row = codes[patch]
    fired = row.nonzero().flatten()
    return sorted(((int(j), float(row[j])) for j in fired), key=lambda pair: -pair[1])


def top_image_shares(tops: pd.DataFrame, images: pd.DataFrame, label: str | None = None) -> pd.DataFrame:
    """Per latent with top images, over them: how many (``top_images``), the share whose label is ``label``
    (``label_share``; 0 without a label) and the share the model gets wrong (``wrong_share``, over those with a
    label): the search for latents by class and by the images where the model is wrong. ``tops``: top_images.parquet's
    rows (latent, image_id); ``images``: the index's (image_id, label, correct)."""
    joined = tops[["latent", "image_id"]].merge(images[["image_id", "label", "correct"]], on="image_id", how="left")
    joined["is_label"] = (joined["label"] == label) if label is not None else False
    joined["is_wrong"] = joined["correct"].map(lambda c: None if pd.isna(c) else not bool(c)).astype(float)
    grouped = joined.groupby("latent")
    return pd.DataFrame(
        {
            "top_images": grouped.size(),
            "label_share": grouped["is_label"].mean().astype(float),
            "wrong_share": grouped["is_wrong"].mean().fillna(0.0),
        }
    ).reset_index()


def attention_to_firing_patches(
    attentions: list[torch.Tensor], codes: torch.Tensor, block: int, prefix_tokens: int
) -> torch.Tensor:
    """(blocks after ``block``, heads): the attention mass each head of the later blocks puts on the patches where a
    latent fires, averaged over its queries (every token) and the images. ``attentions``: every block's (B, heads, T,
    T) weights; ``codes`` (B, P): the latent's code on each image's patches. Those blocks read the residual stream
    the latent was written to, so a head with a large share reads where the feature is."""
    fired = (codes > 0).float()  # (B, P)
    shares = []
    for weights in attentions[block + 1 :]:
        on_patches = weights[..., prefix_tokens:].float()  # (B, heads, T, P)
        shares.append((on_patches * fired[:, None, None, :].to(on_patches)).sum(dim=-1).mean(dim=(0, 2)).cpu())
    return torch.stack(shares) if shares else torch.zeros(0, attentions[0].shape[1])
