"""Train a vitviz ViT: `vitviz train --help`.

Example (the shipped CIFAR-10 default; see checkpoints/README.md for the exact command):

    vitviz train --dataset imagefolder --train-dir /tmp/cifar10/train \
        --val-dir /tmp/cifar10/test --preset cifar --epochs 200 --out runs/cifar10

Writes best.pt and last.pt (vitviz checkpoints), metrics.jsonl (one line per epoch) and
curves.png (loss and top-1 per epoch, redrawn every epoch) into --out. `--resume runs/cifar10/last.pt`
continues from the saved epoch and step. `--tensorboard DIR` also logs the metrics for TensorBoard.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from vitviz.training.train import PRESETS, train

# Whole training recipes: `--recipe NAME` sets these flags' defaults; flags given on the command line win.
RECIPES: dict[str, dict] = {
    # CIFAR-10 on one GPU: patch 2 on 32 x 32 gives a 16 x 16 grid of 256 patches. The data set stays on the
    # GPU as uint8 and is augmented there (see vitviz/training/augment.py); best.pt is stored in fp16 (16.8 MB).
    "cifar10-gpu": dict(
        dataset="imagefolder",
        image_size=32,
        preset="cifar",
        patch_size=2,
        epochs=200,
        batch_size=256,
        lr=1e-3,
        warmup_epochs=5,
        weight_decay=0.05,
        label_smoothing=0.1,
        augment="trivialaugment",
        mixup=0.8,
        cutmix=1.0,
        mix_prob=0.5,
        random_erasing=0.25,
        drop_path=0.1,
        precision="bf16",
        compile=True,
        data_on_device=True,
        half_checkpoints=True,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        help="a whole training recipe: sets the defaults of the flags it names (see RECIPES in "
        "vitviz/commands/train.py); flags given on the command line still win",
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--dataset",
        choices=["cifar10", "cifar100", "mnist", "imagefolder"],
        default="cifar10",
        help="torchvision dataset (downloaded into --data-dir when online) or a folder of class folders",
    )
    data.add_argument("--data-dir", type=Path, default=Path("data"), help="where torchvision datasets live")
    data.add_argument("--train-dir", type=Path, help="imagefolder: training images, one sub-folder per class")
    data.add_argument("--val-dir", type=Path, help="imagefolder: validation images, same class folders")
    data.add_argument("--image-size", type=int, default=32, help="side the images are resized to")
    data.add_argument("--workers", type=int, default=2, help="data-loading worker processes")
    data.add_argument(
        "--preload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="decode every image once into memory (default: on for imagefolder at --image-size <= 64)",
    )
    data.add_argument(
        "--data-on-device",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep the decoded data set on --device as uint8 and shuffle and augment whole batches "
        "there, so a GPU does not wait for CPU workers (implies --preload)",
    )
    model = p.add_argument_group("model")
    model.add_argument("--preset", choices=sorted(PRESETS), default="tiny", help="model size preset")
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_size"):
        model.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"override the preset's {name}")
    model.add_argument("--pooling", choices=["cls", "mean"], default="cls", help="classify from [CLS] or mean token")
    model.add_argument("--dropout", type=float, default=0.0, help="dropout rate")
    model.add_argument("--drop-path", type=float, default=0.1, help="stochastic depth rate of the last block")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--epochs", type=int, default=100, help="training epochs")
    opt.add_argument("--batch-size", type=int, default=128, help="images per step")
    opt.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (AdamW)")
    opt.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay (not on norms, biases)")
    opt.add_argument("--warmup-epochs", type=float, default=5, help="linear warm-up, then cosine decay to 0")
    opt.add_argument("--label-smoothing", type=float, default=0.1, help="cross-entropy label smoothing")
    opt.add_argument(
        "--augment",
        choices=["none", "basic", "trivialaugment", "randaugment"],
        default="trivialaugment",
        help="basic: random crop with padding + flip; the others add that policy",
    )
    opt.add_argument("--mixup", type=float, default=0.0, help="MixUp alpha (0: off)")
    opt.add_argument("--cutmix", type=float, default=0.0, help="CutMix alpha (0: off)")
    opt.add_argument(
        "--mix-prob",
        type=float,
        default=1.0,
        help="share of batches that get MixUp or CutMix, when either is on (the others stay unmixed)",
    )
    opt.add_argument(
        "--random-erasing",
        type=float,
        default=0.0,
        help="probability of erasing one random rectangle of each training image (0: off)",
    )
    opt.add_argument("--precision", choices=["fp32", "bf16"], default="bf16", help="bf16 autocast (CPU and GPU)")
    opt.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False, help="torch.compile the model")
    opt.add_argument(
        "--attention",
        choices=["auto", "sdpa", "eager"],
        default="auto",
        help="attention kernel for training; auto: eager on CPU (faster for short sequences), sdpa on GPU",
    )
    opt.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    opt.add_argument("--max-steps-per-epoch", type=int, help="cut epochs short (for quick checks)")
    run = p.add_argument_group("run")
    run.add_argument("--out", type=Path, default=Path("runs/vit"), help="folder for checkpoints and metrics")
    run.add_argument("--resume", type=Path, help="continue from this last.pt (same flags; epoch, step, RNG restored)")
    run.add_argument(
        "--init-from",
        type=Path,
        help="start from the weights of this vitviz checkpoint (same config and classes), "
        "with a fresh optimiser and schedule",
    )
    run.add_argument("--seed", type=int, default=0, help="random seed")
    run.add_argument(
        "--half-checkpoints", action=argparse.BooleanOptionalAction, default=False, help="store best.pt weights in fp16"
    )
    run.add_argument(
        "--tensorboard",
        type=Path,
        metavar="DIR",
        help="also log every epoch's metrics (at the epoch) and the learning rate (at every step) "
        "for TensorBoard into DIR; needs `pip install tensorboard`",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's flags, with a --recipe's values as defaults; exits with a message on bad values."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.recipe:  # the recipe's values become the defaults; parse again so explicit flags still win
        parser.set_defaults(**RECIPES[args.recipe])
        args = parser.parse_args(argv)
    for flag in ("epochs", "batch_size", "image_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.workers < 0 or not 0 <= args.label_smoothing < 1 or args.lr <= 0:
        parser.error("--workers must be >= 0, --label-smoothing in [0, 1) and --lr > 0")
    numbers = (
        "lr",
        "weight_decay",
        "warmup_epochs",
        "label_smoothing",
        "mixup",
        "cutmix",
        "mix_prob",
        "random_erasing",
        "dropout",
        "drop_path",
    )
    for name in numbers:
        if not math.isfinite(getattr(args, name)):
            parser.error(f"--{name.replace('_', '-')} must be a finite number, not {getattr(args, name)}")
    if not (0 <= args.random_erasing <= 1 and 0 <= args.mix_prob <= 1) or min(args.mixup, args.cutmix) < 0:
        parser.error("--random-erasing and --mix-prob must be in [0, 1], --mixup and --cutmix >= 0")
    if args.data_on_device and args.preload is False:
        parser.error("--data-on-device keeps the decoded images on the device: it cannot go with --no-preload")
    _check_device(parser, args.device)
    if args.resume and args.init_from:
        parser.error("--resume and --init-from exclude each other")
    return args


def _check_device(parser: argparse.ArgumentParser, device: str) -> None:
    """Exit with a message, before any data is decoded, if torch cannot use --device on this machine."""
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        parser.error(f"--device {device}: {error}")
    available = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}.get(kind, lambda: True)
    if not available():
        parser.error(f"--device {device}: this machine has no {kind} device torch can use; try --device cpu")


def main(argv: list[str] | None = None) -> dict:
    return train(parse_args(argv))


if __name__ == "__main__":
    main()
