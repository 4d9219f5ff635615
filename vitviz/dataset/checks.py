"""Checks an index folder passes before anything in it is trusted: a damaged or hand-made folder is refused with
one line (``IndexFormatError``) instead of giving garbage, a foreign exception, a hang or a huge allocation.

    read_manifest_text   the manifest's size, nesting and strings are bounded before and while it is parsed
    check_manifest       every field: types (a bool is not an int), the layout against the model's config, shard
                         names as plain folder names, starts and counts that tile [0, count) once each
    check_files          every listed file against the folder: inside it (no symlink out), a regular file of the
                         size the manifest records, each .npy's shape and dtype against the layout (read from its
                         header only), each images.parquet's row count (from its footer)
    verify_checksums     every file's sha256 (slow on a large index, so only `vitviz index --verify DIR` runs it)

Opening an index runs the first three; they read headers and footers, never the data.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path

import numpy as np

FORMAT = "vitviz-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SHARDS = "shards"
ACTIVATIONS = "activations-block"  # the stem of a block's activation file: activations-block03.<hash>.npy

MAX_MANIFEST_BYTES = 16 << 20  # about 20,000 shards: 20 million images at the default shard size
MAX_DEPTH = 64  # the manifest nests 5 levels deep; far deeper is a hand-made file
MAX_STRING = 1 << 16  # characters: paths, class names and specs are far shorter
MAX_SIDE = 1 << 14  # input pixels per side
MAX_WIDTH = 1 << 16  # token width, feature and embedding dimensions
MAX_BLOCKS = 1 << 10  # layers, heads, prefix tokens
MAX_SHARD_SIZE = 1 << 20  # images per shard
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a file or folder name: no "/", "..", "~" or NUL
ACTIVATION_FILE = re.compile(rf"{ACTIVATIONS}(\d{{2,4}})\.[0-9a-f]{{16}}\.npy")
SHA256 = re.compile(r"[0-9a-f]{64}")
FLOAT16, FLOAT32 = np.dtype("<f2"), np.dtype("<f4")


class IndexFormatError(ValueError):
    """The folder is not an index this vitviz can read; the message says what is wrong and what to do."""


AGAIN = "index the dataset again"


def _refuse(where: object, problem: str, remedy: str = AGAIN) -> IndexFormatError:
    return IndexFormatError(f"{where}: {problem}; {remedy}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_int(value: object) -> bool:
    """A JSON integer: ``True`` is an int to Python, never to a manifest."""
    return type(value) is int


def _int(where: object, name: str, value: object, low: int, high: int) -> int:
    if not is_int(value) or not low <= value <= high:
        shown = repr(value)[:40]
        raise _refuse(where, f"{name} must be an integer in [{low}, {high:,}]; it is {shown}")
    return value


# --- the manifest's text --------------------------------------------------------------------------------------------


def inside(folder: Path, path: Path) -> os.stat_result:
    """``path``'s stat (of what a symlink names, when it stays inside ``folder``, a real path), or a refusal when
    it is missing, unreadable or a symlink out. The caller checks every parent below ``folder`` the same way."""
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            if not Path(os.path.realpath(path)).is_relative_to(folder):
                raise _refuse(path, "is a symlink to a place outside the index folder, which is not followed")
            info = os.stat(path)
    except FileNotFoundError:
        raise _refuse(path, "is missing: the index is damaged") from None
    except OSError as error:
        raise _refuse(path, f"cannot be read ({error.strerror or error})") from None
    return info


def read_manifest_text(folder: Path) -> dict:
    """The manifest parsed, its size bounded before it is read and its nesting and strings after: a manifest of
    gigabytes, a string of megabytes or lists nested thousands deep get one line, never a RecursionError."""
    path = folder / MANIFEST
    info = inside(folder, path)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "is not a regular file")
    if info.st_size > MAX_MANIFEST_BYTES:
        raise _refuse(path, f"is {info.st_size:,} bytes, more than a manifest's {MAX_MANIFEST_BYTES:,}")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise _refuse(path, f"cannot be read ({error.strerror or error})") from None
    if len(data) > MAX_MANIFEST_BYTES:  # it grew since its size was read
        raise _refuse(path, f"is more than a manifest's {MAX_MANIFEST_BYTES:,} bytes")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise _refuse(path, "nests lists or objects thousands deep: it was made by hand or damaged") from None
    except ValueError as error:  # bad JSON, bad UTF-8, an integer of 5,000 digits
        problem = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise _refuse(path, f"is not valid JSON ({problem}): it was damaged or edited by hand") from None
    _check_nesting(path, manifest)
    return manifest


def _check_nesting(path: Path, manifest: object) -> None:
    """Level by level (no recursion): at most MAX_DEPTH levels, no string longer than MAX_STRING."""
    level, depth = [manifest], 1
    while level:
        if depth > MAX_DEPTH:
            raise _refuse(path, f"nests lists or objects more than {MAX_DEPTH} deep: it was made by hand or damaged")
        below = []
        for node in level:
            if isinstance(node, dict):
                below.extend(node.values())
                below.extend(node)  # the keys: strings, checked with the level below
            elif isinstance(node, list):
                below.extend(node)
            elif isinstance(node, str) and len(node) > MAX_STRING:
                raise _refuse(path, f"holds a string of {len(node):,} characters (at most {MAX_STRING:,} are read)")
        level, depth = below, depth + 1


# --- the manifest's fields ------------------------------------------------------------------------------------------


def check_manifest(folder: Path, manifest: object) -> dict:
    """Every field the reader uses, checked against each other and the model's config; returns the manifest."""
    path = folder / MANIFEST
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _refuse(path, f'is not a vitviz index manifest (no "format": "{FORMAT}")', "make one with `vitviz index`")
    version = manifest.get("format_version")
    if not is_int(version):
        raise _refuse(path, "has no integer format_version: it was edited by hand")
    if version > FORMAT_VERSION:
        raise _refuse(
            folder,
            f"was written by vitviz {str(manifest.get('vitviz_version', '?'))[:40]} in index format {version}; "
            f"this vitviz reads format {FORMAT_VERSION} and older",
            "upgrade vitviz",
        )
    required = {"model": dict, "options": dict, "shards": list, "grid": list, "complete": bool, "layout": dict}
    for key, kind in required.items():
        if not isinstance(manifest.get(key), kind):
            raise _refuse(path, f"{key!r} is missing or not a {kind.__name__}: the manifest was edited or damaged")
    _check_layout(path, manifest)
    _check_options(path, manifest)
    _check_shards(path, manifest)
    if manifest["complete"]:  # an unfinished run's search entries are stale: its end builds them again
        _check_search(path, manifest)
    return manifest


