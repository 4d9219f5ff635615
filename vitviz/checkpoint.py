"""The vitviz checkpoint: a plain dict that opens without executing code.

    {"format": "vitviz-checkpoint", "version": 1,
     "config": asdict(ViTConfig), "state_dict": {...}, "class_names": [...],
     "preprocessing": Preprocessing.to_dict(), "training": {...}}

It is read with ``torch.load(..., weights_only=True)``: only tensors and plain containers
can come back, so a hostile file cannot run code when it is opened.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from vitviz.images import Preprocessing
from vitviz.memory import available_memory, gigabytes
from vitviz.model import ViT, ViTConfig

FORMAT = "vitviz-checkpoint"
VERSION = 1


class ModelLoadError(ValueError):
    """A model could not be loaded; the message names the problem and, where possible, the fix."""


def check_model_size(config: ViTConfig, source: str) -> None:
    """Refuse a model that cannot fit in the memory free now (its fp32 weights, from the config's numbers alone),
    with both numbers; a hostile config asking for billions of layers is refused here in microseconds."""
    needed = config.num_parameters * 4
    free = available_memory()
    if needed > free:
        raise ModelLoadError(f"{source} has {config.num_parameters:,} parameters: {gigabytes(needed)} in fp32, more "
                             f"than the {gigabytes(free)} of memory free on this machine")  # fmt: skip


def build_model(config: ViTConfig, state_dict: dict[str, torch.Tensor], source: str) -> ViT:
    """A ViT with exactly these weights, or an error listing missing, unexpected and misshapen ones.

    Shapes are checked on a model built on the meta device (no memory), so a tiny hostile file
    whose config asks for a gigantic model is refused before anything is allocated.
    """
    check_model_size(config, source)
    not_tensors = sorted(name for name, t in state_dict.items() if not isinstance(t, torch.Tensor))
    if not_tensors:
        raise ModelLoadError(f"{source}: state_dict entries that are not tensors: {_shorten(not_tensors)}")
    with torch.device("meta"):
        expected = ViT(config).state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    misshapen = [
        f"{name}: {tuple(state_dict[name].shape)} in file, {tuple(expected[name].shape)} expected"
        for name in sorted(set(expected) & set(state_dict))
        if state_dict[name].shape != expected[name].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing weights {_shorten(missing)}")
    if unexpected:
        problems.append(f"unexpected weights {_shorten(unexpected)}")
    if misshapen:
        problems.append(f"shape mismatches {_shorten(misshapen)}")
    if problems:
        raise ModelLoadError(f"{source} does not match its config: " + "; ".join(problems))
    with torch.device("meta"):  # no random initialisation to throw away: about 1 s for ViT-B
        model = ViT(config)
    # copies, so the model never shares memory with its source (a timm or torchvision model, say)
    model.load_state_dict({name: t.to(torch.float32, copy=True) for name, t in state_dict.items()}, assign=True)
    return model.eval()


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
        raise ValueError(f"a model whose head is a {type(model.head).__name__} (a zero-shot model's prompts) has no "
                         "vitviz checkpoint: keep its source spec and prompts, and call vitviz.zero_shot again")  # fmt: skip
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
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not _is_wellformed_pickle(path):  # random bytes can start like a pickle and fail the same way
            raise ModelLoadError(f"{path} is not a readable PyTorch file (corrupt or not a checkpoint)") from None
        # a real pickle that weights_only refused: it holds objects beyond tensors and plain data
        detail = next((line.strip() for line in str(error).splitlines() if "Unsupported global" in line), "")
        raise ModelLoadError(
            f"{path} holds objects other than tensors and plain data, so it was not opened "
            f"(loading it could run code). {detail}".strip()
        ) from None
    except Exception as error:  # torch raises many kinds for damaged files (RuntimeError, EOFError, IndexError...)
        raise ModelLoadError(f"{path} is not a readable PyTorch file (corrupt or truncated?): {error}") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise ModelLoadError(
            f"{path} is a PyTorch file but not a vitviz checkpoint (no 'format': '{FORMAT}' entry); "
            "to use torchvision or Hugging Face weights, see vitviz.importers"
        )
    if checkpoint.get("version") != VERSION:
        raise ModelLoadError(f"{path} is checkpoint version {checkpoint.get('version')}; this vitviz reads {VERSION}")
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


def _is_wellformed_pickle(path: Path) -> bool:
    """Whether the file's pickle (a bare one, or ``data.pkl`` in torch.save's zip) disassembles cleanly.

    ``pickletools`` only reads opcodes, it never runs them, so this is safe on a hostile file.
    """
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
                data = archive.read(name)
        else:
            data = path.read_bytes()
        pickletools.dis(data, out=io.StringIO())
    except Exception:  # any failure (no data.pkl, unknown opcode, bad stack) means "not a pickle"
        return False
    return True


def _shorten(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
