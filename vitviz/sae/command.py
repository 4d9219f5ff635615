"""`vitviz sae train`: train a TopK SAE on one block's output tokens and write it with its held-out metrics.

    vitviz sae train --images DIR --model default --block 3 --latents 1536 --k 16 --out runs/sae
    vitviz sae train --activations acts.npy --holdout-activations held.npy --latents 1536 --k 16 --out runs/sae

From images, the model runs up to block B and its patch tokens' outputs (prefix tokens left out) are the data; a
seeded share of the images (``--holdout``) is kept out of training for the metrics, top-1 agreement included (against
the labels when the images sit in folders named after the model's classes). From ``.npy`` files (n, d), read
memory-mapped in order, the held-out tokens are ``--holdout-activations`` or the last ``--holdout`` share of them.
DIR receives ``sae.safetensors``, ``config.json`` (``vitviz.sae.files``), ``metrics.json`` and ``checkpoint.pt``
(removed at the end; a run that finds one resumes it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vitviz.sae.data import Source, npy_source
from vitviz.sae.errors import SAEError
from vitviz.sae.files import METRICS, save_sae
from vitviz.sae.metrics import evaluate, top1_agreement
from vitviz.sae.model import SAEConfig
from vitviz.sae.training import TrainConfig, train_sae


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz sae", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = p.add_subparsers(dest="command", required=True)
    t = commands.add_parser(
        "train",
        help="train an SAE on one block's output tokens",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = t.add_mutually_exclusive_group(required=True)
    data.add_argument("--images", type=Path, help="a folder of images (searched recursively) run through --model")
    data.add_argument("--activations", type=Path, nargs="+", help=".npy files of (tokens, width) activations")
    t.add_argument("--model", default="default", help="model spec for --images (any load_model spec)")
    t.add_argument(
        "--block", type=int, default=None, help="the block whose output is read, 0-based (needed with --images)"
    )
    t.add_argument("--holdout", type=float, default=0.1, help="share of the images (or tokens) kept for the metrics")
    t.add_argument("--holdout-activations", type=Path, nargs="+", help=".npy files of held-out activations")
    t.add_argument("--latents", type=int, required=True, help="number of latents N (8x or 16x the width is usual)")
    t.add_argument("--k", type=int, default=16, help="latents kept per token")
    t.add_argument("--aux-k", type=int, default=256, help="dead latents the AuxK loss uses")
    t.add_argument("--epochs", type=int, default=8, help="passes over the training tokens")
    t.add_argument("--batch", type=int, default=4096, help="tokens per step")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate (default 2e-4 / sqrt(N / 2^14))")
    t.add_argument("--seed", type=int, default=0, help="seed for the initialisation, the split and the shuffling")
    t.add_argument("--device", default="auto", help="cpu, cuda, or auto (CUDA when present)")
    t.add_argument("--max-images", type=int, default=None, help="use at most this many images (the first, sorted)")
    t.add_argument("--out", type=Path, required=True, help="folder for the SAE, its config and metrics.json")
    return p


def image_files(folder: Path, limit: int | None) -> list[Path]:
    from vitviz.preprocessing import IMAGE_SUFFIXES

    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise SAEError(f"{folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return files[:limit] if limit else files


def pixels(model, files: list[Path], batch: int = 256):
    """(pixel values (B, C, H, W), labels (B,) or None) per batch of files: labels from folders named after classes."""
    from vitviz.preprocessing import load_image

    names = list(getattr(model, "class_names", None) or [])
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


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    try:
        return train_command(args)
    except (SAEError, OSError) as error:
        raise SystemExit(f"error: {error}") from None


def train_command(args: argparse.Namespace) -> dict:
    if not 0 <= args.holdout < 1:
        raise SAEError(f"--holdout must be in [0, 1); got {args.holdout}")
    model, held_images = None, []
    if args.images is not None:
        from vitviz.loading import ModelLoadError, load_model

        if args.block is None:
            raise SAEError("--images needs --block: the block whose output the SAE reads")
        try:
            model = load_model(args.model)
        except ModelLoadError as error:
            raise SAEError(str(error)) from None
        layers = model.config.num_layers
        if not 0 <= args.block < layers:
            raise SAEError(f"--block must be in [0, {layers - 1}] for this model; got {args.block}")
        files = image_files(args.images, args.max_images)
        order = torch.randperm(len(files), generator=torch.Generator().manual_seed(args.seed)).tolist()
        cut = len(files) - round(args.holdout * len(files))
        train_files, held_images = sorted(files[i] for i in order[:cut]), sorted(files[i] for i in order[cut:])
        print(
            f"block {args.block} tokens of {len(train_files)} training and {len(held_images)} held-out images",
            file=sys.stderr,
        )
        train, held = block_tokens(model, train_files, args.block), block_tokens(model, held_images, args.block)
    else:
        for path in args.activations + (args.holdout_activations or []):
            if path.suffix != ".npy" or not path.is_file():
                raise SAEError(f"{path} is not a .npy file")
        train: Source = npy_source(args.activations)
        if args.holdout_activations:
            held = npy_source(args.holdout_activations)
        else:  # the last share of the tokens (the last images, when they were written in order)
            last = train[-1]
            cut = len(last) - round(args.holdout * sum(len(a) for a in train))
            if cut <= 0:
                raise SAEError(
                    "--holdout asks for more tokens than the last .npy file holds; give --holdout-activations instead"
                )
            train, held = train[:-1] + [last[:cut]], [last[cut:]]
        widths = {a.shape[-1] for a in train} | {a.shape[-1] for a in held}
        if len(widths) != 1 or any(np.ndim(a) != 2 for a in train + held):
            raise SAEError(
                f"the activation files must all be (tokens, width) with one width; got widths {sorted(widths)}"
            )
    width = int(train[0].shape[-1])
    config = SAEConfig(d_in=width, latents=args.latents, k=args.k, aux_k=args.aux_k, block=args.block)
    train_config = TrainConfig(epochs=args.epochs, batch=args.batch, lr=args.lr, seed=args.seed, device=args.device)
    began = time.perf_counter()
    sae, history = train_sae(train, config, train_config, checkpoint=args.out / "checkpoint.pt")
    seconds = time.perf_counter() - began
    metrics = evaluate(sae, held) if sum(len(a) for a in held) else {}
    if model is not None and held_images:
        batches = list(pixels(model, held_images))
        labels = [b[1] for b in batches] if batches[0][1] is not None else None
        metrics |= top1_agreement(model, sae, args.block, [b[0] for b in batches], labels)
    metrics["training_seconds"] = seconds
    save_sae(
        sae,
        args.out,
        model=args.model if model is not None else None,
        training={"train": train_config.__dict__, "history": history, "seconds": seconds},
    )
    (args.out / METRICS).write_text(json.dumps(metrics, indent=1))
    (args.out / "checkpoint.pt").unlink(missing_ok=True)
    for name in ("explained_variance", "l0", "dead_fraction", "top1_agreement", "ce_loss_recovered"):
        if name in metrics:
            print(f"{name:>20}: {metrics[name]:.4f}")
    print(f"{'training time':>20}: {seconds:.1f} s -> {args.out}")
    return metrics


if __name__ == "__main__":
    main()
