"""An SAE's data from a dataset index made with ``vitviz index ... --activations B``.

- the training and held-out tokens, read shard after shard from the memory-mapped activation files (never whole);
- a held-out split of the images by image_id (``held_out``): a hash of the id alone, so an image stays on its side
  whatever the order or the size of the index, and the split is rebuilt from its fraction and seed (kept in the
  SAE's config.json);
- the index's model (its spec in the manifest, checked against the weights' fingerprint) and its images, read again
  from the source the manifest records (each checked against its sha256), for the metrics that run the model.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from vitviz.dataset import DatasetIndex, open_index
from vitviz.dataset.index import check_activations
from vitviz.dataset.sources import HUB_PREFIX, Source, open_source
from vitviz.model import ViT
from vitviz.sae.errors import SAEError

Tokens = Literal["patches", "all"]
BATCH = 64  # images per forward pass of the held-out metrics
SPLIT = "splitmix64(image_id + seed * 2^32) / 2^64 < holdout"  # the rule, as recorded in config.json


def held_out(image_ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Per image id, whether it is held out: splitmix64 of the id and seed, as a uniform number in [0, 1), below
    ``fraction``. Depends on the id alone, never on which other images the index holds."""
    z = np.asarray(image_ids, dtype=np.uint64) + np.uint64(seed % 2**32) * np.uint64(2**32)
    z = z + np.uint64(0x9E3779B97F4A7C15)  # arrays of uint64 wrap around, as the hash wants
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / 2**53 < fraction


def readable_images(index: DatasetIndex) -> np.ndarray:
    """image_ids of the images the index could read, in order (the others have no activations)."""
    table = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id", limit=index.count + 1)
    return table["image_id"].to_numpy(dtype=np.int64)


def token_source(
    index: DatasetIndex, block: int, image_ids: np.ndarray, tokens: Tokens = "patches", images_per_chunk: int = 256
) -> Callable[[], Iterator[np.ndarray]]:
    """A source for ``vitviz.sae.data``: each pass reads the activation files in order, ``images_per_chunk`` images
    at a time, and yields the chosen images' tokens (m * tokens, D) in fp16: the patch tokens, or all of them."""
    shards = index.activation_shards(block)
    skip = index.manifest["activations"]["prefix_tokens"] if tokens == "patches" else 0
    wanted = np.zeros(index.count, dtype=bool)
    wanted[np.asarray(image_ids, dtype=np.int64)] = True

    def chunks() -> Iterator[np.ndarray]:
        for shard, values in shards:  # values: (count, T, D) memory-mapped
            keep = wanted[shard["start"] : shard["start"] + shard["count"]]
            for first in range(0, shard["count"], images_per_chunk):
                rows = np.flatnonzero(keep[first : first + images_per_chunk])
                if len(rows):
                    part = values[first : first + images_per_chunk][rows, skip:]  # (m, T', D): read in order
                    yield part.reshape(-1, part.shape[-1])

    return chunks


@dataclass(frozen=True)
class IndexData:
    """What `vitviz sae train INDEX` reads: the tokens of both sides of the split and how it was made."""

    index: DatasetIndex
    block: int
    train_images: np.ndarray  # image_ids, sorted
    held_images: np.ndarray
    train: Callable[[], Iterator[np.ndarray]]
    held: Callable[[], Iterator[np.ndarray]]
    record: dict  # for config.json: the index, the block, the tokens and the split


def index_data(
    folder: Path, block: int, holdout: float, seed: int, tokens: Tokens = "patches", max_images: int | None = None
) -> IndexData:
    """Open the index, check it stores block ``block``, and split its readable images into training and held-out."""
    index = open_index(folder)
    check_activations(index, block, SAEError)
    images = readable_images(index)[:max_images]
    held = held_out(images, holdout, seed)
    if held.all() or (holdout > 0 and not held.any()):
        raise SAEError(
            f"--holdout {holdout} of {len(images)} readable images leaves {int((~held).sum())} to train on and "
            f"{int(held.sum())} held out; both need at least one image: change --holdout or index more images"
        )
    record = {
        "index": str(index.folder),
        "index_model": index.manifest["model"].get("spec"),
        "index_fingerprint": index.manifest["model"].get("fingerprint"),
        "block": block,
        "tokens": tokens,
        "holdout": holdout,
        "split": SPLIT,
        "split_seed": seed,
        "max_images": max_images,
        "train_images": int((~held).sum()),
        "held_out_images": int(held.sum()),
    }
    return IndexData(
        index,
        block,
        images[~held],
        images[held],
        token_source(index, block, images[~held], tokens),
        token_source(index, block, images[held], tokens),
        record,
    )


