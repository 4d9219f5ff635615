"""The pass: images through the model in batches, once, and what is kept of each.

``analyse_batch`` runs the one analysis of vitviz (``vitviz.analysis.analyse``, the Photo page's too) on a batch and
picks what the index stores: the head statistics, prefix shares and rollout are folded in block by block, so no
(B, heads, T, T) tensor outlives its block. ``index_shard`` reads a shard's files, batches the readable ones and lays
the results out as the shard's tables and arrays.

A model that attends in windows and merges tokens between stages (Swin) goes through ``analyse_windowed_batch``:
one pass keeping its window attention (linear in the tokens), every map on the first stage's patch grid. The rollout
and relevance across windows and stages (explain.stages); ``readout``, the last block's heads read out by the mean
pooling, each carried back to the first stage's patches (explain.stages.last_block_readout); the head statistics
measured inside the windows (vitviz.analysis.window_statistics: one heads-table row per head a block has; no prefix
tokens, so the prefix shares hold the share of attention on real tokens rather than padding); high-norm patches from
the last block's tokens, each first-stage patch marked where its last-stage token is; the pooled vector as the
embedding. No patch features or block activations: Swin's tokens change grid and width at every stage, so no one
(rows, cols, D) array holds them (``windowed_refusal`` says so in one line).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import torch

from vitviz import explain
from vitviz.analysis import analyse, window_statistics
from vitviz.dataset.sources import Entry, read_entry
from vitviz.dataset.storage import ACTIVATIONS, IndexFormatError, activation_name
from vitviz.explain.common import token_grid
from vitviz.explain.facets import Facet
from vitviz.explain.head_statistics import HEAD_STATISTICS
from vitviz.explain.stages import last_block_readout, rollout_across_stages, to_first_tokens
from vitviz.model import Precision, Swin, ViT, autocast
from vitviz.preprocessing import ImageError, load_image

HEAD_STATISTIC_NAMES = tuple(statistic.name for statistic in HEAD_STATISTICS)  # stored in the heads table

TOP = 5  # classes kept per image


@dataclass(frozen=True)
class IndexOptions:
    """What the pass stores; recorded in the manifest, and a resumed run must match it."""

    precision: str = "fp32"  # "fp32" or "bf16" (autocast), already resolved from "auto"
    features: bool = True  # store patch features
    features_block: int = -1  # block whose patch features (0 is the first, -1 the last)
    facet: Facet = "token"  # token after the block; key, query or value cost a second partial pass
    pca: int | None = None  # reduce the features to this many PCA components, fitted on the first pca_sample images
    pca_sample: int = 512
    relevance: bool = False  # class-specific relevance for the top class (a backward pass per image)
    faithfulness: bool = False  # per-image perturbation AUCs of the stored map (11 x 2 forward passes per image)
    outlier_factor: float = 2.0  # high-norm patches: last-block norm above this x the median patch norm
    shard_size: int = 1024  # images per shard
    limit: int | None = None  # index only the first images of the source
    activations: tuple[int, ...] = ()  # blocks (0-based, sorted) whose whole output, every token, is stored in fp16

    def to_dict(self) -> dict:
        values = asdict(self)
        if not self.activations:  # absent when unused: an index made before this option still resumes
            del values["activations"]
        return values


@dataclass(frozen=True)
class Projection:
    """A PCA fitted on a sample of patch features: project with (x - mean) @ components.T."""

    mean: torch.Tensor  # (D,)
    components: torch.Tensor  # (k, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.device)) @ self.components.T.to(x.device)


def fit_projection(features: torch.Tensor, components: int) -> Projection:
    """PCA of feature rows (n, D) by SVD, each component signed so its largest entry is positive."""
    if not 1 <= components <= min(features.shape):
        raise ValueError(
            f"--pca must be in [1, {min(features.shape)}] for {features.shape[0]} sample patches of "
            f"{features.shape[1]} dimensions; got {components}"
        )
    x = features.double()
    mean = x.mean(dim=0)
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    top = vh[:components]  # (k, D)
    signs = top.gather(1, top.abs().argmax(dim=1, keepdim=True)).sign()
    return Projection(mean.float(), (top * torch.where(signs == 0, 1.0, signs)).float())


def windowed_refusal(options: IndexOptions) -> str | None:
    """Why ``options`` cannot index a model that attends in windows and merges tokens (Swin), in one line; None
    if they can."""
    if options.features:
        return (
            "Swin's tokens change grid and width at every stage, so the index stores no patch features for it "
            "(its maps are on the first stage's grid, its pooled vector is the embedding for image search): give "
            "--no-features"
        )
    if options.activations:
        return "--activations stores one grid of tokens per block for a ViT's SAE; Swin's change at every stage"
    return None


def heads_per_layer(model: ViT | Swin) -> list[int]:
    """The heads of every block, in order: one count for a ViT, the stage's for a Swin."""
    c = model.config
    if isinstance(model, Swin):
        return [heads for depth, heads in zip(c.depths, c.num_heads, strict=True) for _ in range(depth)]
    return [c.num_heads] * c.num_layers