def _config(path: Path, manifest: dict) -> dict:
    config = manifest["model"].get("config")
    if not isinstance(config, dict):
        raise _refuse(path, "model.config is missing or not an object")
    for key in ("class_token", "distillation_token"):
        if not isinstance(config.get(key), bool):
            raise _refuse(path, f"model.config.{key} must be true or false; it is {repr(config.get(key))[:40]}")
    _int(path, "model.config.patch_size", config.get("patch_size"), 1, MAX_SIDE)
    _int(path, "model.config.hidden_size", config.get("hidden_size"), 1, MAX_WIDTH)
    _int(path, "model.config.num_layers", config.get("num_layers"), 1, MAX_BLOCKS)
    _int(path, "model.config.num_heads", config.get("num_heads"), 1, MAX_BLOCKS)
    _int(path, "model.config.num_register_tokens", config.get("num_register_tokens"), 0, MAX_BLOCKS)
    if not isinstance(config.get("pooling"), str):
        raise _refuse(path, "model.config.pooling must be a string")
    return config


def prefix_count(config: dict) -> int:
    return int(config["class_token"]) + int(config["distillation_token"]) + config["num_register_tokens"]


def _check_layout(path: Path, manifest: dict) -> None:
    config, layout = _config(path, manifest), manifest["layout"]
    size = layout.get("input_size")
    if not (isinstance(size, list) and len(size) == 2):
        raise _refuse(path, f"layout.input_size must be [height, width]; it is {repr(size)[:40]}")
    height, width = (_int(path, "layout.input_size", side, 1, MAX_SIDE) for side in size)
    patch = _int(path, "layout.patch_size", layout.get("patch_size"), 1, MAX_SIDE)
    if patch != config["patch_size"]:
        raise _refuse(path, f"layout.patch_size {patch} is not the model's patch size {config['patch_size']}")
    grid = [height // patch, width // patch]
    for name, value in (("grid", manifest["grid"]), ("layout.grid", layout.get("grid"))):
        if not (isinstance(value, list) and len(value) == 2 and all(is_int(v) for v in value)):
            raise _refuse(path, f"{name} must be two integers [rows, cols]; it is {repr(value)[:40]}")
        if value != grid:
            raise _refuse(
                path,
                f"{name} {value[0]}x{value[1]} is not the {grid[0]}x{grid[1]} patch grid of a "
                f"{height}x{width} input in {patch}-pixel patches",
            )
    if min(grid) < 1:
        raise _refuse(path, f"a {height}x{width} input has no whole {patch}-pixel patch")
    for name, key in (("layers", "num_layers"), ("heads", "num_heads")):
        if layout.get(name) != config[key] or not is_int(layout.get(name)):
            raise _refuse(path, f"layout.{name} {repr(layout.get(name))[:20]} is not the model's {config[key]}")
    names = layout.get("prefix_tokens")
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names) and len(names) == prefix_count(config)):
        raise _refuse(path, f"layout.prefix_tokens must name the model's {prefix_count(config)} prefix tokens")
    _int(path, "layout.shard_size", layout.get("shard_size"), 1, MAX_SHARD_SIZE)


