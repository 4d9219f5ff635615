"""Faithfulness of the explanation methods over a folder of images: `vitviz benchmark --help`.

    vitviz benchmark /tmp/cifar10/test --model default --limit 1000 --out faithfulness/
    torchrun --standalone --nproc_per_node 2 -m vitviz.commands.benchmark /tmp/cifar10/test --limit 1000 \
        --out faithfulness/

For every image, each method's map (for the predicted class, or with --target label the true one), then
two protocols (see vitviz.explain.faithfulness):
- Chefer et al. 2021's positive and negative perturbation: the top (bottom) 0 %, 10 %..90 % of pixels set to 0,
  top-1 accuracy over the data set, and its area over 0-90 % as the authors compute it, at most 90
  (positive: lower is better; negative: higher is better);
- Petsiuk et al. 2018's deletion and insertion: the class probability as pixels are removed from the image
  or put back into a blurred copy, and its area (deletion: lower is better; insertion: higher is better);
- Wu et al. 2024's SaCo: the pixels in 10 groups by the map, each group removed alone; whether the groups' order
  of salience is the order of their effect on the class probability, from -1 to 1 (higher is better), the mean
  over the images.
A random map is the chance level every method should beat. On a Swin model the methods that cannot read its windows
and stages are skipped, each with one line that says why (vitviz.explain.refusals).

Images go through the model's own preprocessing (--protocol model, the default) or, with --protocol chefer2021,
through Chefer et al.'s: resized to the model's input size without a crop (their Resize((224, 224)), bilinear),
so the whole image, squashed, is explained and perturbed. The model's mean and std are kept either way.

Accuracy is against the folder's labels when its sub-folders are named after the model's classes (for an
ImageNet-1k classifier, also by WordNet id, as ImageNet's validation folders are: n01440764...), else against
the model's own prediction on the intact image. Writes to --out: results.csv (one row per method),
results.md (the table), curves.png (the mean curves), images.jsonl (every image's numbers); the first two
and every image's line name the protocol. A second run with the same --out skips the images already done
(it refuses an --out holding images done with another protocol, other --steps or methods, or by an older
vitviz); so does a run under torchrun, where each process takes a deterministic share and the first writes
the results: the same numbers as one process running with as many threads. torchrun gives each process one
thread; with another thread count the float sums change, and with them near-tied pixel ranks: on 30 CIFAR-10
images the areas differed by at most 4e-5.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from vitviz.commands.common import add_method_options, check_method_options, find_images
from vitviz.explain.faithfulness import CHEFER_FRACTIONS, chefer_auc, chefer_perturbation, deletion_insertion, saco
from vitviz.explain.registry import METHODS, method_maps, refusals
from vitviz.explain.sanity import cascading_randomization
from vitviz.loading import ModelLoadError, load_model
from vitviz.model import ViT, autocast
from vitviz.model.precision import PRECISION_CHOICES, resolve_precision
from vitviz.preprocessing import ImageError, Preprocessing, load_image
from vitviz.text.options import add_prompt_options, apply_prompt_options

RANDOM = "random"  # a map of uniform noise: the chance level
COLUMNS = [
    "method",
    "positive_auc",
    "negative_auc",
    "deletion_auc",
    "insertion_auc",
    "saco",
    "ms_per_image",
    "n_images",
    "protocol",
]
PROTOCOLS = ("model", "chefer2021")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("images", type=Path, help="a folder of images (class sub-folders give labels), searched recursively")
    p.add_argument("--model", default="default", help="model spec for vitviz.load_model (default: %(default)s)")
    p.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=list(METHODS),
        help="maps to test: " + "; ".join(f"{name}: {method.summary}" for name, method in METHODS.items()),
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the results (and for resuming)")
    p.add_argument("--limit", type=int, help="test this many images, spread evenly over the sorted list")
    p.add_argument(
        "--target",
        choices=["predicted", "label"],
        default="predicted",
        help="the class explained: the model's top prediction (as in Chefer et al.'s table) or the label",
    )
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="model",
        help="preprocessing: the model's own transform (default) or chefer2021, Chefer et al.'s: resized to "
        "the model's input size without a crop",
    )
    p.add_argument("--steps", type=int, default=16, help="deletion and insertion steps from 0 to 100 %% of pixels")
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline maps and of the sanity check")
    p.add_argument(
        "--sanity",
        type=int,
        default=0,
        metavar="N",
        help="also run Adebayo et al.'s cascading-randomisation sanity check on the first N images",
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="fp32",
        help="inference precision; auto times fp32 against bf16 on this model first (under torchrun, the "
        "first process times it and every process uses its choice)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    add_prompt_options(p)
    add_method_options(p)
    return p


def spread(paths: list[Path], limit: int | None) -> list[Path]:
    """``limit`` paths taken at even strides, so a class-sorted folder gives every class its share."""
    if limit is None or limit >= len(paths):
        return paths
    return [paths[i * len(paths) // limit] for i in range(limit)]


def folder_labels(
    root: Path, paths: list[Path], class_names: list[str], aliases: list[str] | None = None
) -> dict[Path, int] | None:
    """Each image's label from its first sub-folder's name, when every image has one that is a class name (or,
    given ``aliases``, one per class, that class's other name: ImageNet's WordNet ids, n01440764...)."""
    index = {name.lower(): i for i, name in enumerate(class_names)}
    index |= {alias.lower(): i for i, alias in enumerate(aliases or [])}
    labels = {}
    for path in paths:
        parts = path.relative_to(root).parts
        if len(parts) < 2 or parts[0].lower() not in index:
            return None
        labels[path] = index[parts[0].lower()]
    return labels


def class_aliases(args: argparse.Namespace, class_names: list[str] | None = None) -> list[str] | None:
    """Other names of the classes, for folder labels: ImageNet's WordNet ids (timm's metadata) with --prompt-set
    imagenet or for a classifier whose classes are ImageNet-1k's (timm's, named by their descriptions), since
    ImageNet's validation folders are named by them (n01440764...)."""
    by_prompts = getattr(args, "prompt_set", None) == "imagenet"
    if not by_prompts and (class_names is None or len(class_names) != 1000):
        return None
    from timm.data import ImageNetInfo

    info = ImageNetInfo("imagenet-1k")
    if not by_prompts and list(class_names) != [str(name) for name in info.label_descriptions()]:
        return None
    return [str(wnid) for wnid in info.label_names()]


