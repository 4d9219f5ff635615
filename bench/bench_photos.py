"""How many real photos a CIFAR-10 model gets right: the top-1 class of each photo that shows a CIFAR-10 class,
counted right when it is one of the classes the photo shows (labels.csv's `cifar10_classes_present`, e.g.
"dog;cat"). Photos of none of the ten classes ("other") are left out. Several checkpoints side by side:

    python bench/bench_photos.py ../shared/data/photos runs/cifar10-cpu5/last.pt checkpoints/default.pt

Prints one line per photo (each checkpoint's top-1 and its probability), each checkpoint's count, and the
median time of its forward pass with attentions on one photo at batch 1 in fp32 (what the page runs first).
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path

import torch
from common import parser, save

import vitviz
from vitviz.preprocessing import load_image


def photo_labels(folder: Path) -> dict[str, set[str]]:
    """file name -> the CIFAR-10 classes it shows, for the photos that show at least one."""
    with open(folder / "labels.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    labels = {row["file"]: set(row["cifar10_classes_present"].split(";")) - {"other", ""} for row in rows}
    return {name: classes for name, classes in labels.items() if classes}


@torch.inference_mode()
def top1(model: vitviz.ViT, path: Path) -> tuple[str, float]:
    probabilities = model(model.transform(load_image(path.read_bytes()))[None]).logits.softmax(-1)[0]
    best = int(probabilities.argmax())
    return model.class_names[best], float(probabilities[best])


@torch.inference_mode()
def forward_ms(model: vitviz.ViT, path: Path, repeats: int) -> float:
    """The median time of one forward pass with attentions, after one warm-up, in milliseconds."""
    pixels = model.transform(load_image(path.read_bytes()))[None]
    model(pixels, output_attentions=True)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        model(pixels, output_attentions=True)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    args = parser(__doc__)
    args.add_argument("photos", type=Path, help="a folder with the photos and labels.csv")
    args.add_argument("checkpoints", nargs="+", help="model specs or checkpoint paths")
    args.add_argument("--repeats", type=int, default=30, help="timed forward passes per checkpoint")
    args = args.parse_args()
    labels = photo_labels(args.photos)
    models = {spec: vitviz.load_model(spec).eval() for spec in args.checkpoints}
    results = {spec: {"right": 0, "photos": len(labels), "predictions": {}} for spec in models}
    for name, classes in sorted(labels.items()):
        line = [f"{name:28s} {'/'.join(sorted(classes)):12s}"]
        for spec, model in models.items():
            predicted, probability = top1(model, args.photos / name)
            right = predicted in classes
            results[spec]["right"] += right
            results[spec]["predictions"][name] = [predicted, round(probability, 4)]
            line.append(f"{predicted:>10s} {probability:6.1%} {'right' if right else 'wrong'}")
        print(" | ".join(line))
    first = args.photos / sorted(labels)[0]
    for spec, result in results.items():
        result["forward_ms"] = round(forward_ms(models[spec], first, args.repeats), 2)
        print(
            f"{spec}: {result['right']} of {result['photos']} photos right; forward pass with attentions "
            f"{result['forward_ms']:.2f} ms (median of {args.repeats}, batch 1, fp32, "
            f"{torch.get_num_threads()} threads)"
        )
    save(results, args.out)


if __name__ == "__main__":
    main()
