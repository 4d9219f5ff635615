"""One indexing run: lock the folder, check a resumed run matches, index the shards of this process's share, and
(in the first process) write the manifest and the search indexes. The command and the page both run this.

Under torchrun every process calls ``build_index`` with its rank: shard k goes to process k % world, and each
process writes its own shards; the first process waits for the others, then lists every shard in the manifest.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from vitviz.dataset import search
from vitviz.dataset.indexing import (
    IndexOptions,
    Projection,
    fit_projection,
    index_shard,
    prefix_names,
    windowed_refusal,
)
from vitviz.dataset.sources import Source
from vitviz.dataset.storage import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SHARDS,
    IndexFormatError,
    check_same_run,
    complete_shards,
    folder_lock,
    read_manifest,
    weight_fingerprint,
    write_manifest,
    write_shard,
)
from vitviz.explain import patch_features
from vitviz.model import Swin, ViT
from vitviz.preprocessing import ImageError, load_image

Barrier = Callable[[], None]


def vitviz_version() -> str:
    try:
        return importlib.metadata.version("vitviz")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_model(model: ViT | Swin, options: IndexOptions | None = None) -> tuple[int, int]:
    """The fixed input size the index needs (every image gets the same grid), or a clear refusal; for a Swin,
    also what ``options`` ask that it cannot store (indexing.windowed_refusal)."""
    if isinstance(model, Swin) and options is not None and (reason := windowed_refusal(options)):
        raise IndexFormatError(reason)
    size = model.transform.output_size
    if size is None:
        raise IndexFormatError(
            "this model's preprocessing resizes the shorter side only, so the patch grid would "
            "depend on each image's shape; an index needs one grid: use a model whose "
            "preprocessing crops or resizes to a fixed size"
        )
    patch = model.config.patch_size
    if isinstance(model, Swin) and (size[0] % patch or size[1] % patch):
        raise IndexFormatError(
            f"this Swin's preprocessing gives {size[0]}x{size[1]} inputs, no multiple of its {patch}-pixel patches, "
            "so the first stage's grid would hold padding the index cannot place"
        )
    return size


def index_config(model: ViT | Swin) -> dict:
    """The model's config as the manifest records it. A Swin's is its SwinConfig (per-stage ``num_heads`` kept as
    ``stage_heads``) with the fields an index reads of any model: ``num_layers`` (every block), ``num_heads`` (the
    most of any block: the width of its readout and statistics arrays), ``hidden_size`` (the pooled vector's
    width), no prefix tokens and mean pooling."""
    if not isinstance(model, Swin):
        return asdict(model.config)
    c = model.config
    return asdict(c) | {
        "family": "swin",
        "stage_heads": list(c.num_heads),
        "num_heads": max(c.num_heads),
        "num_layers": c.num_layers,
        "hidden_size": c.hidden_size,
        "class_token": False,
        "distillation_token": False,
        "num_register_tokens": 0,
        "pooling": "mean",
    }


def new_manifest(model: ViT, model_spec: str, extra: dict, options: IndexOptions, source: Source) -> dict:
    """The manifest at the start of a run (no shards yet)."""
    c = model.config
    size = check_model(model, options)
    grid = [size[0] // c.patch_size, size[1] // c.patch_size]
    config = index_config(model)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "vitviz_version": vitviz_version(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": {
            "spec": model_spec,
            "fingerprint": weight_fingerprint(model),
            "class_names": list(model.class_names),
            "config": config,
            "preprocessing": model.transform.to_dict(),
            **extra,
        },
        "options": options.to_dict(),
        "source": {"description": source.description},
        "layout": {
            "grid": grid,
            "input_size": list(size),
            "patch_size": c.patch_size,
            "layers": config["num_layers"],
            "heads": config["num_heads"],
            "prefix_tokens": prefix_names(model),
            "shard_size": options.shard_size,
        },
        "grid": grid,
        "complete": False,
        "shards": [],
    }
    if source.arguments:  # how to open the source again (the images of held-out sets, ablations); not compared
        manifest["source_arguments"] = source.arguments
    if options.activations:
        tokens = grid[0] * grid[1] + c.num_prefix_tokens
        manifest["activations"] = {
            "blocks": list(options.activations),
            "stored": "output.hidden_states[block]: the block's output tokens, before the final norm",
            "tokens": tokens,  # per image: the prefix tokens first, then the patches in row-major order
            "prefix_tokens": c.num_prefix_tokens,
            "width": c.hidden_size,
            "dtype": "float16",
            "bytes_per_image_and_block": tokens * c.hidden_size * 2,
        }
    return json.loads(json.dumps(manifest))  # as it reads back (tuples become lists), so a resumed run compares equal


def shards_of(source: Source, options: IndexOptions) -> Iterator[tuple[int, list]]:
    """(shard index, its entries) in order; entries are listed, not read."""
    entries = iter(source) if options.limit is None else itertools.islice(source, options.limit)
    for index in itertools.count():
        chunk = list(itertools.islice(entries, options.shard_size))
        if not chunk:
            return
        yield index, chunk


def prepare(out: Path, manifest: dict, resume: bool) -> None:
    """Check the folder (first process, under the lock): a fresh folder, or a resumed run with the same settings.
    Removes a killed run's half-written shards and writes the starting manifest."""
    existing = out / MANIFEST
    if existing.exists() or (out / SHARDS).exists():
        if not resume:
            raise IndexFormatError(f"{out} already holds an index: give --resume to continue it, or another --out")
        if existing.exists():
            old = read_manifest(out)
            check_same_run(old, manifest)
            manifest["created"] = old.get("created", manifest["created"])
    complete_shards(out, clean=True)
    write_manifest(out, manifest)


