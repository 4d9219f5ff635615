"""The vitviz checkpoint: a plain dict that opens without executing code.

    {"format": "vitviz-checkpoint", "version": 1,
     "config": asdict(ViTConfig), "state_dict": {...}, "class_names": [...],
     "preprocessing": Preprocessing.to_dict(), "training": {...}}

It is read with ``torch.load(..., weights_only=True)``: only tensors and plain data can come back, so a hostile file
cannot run code when it is opened. What could make the reading slow is checked first from the file's headers: how
many members its zip has, how big its pickle is and how many opcodes it holds (``load_torch_file``). Weights are
compared with the config by name and shape before any model is built, and refused when any of them is NaN or
infinite (build.py's ``build_model``): such a model computes NaN everywhere, so it has nothing to show.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import torch

from vitviz.loading.build import build_model
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.messages import clip_text, echo
from vitviz.model import ViT, ViTConfig
from vitviz.preprocessing import Preprocessing

FORMAT = "vitviz-checkpoint"
VERSION = 1
MAX_TENSORS = 5_000  # in a weights file whose model is not known beforehand; ViT-7B and its optimizer state: 2,600
MAX_PICKLE_BYTES = 16 * 2**20  # a checkpoint's pickle (its index of tensors, names, settings): a few kB to 1 MB
MAX_PICKLE_OPCODES = 200_000  # torch's safe unpickler reads about 300,000 a second; a ViT-B checkpoint has 3,000
SCAN_BYTES = 1 << 16  # of a pickle torch refused, disassembled to tell a real one from random bytes


def save_checkpoint(
    path: str | Path,
    model: ViT,
    class_names: list[str],
    preprocessing: Preprocessing,
    training: dict[str, Any] | None = None,
    half: bool = False,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write a vitviz checkpoint; ``half=True`` stores weights as fp16 (half the size).

    ``extra`` adds entries (plain data and tensors only), e.g. the optimizer state for resuming.
    """
    if len(class_names) != model.config.num_classes:
        raise ValueError(f"{len(class_names)} class names for a model with {model.config.num_classes} classes")
    if model.head is not None and not isinstance(model.head, torch.nn.Linear):
        raise ValueError(
            f"a model whose head is a {type(model.head).__name__} (a zero-shot model's prompts) has no "
            "vitviz checkpoint: keep its source spec and prompts, and call vitviz.zero_shot again"
        )
    state_dict = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    if half:
        state_dict = {name: t.half() for name, t in state_dict.items()}
    checkpoint = {
        "format": FORMAT,
        "version": VERSION,
        "config": asdict(model.config),
        "state_dict": state_dict,
        "class_names": list(class_names),
        "preprocessing": preprocessing.to_dict(),
        "training": training or {},
        **(extra or {}),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, tmp)
    tmp.replace(path)  # atomic: an interrupted save never leaves half a checkpoint


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Open and validate a vitviz checkpoint file without executing any code in it."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"checkpoint {path} does not exist or is not a file")
    checkpoint = load_torch_file(path)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise ModelLoadError(
            f"{path} is a PyTorch file but not a vitviz checkpoint (no 'format': '{FORMAT}' entry); "
            "to use torchvision or Hugging Face weights, see vitviz.loading"
        )
    if checkpoint.get("version") != VERSION:
        raise ModelLoadError(
            f"{path} is checkpoint version {echo(checkpoint.get('version'))}; this vitviz reads {VERSION}"
        )
    for key, kind in [("config", dict), ("state_dict", dict), ("class_names", list), ("preprocessing", dict)]:
        if not isinstance(checkpoint.get(key), kind):
            raise ModelLoadError(f"{path}: entry '{key}' is missing or not a {kind.__name__}")
    return checkpoint


def load_checkpoint(path: str | Path) -> ViT:
    """A ready ViT (eval mode) with ``.class_names`` and ``.transform`` from a vitviz checkpoint."""
    checkpoint = read_checkpoint(path)
    try:
        config = ViTConfig.from_dict(checkpoint["config"])
        preprocessing = Preprocessing.from_dict(checkpoint["preprocessing"])
    except (TypeError, ValueError) as error:
        raise ModelLoadError(f"{path}: {error}") from None
    class_names = [str(name) for name in checkpoint["class_names"]]
    if len(class_names) != config.num_classes:
        raise ModelLoadError(f"{path}: {len(class_names)} class names for {config.num_classes} classes")
    try:
        model = build_model(config, checkpoint["state_dict"], source=str(path))
    except ModelLoadError:
        raise
    except Exception as error:  # e.g. a config that cannot be built; never a traceback for a bad file
        raise ModelLoadError(f"{path}: cannot build the model it describes: {error}") from None
    model.class_names = class_names
    model.transform = preprocessing
    model.training_info = checkpoint.get("training", {})
    return model


def load_torch_file(path: Path, max_tensors: int = MAX_TENSORS) -> Any:
    """``torch.load(path, weights_only=True)``, once the file's headers show nothing that would make it slow: a zip of
    more than ``max_tensors`` members, a pickle of more than MAX_PICKLE_BYTES (read from the zip's directory, before
    anything is decompressed) or MAX_PICKLE_OPCODES. Every failure is a one-line ModelLoadError naming the file."""
    check_torch_file(path, max_tensors)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not _is_wellformed_pickle(path):  # random bytes can start like a pickle and fail the same way
            raise ModelLoadError(f"{path} is not a readable PyTorch file (corrupt or not a checkpoint)") from None
        # a real pickle that weights_only refused: it holds objects beyond tensors and plain data
        found = re.search(r"(?i)unsupported (?:global: )?GLOBAL ([\w.]+)", str(error))  # torch words it two ways
        detail = f" It asks for {clip_text(found[1], 100)}." if found else ""
        raise ModelLoadError(
            f"{path} holds objects other than tensors and plain data, so it was not opened "
            f"(loading it could run code).{detail}"
        ) from None
    except Exception as error:  # torch raises many kinds for damaged files (RuntimeError, EOFError, IndexError...)
        raise ModelLoadError(
            f"{path} is not a readable PyTorch file (corrupt or truncated?): {describe(error)}"
        ) from None