def prefix_names(model: ViT | Swin) -> list[str]:
    """Names of the prefix tokens in their order: cls, dist, reg0, reg1... (none for Swin)."""
    if isinstance(model, Swin):
        return []
    c = model.config
    names = (["cls"] if c.class_token else []) + (["dist"] if c.distillation_token else [])
    names += [f"reg{i}" for i in range(c.num_register_tokens)]
    return names if len(names) == c.num_prefix_tokens else [f"prefix{i}" for i in range(c.num_prefix_tokens)]


def analyse_batch(
    model: ViT, pixels: torch.Tensor, options: IndexOptions, projection: Projection | None = None
) -> dict[str, torch.Tensor]:
    """What the index stores of one batch (B, 3, H, W), from one ``vitviz.analysis.analyse`` pass; every result on
    the CPU in fp32 (the caller stores fp16): probabilities (B, C); every statistic of explain.HEAD_STATISTICS by name,
    (B, layers, heads) or (B, layers, heads, K); rollout (B, rows, cols); readout (B, heads, rows, cols), the last
    block's; high_norm (B, rows * cols) bool; embedding (B, D); features (B, rows, cols, D'); relevance (B, rows, cols)
    and faithfulness (B, 2) when asked; per block of ``options.activations``, its output tokens (B, T, D) in fp16."""
    if isinstance(model, Swin):
        return analyse_windowed_batch(model, pixels, options)
    c = model.config
    block = options.features_block % c.num_layers
    from_the_pass = options.features and options.facet == "token"  # the block's output tokens: no other pass
    blocks = sorted({*options.activations, *([block] if from_the_pass else [])})
    analysis = analyse(model, pixels, options.precision, keep_blocks=blocks, readout_blocks="last")
    p, grid = analysis.num_prefix_tokens, analysis.grid_size
    tokens = analysis.layout if analysis.layout is not None else p  # the token layout, or its prefix count
    results = dict(analysis.statistics) | {
        "rollout": analysis.rollout,
        "readout": analysis.readout_attention[:, -1],
        "high_norm": explain.high_norm_patches(analysis.token_norms[:, -1], tokens, options.outlier_factor),
        "embedding": analysis.pooled,
    }
    if analysis.probabilities is not None:
        results["probabilities"] = analysis.probabilities
    if options.features:
        if from_the_pass:  # what explain.patch_features returns for the token facet, for free
            features = analysis.tokens[block][:, p:].float()  # (B, N, D)
        else:
            features = explain.patch_features(model, analysis.pixel_values, block, options.facet, options.precision)
        if projection is not None:
            features = projection(features)
        # (B, N, D') -> (B, rows, cols, D'), the cells through the layout's own order (TokenLayout.grid_view)
        cells = token_grid(tokens, None if analysis.layout is not None else grid, "the index's patch features")
        results["features"] = cells.as_map(features.transpose(1, 2)).movedim(1, -1).contiguous()
    for kept in options.activations:  # the residual stream after the block: prefix tokens first, then patches
        results[activation_name(kept)] = analysis.tokens[kept].to(torch.float16)  # (B, T, D), fp16 on device
    if options.relevance or options.faithfulness:
        results |= _per_image_extras(model, analysis.pixel_values, results, options)
    return {name: value.detach().cpu() for name, value in results.items()}