def sample_projection(model: ViT, source: Source, options: IndexOptions, out: Path, batch_size: int) -> Projection:
    """The PCA for --pca, fitted on the patch features of the first pca_sample readable images (kept in pca.npz, so
    a resumed run and every process use the same)."""
    path = out / "pca.npz"
    if path.is_file():
        saved = np.load(path)
        return Projection(torch.from_numpy(saved["mean"]), torch.from_numpy(saved["components"]))
    pixels = []
    for entry in itertools.islice(
        source, options.pca_sample if options.limit is None else min(options.pca_sample, options.limit)
    ):
        try:
            pixels.append(model.transform(load_image(entry.read())))
        except Exception:  # unreadable files are recorded by the pass; the sample skips them
            continue
    if not pixels:
        raise ImageError("no readable image among the first ones, so there is nothing to fit the PCA on")
    features = torch.cat(
        [
            patch_features(
                model, torch.stack(pixels[i : i + batch_size]), options.features_block, options.facet, options.precision
            )
            .flatten(0, 1)
            .cpu()
            for i in range(0, len(pixels), batch_size)
        ]
    )  # (n * N, D)
    projection = fit_projection(features, options.pca)
    temporary = out / ".pca.tmp.npz"
    np.savez(temporary, mean=projection.mean.numpy(), components=projection.components.numpy())
    temporary.replace(path)
    return projection


def build_index(
    model: ViT,
    source: Source,
    out: Path,
    options: IndexOptions,
    model_spec: str,
    batch_size: int = 64,
    resume: bool = False,
    rank: int = 0,
    world: int = 1,
    barrier: Barrier = lambda: None,
    progress: Callable[[int], None] | None = None,
    model_extra: dict | None = None,
) -> dict | None:
    """Index ``source`` into ``out``; returns the final manifest (in the first process; None in the others)."""
    manifest = new_manifest(model, model_spec, model_extra or {}, options, source)
    with contextlib.ExitStack() as stack:
        if rank == 0:  # the first process checks and prepares the folder while the others wait
            stack.enter_context(folder_lock(out))
            prepare(out, manifest, resume)
            if options.pca:
                sample_projection(model, source, options, out, batch_size)
        barrier()
        projection = sample_projection(model, source, options, out, batch_size) if options.pca else None
        _index_share(model, source, out, options, batch_size, rank, world, progress, projection, complete_shards(out))
        barrier()  # every process has written its shards
        return finish(out, manifest, options) if rank == 0 else None