def check_torch_file(path: Path, max_tensors: int) -> None:
    """Refuse, from the headers alone, a file whose reading would be slow (see ``load_torch_file``)."""
    if not zipfile.is_zipfile(path):  # a bare pickle, or torch's older format: its pickles come first
        with open(path, "rb") as stream:
            return _count_opcodes(io.BytesIO(stream.read(MAX_PICKLE_BYTES + 1)), path)
    members = _zip_member_count(path)
    if members > max_tensors + 8:  # data.pkl, version, byteorder... and one member per tensor's storage
        raise ModelLoadError(
            f"{path} is a zip of {members:,} members, more than the {max_tensors:,} tensors a "
            "model's weights may have here: it was not read"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            info = _pickle_member(archive)
            if info is not None and info.file_size > MAX_PICKLE_BYTES:
                raise ModelLoadError(
                    f"{path}'s pickle ({clip_text(info.filename, 100)}) takes "
                    f"{info.file_size / 2**20:,.0f} MB unpacked, more than the "
                    f"{MAX_PICKLE_BYTES // 2**20} MB a model's may: it was not read"
                )
            if info is not None:  # read at once (at most MAX_PICKLE_BYTES): scanning a stream is 2 to 3x slower
                with archive.open(info) as stream:
                    _count_opcodes(io.BytesIO(stream.read(MAX_PICKLE_BYTES + 1)), path)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError):  # a damaged zip: torch.load names the problem
        return


def _pickle_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """torch.save's pickle in its zip: ``<name>/data.pkl``."""
    return next((info for info in archive.infolist() if info.filename.endswith("data.pkl")), None)


def _zip_member_count(path: Path) -> int:
    """How many members a zip's end record declares, read from its last bytes (zipfile reads every member's entry
    first: 6 s for 300,000 of them). 0 if the record cannot be found."""
    with open(path, "rb") as f:
        size = f.seek(0, io.SEEK_END)
        f.seek(max(0, size - (1 << 16) - 22))
        tail = f.read()
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or end + 12 > len(tail):
        return 0
    (count,) = struct.unpack_from("<H", tail, end + 10)
    zip64 = tail.rfind(b"PK\x06\x06", 0, end)  # more than 65,535 members: the zip64 end record has the count
    if count == 0xFFFF and zip64 >= 0 and zip64 + 40 <= len(tail):
        (count,) = struct.unpack_from("<Q", tail, zip64 + 32)
    return count


@contextmanager
def _pickle_stream(path: Path) -> Iterator[IO[bytes]]:
    """The file's pickle as a stream: ``data.pkl`` in torch.save's zip (decompressed as it is read), else the file."""
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as stream:
            yield stream
        return
    with zipfile.ZipFile(path) as archive:
        info = _pickle_member(archive)
        with archive.open(info) if info is not None else io.BytesIO() as stream:
            yield stream


def _count_opcodes(stream: IO[bytes], path: Path, pickles: int = 5) -> None:
    """Refuse a file whose first pickles (torch's older format has five before its tensors) hold more than
    MAX_PICKLE_OPCODES opcodes; the scan stops there, and at anything that is not a pickle (torch says what).
    pickletools reads about a million opcodes a second, so the scan stops within about 0.2 s."""
    count = 0
    try:
        for _ in range(pickles):
            for _ in pickletools.genops(stream):
                count += 1
                if count > MAX_PICKLE_OPCODES:
                    raise ModelLoadError(
                        f"{path} holds a pickle of more than {MAX_PICKLE_OPCODES:,} opcodes, far more "
                        "than a model's weights need (a few thousand): it was not read"
                    )
    except ModelLoadError:
        raise
    except Exception:  # the end of the file, or bytes that are not a pickle
        return


class _EndOfScan(Exception):
    """The scan of a pickle reached the end of the bytes read for it."""


class _Prefix(io.BytesIO):
    """The first bytes of a longer pickle: reading past them raises _EndOfScan, not "pickle exhausted"."""

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if size is None or size < 0 or len(data) < size:
            raise _EndOfScan
        return data

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        if not line.endswith(b"\n"):
            raise _EndOfScan
        return line


def _is_wellformed_pickle(path: Path) -> bool:
    """Whether the file's pickle (a bare one, or ``data.pkl`` in torch.save's zip) disassembles cleanly, as far as
    its first SCAN_BYTES go.

    ``pickletools`` only reads opcodes, it never runs them, so this is safe on a hostile file.
    """
    try:
        with _pickle_stream(path) as stream:
            data = stream.read(SCAN_BYTES + 1)
        pickletools.dis(_Prefix(data[:SCAN_BYTES]) if len(data) > SCAN_BYTES else data, out=io.StringIO())
    except _EndOfScan:  # random bytes never get this far
        return True
    except Exception:  # any failure (no data.pkl, unknown opcode, bad stack) means "not a pickle"
        return False
    return True