def protocol_transform(model: ViT, protocol: str) -> Preprocessing:
    """The preprocessing of ``protocol``: the model's own, or (chefer2021) Chefer et al.'s, which resizes every image
    to the model's input size (``config.image_hw``) without a crop, bilinearly as torchvision's Resize((224, 224))
    does, keeping the model's mean and std. Its output is always the model's input size, so the maps' grid is the
    model's and their box (``crop_box``) is the whole image."""
    if protocol == "model":
        return model.transform
    if protocol == "chefer2021":
        return dataclasses.replace(
            model.transform, resize=tuple(model.config.image_hw), crop=None, interpolation="bilinear"
        )
    raise ValueError(f"protocol must be one of {PROTOCOLS}; got {protocol!r}")


def random_map(shape: tuple[int, ...], name: str, seed: int) -> torch.Tensor:
    """A uniform-noise map seeded by the image's name, so it is the same in any process and any order."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.rand(shape, generator=torch.Generator().manual_seed(int.from_bytes(digest[:8], "little")))


def evaluate_image(model: ViT, pixels: torch.Tensor, label: int | None, name: str, args: argparse.Namespace) -> dict:
    """Every method's numbers for one image: the two protocols' raw results and the time its map took.
    ``pixels`` come from ``protocol_transform``, whose mean and std are the model's."""
    with torch.inference_mode(), autocast(args.precision, pixels.device.type):
        predicted = int(model(pixels).logits.argmax(dim=-1))
    target = label if args.target == "label" and label is not None else predicted
    truth = torch.tensor([predicted if label is None else label], device=pixels.device)
    record = {
        "image": name,
        "label": label,
        "predicted": predicted,
        "target": target,
        "protocol": args.protocol,
        "method_options": getattr(args, "method_options", {}),
        "methods": {},
    }
    mean, std = model.transform.mean, model.transform.std
    for method in [*args.methods, RANDOM]:
        start = time.perf_counter()
        if method == RANDOM:
            relevance = random_map(tuple(model.config.grid_size), name, args.seed)
        else:
            options = getattr(args, "method_options", {})
            relevance = method_maps(model, pixels, [method], target, args.precision, **options).maps[method]
        ms = 1000 * (time.perf_counter() - start)
        relevance = relevance.to(pixels.device)[None]
        with autocast(args.precision, pixels.device.type):
            positive = chefer_perturbation(model, pixels, relevance, truth, mean, std)
            negative = chefer_perturbation(model, pixels, relevance, truth, mean, std, negative=True)
            curves = deletion_insertion(model, pixels, relevance, target, mean, std, args.steps)
            coefficient = saco(model, pixels, relevance, target, mean, std)
        record["methods"][method] = {
            "positive": positive[:, 0].int().tolist(),
            "negative": negative[:, 0].int().tolist(),
            "deletion": curves["deletion"].tolist(),
            "insertion": curves["insertion"].tolist(),
            "saco": None if coefficient != coefficient else coefficient,  # NaN (a flat map) as JSON's null
            "ms": ms,
        }
    return record


