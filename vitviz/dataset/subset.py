"""A sub-index: some images of an index written as an index of their own, for `vitviz sae` or the benchmark.

``write_subindex(index, image_ids, out)`` copies the chosen images' rows of every table and array (in their stored
dtypes, shard by shard) into ``out``, numbered 0, 1, 2... in the order of their parent ids; the images table keeps
each image's id in the parent as ``parent_image_id``. The manifest is the parent's (model, options, layout, source,
so the photos are read from where the parent's were) with the new shards, the count and ``subset_of`` (the parent's
folder); the search indexes are built anew over the chosen images. ``vitviz.open_index(out)`` reads it with the same
checks as any index.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitviz.dataset.build import build_search
from vitviz.dataset.index import DatasetIndex
from vitviz.dataset.storage import (
    ACTIVATIONS,
    SHARDS,
    TABLES,
    activation_name,
    folder_lock,
    write_manifest,
    write_shard,
)

PARENT_ID = "parent_image_id"  # the images table's column that holds each image's id in the parent index


class SubsetError(ValueError):
    """The chosen images or the output folder cannot make a sub-index."""


def _array_names(index: DatasetIndex) -> list[str]:
    """The per-image arrays the index stores (rollout, features, activations of each block, ...)."""
    names = {f.removesuffix(".npy") for f in index.shards[0]["files"] if f.endswith(".npy")}
    stored = sorted(n for n in names if not n.startswith(ACTIVATIONS))
    return stored + [activation_name(b) for b in index.activation_blocks]


def _gather(index: DatasetIndex, ids: np.ndarray, name: str) -> np.ndarray:
    """Rows ``ids`` (sorted) of array ``name`` in its stored dtype, read from the parent's shards."""
    parts = []
    for shard in index.shards:
        start, count = shard["start"], shard["count"]
        inside = ids[(ids >= start) & (ids < start + count)]
        if len(inside):
            parts.append(np.asarray(index._array(shard, name)[inside - start]))
    return np.concatenate(parts)


def _tables(index: DatasetIndex, ids: np.ndarray, renumber: dict[int, int]) -> dict:
    """The chosen rows of each Parquet table, image_id renumbered (the images table keeps the parent's id)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tables = {}
    for name in TABLES:
        parts = []
        for shard in index.shards:
            start, count = shard["start"], shard["count"]
            if not ((ids >= start) & (ids < start + count)).any():
                continue
            table = pq.read_table(index.folder / SHARDS / shard["name"] / f"{name}.parquet")
            parts.append(table.filter(pc.is_in(table["image_id"], value_set=pa.array(ids, pa.int64()))))
        table = pa.concat_tables(parts)
        parent = table["image_id"].to_numpy()
        new = pa.array([renumber[int(i)] for i in parent], table.schema.field("image_id").type)
        table = table.set_column(table.schema.get_field_index("image_id"), "image_id", new)
        if name == "images":
            table = table.append_column(PARENT_ID, pa.array(parent, pa.int64()))
        tables[name] = table
    return tables


def write_subindex(index: DatasetIndex, image_ids: Sequence[int], out: str | Path) -> Path:
    """Write the images ``image_ids`` of ``index`` as an index in the new folder ``out`` (see the module's
    docstring); returns the folder. Raises SubsetError for no ids, an id outside the index or a folder that exists
    and is not empty."""
    ids = np.unique(np.asarray(list(image_ids), dtype=np.int64))
    if not len(ids):
        raise SubsetError("no images chosen: a sub-index needs at least one")
    if ids[0] < 0 or ids[-1] >= index.count:
        raise SubsetError(f"image ids must be in [0, {index.count - 1}]; got {ids[0]} .. {ids[-1]}")
    out = Path(out).expanduser().resolve()
    if out == index.folder or index.folder in out.parents:
        raise SubsetError(f"{out} is inside the index it is taken from; choose a folder outside {index.folder}")
    if out.exists() and (not out.is_dir() or any(p.name != ".lock" for p in out.iterdir())):
        raise SubsetError(f"{out} exists and is not an empty folder; choose a new folder")
    size = index.layout["shard_size"]
    renumber = {int(parent): position for position, parent in enumerate(ids)}
    names = _array_names(index)
    manifest = copy.deepcopy(index.manifest)
    with folder_lock(out):
        records = []
        for number, first in enumerate(range(0, len(ids), size)):
            chosen = ids[first : first + size]
            arrays = {name: _gather(index, chosen, name) for name in names}
            records.append(write_shard(out, number, first, _tables(index, chosen, {**renumber}), arrays))
        if (index.folder / "pca.npz").is_file():
            shutil.copyfile(index.folder / "pca.npz", out / "pca.npz")
        manifest["shards"], manifest["count"], manifest["complete"] = records, len(ids), True
        manifest["subset_of"] = {"folder": str(index.folder), "images": len(ids)}
        manifest["search"] = build_search(out, manifest)
        write_manifest(out, manifest)
    return out


__all__ = ["PARENT_ID", "SubsetError", "write_subindex"]
