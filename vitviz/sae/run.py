"""One SAE training run, end to end: ``train(...)`` reads the data, trains, measures the held-out images and writes
the SAE folder. `vitviz sae train` (vitviz/commands/sae.py) is this function with flags.

    sae, record = train("runs/sae", index="my-index", block=3, latents=1536, k=16)
    sae, record = train("runs/sae", images="photos/", model="default", block=3, latents=1536)
    sae, record = train("runs/sae", activations=["acts.npy"], holdout_activations=["held.npy"], latents=1536)

The data is exactly one of:
- ``index``: a dataset index made with `vitviz index SOURCE --out INDEX --activations B`; its block-B tokens are
  read from the activation shards in order, memory-mapped (the patch tokens, or ``tokens="all"``), and a seeded
  ``holdout`` share of its images, chosen by a hash of each image_id (``vitviz.sae.indexed``), is never trained on;
  the metrics are measured on them, top-1 agreement included (the index's model, its images read again);
- ``images``: a folder of images run through ``model`` up to block B, its patch tokens the data; a seeded share of the
  images is held out (labels from folders named after the model's classes);
- ``activations``: ``.npy`` files (tokens, width), memory-mapped; the held-out tokens are ``holdout_activations`` or
  the last ``holdout`` share of them.

The folder receives ``sae.safetensors`` and ``config.json`` (``vitviz.sae.files``; the training record holds the
``TrainConfig``, Matryoshka prefixes included, the per-epoch history and the data split), ``metrics.json`` and,
while it runs, ``checkpoint.pt`` (a run that finds one resumes it; removed at the end).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from vitviz.sae.data import Source, npy_source
from vitviz.sae.errors import SAEError
from vitviz.sae.files import METRICS, save_sae
from vitviz.sae.metrics import evaluate, prefix_nmse, top1_agreement
from vitviz.sae.model import SAEConfig, TopKSAE
from vitviz.sae.training import TrainConfig, device_of, train_sae


@dataclass(frozen=True)
class TrainRecord:
    """What a run produced besides the SAE: where it is, its held-out metrics and how it went."""

    folder: Path  # the SAE folder written
    metrics: dict  # metrics.json: the held-out activation metrics, top-1 agreement when a model ran, seconds
    history: list[dict]  # one record per epoch (``train_sae``)
    seconds: float  # training time
    model: str | None = None  # the model spec the tokens came from, when known
    data: dict = field(default_factory=dict)  # the index's split record, when trained from an index


def image_files(folder: Path, limit: int | None = None) -> list[Path]:
    """The images under ``folder`` (vitviz's one folder walk: recursive, sorted), at most ``limit``."""
    from vitviz.preprocessing import IMAGE_SUFFIXES
    from vitviz.preprocessing import image_files as walk

    files = walk(folder)
    if not files:
        raise SAEError(f"{folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return files[:limit] if limit else files


def pixels(model, files: list[Path], batch: int = 256) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """(pixel values (B, C, H, W), labels (B,) or None) per batch of files: labels from folders named after classes."""
    from vitviz.preprocessing import load_image

    names = model.class_names
    labelled = names and all(f.parent.name in names for f in files)
    for start in range(0, len(files), batch):
        part = files[start : start + batch]
        images = torch.stack([model.transform(load_image(f.read_bytes())) for f in part])
        yield images, torch.tensor([names.index(f.parent.name) for f in part]) if labelled else None


def block_tokens(model, files: list[Path], block: int) -> list[torch.Tensor]:
    """The patch tokens of block ``block``'s output, fp16 chunks (images x patches, D)."""
    from vitviz.explain.facets import patch_features

    out = []
    for images, _ in pixels(model, files):
        out.append(patch_features(model, images, block).flatten(0, 1).half())  # (B * N, D)
    return out


def _npy_data(
    activations: Sequence[Path], holdout_activations: Sequence[Path] | None, holdout: float
) -> tuple[Source, Source]:
    for path in [*activations, *(holdout_activations or [])]:
        if Path(path).suffix != ".npy" or not Path(path).is_file():
            raise SAEError(f"{path} is not a .npy file")
    train: Source = npy_source([Path(p) for p in activations])
    if holdout_activations:
        held = npy_source([Path(p) for p in holdout_activations])
    else:  # the last share of the tokens (the last images, when they were written in order)
        last = train[-1]
        cut = len(last) - round(holdout * sum(len(a) for a in train))
        if cut <= 0:
            raise SAEError(
                "--holdout asks for more tokens than the last .npy file holds; give --holdout-activations instead"
            )
        train, held = train[:-1] + [last[:cut]], [last[cut:]]
    widths = {a.shape[-1] for a in train} | {a.shape[-1] for a in held}
    if len(widths) != 1 or any(np.ndim(a) != 2 for a in train + held):
        raise SAEError(f"the activation files must all be (tokens, width) with one width; got widths {sorted(widths)}")
    return train, held


def train(
    out: str | Path,
    *,
    latents: int,
    k: int = 16,
    aux_k: int = 256,
    index: str | Path | None = None,
    images: str | Path | None = None,
    activations: Sequence[str | Path] | None = None,
    holdout_activations: Sequence[str | Path] | None = None,
    block: int | None = None,
    model: str | None = None,
    tokens: Literal["patches", "all"] = "patches",
    source: str | None = None,
    holdout: float = 0.1,
    max_images: int | None = None,
    config: TrainConfig = TrainConfig(),
    progress: bool = True,
) -> tuple[TopKSAE, TrainRecord]:
    """Train a TopK SAE (Matryoshka when ``config.matryoshka`` names prefixes) on one block's tokens from exactly one
    of ``index``, ``images`` or ``activations`` (see the module docstring), measure it on the held-out share and
    write it to ``out``. Returns the SAE (eval mode, CPU) and the run's record. Bad input raises ``SAEError``."""
    out = Path(out)
    if not 0 <= holdout < 1:
        raise SAEError(f"--holdout must be in [0, 1); got {holdout}")
    if sum(x is not None for x in (index, images, activations)) != 1:
        raise SAEError("give exactly one of INDEX, --images DIR or --activations FILE...")
    vit, held_images, held_batches, held_labels, data_record = None, [], None, None, {}
    if index is not None:
        from vitviz.sae.indexed import index_data, index_labels, index_model, index_pixels, label_batches

        if block is None:
            raise SAEError("INDEX needs --block: the block whose stored output the SAE reads")
        data = index_data(Path(index), block, holdout, config.seed, tokens, max_images)
        vit = index_model(data.index, model).to(device_of(config.device))
        print(
            f"block {block} tokens of {len(data.train_images)} training and {len(data.held_images)} held-out "
            f"images of {data.index.folder}",
            file=sys.stderr,
        )
        training, held, data_record = data.train, [], data.record
        if len(data.held_images):  # else (holdout 0) no metrics
            held = data.held
            held_batches = index_pixels(data.index, vit, data.held_images, source=source)
            held_labels = label_batches(vit, index_labels(data.index, data.held_images))
        model = model or data.index.manifest["model"].get("spec")
        width = int(data.index.manifest["activations"]["width"])
    elif images is not None:
        from vitviz.loading.errors import ModelLoadError
        from vitviz.loading.specs import load_model

        if block is None:
            raise SAEError("--images needs --block: the block whose output the SAE reads")
        model = model or "default"
        try:
            vit = load_model(model)
        except ModelLoadError as error:
            raise SAEError(str(error)) from None
        layers = vit.config.num_layers
        if not 0 <= block < layers:
            raise SAEError(f"--block must be in [0, {layers - 1}] for this model; got {block}")
        files = image_files(Path(images), max_images)
        order = torch.randperm(len(files), generator=torch.Generator().manual_seed(config.seed)).tolist()
        cut = len(files) - round(holdout * len(files))
        train_files, held_images = sorted(files[i] for i in order[:cut]), sorted(files[i] for i in order[cut:])
        print(
            f"block {block} tokens of {len(train_files)} training and {len(held_images)} held-out images",
            file=sys.stderr,
        )
        training, held = block_tokens(vit, train_files, block), block_tokens(vit, held_images, block)
        width = int(training[0].shape[-1])
    else:
        training, held = _npy_data([Path(p) for p in activations], holdout_activations, holdout)
        width = int(training[0].shape[-1])
    sae_config = SAEConfig(d_in=width, latents=latents, k=k, aux_k=aux_k, block=block)
    began = time.perf_counter()
    sae, history = train_sae(training, sae_config, config, checkpoint=out / "checkpoint.pt", progress=progress)
    seconds = time.perf_counter() - began
    metrics = evaluate(sae, held) if callable(held) or sum(len(a) for a in held) else {}
    if metrics and config.matryoshka:
        metrics["prefix_nmse"] = dict(zip(map(str, config.matryoshka), prefix_nmse(sae, held, config.matryoshka)))
    if held_batches is not None:
        metrics |= top1_agreement(vit, sae, block, held_batches, held_labels)
    elif vit is not None and held_images:
        batches = list(pixels(vit, held_images))
        labels = [b[1] for b in batches] if batches[0][1] is not None else None
        metrics |= top1_agreement(vit, sae, block, [b[0] for b in batches], labels)
    metrics["training_seconds"] = seconds
    model = model if vit is not None else None
    training_record = {"train": config.__dict__, "history": history, "seconds": seconds}
    save_sae(sae, out, model=model, training=training_record | ({"data": data_record} if data_record else {}))
    (out / METRICS).write_text(json.dumps(metrics, indent=1))
    (out / "checkpoint.pt").unlink(missing_ok=True)
    return sae, TrainRecord(out, metrics, history, seconds, model, data_record)