def analyse_windowed_batch(model: Swin, pixels: torch.Tensor, options: IndexOptions) -> dict[str, torch.Tensor]:
    """What the index stores of one batch through a Swin (the module's docstring), in ``analyse_batch``'s names and
    shapes: maps (B, rows, cols) and readout (B, heads, rows, cols) on the first stage's grid, heads the most of any
    block (0 past the last block's own); statistics (B, layers, heads[, 1]), NaN past a block's heads."""
    if reason := windowed_refusal(options):
        raise ValueError(reason)
    pixels = pixels.to(next(model.parameters()).device)
    precision: Precision = options.precision
    with torch.inference_mode(), autocast(precision, pixels.device.type):
        out = model(pixels, output_attentions=True, output_hidden_states=True)
    attentions = [a.float() for a in out.attentions]
    statistics = window_statistics(attentions, out.layouts, model.config.patch_size)
    heads = max(heads_per_layer(model))
    readout = last_block_readout(attentions[-1], out.layouts)  # (B, heads_last, rows, cols)
    readout = torch.cat([readout, readout.new_zeros(readout.shape[0], heads - readout.shape[1], *readout.shape[2:])], 1)
    norms = out.hidden_states[-1].float().norm(dim=-1)  # (B, T_last): the last block's tokens
    high = explain.high_norm_patches(norms, 0, options.outlier_factor).float()
    results = statistics | {
        "rollout": rollout_across_stages(attentions, out.layouts),
        "readout": readout,
        "high_norm": to_first_tokens(high, out.layouts) > 0,  # each first-stage patch of a high-norm token
        "embedding": out.pooled.float(),
    }
    if out.logits is not None:
        results["probabilities"] = model.probabilities(out.logits.float())
    if options.relevance or options.faithfulness:
        results |= _per_image_extras(model, pixels, results, options)
    return {name: value.detach().cpu() for name, value in results.items()}


def _per_image_extras(model: ViT, pixels: torch.Tensor, results: dict, options: IndexOptions) -> dict:
    """Relevance for the top class and faithfulness AUCs, image by image (they need gradients or extra passes)."""
    if "probabilities" not in results:
        raise ValueError("--relevance and --faithfulness need a classifier; this model is a backbone")
    relevance, aucs = [], []
    for i, target in enumerate(results["probabilities"].argmax(dim=1).tolist()):
        one = pixels[i : i + 1]
        if options.relevance:
            relevance.append(
                explain.method_maps(model, one, ["relevance"], target, options.precision).maps["relevance"]
            )
        if options.faithfulness:
            scored = relevance[-1] if options.relevance else results["rollout"][i]
            curves = explain.faithfulness(model, one, scored.to(one.device), target, precision=options.precision)
            aucs.append([curves["auc_most_first"], curves["auc_least_first"]])
    extras = {}
    if relevance:
        extras["relevance"] = torch.stack(relevance)  # (B, rows, cols)
    if aucs:
        extras["faithfulness"] = torch.tensor(aucs)  # (B, 2)
    return extras