def _check_options(path: Path, manifest: dict) -> None:
    options = manifest["options"]
    for key in ("features", "relevance"):
        if not isinstance(options.get(key, False), bool):
            raise _refuse(path, f"options.{key} must be true or false")
    if options.get("pca") is not None:
        _int(path, "options.pca", options["pca"], 1, MAX_WIDTH)
    if "activations" not in manifest:
        return
    config, stored = manifest["model"]["config"], manifest["activations"]
    blocks = stored.get("blocks") if isinstance(stored, dict) else None
    if not (isinstance(blocks, list) and blocks):
        raise _refuse(path, "activations.blocks must list the stored blocks")
    for block in blocks:
        _int(path, "activations.blocks", block, 0, config["num_layers"] - 1)
    if len(set(blocks)) != len(blocks):
        raise _refuse(path, f"activations.blocks lists a block twice: {blocks[:8]}")
    rows, cols = manifest["grid"]
    expected = {"tokens": rows * cols + prefix_count(config), "width": config["hidden_size"]}
    expected["prefix_tokens"] = prefix_count(config)
    for key, value in expected.items():
        if stored.get(key) != value or not is_int(stored.get(key)):
            raise _refuse(path, f"activations.{key} is {repr(stored.get(key))[:20]}; the model's layout has {value}")


def _check_shards(path: Path, manifest: dict) -> None:
    """Plain, distinct names; starts and counts that tile [0, count): full shards of shard_size, the last one short."""
    shards, size = manifest["shards"], manifest["layout"]["shard_size"]
    names = set()
    for position, shard in enumerate(shards):
        where = f"{path}: shard entry {position}"
        if not (isinstance(shard, dict) and isinstance(shard.get("files"), dict)):
            raise IndexFormatError(f"{where} is malformed ({str(shard)[:80]}); {AGAIN}")
        name = shard.get("name")
        if not (isinstance(name, str) and PLAIN_NAME.fullmatch(name) and ".." not in name):
            raise IndexFormatError(
                f"{where}: its name {repr(name)[:60]} is not a plain folder name (no '/', '..' or absolute "
                f"paths); {AGAIN}"
            )
        if name in names:
            raise IndexFormatError(f"{where}: shard {name} is listed twice, which would count its rows twice; {AGAIN}")
        names.add(name)
        _int(where, "start", shard.get("start"), 0, 1 << 62)
        _int(where, "count", shard.get("count"), 1, size)
        for file, record in shard["files"].items():
            if not (isinstance(file, str) and PLAIN_NAME.fullmatch(file) and ".." not in file):
                raise IndexFormatError(f"{where}: file name {file[:60]!r} is not a plain file name; {AGAIN}")
            if not (isinstance(record, dict) and isinstance(record.get("sha256"), str)):
                raise IndexFormatError(f"{where}: {file} has no sha256; {AGAIN}")
            if not SHA256.fullmatch(record["sha256"]):
                raise IndexFormatError(f"{where}: {file}'s sha256 is not 64 hex digits; {AGAIN}")
            _int(where, f"{file}'s bytes", record.get("bytes"), 0, 1 << 50)
    end = 0
    for position, shard in enumerate(sorted(shards, key=lambda s: s["start"])):
        if shard["start"] != end:
            problem = "overlaps the shard before it" if shard["start"] < end else f"leaves images [{end}, "
            problem += "" if shard["start"] < end else f"{shard['start']}) in no shard"
            raise IndexFormatError(f"{path}: shard {shard['name']} starts at {shard['start']} and {problem}; {AGAIN}")
        if position < len(shards) - 1 and shard["count"] != size:
            raise IndexFormatError(
                f"{path}: shard {shard['name']} holds {shard['count']} images, but only the last shard may hold "
                f"fewer than the shard size {size}; {AGAIN}"
            )
        end += shard["count"]
    if manifest["complete"] and manifest.get("count", end) != end:  # an unfinished run's count is not read
        raise IndexFormatError(f"{path}: count is {repr(manifest['count'])[:30]}, its shards hold {end}; {AGAIN}")