def _index_share(
    model: ViT,
    source: Source,
    out: Path,
    options: IndexOptions,
    batch_size: int,
    rank: int,
    world: int,
    progress,
    projection: Projection | None,
    done: dict,
) -> None:
    for index, entries in shards_of(source, options):
        if index % world != rank:
            continue
        if index in done and done[index]["count"] == len(entries):  # a complete shard of a killed run
            if progress is not None:
                progress(len(entries))
            continue
        start = index * options.shard_size
        tables, arrays = index_shard(model, entries, start, options, batch_size, projection, progress)
        write_shard(out, index, start, tables, arrays)


def finish(out: Path, manifest: dict, options: IndexOptions) -> dict:
    """List the shards (there must be no gap), build the search indexes, and mark the index complete."""
    shards = complete_shards(out)
    for position, index in enumerate(sorted(shards)):
        if index != position or shards[index]["start"] != index * options.shard_size:
            raise IndexFormatError(
                f"the shards of {out} are not 0, 1, 2... in order (found {sorted(shards)}): shards "
                "from another run are mixed in; index into a new folder"
            )
    manifest["shards"] = [shards[i] for i in sorted(shards)]
    manifest["count"] = sum(s["count"] for s in manifest["shards"])
    if (out / "pca.npz").is_file():
        manifest["pca"] = {"file": "pca.npz", "components": options.pca, "sample_images": options.pca_sample}
    manifest["search"] = build_search(out, manifest)
    manifest["complete"] = True
    write_manifest(out, manifest)
    return manifest


def _readable(out: Path, shards: list[dict]) -> np.ndarray:
    """image_ids of the images that were read (no error), in order."""
    import pyarrow.parquet as pq

    ids = []
    for shard in shards:
        table = pq.read_table(out / SHARDS / shard["name"] / "images.parquet", columns=["image_id", "error"])
        ids.append(table["image_id"].to_numpy()[table["error"].is_null().to_numpy(zero_copy_only=False)])
    return np.concatenate(ids)


def build_search(out: Path, manifest: dict, exact_limit: int = search.EXACT_LIMIT) -> dict:
    """FAISS indexes over the readable images' patch features and pooled embeddings (search/*.faiss)."""
    shards = manifest["shards"]
    readable = set(_readable(out, shards).tolist())
    info = {}
    for kind, array in (("patches", "features"), ("images", "embedding")):
        if not all(f"{array}.npy" in s["files"] for s in shards):
            continue
        first = np.load(out / SHARDS / shards[0]["name"] / f"{array}.npy", mmap_mode="r")
        per_image = int(np.prod(first.shape[1:-1])) if kind == "patches" else 1
        dimension = first.shape[-1]

        def chunks(array=array, per_image=per_image, dimension=dimension):
            for shard in shards:
                values = np.load(out / SHARDS / shard["name"] / f"{array}.npy", mmap_mode="r")
                keep = np.array([shard["start"] + i in readable for i in range(shard["count"])], dtype=bool)
                image_ids = np.arange(shard["start"], shard["start"] + shard["count"])[keep]
                ids = (image_ids[:, None] * per_image + np.arange(per_image)).reshape(-1)
                yield ids, np.asarray(values[keep]).reshape(-1, dimension)

        count = len(readable) * per_image
        if count == 0:
            continue
        index, measured = search.build_vector_index(chunks, count, dimension, exact_limit)
        search.save(index, out / search.SEARCH / f"{kind}.faiss")
        info[kind] = measured | {"file": f"{search.SEARCH}/{kind}.faiss", "dimension": dimension}
    return info
