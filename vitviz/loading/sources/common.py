"""What every importer shares: renaming weights by rules, fusing q/k/v, reading JSON configs.

Each importer renames the source's keys with a table of (regular expression, replacement) rules.
Any key that no rule covers is an error, so a layer can never be silently dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from vitviz.loading.build import ExpectedWeights, check_model_size
from vitviz.loading.errors import ModelLoadError
from vitviz.messages import echo
from vitviz.model import ViTConfig

_QKV_PARTS = {"query": 0, "key": 1, "value": 2, "q": 0, "k": 1, "v": 2}


def rename(state_dict: dict[str, torch.Tensor], rules: list[tuple[str, str]], source: str) -> dict[str, torch.Tensor]:
    """Rename every key by the first rule whose pattern matches its start; \\1 is the block index."""
    renamed = {}
    for name, tensor in state_dict.items():
        for pattern, replacement in rules:
            new_name, count = re.subn(f"^{pattern}", replacement, name)
            if count:
                renamed[new_name] = tensor
                break
        else:
            raise ModelLoadError(f"{source} has a weight vitviz does not know: {name}")
    return renamed


def fuse_qkv(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """blocks.i.attn.{query,key,value}.{weight,bias} -> blocks.i.attn.qkv.{weight,bias} (q, k, v order); a Swin's
    stages.s.blocks.i.attn likewise."""
    fused: dict[str, list] = {}
    out = {}
    for name, tensor in state_dict.items():
        match = re.fullmatch(r"((?:stages\.\d+\.)?blocks\.\d+\.attn)\.(query|key|value|q|k|v)\.(weight|bias)", name)
        if match:
            parts = fused.setdefault(f"{match[1]}.qkv.{match[3]}", [None, None, None])
            parts[_QKV_PARTS[match[2]]] = tensor
        else:
            out[name] = tensor
    for name, parts in fused.items():
        if any(p is None for p in parts):
            raise ModelLoadError(f"incomplete query/key/value weights for {name}")
        out[name] = torch.cat(parts, dim=0)
    return out


MAX_JSON_BYTES = 16 * 2**20  # a config, preprocessor config or shard index; real ones are a few kB to a few 100 kB


def read_json(path: Path) -> dict:
    """A JSON object from a model's folder, or a ModelLoadError: unreadable, not JSON, too big, nested too deeply
    for Python's parser (a hostile config of 100,000 nested lists), or not an object."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise ModelLoadError(
                f"{path} is {size / 2**20:.0f} MB, more than the {MAX_JSON_BYTES // 2**20} MB a model's "
                "JSON file may take"
            )
        value = json.loads(path.read_text())
    except RecursionError:
        raise ModelLoadError(f"{path} is nested too deeply to be a model's config") from None
    except (OSError, ValueError) as error:
        if isinstance(error, ModelLoadError):
            raise
        raise ModelLoadError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return value


def add_zero_biases(config: ViTConfig, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Zero biases for the linear and convolution layers the source built without one (CLIP's patch
    convolution, timm's proj_bias=False): adding 0 is exact. A missing LayerNorm bias stays missing."""
    check_model_size(config, "the model")
    expected = ExpectedWeights.of(config)
    zeros = {}
    for name, weight in state_dict.items():
        bias = name.removesuffix(".weight") + ".bias"
        shape = expected.shape(bias) if name.endswith(".weight") and bias not in state_dict else None
        if shape is not None and isinstance(weight, torch.Tensor) and weight.ndim >= 2:
            zeros[bias] = torch.zeros(shape, dtype=weight.dtype)
    return state_dict | zeros


def check_logit_scale(scale: object, bias: object, source: str) -> None:
    """Refuse an image-text model whose logit scale (stored as its log) or bias is not one finite number, or whose
    scale overflows to infinity: every zero-shot score would be NaN or infinite."""
    for name, value in (("logit_scale", scale), ("logit_bias", bias)):
        if name == "logit_bias" and value is None:
            continue
        if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
            raise ModelLoadError(f"{source}: {name} must be one number; got {echo(value, 80)}")
        finite = value.detach().float().exp() if name == "logit_scale" else value.detach().float()
        if not bool(torch.isfinite(finite).all()):
            what = "exp(logit_scale), the scale of the logits," if name == "logit_scale" else "logit_bias"
            raise ModelLoadError(
                f"{source}: {what} is {finite.item()} (from {value.item()}): every zero-shot score "
                "would be infinite or NaN"
            )
