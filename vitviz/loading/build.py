"""A ViT from a config and a state dict, refused before anything is built when the two do not match, when the
model would not fit in memory, or when a weight is NaN or infinite."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from vitviz.loading.errors import ModelLoadError, summarize
from vitviz.loading.memory import available_memory, gigabytes
from vitviz.model import ViT, ViTConfig


def check_parameters(count: int, source: str) -> None:
    """Refuse a model of ``count`` parameters that cannot fit in the memory free now (in fp32), with both numbers."""
    needed = count * 4
    free = available_memory()
    if needed > free:
        raise ModelLoadError(
            f"{source} has {count:,} parameters: {gigabytes(needed)} in fp32, more "
            f"than the {gigabytes(free)} of memory free on this machine"
        )


def check_model_size(config: ViTConfig, source: str) -> None:
    """``check_parameters`` from the config's numbers alone: a hostile config asking for billions of layers is
    refused here in microseconds."""
    check_parameters(config.num_parameters, source)


def check_finite(weights: Mapping[str, Any], source: str) -> None:
    """Refuse weights with a NaN or an infinity, naming them: every output of such a model is NaN."""
    bad = [
        name
        for name, t in weights.items()
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:
        raise ModelLoadError(
            f"{source} has NaN or infinite values in {len(bad):,} weights ({summarize(bad)}), so "
            "every output would be NaN: it was not loaded"
        )


_BLOCK_NAME = re.compile(r"blocks\.(0|[1-9]\d*)\.(.+)")


@dataclass(frozen=True)
class ExpectedWeights:
    """The names and shapes of a ViT's weights, from its config alone. A ViT of one block and one of two are built on
    the meta device; the block's weights repeat and the rest grow with the blocks as from one to two (RoPE-Mixed's
    frequencies), so a config asking for 100,000 blocks is compared with a file's names at no cost."""

    outer: dict[str, tuple[int, ...]]  # the weights outside the blocks, in the model's order
    block: dict[str, tuple[int, ...]]  # each block's, without "blocks.<i>."
    num_layers: int

    @classmethod
    def of(cls, config: ViTConfig) -> ExpectedWeights:
        with torch.device("meta"):
            one, two = (ViT(replace(config, num_layers=n)).state_dict() for n in (1, 2))
        L = config.num_layers
        grown = lambda a, b: tuple(x + (y - x) * (L - 1) for x, y in zip(a, b))  # noqa: E731
        outer = {name: grown(t.shape, two[name].shape) for name, t in one.items() if not name.startswith("blocks.")}
        block = {
            name.removeprefix("blocks.0."): tuple(t.shape) for name, t in one.items() if name.startswith("blocks.")
        }
        return cls(outer, block, L)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape the weight ``name`` has, or None when the model has no such weight."""
        if name in self.outer:
            return self.outer[name]
        match = _BLOCK_NAME.fullmatch(name)
        return self.block.get(match[2]) if match and int(match[1]) < self.num_layers else None

    def __len__(self) -> int:
        return len(self.outer) + self.num_layers * len(self.block)

    def __iter__(self) -> Iterator[str]:
        """Every name, the blocks' in order (made as they are asked for)."""
        yield from self.outer
        for index in range(self.num_layers):
            yield from (f"blocks.{index}.{name}" for name in self.block)


def build_model(config: ViTConfig, state_dict: dict[str, torch.Tensor], source: str) -> ViT:
    """A ViT with exactly these weights, or an error listing missing, unexpected and misshapen ones.

    Names and shapes are compared with the config's (``ExpectedWeights``) before anything is built, so a tiny hostile
    file whose config asks for a gigantic model, or for 100,000 blocks, is refused at once.
    """
    check_model_size(config, source)
    not_tensors = sorted(name for name, t in state_dict.items() if not isinstance(t, torch.Tensor))
    if not_tensors:
        raise ModelLoadError(f"{source}: state_dict entries that are not tensors: {summarize(not_tensors)}")
    expected = ExpectedWeights.of(config)
    shapes = {name: expected.shape(name) for name in state_dict}
    unexpected = sorted(name for name, shape in shapes.items() if shape is None)
    misshapen = [
        f"{name}: {tuple(state_dict[name].shape)} in file, {shape} expected"
        for name, shape in sorted(shapes.items())
        if shape is not None and state_dict[name].shape != shape
    ]
    missing_count = len(expected) - (len(state_dict) - len(unexpected))
    missing = list(itertools.islice((n for n in expected if n not in state_dict), 5)) if missing_count else []
    problems = []
    if missing:
        problems.append(f"missing weights {summarize(missing, missing_count)}")
    if unexpected:
        problems.append(f"unexpected weights {summarize(unexpected)}")
    if misshapen:
        problems.append(f"shape mismatches {summarize(misshapen)}")
    if problems:
        raise ModelLoadError(f"{source} does not match its config: " + "; ".join(problems))
    check_finite(state_dict, source)
    with torch.device("meta"):  # no random initialisation to throw away: about 1 s for ViT-B
        model = ViT(config)
    # copies, so the model never shares memory with its source (a timm or torchvision model, say)
    model.load_state_dict({name: t.to(torch.float32, copy=True) for name, t in state_dict.items()}, assign=True)
    return model.eval()
