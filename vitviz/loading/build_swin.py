"""A Swin from a config and a state dict, refused before anything is built when the two do not match, when the
model would not fit in memory, or when a weight is NaN or infinite (as ``build.build_model`` does for a ViT)."""

from __future__ import annotations

import torch

from vitviz.loading.build import check_finite, check_parameters
from vitviz.loading.errors import ModelLoadError, summarize
from vitviz.model.swin import Swin, SwinConfig

MAX_BLOCKS = 1_000  # the largest Swin has 48 (Swin v2-G): more is a hostile config, refused before building it


def build_swin(config: SwinConfig, state_dict: dict[str, torch.Tensor], source: str) -> Swin:
    """A Swin with exactly these weights (copied to fp32), or an error listing the missing, unexpected and misshapen
    ones; names and shapes are compared with a model built on the meta device, which allocates nothing."""
    check_parameters(config.num_parameters, source)
    if config.num_layers > MAX_BLOCKS:
        raise ModelLoadError(f"{source} asks for {config.num_layers:,} blocks, more than {MAX_BLOCKS:,}")
    not_tensors = sorted(name for name, t in state_dict.items() if not isinstance(t, torch.Tensor))
    if not_tensors:
        raise ModelLoadError(f"{source}: state_dict entries that are not tensors: {summarize(not_tensors)}")
    with torch.device("meta"):
        model = Swin(config)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = [name for name in expected if name not in state_dict]
    unexpected = sorted(name for name in state_dict if name not in expected)
    misshapen = [
        f"{name}: {tuple(t.shape)} in file, {expected[name]} expected"
        for name, t in sorted(state_dict.items())
        if name in expected and tuple(t.shape) != expected[name]
    ]
    problems = [
        f"{what} {summarize(names)}"
        for what, names in (
            ("missing weights", missing),
            ("unexpected weights", unexpected),
            ("shape mismatches", misshapen),
        )
        if names
    ]
    if problems:
        raise ModelLoadError(f"{source} does not match its config: " + "; ".join(problems))
    check_finite(state_dict, source)
    model.load_state_dict({name: t.to(torch.float32, copy=True) for name, t in state_dict.items()}, assign=True)
    return model.eval()
