"""What every format reader shares: the ``SAEFileFormat`` record, and reading files within the bounds that hostile
model files get (vitviz.loading): JSON and header lines read up to a size, torch files opened with
``weights_only=True`` after their headers are checked, safetensors checked by name and shape before their tensors
are read, sizes checked against the memory free, and NaN or infinite weights refused. Every failure is one line, an
``SAEFormatError`` naming the file."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitviz.loading.build import check_finite, check_parameters
from vitviz.loading.checkpoint import load_torch_file
from vitviz.loading.errors import ModelLoadError
from vitviz.messages import clip_text
from vitviz.sae.errors import SAEFormatError

MAX_JSON_BYTES = 1 << 20  # a config or header line: a few kB in practice
MAX_TENSORS = 64  # an SAE's weights file: 4 to 10 tensors
MAX_WIDTH = 1 << 16  # d_in: the widest ViTs are 8,192 wide
MAX_LATENTS = 1 << 24  # the largest published dictionaries have about a million latents

_RESID_POST = re.compile(r"blocks\.(\d+)\.hook_resid_post")
_RESID_PRE = re.compile(r"blocks\.(\d+)\.hook_resid_pre")


@dataclass(frozen=True)
class SAEFileFormat:
    """One format ``load_sae`` reads: ``detect(path)`` says whether a file or folder is in it (cheaply, from names
    and small JSON files), ``load(path)`` reads it into an SAE, raising ``SAEFormatError`` for anything wrong."""

    name: str
    description: str  # for messages: what a file or folder in this format holds
    detect: Callable[[Path], bool]
    load: Callable[[Path], nn.Module]


def folder_of(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def read_json(path: Path) -> Any:
    """A JSON file of at most MAX_JSON_BYTES, parsed; SAEFormatError when it is bigger or not JSON."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise SAEFormatError(
                f"{path} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} an SAE's config may be: it was not read"
            )
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        if isinstance(error, SAEFormatError):
            raise
        raise SAEFormatError(f"{path} is not a readable JSON file ({type(error).__name__})") from None


def read_config(path: Path) -> dict:
    """An SAE's JSON config file (``read_json``), which must hold an object; SAEFormatError otherwise."""
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise SAEFormatError(f"{path} is not a JSON object")
    return cfg


def json_object(path: Path) -> dict | None:
    """A small JSON file's object, or None when it is missing, too big, not JSON or not an object (for detect)."""
    try:
        value = read_json(path) if path.is_file() else None
    except SAEFormatError:
        return None
    return value if isinstance(value, dict) else None


def first_line(path: Path) -> bytes:
    """The file's first line, read up to MAX_JSON_BYTES: a longer one is refused without reading the rest."""
    with open(path, "rb") as f:
        line = f.readline(MAX_JSON_BYTES + 1)
    if len(line) > MAX_JSON_BYTES or not line.endswith(b"\n"):
        raise SAEFormatError(
            f"{path}: its first line (a header) runs past {MAX_JSON_BYTES:,} bytes or the end of the file: "
            "it was not read"
        )
    return line


def check_size(d_in: int, latents: int, source: str) -> None:
    """Refuse absurd or too-big dimensions from a config's numbers alone, before anything is allocated."""
    if not (1 <= d_in <= MAX_WIDTH and 1 <= latents <= MAX_LATENTS):
        raise SAEFormatError(
            f"{source}: d_in={d_in:,} and latents={latents:,} are not an SAE's (d_in 1 to {MAX_WIDTH:,}, "
            f"latents 1 to {MAX_LATENTS:,})"
        )
    try:
        check_parameters(2 * d_in * latents, source)
    except ModelLoadError as error:
        raise SAEFormatError(str(error)) from None


def load_torch(path: Path) -> Any:
    """``torch.load(weights_only=True)`` behind vitviz.loading's checks: never unpickles anything but tensors and
    plain data."""
    try:
        return load_torch_file(path, max_tensors=MAX_TENSORS)
    except ModelLoadError as error:
        raise SAEFormatError(str(error)) from None


def load_torch_tail(path: Path, offset: int) -> Any:
    """``load_torch`` of the bytes after ``offset`` (saev's sae.pt: a header line, then torch.save's bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        tail = Path(tmp) / path.name
        with open(path, "rb") as source, open(tail, "wb") as target:
            source.seek(offset)
            while chunk := source.read(1 << 24):
                target.write(chunk)
        try:
            return load_torch_file(tail, max_tensors=MAX_TENSORS)
        except ModelLoadError as error:
            raise SAEFormatError(str(error).replace(str(tail), str(path))) from None


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors (fp32), once its header shows at most MAX_TENSORS of them."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            names = list(f.keys())
            if len(names) > MAX_TENSORS:
                raise SAEFormatError(
                    f"{path} holds {len(names):,} tensors, more than the {MAX_TENSORS} an SAE's may: it was not read"
                )
            return {name: f.get_tensor(name) for name in names}
    except SAEFormatError:
        raise
    except Exception as error:  # safetensors raises its own kinds for damaged headers and files
        raise SAEFormatError(
            f"{path} is not a readable safetensors file ({type(error).__name__}: {clip_text(str(error), 120)})"
        ) from None


def state_dict_of(value: Any, path: Path) -> dict[str, torch.Tensor]:
    """A loaded torch file's tensors by name: a plain state dict, or one under "state_dict"."""
    if isinstance(value, dict) and isinstance(value.get("state_dict"), dict):
        value = value["state_dict"]
    if not isinstance(value, dict) or not all(isinstance(t, torch.Tensor) for t in value.values()):
        raise SAEFormatError(f"{path} does not hold a state dict (a mapping of names to tensors)")
    return value


def fill(sae: nn.Module, tensors: Mapping[str, torch.Tensor], source: Path, optional: tuple[str, ...] = ()) -> None:
    """Copy ``tensors`` into ``sae``'s parameters and buffers of the same names, after checking that none is
    missing (but ``optional`` ones), each has the shape the config says, and none is NaN or infinite."""
    expected = {name: tuple(t.shape) for name, t in sae.state_dict().items()}
    missing = sorted(set(expected) - set(tensors) - set(optional) - {"scale"})
    if missing:
        raise SAEFormatError(f"{source} lacks the tensors {missing} its config asks for")
    for name, tensor in tensors.items():
        if name in expected and tuple(tensor.shape) != expected[name]:
            raise SAEFormatError(f"{source}: {name} is {tuple(tensor.shape)}, but its config says {expected[name]}")
    try:
        check_finite({name: t for name, t in tensors.items() if name in expected}, str(source))
    except ModelLoadError as error:
        raise SAEFormatError(str(error)) from None
    with torch.no_grad():
        for name, value in sae.state_dict().items():
            if name in tensors:
                value.copy_(tensors[name].float())


def block_of_hook(hook: str | None) -> int | None:
    """The vitviz block whose output a TransformerLens-style hook reads: ``blocks.N.hook_resid_post`` is block N's
    output, ``blocks.N.hook_resid_pre`` block N - 1's; other hooks (inside a block) are no block's output."""
    if not isinstance(hook, str):
        return None
    if found := _RESID_POST.fullmatch(hook):
        return int(found[1])
    if (found := _RESID_PRE.fullmatch(hook)) and int(found[1]) > 0:
        return int(found[1]) - 1
    return None


def integer(value: Any, name: str, source: Path) -> int:
    """A config's integer field, or a one-line SAEFormatError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise SAEFormatError(f"{source}: {name} should be an integer; found {clip_text(repr(value), 80)}")
    return int(value)
