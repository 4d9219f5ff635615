"""Faithfulness of the explanation methods over a folder of images: `vitviz benchmark --help`.

    vitviz benchmark /tmp/cifar10/test --model default --limit 1000 --out faithfulness/

For every image, each method's map for the predicted class, then the perturbation test of
vitviz.explain.faithfulness: patches are replaced most-relevant first (a faithful map makes the
probability fall fast: a low area) and least-relevant first (a high area). A random map is the
baseline every method should beat. Prints the mean areas with their standard errors, and writes
results.json (areas and mean curves per method) and areas.csv (one row per image and method).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from vitviz import explain
from vitviz.checkpoint import ModelLoadError
from vitviz.explain_cli import METHODS, explain_image, find_images
from vitviz.images import ImageError, load_image
from vitviz.load import load_model
from vitviz.model import autocast

RANDOM = "random"  # a map of uniform noise: the chance level
AREAS = ("auc_most_first", "auc_least_first")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("images", nargs="+", type=Path, help="image files and/or folders (searched recursively)")
    p.add_argument("--model", default="default", help="model spec for vitviz.load_model (default: %(default)s)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="maps to test")
    p.add_argument("--limit", type=int, help="test this many images, spread evenly over the sorted list")
    p.add_argument("--baseline", choices=["mean", "blur"], default="mean",
                   help="what replaces a patch: the data set's mean colour, or a blur of the image")  # fmt: skip
    p.add_argument("--steps", type=int, default=10, help="perturbation steps from 0 to 100 %% of the patches")
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline maps")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="inference precision")
    p.add_argument("--out", type=Path, help="write results.json and areas.csv here")
    return p


def spread(paths: list[Path], limit: int | None) -> list[Path]:
    """``limit`` paths taken at even strides, so a class-sorted folder gives every class its share."""
    if limit is None or limit >= len(paths):
        return paths
    return [paths[i * len(paths) // limit] for i in range(limit)]


def summarise(rows: list[dict]) -> dict[str, float]:
    """Mean and standard error of each area over the images."""
    summary = {}
    for area in AREAS:
        values = torch.tensor([row[area] for row in rows], dtype=torch.float64)
        summary[area] = float(values.mean())
        summary[f"{area}_sem"] = float(values.std() / math.sqrt(len(values))) if len(values) > 1 else float("nan")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    paths = spread(find_images(args.images), args.limit)
    try:
        model = load_model(args.model)
    except ModelLoadError as error:
        raise SystemExit(f"error: {error}") from None
    if model.config.num_classes == 0:
        raise SystemExit("error: this model has no classification head; the benchmark needs class probabilities")
    # the batch CLI's settings for each map: rollout and the class-specific maps for the predicted class
    map_args = argparse.Namespace(methods=args.methods, precision=args.precision, target=None, head_fusion="mean",
                                  discard_ratio=0.0, start_layer=0)  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    rows, curves, failures = [], {}, []
    for path in tqdm(paths, desc="benchmark", unit="image", disable=None, file=sys.stderr):
        try:
            pixels = model.transform(load_image(path.read_bytes()))[None]
        except (ImageError, OSError) as error:
            failures.append(f"{path}: {error}")
            continue
        _, maps = explain_image(model, pixels, map_args)
        target = int(maps.pop("target"))
        maps = {name: torch.from_numpy(m) for name, m in maps.items()}
        maps[RANDOM] = torch.rand(next(iter(maps.values())).shape, generator=generator)
        for name, relevance in maps.items():
            with autocast(args.precision):
                result = explain.faithfulness(model, pixels, relevance, target, args.baseline, args.steps)
            rows.append({"image": str(path), "method": name, "target": target} | {a: result[a] for a in AREAS})
            for order in ("most_first", "least_first"):
                curves.setdefault(name, {}).setdefault(order, []).append(result[order].double())
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    if not rows:
        raise SystemExit("error: no image could be read")

    methods = [*args.methods, RANDOM]
    results = {"model": args.model, "images": len(paths) - len(failures), "baseline": args.baseline,
               "steps": args.steps, "precision": args.precision, "methods": {}}  # fmt: skip
    for name in methods:
        summary = summarise([row for row in rows if row["method"] == name])
        summary |= {f"curve_{order}": torch.stack(c).mean(0).tolist() for order, c in curves[name].items()}
        results["methods"][name] = summary
    print(table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
        with open(args.out / "areas.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["image", "method", "target", *AREAS])
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.out / 'results.json'} and {args.out / 'areas.csv'}")
    return 1 if failures else 0


def table(results: dict) -> str:
    """The results as a Markdown table: mean area ± standard error, per method and order."""
    lines = [f"{results['images']} images, {results['baseline']} baseline, {results['steps']} steps, model "
             f"{results['model']}", "", "| method | most relevant first (lower is better) | least relevant first "
             "(higher is better) |", "| --- | --- | --- |"]  # fmt: skip
    for name, s in results["methods"].items():
        lines.append(f"| {name} | {s['auc_most_first']:.4f} ± {s['auc_most_first_sem']:.4f} "
                     f"| {s['auc_least_first']:.4f} ± {s['auc_least_first_sem']:.4f} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