def index_model(index: DatasetIndex, spec: str | None = None) -> ViT:
    """The model the index was made with (or ``spec``), with its prompts, refused if its weights differ."""
    from vitviz.dataset.storage import weight_fingerprint
    from vitviz.loading.specs import load_model
    from vitviz.text.options import apply_prompt_options

    info = index.manifest["model"]
    spec = spec or info.get("spec")
    model = load_model(spec)
    prompts = argparse.Namespace(
        prompts=info.get("prompts"), prompt_set=info.get("prompt_set"), templates=info.get("templates")
    )
    model = apply_prompt_options(model, prompts).eval()
    if weight_fingerprint(model) != info.get("fingerprint"):
        raise SAEError(
            f"the model {spec!r} does not have the weights {index.folder} was indexed with (their fingerprints "
            "differ): give the index's model with --model"
        )
    return model


def reopen_source(index: DatasetIndex, spec: str | Path | None = None) -> Source:
    """The source the index was made from, opened again (or ``spec``, where the images are now)."""
    arguments = dict(index.manifest.get("source_arguments") or {})
    if spec is not None:
        arguments["spec"] = str(spec)
    if "spec" not in arguments:  # an index made before the arguments were recorded: its description names it
        kind, _, rest = index.manifest["source"]["description"].partition(" ")
        where, _, split = rest.partition(" split ")
        arguments |= {"spec": f"{HUB_PREFIX}{where}" if kind == "hub" else where, "split": split or None}
    return open_source(
        arguments["spec"], arguments.get("path_column") or "path", arguments.get("label_column"), arguments.get("split")
    )


def index_pixels(
    index: DatasetIndex, model: ViT, image_ids: np.ndarray, batch: int = BATCH, source: str | Path | None = None
) -> Iterator[torch.Tensor]:
    """Pixel batches (B, C, H, W) of these images in image_id order, read again from the source and checked: the
    same path and the same bytes (sha256) as when indexed."""
    import hashlib

    from vitviz.preprocessing import load_image

    ids = np.sort(np.asarray(image_ids, dtype=np.int64))
    if not len(ids):
        return
    stored = index.query(
        f"SELECT image_id, path, sha256 FROM images WHERE image_id <= {int(ids[-1])} ORDER BY image_id",
        limit=index.count + 1,
    ).set_index("image_id")
    wanted = set(ids.tolist())
    pending: list[torch.Tensor] = []
    found = 0
    for image_id, entry in enumerate(reopen_source(index, source)):
        if image_id > ids[-1]:
            break
        if image_id not in wanted:
            continue
        path, digest = stored.loc[image_id, "path"], stored.loc[image_id, "sha256"]
        data = entry.read() if entry.path == path else b""
        if hashlib.sha256(data).hexdigest() != digest:
            raise SAEError(
                f"image {image_id} ({path}) is not the file that was indexed (source entry {entry.path!r}): the source "
                "changed since; give where the indexed images are now with --source"
            )
        pending.append(model.transform(load_image(data)))
        found += 1
        if len(pending) == batch:
            yield torch.stack(pending)
            pending = []
    if pending:
        yield torch.stack(pending)
    if found < len(ids):
        raise SAEError(f"the source holds fewer images than the index ({found} of {len(ids)} found)")


def index_labels(index: DatasetIndex, image_ids: np.ndarray) -> list[str | None]:
    """The labels of these images (in image_id order), None where the source gave none."""
    table = index.query("SELECT image_id, label FROM images ORDER BY image_id", limit=index.count + 1)
    labels = table.set_index("image_id")["label"]
    return [None if v is None or v != v else str(v) for v in labels.loc[np.sort(image_ids)].tolist()]


def label_batches(model: ViT, labels: list[str | None], batch: int = BATCH) -> list[torch.Tensor] | None:
    """Class indices in batches, when every label is one of the model's classes; else None."""
    names = list(model.class_names or [])
    if not labels or not all(label in names for label in labels):
        return None
    indices = torch.tensor([names.index(label) for label in labels])
    return list(indices.split(batch))
