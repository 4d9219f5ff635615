"""Class embeddings from prompts, computed once per (text tower, classes, templates) and kept on disk.

With templates, a class's embedding is the renormalised mean of its normalised template embeddings (CLIP's
ImageNet recipe; open_clip's ``build_zero_shot_classifier``). A long set (ImageNet's 1,000 classes x 80 templates
is 80,000 prompts) is embedded in chunks of classes, each saved as soon as it is done: interrupted (Ctrl-C, a
closed page, a crash), the next call starts at the first missing chunk. ``progress(done, total)`` counts prompts.
Before a long set, ``estimated_seconds`` says about how long it will take (the prompts left, times a sample's rate).

The cache lives in ``$VITVIZ_CACHE/text-embeddings`` (default ``~/.cache/vitviz``), one folder per key: the
tower's fingerprint (a digest of its weights and tokenizer) and the exact classes and templates.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from vitviz.text.prompts import check_prompts, check_templates, fill
from vitviz.text.towers import TextTower

Progress = Callable[[int, int], None]  # (prompts embedded so far, prompts in all)
PROMPTS_PER_CHUNK = 512  # a chunk holds whole classes, about this many prompts: what an interruption can lose
BATCH_SIZE = 256  # prompts per call of the text tower (a causal one sorts them by length: vitviz.text.cut)
LONG_SET = 1000  # prompts left from which estimated_seconds measures a sample (ImageNet, one template: 1,000)
SAMPLE_SIZE = 32  # prompts timed for an estimate


def default_cache_dir() -> Path:
    root = os.environ.get("VITVIZ_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitviz"
    return Path(root) / "text-embeddings"


def cache_key(tower: TextTower, classes: Sequence[str], templates: Sequence[str] | None) -> str:
    text = json.dumps([tower.fingerprint, list(classes), None if templates is None else list(templates)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def class_embeddings(
    tower: TextTower,
    classes: Sequence[str],
    templates: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """(C, E) unit-length text embeddings, one per class, in fp32.

    Without ``templates`` each class's text is used as it is; with them, every template is filled with the class
    name and the normalised embeddings are averaged and renormalised. ``cache_dir`` (default: default_cache_dir())
    keeps the result and the finished chunks of an interrupted run; ``use_cache=False`` neither reads nor writes it.
    """
    plan = _plan(tower, classes, templates, cache_dir if use_cache else False)
    total = len(plan.classes) * plan.per_class
    if plan.done_file is not None and plan.done_file.is_file():
        cached = _read(plan.done_file)
        if cached is not None and cached.shape[0] == len(plan.classes):
            if progress:
                progress(total, total)
            return cached
    chunks = []
    for start, names, chunk_file in plan.chunks:
        chunk = _read(chunk_file) if chunk_file is not None and chunk_file.is_file() else None
        if chunk is None or chunk.shape[0] != len(names):
            before = start * plan.per_class  # prompts done before this chunk: progress is reported after every batch
            step = (lambda done, before=before: progress(before + done, total)) if progress else None
            chunk = _embed_classes(tower, names, plan.templates, step)
            if chunk_file is not None:
                _write(chunk, chunk_file)
        elif progress:
            progress((start + len(names)) * plan.per_class, total)
        chunks.append(chunk)
    embeddings = torch.cat(chunks)
    if plan.done_file is not None:
        _write(embeddings, plan.done_file)
        for _, _, chunk_file in plan.chunks:
            chunk_file.unlink(missing_ok=True)
    return embeddings


def prompts_left(
    tower: TextTower,
    classes: Sequence[str],
    templates: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
) -> int:
    """How many prompts ``class_embeddings`` would still embed: 0 when the set is on disk, fewer than all when an
    interrupted run left finished chunks (a damaged file, found only when read, is not counted)."""
    plan = _plan(tower, classes, templates, cache_dir)
    if plan.done_file.is_file():
        return 0
    return sum(len(names) for _, names, chunk_file in plan.chunks if not chunk_file.is_file()) * plan.per_class


def estimated_seconds(
    tower: TextTower,
    classes: Sequence[str],
    templates: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    least: int | None = None,
) -> float | None:
    """About how long ``class_embeddings`` will take, in seconds: the prompts left (``prompts_left``) times the
    time per prompt of a sample of them (``seconds_per_prompt``); None when fewer than ``least`` (default LONG_SET)
    prompts are left, which takes seconds at most and is not worth the sample's time."""
    left = prompts_left(tower, classes, templates, cache_dir)
    if left < (LONG_SET if least is None else least):
        return None
    texts = list(classes) if templates is None else [fill(t, name) for name in classes for t in templates]
    return left * seconds_per_prompt(tower, texts)


