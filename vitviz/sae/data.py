"""Training data for an SAE: any sequential source of (n, d) float chunks, read in order and never loaded whole.

A source is a sequence of arrays (NumPy, memory-mapped ``.npy`` files in fp16, torch tensors) or a function that
returns a fresh iterable of them for each pass. ``shuffled_batches`` fills a buffer of chunks in order, shuffles
within it with a seeded generator, and cuts it into batches; ``statistics`` makes one pass for the mean, the scale
and a uniform sample of tokens (reservoir sampling) for the data-point initialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vitviz.sae.errors import SAEError

Chunk = np.ndarray | torch.Tensor  # (n, d)
Source = Sequence[Chunk] | Callable[[], Iterable[Chunk]]


def chunks(source: Source) -> Iterator[torch.Tensor]:
    """Each chunk of the source in order, as a float32 CPU tensor (n, d); memory maps are read one chunk at a time."""
    for chunk in source() if callable(source) else source:
        # one float32 copy of a (possibly read-only, fp16) memory-mapped slice
        tensor = chunk if isinstance(chunk, torch.Tensor) else torch.from_numpy(np.array(chunk, dtype=np.float32))
        if tensor.ndim != 2:
            raise SAEError(f"activation chunks must be (tokens, width); got shape {tuple(tensor.shape)}")
        yield tensor.detach().to("cpu", torch.float32)


def npy_source(paths: Sequence[str | Path]) -> list[np.ndarray]:
    """Memory-mapped ``.npy`` files (n, d) as a source: nothing is read until training reaches each one."""
    return [np.load(path, mmap_mode="r") for path in paths]


def shuffled_batches(source: Source, batch: int, buffer: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Batches (batch, d) of the source's tokens, shuffled within windows of ``buffer`` tokens read in order; the
    rows a window leaves over go into the next one, and the last batch may be smaller."""
    pending: list[torch.Tensor] = []
    held = 0
    for chunk in chunks(source):
        pending.append(chunk)
        held += len(chunk)
        if held >= buffer:
            window = torch.cat(pending)
            window = window[torch.randperm(len(window), generator=generator)]
            whole = len(window) // batch * batch
            yield from window[:whole].split(batch)
            pending, held = [window[whole:]], len(window) - whole
    if held:
        window = torch.cat(pending)
        yield from window[torch.randperm(len(window), generator=generator)].split(batch)


@dataclass
class Statistics:
    tokens: int  # how many tokens the source holds
    mean: torch.Tensor  # (d,) the mean token
    scale: torch.Tensor  # () sqrt of the mean squared distance from the mean
    sample: torch.Tensor  # (m, d) a uniform random sample of the tokens, in the model's units


def statistics(source: Source, sample_size: int, generator: torch.Generator) -> Statistics:
    """One pass over the source: mean and scale in float64, and a uniform sample (reservoir sampling, Algorithm R)."""
    total, sums, squares = 0, None, 0.0
    reservoir: torch.Tensor | None = None
    for chunk in chunks(source):
        if sums is None:
            sums = torch.zeros(chunk.shape[1], dtype=torch.float64)
            reservoir = chunk.new_empty(sample_size, chunk.shape[1])
        elif chunk.shape[1] != len(sums):
            raise SAEError(f"activation chunks differ in width: {len(sums)} and then {chunk.shape[1]}")
        wide = chunk.double()
        sums += wide.sum(dim=0)
        squares += float(wide.square().sum())
        fill = min(len(chunk), max(0, sample_size - total))
        reservoir[total : total + fill] = chunk[:fill]
        rest = torch.arange(total + fill, total + len(chunk))  # global indices past the filled reservoir
        if len(rest):
            slots = (torch.rand(len(rest), generator=generator, dtype=torch.float64) * (rest + 1)).long()
            for row, slot in zip((rest[slots < sample_size] - total).tolist(), slots[slots < sample_size].tolist()):
                reservoir[slot] = chunk[row]
        total += len(chunk)
    if not total:
        raise SAEError("the activation source holds no tokens: no chunks, or only empty ones")
    mean = sums / total
    variance = max(squares / total - float(mean.square().sum()), 1e-12)  # mean squared distance from the mean
    return Statistics(
        total, mean.float(), torch.tensor(variance**0.5, dtype=torch.float32), reservoir[: min(total, sample_size)]
    )