def summarise(records: list[dict], methods: list[str]) -> list[dict]:
    """One row per method: the areas of the mean curves over the images (in image-name order, so the same
    records give the same numbers whatever order they were computed in)."""
    records = sorted(records, key=lambda r: r["image"])
    rows = []
    for method in methods:
        curves = {
            kind: torch.tensor([r["methods"][method][kind] for r in records], dtype=torch.float64).mean(0)
            for kind in ("positive", "negative", "deletion", "insertion")
        }
        steps = len(curves["deletion"]) - 1
        rows.append(
            {
                "method": method,
                "positive_auc": chefer_auc(curves["positive"]),
                "negative_auc": chefer_auc(curves["negative"]),
                "deletion_auc": float(torch.trapezoid(curves["deletion"], dx=1 / steps)),
                "insertion_auc": float(torch.trapezoid(curves["insertion"], dx=1 / steps)),
                "saco": mean_saco([r["methods"][method]["saco"] for r in records]),
                "ms_per_image": sum(r["methods"][method]["ms"] for r in records) / len(records),
                "n_images": len(records),
                "protocol": records[0].get("protocol", "model"),
                "curves": {kind: curve.tolist() for kind, curve in curves.items()},
            }
        )
    return rows


def mean_saco(values: list[float | None]) -> float:
    """The mean SaCo over the images where it is defined (None: a flat map, whose groups have no order); NaN if
    none."""
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else float("nan")


PROTOCOL_NOTES = {
    "model": "the model's own preprocessing",
    "chefer2021": "Chefer et al. 2021's preprocessing (resized to the model's input size, no crop)",
}


def markdown(rows: list[dict], model: str, target: str, precision: str = "fp32", protocol: str = "model") -> str:
    lines = [
        (
            f"{rows[0]['n_images']} images, model `{model}` in {precision}, maps of the {target} class, "
            f"protocol `{protocol}`: {PROTOCOL_NOTES[protocol]}; positive and negative AUC over 0-90 % removed "
            "(at most 90)"
        ),
        "",
        (
            "| method | positive AUC (lower is better) | negative AUC (higher) | deletion AUC (lower) "
            "| insertion AUC (higher) | SaCo (higher) | ms per image |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['positive_auc']:.2f} | {r['negative_auc']:.2f} | {r['deletion_auc']:.4f} "
            f"| {r['insertion_auc']:.4f} | {r['saco']:.3f} | {r['ms_per_image']:.1f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """The mean curves of both protocols, one line per method, as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 3.4), layout="constrained")
    panels = [
        ("positive", "positive perturbation", "top-1 accuracy"),
        ("negative", "negative perturbation", "top-1 accuracy"),
        ("deletion", "deletion", "class probability"),
        ("insertion", "insertion", "class probability"),
    ]
    for axes, (kind, title, ylabel) in zip(figure.subplots(1, 4), panels):
        for row in rows:
            curve = row["curves"][kind]
            x = CHEFER_FRACTIONS if kind in ("positive", "negative") else torch.linspace(0, 1, len(curve)).tolist()
            axes.plot(x, curve, label=row["method"], linestyle="--" if row["method"] == RANDOM else "-")
        axes.set(title=title, xlabel="fraction of pixels", ylabel=ylabel)
        axes.grid(alpha=0.3)
    figure.axes[0].legend(fontsize="small")
    FigureCanvasAgg(figure).print_png(str(path))


