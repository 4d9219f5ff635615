"""Training a vitviz ViT: data sets, model presets, the optimizer and the loop, read from the flags of
`vitviz train` (vitviz/commands/train.py, which has the flags and an example).

Writes best.pt and last.pt (vitviz checkpoints), metrics.jsonl (one line per epoch) and
curves.png (loss and top-1 per epoch, redrawn every epoch) into --out. `--resume runs/cifar10/last.pt`
continues from the saved epoch and step. `--tensorboard DIR` also logs the metrics for TensorBoard.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets
from torchvision.transforms import v2
from tqdm import tqdm

from vitviz.loading.checkpoint import read_checkpoint, save_checkpoint
from vitviz.loading.errors import ModelLoadError
from vitviz.model import ViT, ViTConfig
from vitviz.preprocessing import Preprocessing
from vitviz.render.curves import plot_curves, read_history
from vitviz.training.augment import BatchAugment, DeviceBatches
from vitviz.training.metrics import classification_metrics

# Model presets for small images (patch 4 on 32x32 gives an 8x8 grid of 64 patches).
PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=4, hidden_size=192, num_layers=6, num_heads=6, mlp_size=384),
    "small": dict(patch_size=4, hidden_size=256, num_layers=8, num_heads=8, mlp_size=512),
    "cifar": dict(patch_size=4, hidden_size=384, num_layers=7, num_heads=12, mlp_size=768),
}
# Per-channel statistics of each dataset's training images, for normalisation.
DATASET_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "mnist": ((0.1307, 0.1307, 0.1307), (0.3081, 0.3081, 0.3081)),
    "imagefolder": ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
}


def build_datasets(args: argparse.Namespace) -> tuple[Dataset, Dataset, list[str], Preprocessing]:
    mean, std = DATASET_STATS[args.dataset]
    size = args.image_size
    augment: list = [v2.RandomCrop(size, padding=size // 8, padding_mode="reflect")] if args.augment != "none" else []
    if args.augment != "none" and args.dataset != "mnist":  # digits are not mirror-symmetric
        augment.append(v2.RandomHorizontalFlip())
    augment += {"trivialaugment": [v2.TrivialAugmentWide()], "randaugment": [v2.RandAugment()]}.get(args.augment, [])
    to_tensor = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    erase = [v2.RandomErasing(args.random_erasing)] if args.random_erasing > 0 else []
    base = [v2.RGB(), v2.Resize((size, size), antialias=True)]
    train_tf, val_tf = v2.Compose(base + augment + to_tensor + erase), v2.Compose(base + to_tensor)
    if args.dataset == "imagefolder":
        train, val = _image_folder(args.train_dir, "--train-dir"), _image_folder(args.val_dir, "--val-dir")
        if train.classes != val.classes:
            raise SystemExit(f"error: --train-dir classes {train.classes} differ from --val-dir classes {val.classes}")
    else:
        cls = {"cifar10": datasets.CIFAR10, "cifar100": datasets.CIFAR100, "mnist": datasets.MNIST}[args.dataset]
        try:
            train = cls(args.data_dir, train=True, download=True)
            val = cls(args.data_dir, train=False, download=True)
        except (OSError, RuntimeError) as error:  # offline and not yet downloaded
            raise SystemExit(
                f"error: could not get {args.dataset} into {args.data_dir} ({error}); "
                "download it once online, or use --dataset imagefolder"
            ) from None
    classes = list(train.classes)
    preload = args.preload if args.preload is not None else (args.dataset == "imagefolder" and size <= 64)
    if preload or args.data_on_device:
        decode = v2.Compose(base + [v2.ToImage()])  # uint8 (3, size, size), augmented later per epoch
        train = InMemoryImages(train, decode, v2.Compose(augment + to_tensor + erase))
        val = InMemoryImages(val, decode, v2.Compose(to_tensor))
    else:
        train.transform, val.transform = train_tf, val_tf
    return train, val, classes, Preprocessing(resize=(size, size), crop=None, mean=mean, std=std)


def build_loaders(args: argparse.Namespace, train: Dataset, val: Dataset) -> tuple:
    """Training and validation batches: torch DataLoaders, or DeviceBatches with --data-on-device."""
    drop_last = len(train) > args.batch_size
    if args.data_on_device:
        mean, std = DATASET_STATS[args.dataset]
        augment = BatchAugment(
            mean, std, policy=args.augment, flip=args.dataset != "mnist", erasing=args.random_erasing
        )
        plain = BatchAugment(mean, std, policy="none")
        return (
            DeviceBatches(train.images, train.targets, args.batch_size, args.device, augment, True, drop_last),
            DeviceBatches(val.images, val.targets, args.batch_size, args.device, plain, False),
        )
    loader_kwargs = dict(batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0)
    return (
        DataLoader(train, shuffle=True, drop_last=drop_last, **loader_kwargs),
        DataLoader(val, shuffle=False, **loader_kwargs),
    )


def _image_folder(path: Path | None, flag: str) -> datasets.ImageFolder:
    if path is None:
        raise SystemExit(f"error: --dataset imagefolder needs {flag}")
    if not path.is_dir():
        raise SystemExit(f"error: {flag} {path} is not a folder")
    try:
        folder = datasets.ImageFolder(str(path))
    except (FileNotFoundError, RuntimeError) as error:
        raise SystemExit(f"error: {flag} {path}: {error}") from None
    if len(folder.classes) < 2:
        raise SystemExit(f"error: {flag} {path} has {len(folder.classes)} class folder(s); at least 2 are needed")
    return folder


class InMemoryImages(Dataset):
    """A data set of small images decoded once into one uint8 tensor, so epochs skip JPEG decoding.

    CIFAR-10's 50,000 training images take 150 MB this way; the per-epoch transform
    (augmentation, scaling, normalisation) still runs on every access.
    """

    def __init__(self, dataset: Dataset, decode, transform):
        name = getattr(dataset, "root", type(dataset).__name__)
        items = tqdm(range(len(dataset)), desc=f"decoding {name}", disable=None, leave=False, file=sys.stderr)
        images, targets = [], []
        for index in items:
            image, target = dataset[index]  # a PIL image: the data set has no transform
            images.append(decode(image))
            targets.append(target)
        self.images = torch.stack(images)  # (N, 3, size, size) uint8
        self.targets = torch.tensor(targets)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.images[index]), int(self.targets[index])


def build_config(args: argparse.Namespace, num_classes: int) -> ViTConfig:
    values = dict(PRESETS[args.preset])
    for name in values:
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    try:
        return ViTConfig(
            image_size=args.image_size,
            num_classes=num_classes,
            pooling=args.pooling,
            dropout=args.dropout,
            drop_path=args.drop_path,
            **values,
        )
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def build_optimizer(model: ViT, args: argparse.Namespace, total_steps: int, warmup_steps: int):
    # no weight decay on biases, norms, tokens and position embeddings (1-D or prefix parameters)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    no_decay = [
        p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos_embed" not in n and "token" not in n)
    ]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr
    )

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def evaluate_loader(model: torch.nn.Module, loader: DataLoader, device: str, precision: str):
    """Mean loss, predictions and targets over a loader (no augmentation, no grad)."""
    model.eval()
    losses, predictions, targets = [], [], []
    with torch.inference_mode(), torch.autocast(device.split(":")[0], torch.bfloat16, enabled=precision == "bf16"):
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            logits = model(images).logits.float()
            losses.append(F.cross_entropy(logits, labels, reduction="sum").item())
            predictions.append(logits.argmax(-1).cpu())
            targets.append(labels.cpu())
    return sum(losses) / max(1, len(loader.dataset)), torch.cat(predictions), torch.cat(targets)


def train(args: argparse.Namespace) -> dict:
    """One training run from the command line's flags (vitviz/commands/train.py): writes best.pt, last.pt,
    metrics.jsonl and curves.png into ``args.out``; returns the history, the best top-1 and the folder."""
    summary_writer = _summary_writer_class() if args.tensorboard else None  # before loading data, not after
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    train_set, val_set, classes, preprocessing = build_datasets(args)
    train_loader, val_loader = build_loaders(args, train_set, val_set)
    config = build_config(args, len(classes))
    model = ViT(config).to(args.device)
    model.attn_implementation = (
        args.attention if args.attention != "auto" else ("eager" if args.device.startswith("cpu") else "sdpa")
    )
    if args.init_from:
        _init_from(args.init_from, model, config, classes)
    steps_per_epoch = min(len(train_loader), args.max_steps_per_epoch or len(train_loader))
    total_steps = steps_per_epoch * args.epochs
    optimizer, scheduler = build_optimizer(model, args, total_steps, int(args.warmup_epochs * steps_per_epoch))
    mixers = [v2.MixUp(alpha=args.mixup, num_classes=len(classes))] if args.mixup > 0 else []
    mixers += [v2.CutMix(alpha=args.cutmix, num_classes=len(classes))] if args.cutmix > 0 else []
    mix = v2.RandomChoice(mixers) if mixers else None

    start_epoch, step, best_top1, elapsed = 0, 0, -1.0, 0.0
    if args.resume:
        start_epoch, step, best_top1, elapsed = _resume(args.resume, model, optimizer, scheduler, config)
    forward = torch.compile(model) if args.compile else model
    args.out.mkdir(parents=True, exist_ok=True)
    metrics_path = args.out / "metrics.jsonl"
    hyper = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    started = time.time() - elapsed  # elapsed_s counts training time across resumes
    history = []
    # curves.png covers the whole run: when resuming, also the epochs that last.pt holds
    curves = _earlier_epochs(metrics_path, start_epoch) if args.resume else []
    # purge_step hides the events an earlier run logged into DIR from this step on: those of the epoch an
    # interrupted run did not finish (when resuming), or all of an older run's (otherwise)
    logger = summary_writer(str(args.tensorboard), purge_step=step + 1) if summary_writer else nullcontext()
    with logger as tensorboard:  # closed (all events written) also when training stops early
        for epoch in range(start_epoch, args.epochs):
            epoch_started = time.time()
            model.train()
            # running sums stay on the device: reading them every step would make the CPU wait for a GPU
            seen, loss_sum, correct = 0, torch.zeros((), device=args.device), torch.zeros((), device=args.device)
            bar = tqdm(
                train_loader,
                total=steps_per_epoch,
                desc=f"epoch {epoch + 1}/{args.epochs}",
                leave=False,
                disable=None,
                file=sys.stderr,
            )
            for batch_index, (images, labels) in enumerate(bar):
                if batch_index >= steps_per_epoch:
                    break
                images, labels = images.to(args.device), labels.to(args.device)
                targets = labels
                if mix is not None and (args.mix_prob >= 1 or torch.rand(()).item() < args.mix_prob):
                    images, targets = mix(images, labels)
                with torch.autocast(args.device.split(":")[0], torch.bfloat16, enabled=args.precision == "bf16"):
                    logits = forward(images).logits.float()
                loss = F.cross_entropy(logits, targets, label_smoothing=args.label_smoothing)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                if tensorboard is not None:  # the rate this step used, at its 1-based number (as "step" counts)
                    tensorboard.add_scalar("step/lr", scheduler.get_last_lr()[0], step + 1)
                scheduler.step()
                step += 1
                seen += len(labels)
                loss_sum += loss.detach() * len(labels)
                correct += (logits.argmax(-1) == labels).sum()
                if not bar.disable and (step % 20 == 0 or batch_index + 1 == steps_per_epoch):
                    bar.set_postfix(
                        loss=f"{loss_sum.item() / seen:.3f}",
                        acc=f"{correct.item() / seen:.3f}",
                        lr=f"{scheduler.get_last_lr()[0]:.2e}",
                    )
            val_loss, predictions, val_targets = evaluate_loader(model, val_loader, args.device, args.precision)
            scores = classification_metrics(predictions, val_targets, len(classes))
            record = {
                "epoch": epoch + 1,
                "step": step,
                "train_loss": loss_sum.item() / max(1, seen),
                "train_top1": correct.item() / max(1, seen),
                "val_loss": val_loss,
                "val_top1": scores["accuracy"],
                "val_macro_precision": scores["macro_precision"],
                "val_macro_recall": scores["macro_recall"],
                "val_macro_f1": scores["macro_f1"],
                "lr": scheduler.get_last_lr()[0],
                "epoch_s": time.time() - epoch_started,
                "elapsed_s": time.time() - started,
            }
            history.append(record)
            curves.append(record)
            with open(metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            plot_curves(curves, args.out / "curves.png")
            print(
                f"epoch {epoch + 1}/{args.epochs}: train loss {record['train_loss']:.4f} acc {record['train_top1']:.4f}"
                f" | val loss {val_loss:.4f} top-1 {scores['accuracy']:.4f} macro-F1 {scores['macro_f1']:.4f}",
                flush=True,
            )
            training = {
                "args": hyper,
                "epoch": epoch + 1,
                "step": step,
                "metrics": record,
                "device": args.device,
                "torch": str(torch.__version__),
            }
            if scores["accuracy"] > best_top1:
                best_top1 = scores["accuracy"]
                save_checkpoint(
                    args.out / "best.pt", model, classes, preprocessing, training, half=args.half_checkpoints
                )
            _save_last(args.out / "last.pt", model, classes, preprocessing, training, optimizer, scheduler, best_top1)
            if tensorboard is not None:  # after last.pt: a run resumed from it logs the epochs after this one
                for key, value in record.items():
                    if key not in ("epoch", "step"):  # the axes, not metrics
                        tensorboard.add_scalar(f"epoch/{key}", value, epoch + 1)
                tensorboard.flush()  # on disk up to what last.pt holds, even if the process is killed
    return {"history": history, "best_top1": best_top1, "out": str(args.out)}


def _save_last(path, model, classes, preprocessing, training, optimizer, scheduler, best_top1) -> None:
    """last.pt: a vitviz checkpoint plus what --resume needs (plain tensors and dicts only), written atomically."""
    resume = {
        "epoch": training["epoch"],
        "step": training["step"],
        "best_top1": best_top1,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": torch.get_rng_state(),  # the next epoch's data order and augmentations continue from here
        # a GPU's own generators (drop-path draws there); restored when the resumed run has as many GPUs
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    save_checkpoint(path, model, classes, preprocessing, training, extra={"resume": resume})


def _summary_writer_class() -> type:
    """torch's TensorBoard SummaryWriter, or exit with how to install the tensorboard package it needs."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise SystemExit(
            f"error: --tensorboard needs the tensorboard package ({error}); install it with `pip install tensorboard`"
        ) from None
    return SummaryWriter