def index_shard(
    model: ViT,
    entries: Sequence[Entry],
    start: int,
    options: IndexOptions,
    batch_size: int,
    projection: Projection | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, pa.Table], dict[str, np.ndarray]]:
    """The tables ("images", "heads") and arrays (one row per entry, zeros for unreadable ones) of one shard whose
    first image is ``start``. ``progress(n)`` is called as n more images are done."""
    c = model.config
    size = model.transform.output_size  # fixed: checked by the caller
    n = len(entries)
    rows = [
        {
            "image_id": start + i,
            "path": e.path,
            "label": e.label,
            "width": None,
            "height": None,
            "sha256": None,
            "error": None,
        }
        for i, e in enumerate(entries)
    ]
    arrays: dict[str, np.ndarray] = {}
    heads: list[dict[str, np.ndarray]] = []
    pending: list[tuple[int, torch.Tensor]] = []

    def flush() -> None:
        if not pending:
            return
        positions = [i for i, _ in pending]
        batch = analyse_batch(model, torch.stack([x for _, x in pending]), options, projection)
        _store(batch, positions, rows, arrays, heads, n, start, model)
        if progress is not None:
            progress(len(pending))
        pending.clear()

    for i, entry in enumerate(entries):
        data, error = read_entry(entry)
        if data is not None:
            rows[i]["sha256"] = hashlib.sha256(data).hexdigest()
            try:
                image = load_image(data)
                rows[i]["width"], rows[i]["height"] = image.size
                pending.append((i, model.transform(image)))
            except (ImageError, OSError, ValueError) as failure:
                error = str(failure) or type(failure).__name__
        if error is not None:
            rows[i]["error"] = error
            if progress is not None:
                progress(1)
        if len(pending) == batch_size:
            flush()
    flush()
    if not arrays:  # nothing readable in this shard: still the arrays, all zeros, so every shard has every file
        probe = analyse_batch(model, torch.zeros(1, c.num_channels, *size), options, projection)
        for name, value in probe.items():
            if name not in ("probabilities", "high_norm", "faithfulness", *HEAD_STATISTIC_NAMES):
                arrays[name] = np.zeros((n, *value.shape[1:]), _dtype(name))
    tables = {
        "images": pa.Table.from_pylist(rows, schema=_images_schema(model, options)),
        "heads": _heads_table(heads, model),
    }
    return tables, {name: arrays[name] for name in sorted(arrays)}


def _dtype(name: str) -> type:
    return np.float32 if name == "embedding" else np.float16  # maps and features in fp16


FP16_MAX = float(torch.finfo(torch.float16).max)  # 65,504


def _stored(name: str, values: torch.Tensor) -> np.ndarray:
    """``values`` in the array's stored dtype, converted by torch (several times faster than numpy's fp16 cast).
    A finite value beyond fp16's range would be stored as infinity without a word, so it is refused instead."""
    if _dtype(name) == np.float32:
        return values.float().numpy()
    if values.dtype != torch.float16:
        largest = values.abs().amax().item() if values.numel() else 0.0
        if largest > FP16_MAX and np.isfinite(largest):
            raise IndexFormatError(
                f"{name} reaches {largest:.4g}, beyond float16's largest value ({FP16_MAX:,.0f}); the index stores "
                f"{name} in float16, so this model's values cannot be kept: leave {name} out of the index"
            )
    return values.to(torch.float16).numpy()