def _check_search(path: Path, manifest: dict) -> None:
    found = manifest.get("search", {})
    if not isinstance(found, dict):
        raise _refuse(path, "search must be an object")
    rows, cols = manifest["grid"]
    images, arrays = sum(s["count"] for s in manifest["shards"]), expected_arrays(manifest)
    for kind, info in found.items():
        where = f"{path}: search.{kind}"
        array = {"patches": "features", "images": "embedding"}.get(kind)
        if array not in arrays or not isinstance(info, dict):
            raise IndexFormatError(f"{where} is not a search index of this index's stored arrays; {AGAIN}")
        if info.get("file") != f"search/{kind}.faiss":
            raise IndexFormatError(f"{where}: its file must be search/{kind}.faiss; {AGAIN}")
        most = images * (rows * cols if kind == "patches" else 1)
        _int(where, "vectors", info.get("vectors"), 1, max(1, most))
        dimension = arrays[array][0][-1]
        if info.get("dimension") != dimension or not is_int(info.get("dimension")):
            raise IndexFormatError(
                f"{where}: dimension {repr(info.get('dimension'))[:20]} is not the stored {array}' {dimension}; {AGAIN}"
            )
        if info.get("nprobe") is not None:
            _int(where, "nprobe", info["nprobe"], 1, MAX_SHARD_SIZE)


# --- the files ------------------------------------------------------------------------------------------------------


def expected_arrays(manifest: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each stored array's shape after its first axis (the shard's images) and its dtype, as the writer
    (indexing.py) stores them, by name (activations by "activations-blockNN")."""
    config, options = manifest["model"]["config"], manifest["options"]
    rows, cols = manifest["grid"]
    pooled = 2 * config["hidden_size"] if config["pooling"] == "cls+mean" else config["hidden_size"]
    arrays = {
        "rollout": ((rows, cols), FLOAT16),
        "readout": ((config["num_heads"], rows, cols), FLOAT16),
        "embedding": ((pooled,), FLOAT32),
    }
    if options.get("features", False):
        arrays["features"] = ((rows, cols, options.get("pca") or config["hidden_size"]), FLOAT16)
    if options.get("relevance", False):
        arrays["relevance"] = ((rows, cols), FLOAT16)
    stored = manifest.get("activations")
    for block in stored["blocks"] if stored else []:
        arrays[f"{ACTIVATIONS}{block:02d}"] = ((stored["tokens"], stored["width"]), FLOAT16)
    return arrays


# the header np.save writes, exactly: read without numpy's literal_eval, which is most of the cost of a header
SAVED_HEADER = re.compile(
    rb"\{'descr': '([<>|][a-zA-Z]\d{0,2})', 'fortran_order': (True|False), "
    rb"'shape': \(((?:\d{1,19}, )*\d{1,19},?)?\), \} *\n"
)


def npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, where the data starts) from a .npy file's header: the data is not read, and
    nothing in it is unpickled. The header np.save writes is matched exactly; any other goes to numpy's reader."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                start = f.tell()
                length = int.from_bytes(f.read(2), "little")
                saved = SAVED_HEADER.fullmatch(f.read(length))
                if saved:
                    shape = tuple(int(n) for n in saved[3].split(b",") if n.strip()) if saved[3] else ()
                    return shape, saved[2] == b"True", np.dtype(saved[1].decode()), f.tell()
                f.seek(start)
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"format version {version} is not one np.save writes for these arrays")
            return shape, fortran, dtype, f.tell()
    except (OSError, ValueError, SyntaxError, TypeError) as error:
        raise _refuse(path, f"is not a readable .npy array ({str(error)[:120]})") from None


def check_files(folder: Path, manifest: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Every shard's files against the manifest (see the module's docstring); returns ``expected_arrays``."""
    arrays = expected_arrays(manifest)
    shards_folder = folder / SHARDS
    if not stat.S_ISDIR(inside(folder, shards_folder).st_mode):
        raise _refuse(shards_folder, "is not a folder")
    for shard in manifest["shards"]:
        base = shards_folder / shard["name"]
        if not stat.S_ISDIR(inside(folder, base).st_mode):
            raise _refuse(base, "is not a folder", "delete it and run `vitviz index ... --resume`")
        _check_listing(base, shard, arrays)
        for name, record in shard["files"].items():
            path = base / name
            info = inside(folder, path)
            if not stat.S_ISREG(info.st_mode):
                raise _refuse(path, "is not a regular file (a folder or a device?)")
            if info.st_size != record["bytes"]:
                raise _refuse(
                    path,
                    f"is {info.st_size:,} bytes, the manifest records {record['bytes']:,}: the index is damaged",
                    "delete that shard folder and run `vitviz index ... --resume`",
                )
            if name.endswith(".npy"):
                stem = name.split(".")[0]
                _check_array(path, info.st_size, (shard["count"], *arrays[stem][0]), arrays[stem][1])
        _check_rows(base / "images.parquet", shard["count"])
    for kind in manifest.get("search", {}):
        path = folder / "search" / f"{kind}.faiss"
        for part in (path.parent, path):
            kind_ok = stat.S_ISDIR if part == path.parent else stat.S_ISREG
            if not kind_ok(inside(folder, part).st_mode):
                raise _refuse(part, "is not a " + ("folder" if part == path.parent else "regular file"))
    return arrays