def check_records(done: dict[str, dict], args: argparse.Namespace) -> None:
    """Refuse to resume from records made with other settings: their numbers would be averaged with these."""
    for record in done.values():
        methods = record["methods"]
        first = next(iter(methods.values()), {})
        problem = None
        if record.get("protocol", "model") != args.protocol:
            problem = f"with --protocol {record.get('protocol', 'model')}"
        elif len(first.get("positive", CHEFER_FRACTIONS)) != len(CHEFER_FRACTIONS):
            problem = "by an older vitviz whose perturbation curves start at 10 % (the area now starts at 0 %)"
        elif record.get("method_options", {}) != getattr(args, "method_options", {}):
            problem = f"with other method options ({record.get('method_options', {})})"
        elif first and "saco" not in first:
            problem = "by an older vitviz, without SaCo"
        elif len(first.get("deletion", range(args.steps + 1))) != args.steps + 1:
            problem = f"with --steps {len(first['deletion']) - 1}"
        elif missing := [m for m in [*args.methods, RANDOM] if m not in methods]:
            problem = f"without the method(s) {', '.join(missing)}"
        if problem:
            raise SystemExit(
                f"error: {args.out} holds images benchmarked {problem} ({record['image']}); "
                "give another --out, or the same settings"
            )


def read_records(out: Path) -> dict[str, dict]:
    """The images already done: images.jsonl and the per-process files of an interrupted run."""
    done = {}
    for path in [out / "images.jsonl", *sorted((out / "partial").glob("*.jsonl"))]:
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # the last line of a process killed mid-write
                    continue
                done[record["image"]] = record
    return done


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.sanity < 0:
        parser.error("--sanity must be 0 or more")
    args.method_options = check_method_options(parser, args)
    if not args.images.is_dir():
        parser.error(f"{args.images} is not a folder")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # under torchrun: gloo on CPUs, NCCL on GPUs, torchrun's rendezvous across machines
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        if args.device.startswith("cuda"):
            args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    try:
        return run(args, rank, world)
    finally:
        if distributed:
            dist.destroy_process_group()


def run(args: argparse.Namespace, rank: int, world: int) -> int:
    paths = spread(find_images([args.images]), args.limit)
    try:
        model = load_model(args.model)
    except ModelLoadError as error:
        raise SystemExit(f"error: {error}") from None
    if rank > 0 and world > 1:  # the first process embeds the prompts; the others then read them from the disk cache
        dist.barrier()
    model = apply_prompt_options(model, args).to(args.device)
    if rank == 0 and world > 1:
        dist.barrier()
    if model.config.num_classes == 0:
        hint = " (give --prompts or --prompt-set: it has a text tower)" if model.text_tower is not None else ""
        raise SystemExit(f"error: this model has no classification head; the benchmark needs class probabilities{hint}")
    refused = refusals(model, args.methods)  # Swin: the methods that read no windows
    args.methods = [method for method in args.methods if method not in refused]
    for reason in refused.values() if rank == 0 else ():
        print(f"skipping {reason}", file=sys.stderr)
    if not args.methods:
        raise SystemExit("error: none of the --methods can explain this model (see above)")
    if args.precision == "auto":  # decided once, by the first process, so that every process uses the same
        choice = [resolve_precision("auto", model)[1] if rank == 0 else None]
        if world > 1:
            dist.broadcast_object_list(choice, src=0)
        args.precision = choice[0].precision
        if rank == 0:
            print(choice[0].summary(), file=sys.stderr)
    labels = folder_labels(args.images, paths, model.class_names, class_aliases(args, model.class_names))
    if args.target == "label" and labels is None:
        raise SystemExit("error: --target label needs class sub-folders named after the model's classes")
    names = {path: str(path.relative_to(args.images)) for path in paths}
    done = read_records(args.out)
    check_records(done, args)
    transform = protocol_transform(model, args.protocol)
    todo = [path for path in paths if names[path] not in done][rank::world]  # a deterministic share
    (args.out / "partial").mkdir(parents=True, exist_ok=True)
    failures, records = [], []
    with open(args.out / "partial" / f"rank{rank}-of-{world}.jsonl", "a") as partial:
        for path in tqdm(
            todo,
            desc=f"benchmark (process {rank + 1} of {world})" if world > 1 else "benchmark",
            unit="image",
            disable=None,
            file=sys.stderr,
            position=rank,
        ):
            try:
                pixels = transform(load_image(path.read_bytes()))[None].to(args.device)
            except (ImageError, OSError) as error:
                failures.append(f"{path}: {error}")
                continue
            try:
                records.append(evaluate_image(model, pixels, labels[path] if labels else None, names[path], args))
            except ValueError as error:  # a method's option this model cannot take: the same for every image
                raise SystemExit(f"error: {path}: {error}") from None
            partial.write(json.dumps(records[-1]) + "\n")
            partial.flush()  # an interrupted run keeps every finished image
    if world > 1:  # gather every process's records and failures in the first (its disk may be another's)
        gathered = [None] * world
        dist.all_gather_object(gathered, (records, failures))
        records = [r for part, _ in gathered for r in part]
        failures = [f for _, part in gathered for f in part]
    if rank != 0:
        return 1 if failures else 0
    done |= {record["image"]: record for record in records}
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    finished = [done[names[path]] for path in paths if names[path] in done]
    if not finished:
        raise SystemExit("error: no image could be read")
    write_results(args, finished, labelled=labels is not None)
    if args.sanity:
        sanity(model, transform, [p for p in paths if names[p] in done][: args.sanity], labels, args)
    return 1 if failures else 0