def seconds_per_prompt(tower: TextTower, texts: Sequence[str], sample: int = SAMPLE_SIZE, seed: int = 0) -> float:
    """The seconds one prompt takes, timed on one batch of ``sample`` prompts drawn from ``texts`` at random (a
    fixed seed), after a warm-up of two: representative of the set's lengths. About 1 s for a B-sized tower."""
    chosen = random.Random(seed).sample(list(texts), min(sample, len(texts)))
    with torch.inference_mode():
        tower.encode(chosen[:2])
        start = time.perf_counter()
        tower.encode(chosen)
    return (time.perf_counter() - start) / len(chosen)


@dataclass(frozen=True)
class _Plan:
    classes: list[str]
    templates: list[str] | None
    per_class: int  # prompts per class
    done_file: Path | None  # the finished set (None: no cache)
    chunks: list[tuple[int, list[str], Path | None]]  # (index of the first class, the classes, the chunk's file)


def _plan(
    tower: TextTower,
    classes: Sequence[str],
    templates: Sequence[str] | None,
    cache_dir: str | Path | None | Literal[False],
) -> _Plan:
    """The checked classes and templates, and the files of the set and its chunks (none for ``cache_dir=False``)."""
    classes = check_prompts(classes, unique=False)
    templates = None if templates is None else check_templates(templates)
    per_class = 1 if templates is None else len(templates)
    folder = (
        None if cache_dir is False else Path(cache_dir or default_cache_dir()) / cache_key(tower, classes, templates)
    )
    step = max(1, PROMPTS_PER_CHUNK // per_class)
    chunks = [
        (start, classes[start : start + step], folder / f"chunk-{start:06d}.pt" if folder else None)
        for start in range(0, len(classes), step)
    ]
    return _Plan(classes, templates, per_class, folder / "embeddings.pt" if folder else None, chunks)


def _embed_classes(
    tower: TextTower,
    names: Sequence[str],
    templates: Sequence[str] | None,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """(len(names), E): each class's normalised embedding, or the renormalised mean over its templates.
    ``progress(prompts done)`` after each batch."""
    texts = list(names) if templates is None else [fill(t, name) for name in names for t in templates]
    parts = []
    with torch.inference_mode():
        for i in range(0, len(texts), BATCH_SIZE):
            parts.append(tower.encode(texts[i : i + BATCH_SIZE]).float())
            if progress:
                progress(min(len(texts), i + BATCH_SIZE))
    embeddings = F.normalize(torch.cat(parts), dim=-1)  # (len(texts), E)
    if templates is not None:
        embeddings = F.normalize(embeddings.reshape(len(names), len(templates), -1).mean(dim=1), dim=-1)
    return embeddings.clone()  # an ordinary tensor, not an inference tensor: it may be used with autograd


def _read(path: Path) -> torch.Tensor | None:
    """A cached tensor, or None for a damaged file (it is then computed again)."""
    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # truncated, corrupt or foreign: recompute rather than fail
        return None
    return tensor if isinstance(tensor, torch.Tensor) and tensor.ndim == 2 else None


def _write(tensor: torch.Tensor, path: Path) -> None:
    """Atomically: a reader never sees half a file, and an interruption leaves no broken one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    torch.save(tensor.contiguous(), partial)
    partial.replace(path)
