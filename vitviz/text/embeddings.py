"""Class embeddings from prompts, computed once per (text tower, classes, templates) and kept on disk.

With templates, a class's embedding is the renormalised mean of its normalised template embeddings (CLIP's
ImageNet recipe; open_clip's ``build_zero_shot_classifier``). A long set (ImageNet's 1,000 classes x 80 templates
is 80,000 prompts) is embedded in chunks of classes, each saved as soon as it is done: interrupted (Ctrl-C, a
closed page, a crash), the next call starts at the first missing chunk. ``progress(done, total)`` counts prompts.

The cache lives in ``$VITVIZ_CACHE/text-embeddings`` (default ``~/.cache/vitviz``), one folder per key: the
tower's fingerprint (a digest of its weights and tokenizer) and the exact classes and templates.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from vitviz.text.prompts import check_prompts, check_templates, fill
from vitviz.text.towers import TextTower

Progress = Callable[[int, int], None]  # (prompts embedded so far, prompts in all)
PROMPTS_PER_CHUNK = 512  # a chunk holds whole classes, about this many prompts: what an interruption can lose
BATCH_SIZE = 256  # prompts per forward pass of the text tower


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
    classes = check_prompts(classes, unique=False)
    templates = None if templates is None else check_templates(templates)
    per_class = 1 if templates is None else len(templates)
    total = len(classes) * per_class
    folder = Path(cache_dir or default_cache_dir()) / cache_key(tower, classes, templates) if use_cache else None
    done_file = folder / "embeddings.pt" if folder else None
    if done_file is not None and done_file.is_file():
        cached = _read(done_file)
        if cached is not None and cached.shape[0] == len(classes):
            if progress:
                progress(total, total)
            return cached
    classes_per_chunk = max(1, PROMPTS_PER_CHUNK // per_class)
    chunks = []
    for start in range(0, len(classes), classes_per_chunk):
        names = classes[start : start + classes_per_chunk]
        chunk_file = folder / f"chunk-{start:06d}.pt" if folder else None
        chunk = _read(chunk_file) if chunk_file is not None and chunk_file.is_file() else None
        if chunk is None or chunk.shape[0] != len(names):
            before = start * per_class  # prompts done before this chunk: progress is reported after every batch
            step = (lambda done: progress(before + done, total)) if progress else None
            chunk = _embed_classes(tower, names, templates, step)
            if chunk_file is not None:
                _write(chunk, chunk_file)
        elif progress:
            progress((start + len(names)) * per_class, total)
        chunks.append(chunk)
    embeddings = torch.cat(chunks)
    if done_file is not None:
        _write(embeddings, done_file)
        for chunk_file in folder.glob("chunk-*.pt"):
            chunk_file.unlink(missing_ok=True)
    return embeddings


def _embed_classes(tower: TextTower, names: Sequence[str], templates: Sequence[str] | None,
                   progress: Callable[[int], None] | None = None) -> torch.Tensor:  # fmt: skip
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
