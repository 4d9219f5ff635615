"""Evaluate a checkpoint on a labelled image folder: `vitviz evaluate --help` (or `python -m vitviz evaluate`).

    python -m vitviz evaluate checkpoints/default.pt --val-dir /tmp/cifar10/test --out eval/

Prints top-1 accuracy, per-class accuracy and the confusion matrix, and saves them as
JSON and CSV into --out. Images are preprocessed with the checkpoint's own recipe.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from tqdm import tqdm

from vitviz.loading import ModelLoadError, load_model
from vitviz.model import autocast
from vitviz.preprocessing import load_image
from vitviz.training.metrics import classification_metrics


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint", help="model spec: a checkpoint path, 'default', or any load_model spec")
    p.add_argument("--val-dir", type=Path, required=True, help="images in one sub-folder per class")
    p.add_argument("--out", type=Path, help="write metrics.json and confusion_matrix.csv here")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    p.add_argument("--workers", type=int, default=2, help="data-loading worker processes")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="inference precision")
    return p


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.workers < 0:
        parser.error("--batch-size must be at least 1 and --workers at least 0")
    try:
        model = load_model(args.checkpoint)
    except ModelLoadError as error:
        raise SystemExit(f"error: {error}") from None
    if model.config.num_classes == 0:
        raise SystemExit("error: this model has no classification head (a backbone); nothing to evaluate")
    if not args.val_dir.is_dir():
        raise SystemExit(f"error: --val-dir {args.val_dir} is not a folder")
    try:
        # the same intake as the app (EXIF orientation, transparency, greyscale depth), so scores match what it shows
        folder = datasets.ImageFolder(str(args.val_dir), transform=model.transform, loader=read_image)
    except (FileNotFoundError, RuntimeError) as error:
        raise SystemExit(f"error: --val-dir {args.val_dir}: {error}") from None
    unknown = sorted(set(folder.classes) - set(model.class_names))
    if unknown:
        raise SystemExit(f"error: class folders {unknown} are not among the model's classes {model.class_names}")
    # folder index -> model index, so folders may be a subset or in another order
    to_model = torch.tensor([model.class_names.index(name) for name in folder.classes])

    loader = DataLoader(folder, batch_size=args.batch_size, num_workers=args.workers)
    predictions, targets = [], []
    with torch.inference_mode(), autocast(args.precision):
        for images, labels in tqdm(loader, desc="evaluating", disable=None, file=sys.stderr):
            predictions.append(model(images).logits.float().argmax(-1))
            targets.append(to_model[labels])
    scores = classification_metrics(torch.cat(predictions), torch.cat(targets), len(model.class_names))
    report(scores, model.class_names, len(folder))
    if args.out:
        save(scores, model.class_names, args.out)
    return scores


def read_image(path: str):
    """ImageFolder's loader: vitviz's own intake (a module-level function, so worker processes can use it)."""
    return load_image(Path(path).read_bytes())


def report(scores: dict, class_names: list[str], count: int) -> None:
    print(f"top-1 accuracy: {scores['accuracy']:.4f} on {count} images")
    print(
        f"macro precision {scores['macro_precision']:.4f}, recall {scores['macro_recall']:.4f}, "
        f"F1 {scores['macro_f1']:.4f}"
    )
    width = max(len(name) for name in class_names)
    print("\nper-class accuracy:")
    for name, accuracy in zip(class_names, scores["per_class_accuracy"]):
        print(f"  {name:{width}s} {accuracy:.4f}")
    print("\nconfusion matrix (rows: true class, columns: predicted):")
    print(" " * (width + 1) + " ".join(f"{name[:6]:>6s}" for name in class_names))
    for name, row in zip(class_names, scores["confusion_matrix"]):
        print(f"{name:{width}s} " + " ".join(f"{n:6d}" for n in row))


def save(scores: dict, class_names: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps({"class_names": class_names, **scores}, indent=1))
    with open(out / "confusion_matrix.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["true \\ predicted", *class_names])
        for name, row in zip(class_names, scores["confusion_matrix"]):
            writer.writerow([name, *row])
    print(f"\nsaved {out / 'metrics.json'} and {out / 'confusion_matrix.csv'}")


if __name__ == "__main__":
    main()
