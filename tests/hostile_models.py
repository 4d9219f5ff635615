"""Hostile model files and specs, written here (no binary fixtures), and what loading one must do: raise one line of
ModelLoadError, fast. Used by tests/test_hostile_models.py (configs, preprocessing, weights, text towers) and
tests/test_hostile_files.py (file headers, pickles, paths, specs, caches, open_clip configs)."""

import json
import os
import time
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_checkpoint, tiny_hf_vit_config
from transformers import ViTModel

from vitviz import ModelLoadError, load_model
from vitviz.loading.checkpoint import read_checkpoint


def refusal(spec, match: str) -> str:
    """load_model(spec)'s ModelLoadError, one line of less than 1,000 characters matching ``match``."""
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match=match) as refused:
        load_model(str(spec))
    assert time.monotonic() - start < 10  # a hang guard, not a timing: each test shows what makes the refusal fast
    message = str(refused.value)
    assert "\n" not in message and len(message) < 1000, message
    return message


def forbid(monkeypatch, owner, name: str) -> list:
    """``owner.name`` replaced by a stand-in that records its calls and fails them: the list stays empty when it
    was never called."""
    calls = []

    def stand_in(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"{name} was called")

    monkeypatch.setattr(owner, name, stand_in)
    return calls


def edited_checkpoint(tmp_path: Path, name: str = "edited.pt", state=None, preprocessing=None, **config) -> Path:
    """The tiny checkpoint with these config fields, preprocessing fields, or state_dict edits (a function)."""
    checkpoint = read_checkpoint(tiny_checkpoint(tmp_path / "tiny.pt"))
    checkpoint["config"].update(config)
    checkpoint["preprocessing"].update(preprocessing or {})
    if state:
        state(checkpoint["state_dict"])
    torch.save(checkpoint, tmp_path / name)
    return tmp_path / name


def hf_vit_folder(folder: Path, **changes) -> Path:
    """A tiny Hugging Face ViT saved with save_pretrained, its config.json then changed."""
    torch.manual_seed(0)
    ViTModel(tiny_hf_vit_config()).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))
    return folder


def edit_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


class CreatesAFile:
    """Unpickling this would call os.system, creating a file: the classic malicious checkpoint."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))