def sanity(
    model: ViT, transform: Preprocessing, paths: list[Path], labels: dict[Path, int] | None, args: argparse.Namespace
) -> None:
    """Adebayo et al.'s check on ``paths``: each method's mean Spearman correlation with its original map as the
    blocks are randomised from the top; written to sanity.csv and appended to results.md."""

    def method(name: str):
        def explain(m: ViT, pixels: torch.Tensor, target: int) -> torch.Tensor:
            if name == RANDOM:
                return random_map(tuple(m.config.grid_size), "sanity", args.seed)[None]
            return method_maps(m, pixels, [name], target, args.precision).maps[name][None]

        return explain

    methods = {name: method(name) for name in [*args.methods, RANDOM]}
    checks = []
    for path in tqdm(paths, desc="sanity check", unit="image", disable=None, file=sys.stderr):
        pixels = transform(load_image(path.read_bytes()))[None].to(args.device)
        with torch.inference_mode():
            predicted = int(model(pixels).logits.argmax(dim=-1))
        target = labels[path] if args.target == "label" and labels else predicted
        checks.append(cascading_randomization(model, pixels, target, methods, seed=args.seed))
    depths = checks[0].depths
    mean = {
        name: torch.tensor([c.correlations[name] for c in checks], dtype=torch.float64).nanmean(0).tolist()
        for name in methods
    }
    with open(args.out / "sanity.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", *(f"depth_{d}" for d in depths)])
        writer.writerows([name, *(f"{v:.4f}" for v in values)] for name, values in mean.items())
    threshold = checks[0].threshold
    lines = [
        "",
        (
            f"Sanity check (Adebayo et al. 2018) on {len(checks)} images: mean Spearman correlation of each map "
            "with the model's own as the last k blocks are re-initialised (k = 0 is the model itself); a map "
            f"still above {threshold} with every block random fails."
        ),
        "",
        "| method | " + " | ".join(f"k = {d}" for d in depths) + " | passes |",
        "| --- |" + " ---: |" * (len(depths) + 1),
    ]
    for name, values in mean.items():
        verdict = "no" if values[-1] > threshold else "yes"
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {verdict} |")
    with open(args.out / "results.md", "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def write_results(args: argparse.Namespace, records: list[dict], labelled: bool) -> None:
    """results.csv, results.md, curves.png and images.jsonl (then the per-process files are not needed)."""
    rows = summarise(records, [*args.methods, RANDOM])
    with open(args.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    table = markdown(rows, args.model, args.target, args.precision, args.protocol)
    table += f"\n\nAccuracy against the {'folder labels' if labelled else 'prediction on the intact image'}."
    (args.out / "results.md").write_text(table + "\n")
    plot(rows, args.out / "curves.png")
    with open(args.out / "images.jsonl.tmp", "w") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    (args.out / "images.jsonl.tmp").replace(args.out / "images.jsonl")
    for partial in (args.out / "partial").glob("*.jsonl"):
        partial.unlink()
    print(table)
    print(f"wrote {args.out / 'results.csv'}, results.md, curves.png and images.jsonl")


if __name__ == "__main__":
    sys.exit(main())
