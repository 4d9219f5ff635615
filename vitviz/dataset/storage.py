"""The index on disk: Parquet tables and .npy arrays in immutable shards, a manifest, and a lock.

    DIR/manifest.json            what made the index (model, weights, options), its shards and their sha256
    DIR/shards/000000/           images.parquet, heads.parquet, rollout.npy, readout.npy, embedding.npy,
                                 features.npy (and relevance.npy), shard.json: one shard of shard_size images;
                                 with --activations, activations-block03.<sha256[:16]>.npy per block: every
                                 token of the block's output, named by the hash of its content (saev's layout)
    DIR/pca.npz                  the PCA the patch features were reduced by (with --pca)
    DIR/search/                  the FAISS indexes (search.py)
    DIR/.lock                    held (flock) by the run writing DIR; it holds that run's pid

A shard is written into a hidden temporary folder and renamed into place only once every file in it is
complete and synced, so a killed run leaves either a whole shard or none (a leftover temporary folder is
removed by the next run). Shard k holds image_ids [k * shard_size, (k + 1) * shard_size), whichever process
wrote it, so a resumed run and a run of several processes write the same shards as one clean run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from vitviz.dataset.checks import (
    ACTIVATIONS,
    FORMAT,  # noqa: F401 - the layout's names are read from here (build.py)
    FORMAT_VERSION,  # noqa: F401
    MANIFEST,
    SHARDS,
    IndexFormatError,
    check_manifest,
    read_manifest_text,
    sha256_file,
)

TABLES = ("images", "heads")


def activation_name(block: int) -> str:
    return f"{ACTIVATIONS}{block:02d}"


class IndexBusyError(RuntimeError):
    """Another run is writing the index folder."""


def shard_name(index: int) -> str:
    return f"{index:06d}"


def weight_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (names, shapes, dtypes and bytes): equal weights, equal fingerprint."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)  # 1-D: a 0-dim scalar (a logit scale) cannot be viewed
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold DIR/.lock for the run: a second run on the same folder is refused with the first one's pid.

    flock is released by the kernel when the process dies, so a kill -9 never leaves the folder locked."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise IndexBusyError(
                f"{out} is being written by another run (pid {holder}); wait for it to finish, "
                "or index into another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: Path, value: dict) -> None:
    """Write JSON atomically: a temporary file, synced, then renamed over ``path``."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    _sync_folder(path.parent)


def write_shard(out: Path, index: int, start: int, tables: dict, arrays: dict[str, np.ndarray]) -> dict:
    """Write shard ``index`` (its images start at ``start``) and return its record for the manifest.

    Everything goes into a temporary folder first; the rename that makes it visible comes last."""
    import pyarrow.parquet as pq

    shards = out / SHARDS
    shards.mkdir(parents=True, exist_ok=True)
    temporary = shards / f".{shard_name(index)}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    for name, table in tables.items():
        pq.write_table(table, temporary / f"{name}.parquet", compression="zstd")
    for name, array in arrays.items():
        np.save(temporary / f"{name}.npy", np.ascontiguousarray(array))
    files, activations = {}, {}
    for path in sorted(temporary.iterdir()):
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        digest = sha256_file(path)
        if path.name.startswith(ACTIVATIONS):  # named by its content: a name never points at other bytes
            named = path.with_name(f"{path.stem}.{digest[:16]}.npy")
            path.rename(named)
            path = named
            activations[str(int(path.stem.split(".")[0].removeprefix(ACTIVATIONS)))] = path.name
        files[path.name] = {"sha256": digest, "bytes": path.stat().st_size}
    count = tables["images"].num_rows
    record = {"name": shard_name(index), "start": start, "count": count, "files": files}
    if activations:
        record["activations"] = activations  # block -> its file in this shard
    _write_json(temporary / "shard.json", record)
    final = shards / shard_name(index)
    if final.exists():  # a shard redone (it was short: the run before had a smaller --limit)
        shutil.rmtree(final)
    os.rename(temporary, final)
    _sync_folder(shards)
    return record


def complete_shards(out: Path, clean: bool = False) -> dict[int, dict]:
    """The shards that were renamed into place (complete by construction), by index. With ``clean``, leftover
    temporary folders of killed runs are removed (only before any process of this run starts writing)."""
    shards = out / SHARDS
    if not shards.is_dir():
        return {}
    found = {}
    for folder in sorted(shards.iterdir()):
        if folder.name.startswith("."):
            if clean:
                shutil.rmtree(folder, ignore_errors=True)  # a killed run's half-written shard
            continue
        try:
            record = json.loads((folder / "shard.json").read_text())
            found[int(folder.name)] = record
        except (OSError, ValueError) as error:
            raise IndexFormatError(
                f"shard {folder} has no readable shard.json ({error}); delete that folder and run again with --resume"
            ) from None
    return found


def write_manifest(out: Path, manifest: dict) -> None:
    _write_json(out / MANIFEST, manifest)


def read_manifest(out: Path) -> dict:
    """The manifest, checked (checks.py): its size and nesting before and as it is parsed, then every field the
    reader uses, against each other and the model's config. The files themselves are checked on opening."""
    folder = Path(os.path.realpath(Path(out).expanduser()))
    if not (folder / MANIFEST).exists() and not (folder / MANIFEST).is_symlink():
        raise IndexFormatError(f"{out} is not a vitviz index: it has no {MANIFEST} (make one with `vitviz index`)")
    return check_manifest(folder, read_manifest_text(folder))


def check_same_run(old: dict, new: dict) -> None:
    """Refuse to resume a run made with another model or other options, naming both."""
    for key in ("model", "options", "source"):
        if old.get(key) != new.get(key):
            differ = sorted(
                k
                for k in set(old.get(key, {})) | set(new.get(key, {}))
                if old.get(key, {}).get(k) != new.get(key, {}).get(k)
            )
            before = {k: old.get(key, {}).get(k) for k in differ}
            now = {k: new.get(key, {}).get(k) for k in differ}
            raise IndexFormatError(
                f"cannot --resume: the index was made with {key} {before}, this run has {now}; "
                "resume with the same settings, or index into a new folder"
            )