def _earlier_epochs(metrics_path: Path, start_epoch: int) -> list[dict]:
    """The metrics.jsonl records of the epochs a resumed last.pt holds (none if the file is missing)."""
    if not metrics_path.exists():
        return []
    try:
        return [record for record in read_history(metrics_path) if record["epoch"] <= start_epoch]
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: --resume: cannot continue the training curves: {error}") from None


def _read(path: Path, flag: str) -> dict:
    """The checkpoint a flag names, or exit with the reason it cannot be read."""
    try:
        return read_checkpoint(path)
    except ModelLoadError as error:
        raise SystemExit(f"error: {flag}: {error}") from None


def _init_from(path: Path, model: ViT, config: ViTConfig, classes: list[str]) -> None:
    checkpoint = _read(path, "--init-from")
    regularisation = ("dropout", "attention_dropout", "drop_path")  # may change between runs
    # through ViTConfig, so a checkpoint saved before a field existed gets that field's default
    theirs = asdict(ViTConfig(**checkpoint["config"]))
    ours = asdict(config)
    differ = {k: (theirs[k], ours[k]) for k in ours if k not in regularisation and theirs[k] != ours[k]}
    if differ:
        listed = ", ".join(f"{k}={a!r} there, {b!r} here" for k, (a, b) in differ.items())
        raise SystemExit(f"error: --init-from {path} has another model: {listed}; pass the same model flags")
    if list(checkpoint["class_names"]) != list(classes):
        raise SystemExit(f"error: --init-from {path} has classes {checkpoint['class_names']}, the data has {classes}")
    model.load_state_dict({k: v.float() for k, v in checkpoint["state_dict"].items()})
    print(f"initialised from {path}", flush=True)


def _resume(path: Path, model: ViT, optimizer, scheduler, config: ViTConfig) -> tuple[int, int, float, float]:
    checkpoint = _read(path, "--resume")
    if "resume" not in checkpoint:
        raise SystemExit(f"error: --resume {path} has no optimizer state; resume from a last.pt written by train")
    if checkpoint["config"] != asdict(config):
        raise SystemExit(f"error: --resume {path} was trained with config {checkpoint['config']}, not {asdict(config)}")
    model.load_state_dict(checkpoint["state_dict"])
    optimizer.load_state_dict(checkpoint["resume"]["optimizer"])
    scheduler.load_state_dict(checkpoint["resume"]["scheduler"])
    state = checkpoint["resume"]
    if "rng" in state:  # absent in last.pt files written before vitviz saved it
        torch.set_rng_state(state["rng"])
    cuda_rng = state.get("cuda_rng", [])
    if cuda_rng and torch.cuda.is_available() and len(cuda_rng) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_rng)
    print(f"resumed from {path}: epoch {state['epoch']}, step {state['step']}", flush=True)
    elapsed = float(checkpoint.get("training", {}).get("metrics", {}).get("elapsed_s", 0.0))
    return state["epoch"], state["step"], state["best_top1"], elapsed
