"""Weights files read with their size checked first: safetensors files and the shards an index lists.

A file is refused from its size and header (more tensors than its model may have, more bytes than the memory free)
before any tensor is read. The Hugging Face source reads its folders with these; the timm and open_clip sources,
whose libraries read the weights themselves, check each file's header first (``check_weights_file``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from vitviz.loading.checkpoint import MAX_TENSORS, check_torch_file
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.memory import available_memory, gigabytes
from vitviz.loading.sources.common import read_json

SHARD_INDEX = "model.safetensors.index.json"


def shard_files(index: Path, max_tensors: int = MAX_TENSORS) -> list[str]:
    """The shard files a safetensors index lists (its weight_map's values), each a plain name in the folder; refused,
    before any shard is read or downloaded, when it maps more than ``max_tensors`` weights."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(f"{index} has no weight_map")
    if len(weight_map) > max_tensors:
        raise ModelLoadError(
            f"{index} maps {len(weight_map):,} weights, more than the {max_tensors:,} its model may "
            "have: no shard was read"
        )
    shards = sorted(set(map(str, weight_map.values())))
    if any(Path(shard).name != shard for shard in shards):  # never a path outside the folder
        raise ModelLoadError(f"{index} names shard files outside its folder")
    return shards


SAFETENSORS_HEADER_BYTES = (256 << 10, 512)  # a safetensors header: at most 256 kB, and 512 bytes per tensor


def read_safetensors(path: str | Path, max_tensors: int = MAX_TENSORS, tensors: bool = True) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file, read by the ``safetensors`` package (none when not ``tensors``: the checks
    alone); a ModelLoadError for a damaged file, one whose header lists more than ``max_tensors`` (checked from its
    size, then its names, before any tensor is read), or one whose tensors do not fit in the memory free now."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > available_memory():
            raise ModelLoadError(
                f"{path} holds {gigabytes(size)} of weights, more than the "
                f"{gigabytes(available_memory())} of memory free on this machine"
            )
        with open(path, "rb") as f:
            header = int.from_bytes(f.read(8), "little")
        fixed, per_tensor = SAFETENSORS_HEADER_BYTES
        if header > size - 8:
            raise ModelLoadError(
                f"{path} is not a safetensors file (its header would take {header:,} bytes, more "
                f"than the file's {size:,})"
            )
        if header > fixed + per_tensor * max_tensors:
            raise ModelLoadError(
                f"{path}'s header takes {header / 2**20:,.1f} MB, room for far more than the "
                f"{max_tensors:,} tensors its model may have: it was not read"
            )
        with safe_open(path, "pt", device="cpu") as f:
            names = list(f.keys())
            if len(names) > max_tensors:
                raise ModelLoadError(
                    f"{path} holds {len(names):,} tensors, more than the {max_tensors:,} its model "
                    "may have: they were not read"
                )
            return {name: f.get_tensor(name) for name in names} if tensors else {}
    except ModelLoadError:
        raise
    except (SafetensorError, OSError, ValueError) as error:
        raise ModelLoadError(f"{path} is not a safetensors file ({describe(error)})") from None


def check_weights_file(path: Path, max_tensors: int = MAX_TENSORS) -> None:
    """What ``read_safetensors`` or ``load_torch_file`` checks of a file's header, for a weights file a library reads
    itself (timm's, open_clip's): one of 300,000 tensors is refused before the library reads it whole."""
    if path.suffix == ".safetensors":
        read_safetensors(path, max_tensors, tensors=False)
    else:
        check_torch_file(path, max_tensors)