def _check_listing(base: Path, shard: dict, arrays: dict) -> None:
    """The shard lists exactly the files the writer writes: both tables, each array once, activations by block."""
    files = set(shard["files"])
    blocks = {}
    for name in files:
        match = ACTIVATION_FILE.fullmatch(name)
        if match and name.startswith(f"{ACTIVATIONS}{int(match[1]):02d}."):  # as written: not block007
            blocks.setdefault(f"{ACTIVATIONS}{int(match[1]):02d}", []).append(name)
    plain = {f"{a}.npy" for a in arrays if not a.startswith(ACTIVATIONS)} | {"images.parquet", "heads.parquet"}
    unknown = sorted(files - plain - {n for names in blocks.values() for n in names})
    missing = sorted(plain - files) + sorted(a for a in arrays if a.startswith(ACTIVATIONS) and a not in blocks)
    extra = sorted(b for b, names in blocks.items() if b not in arrays or len(names) > 1)
    if unknown or missing or extra:
        detail = "; ".join(
            f"{what}: {', '.join(names)[:120]}"
            for what, names in (("missing", missing), ("not of this index", unknown + extra))
            if names
        )
        raise _refuse(base, f"the manifest's files for this shard are not the index's ({detail})")
    named = shard.get("activations", {})
    wanted = {str(int(b.removeprefix(ACTIVATIONS))): names[0] for b, names in blocks.items()}
    if named != wanted:
        raise _refuse(base, f"its activations record {str(named)[:80]} does not name its activation files")


def _check_array(path: Path, size: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
    stored, fortran, stored_dtype, start = npy_header(path)
    if stored_dtype != dtype or fortran:
        kind = "Fortran-ordered " if fortran else ""
        raise _refuse(path, f"holds {kind}{stored_dtype} values; the index stores {dtype} in C order")
    if tuple(stored) != shape:
        raise _refuse(path, f"has shape {tuple(stored)}, the manifest's layout says {shape}")
    if start + math.prod(shape) * dtype.itemsize != size:
        raise _refuse(path, "is truncated or has trailing bytes: the index is damaged")


def _check_rows(path: Path, count: int) -> None:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_metadata(path).num_rows
    except Exception as error:  # any failure of pyarrow to read a footer means a damaged file
        raise _refuse(path, f"is not a readable Parquet file ({str(error)[:120]})") from None
    if rows != count:
        raise _refuse(path, f"holds {rows} rows, the manifest says the shard has {count} images")


def verify_checksums(folder: Path, manifest: dict) -> list[str]:
    """One line per file that is missing or whose sha256 is not the manifest's (reads every byte)."""
    problems = []
    for shard in manifest["shards"]:
        for name, record in shard["files"].items():
            path = folder / SHARDS / shard["name"] / name
            try:
                digest = sha256_file(path)
            except OSError as error:
                problems.append(f"{path}: cannot be read ({error.strerror or error})")
                continue
            if digest != record["sha256"]:
                problems.append(f"{path}: does not match its checksum: the index is damaged")
    return problems