def _store(
    batch: dict, positions: list[int], rows: list[dict], arrays: dict, heads: list, n: int, start: int, model: ViT
) -> None:
    """Copy one batch's results into the shard's rows, arrays and head records."""
    stored = (
        "rollout",
        "readout",
        "embedding",
        "features",
        "relevance",
        *(n for n in batch if n.startswith(ACTIVATIONS)),
    )
    for name in stored:
        if name in batch:
            if name not in arrays:
                arrays[name] = np.zeros((n, *batch[name].shape[1:]), _dtype(name))
            arrays[name][positions] = _stored(name, batch[name])
    names = model.class_names
    # whole-batch tensor ops, converted to Python lists once: no per-image tensor calls
    high_norm = batch["high_norm"].numpy()
    if "probabilities" in batch:
        top = batch["probabilities"].topk(min(TOP, len(names)), dim=1)  # per row, as topk of each row
        top_indices, top_values = top.indices.tolist(), top.values.tolist()
    faithfulness = batch["faithfulness"].tolist() if "faithfulness" in batch else None
    for j, i in enumerate(positions):
        row = rows[i]
        row["high_norm_patches"] = np.flatnonzero(high_norm[j]).tolist()
        if "probabilities" in batch:
            row["top5_indices"] = top_indices[j]
            row["top5_classes"] = [names[k] for k in top_indices[j]]
            row["top5_probabilities"] = top_values[j]
            row["prediction"], row["prediction_index"] = row["top5_classes"][0], row["top5_indices"][0]
            row["probability"] = row["top5_probabilities"][0]
            row["correct"] = None if row["label"] is None else row["label"] == row["prediction"]
        if faithfulness is not None:
            row["faithfulness_most_first"], row["faithfulness_least_first"] = faithfulness[j]
    heads.append(
        {
            "image_id": np.asarray(positions) + start,
            **{name: batch[name].numpy() for name in HEAD_STATISTIC_NAMES},
        }
    )


def _images_schema(model: ViT, options: IndexOptions) -> pa.Schema:
    fields = [
        ("image_id", pa.int64()),
        ("path", pa.string()),
        ("label", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("sha256", pa.string()),
        ("error", pa.string()),
    ]
    if model.config.num_classes > 0:
        fields += [
            ("prediction", pa.string()),
            ("prediction_index", pa.int32()),
            ("probability", pa.float32()),
            ("correct", pa.bool_()),
            ("top5_classes", pa.list_(pa.string())),
            ("top5_indices", pa.list_(pa.int32())),
            ("top5_probabilities", pa.list_(pa.float32())),
        ]
    fields.append(("high_norm_patches", pa.list_(pa.int32())))
    if options.faithfulness:
        fields += [("faithfulness_most_first", pa.float32()), ("faithfulness_least_first", pa.float32())]
    return pa.schema(fields)


def _heads_table(heads: list[dict], model: ViT) -> pa.Table:
    """One row per (image, layer, head), in that order."""
    counts = heads_per_layer(model)  # a Swin's blocks have their stage's heads: its arrays have the most, NaN past
    layers, most = len(counts), max(counts)
    real = (np.arange(most)[None] < np.asarray(counts)[:, None]).reshape(-1)  # (layers * most,) the heads that exist
    prefix = prefix_names(model)
    columns: dict[str, list[np.ndarray]] = {}
    for part in heads:
        B = len(part["image_id"])
        kept = np.tile(real, B)  # (B * layers * most,)
        values = {
            "image_id": np.repeat(part["image_id"].astype(np.int64), layers * most)[kept],
            "layer": np.tile(np.repeat(np.arange(layers, dtype=np.int16), most), B)[kept],
            "head": np.tile(np.arange(most, dtype=np.int16), B * layers)[kept],
        }
        for statistic in HEAD_STATISTICS:  # (B * layers * heads, K) per statistic, one column per k
            table = part[statistic.name].reshape(B * layers * most, -1)[kept]
            values |= {name: table[:, k].astype(np.float32) for k, name in enumerate(statistic.columns(prefix))}
        for name, value in values.items():
            columns.setdefault(name, []).append(value)
    schema = pa.schema(
        [("image_id", pa.int64()), ("layer", pa.int16()), ("head", pa.int16())]
        + [(name, pa.float32()) for statistic in HEAD_STATISTICS for name in statistic.columns(prefix)]
    )
    if not columns:
        return schema.empty_table()
    table = pa.table({name: np.concatenate(parts) for name, parts in columns.items()})
    order = np.argsort(table["image_id"].to_numpy(), kind="stable")  # batches come in image order already
    return table.take(order).cast(schema)
