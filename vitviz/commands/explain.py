"""Batch explanations from the command line: `vitviz explain --help`.

    vitviz explain photos/ --model default --methods rollout relevance --out maps/
    vitviz explain photos/ --model open_clip:ViT-B-16/openai --prompts "a dog" "a cat" --out maps/
    vitviz explain photos/ --model timm:vit_small_patch14_reg4_dinov2.lvd142m --features pca --out pca/
    vitviz explain clips/ --model hf:MCG-NJU/videomae-base-finetuned-kinetics --video-format mp4 --out maps/

For every image: one overlay PNG per method (drawn on the photo at its own resolution), one
.npz with the raw patch maps and the class probabilities (for "lens" also every block's maps,
lens_layers and lens_votes), and a row in predictions.csv with the top-5 classes. Unreadable
images are reported and skipped; the exit status is 1 if any were.

A Swin model gets the methods that read its windows and stages (rollout, relevance, grad-rollout, gradcam, lens),
each map over its first stage's grid; every other method asked for is skipped with one line that says why.

With --features pca, the patch features of every image (--feature-block, --facet) are also coloured by one PCA
fitted over all of them: pca.png shows them side by side, <image>_pca.png each on its photo, pca.npz holds the
colours (and the foreground masks). A backbone (no classifier) gives only these.

A video model (VideoMAE, ViViT, TimeSformer, V-JEPA 2) reads videos (MP4, WebM, MOV, MKV, GIF, ...): for each, an
overlay GIF or MP4 per map (rollout, relevance; --video-format) and an .npz (explain_video.py). An image model given
a video, or a video model that cannot read an image, skips the file with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vitviz import explain
from vitviz.commands.common import add_method_options, check_method_options
from vitviz.commands.explain_video import add_video_options, explain_videos, find_inputs, video_refusal
from vitviz.explain.common import check_not_windowed
from vitviz.explain.facets import FACETS, SWIN_FEATURES
from vitviz.explain.registry import METHODS
from vitviz.loading import ModelLoadError
from vitviz.loading.specs import load_model
from vitviz.model import ViT
from vitviz.model.precision import PRECISION_CHOICES, resolve_precision
from vitviz.preprocessing import ImageError, load_image
from vitviz.render.feature_pictures import paint_patches, side_by_side
from vitviz.render.overlays import COLORMAPS, overlay
from vitviz.text.options import add_prompt_options, apply_prompt_options
from vitviz.video_clips import is_video_model

MAX_FEATURE_IMAGES = 64  # one PCA over every image: their features are held together


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz explain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("images", nargs="+", type=Path, help="image or video files, and/or folders of them")
    p.add_argument("--model", default="default", help="model spec for vitviz.load_model (default: %(default)s)")
    p.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=["rollout", "cls", "relevance"],
        help="; ".join(f"{name}: {method.summary}" for name, method in METHODS.items())
        + " (every block's lens maps go in the .npz)",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--target", type=int, help="class index for class-specific maps (default: top prediction)")
    p.add_argument("--head-fusion", choices=explain.HEAD_FUSIONS, default="mean", help="rollout head fusion")
    p.add_argument("--discard-ratio", type=float, default=0.0, help="rollout: fraction of weakest weights dropped")
    p.add_argument("--start-layer", type=int, default=0, help="rollout, legrad, tam: first block included")
    p.add_argument("--colormap", choices=COLORMAPS, default="inferno", help="overlay colours")
    p.add_argument("--alpha", type=float, default=0.5, help="overlay opacity in [0, 1]")
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="fp32",
        help="inference precision; auto times fp32 against bf16 on this model first",
    )
    add_prompt_options(p)
    add_video_options(p)
    features = p.add_argument_group("patch features")
    features.add_argument(
        "--features",
        nargs="+",
        choices=["pca"],
        default=[],
        help=f"pca: colour the patches of every image by one joint PCA (at most {MAX_FEATURE_IMAGES} images)",
    )
    features.add_argument("--feature-block", type=int, default=-1, help="block whose features (default: the last)")
    features.add_argument(
        "--facet",
        choices=FACETS,
        default="token",
        help="token after the block, or the attention's key, query or value (default: %(default)s)",
    )
    features.add_argument(
        "--foreground",
        type=float,
        metavar="THRESHOLD",
        help="DINOv2's recipe: keep patches whose first component (scaled to [0, 1]) is above this, "
        "and colour them by a second PCA; the background is black",
    )
    features.add_argument(
        "--flip-first",
        action="store_true",
        help="negate the first component (which side is the foreground is arbitrary)",
    )
    add_method_options(p)
    return p


def explain_image(model: ViT, pixels: torch.Tensor, args: argparse.Namespace) -> tuple[np.ndarray, dict]:
    """Class probabilities (num_classes,) and one (rows, cols) map per requested method; with "lens", also its
    (layers, rows, cols) maps "lens_layers" (the target's probability) and "lens_votes" (each patch's top class)."""
    result = explain.method_maps(
        model,
        pixels,
        args.methods,
        args.target,
        args.precision,
        args.head_fusion,
        args.discard_ratio,
        args.start_layer,
        **getattr(args, "method_options", {}),
    )
    arrays = {name: m.numpy() for name, m in result.maps.items()}
    if result.lens is not None:
        arrays |= {"lens_layers": result.lens.probability[:, 0].numpy(), "lens_votes": result.lens.votes[:, 0].numpy()}
    return result.probabilities.numpy(), arrays | {"target": np.array(result.target)}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.alpha <= 1:
        parser.error("--alpha must be in [0, 1]")
    if not 0 <= args.discard_ratio < 1:
        parser.error("--discard-ratio must be in [0, 1)")
    args.method_options = check_method_options(parser, args)
    paths = find_inputs(args.images)
    if args.features and len(paths) > MAX_FEATURE_IMAGES:
        parser.error(f"--features pca fits one PCA over every image, at most {MAX_FEATURE_IMAGES}; got {len(paths)}")
    if args.foreground is not None and not 0 <= args.foreground <= 1:
        parser.error("--foreground must be in [0, 1]")
    feature_options = (
        args.foreground is not None or args.flip_first or args.facet != "token" or args.feature_block != -1
    )
    if feature_options and not args.features:
        parser.error("--feature-block, --facet, --foreground and --flip-first need --features pca")
    try:
        model = load_model(args.model)
    except ModelLoadError as error:
        raise SystemExit(f"error: {error}") from None
    model = apply_prompt_options(model, args)
    if is_video_model(model):
        if args.features or feature_options:
            parser.error("--features pca is for images; a video model gets its maps over the frames")
        return explain_videos(model, paths, args, set(), _unique_name)
    classify = model.config.num_classes > 0
    if not classify and not args.features:
        hint = " (give --prompts or --prompt-set: it has a text tower)" if model.text_tower is not None else ""
        raise SystemExit(
            f"error: this model has no classification head; vitviz.explain needs a classifier{hint}, or --features pca"
        )
    args.precision, measured = resolve_precision(args.precision, model)
    if measured:
        print(measured.summary(), file=sys.stderr)
    if not -model.config.num_layers <= args.feature_block < model.config.num_layers:
        parser.error(f"--feature-block must be in [0, {model.config.num_layers - 1}] (or -1 for the last)")
    if args.target is not None and classify and not 0 <= args.target < model.config.num_classes:
        parser.error(f"--target must be in [0, {model.config.num_classes - 1}]")
    if not 0 <= args.start_layer < model.config.num_layers:
        parser.error(
            f"--start-layer must be in [0, {model.config.num_layers - 1}]: the model has "
            f"{model.config.num_layers} blocks, counted from 0; got {args.start_layer}"
        )
    refused = explain.refusals(model, args.methods)  # Swin: the methods that read no windows
    args.methods = [method for method in args.methods if method not in refused]
    for reason in refused.values():
        print(f"skipping {reason}", file=sys.stderr)
    if classify and not args.methods:
        raise SystemExit("error: none of the --methods can explain this model (see above)")
    if "cls" in args.methods and not model.config.class_token:
        parser.error("--methods cls needs a model with a [CLS] token; this one has none")
    try:
        if args.features:
            check_not_windowed(model, SWIN_FEATURES)
    except ValueError as error:
        raise SystemExit(f"error: --features pca: {error}") from None
    args.out.mkdir(parents=True, exist_ok=True)

    failures, used_names, features = [], set(), []
    with open(args.out / "predictions.csv", "w", newline="") if classify else contextlib.nullcontext() as f:
        writer = csv.writer(f) if classify else None
        if writer:
            writer.writerow(["image"] + [f"{kind}{rank}" for rank in range(1, 6) for kind in ("class", "probability")])
        for path in tqdm(paths, desc="explaining", unit="image", disable=None, file=sys.stderr):
            if refusal := video_refusal(path):
                failures.append(refusal)
                continue
            try:
                image = load_image(path.read_bytes())
            except (ImageError, OSError) as error:
                failures.append(f"{path}: {error}")
                continue
            pixels = model.transform(image)[None]
            name = _unique_name(path, used_names)
            box = model.transform.crop_box(*image.size)
            if args.features:
                grid = (pixels.shape[-2] // model.config.patch_size, pixels.shape[-1] // model.config.patch_size)
                features.append(
                    (
                        name,
                        image,
                        box,
                        grid,
                        explain.patch_features(model, pixels, args.feature_block, args.facet, args.precision)[0],
                    )
                )
            if not classify:
                continue
            try:
                probabilities, maps = explain_image(model, pixels, args)
            except ValueError as error:  # a method's option this model or input cannot take: the same for every image
                raise SystemExit(f"error: {path}: {error}") from None
            for method in args.methods:
                overlay(image, maps[method], args.colormap, args.alpha, box).save(args.out / f"{name}_{method}.png")
            np.savez_compressed(args.out / f"{name}.npz", probabilities=probabilities, **maps)
            top = np.argsort(-probabilities, kind="stable")[:5]
            writer.writerow([str(path)] + [v for i in top for v in (model.class_names[i], f"{probabilities[i]:.6f}")])
    explained = len(paths) - len(failures)
    print(f"explained {explained} of {len(paths)} images into {args.out}")
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    if features:
        try:
            write_pca(features, args)
        except ValueError as error:  # a foreground threshold that keeps no patch
            raise SystemExit(f"error: no PCA colours: {error}") from None
    return 1 if failures else 0


def write_pca(features: list[tuple], args: argparse.Namespace) -> None:
    """One PCA over every image's patch features (explain.pca_rgb): pca.png side by side, <name>_pca.png each,
    pca.npz with every image's (rows, cols, 3) colours and the explained variance."""
    result = explain.pca_rgb([f[-1] for f in features], foreground=args.foreground, flip_first=args.flip_first)
    pictures, arrays = [], {"explained_variance": result.explained_variance.numpy()}
    for index, (name, image, box, grid, _) in enumerate(features):
        colours = result.colours[index].numpy().reshape(*grid, 3)
        picture = paint_patches(image, colours, box)
        picture.save(args.out / f"{name}_pca.png")
        pictures.append(picture)
        arrays[f"{name}_colours"] = colours
        if result.foreground is not None:  # a foreground patch may be black too: the mask tells them apart
            arrays[f"{name}_foreground"] = result.foreground[index].numpy().reshape(grid)
    side_by_side(pictures).save(args.out / "pca.png")
    np.savez_compressed(args.out / "pca.npz", **arrays)
    variance = ", ".join(f"{v:.1%}" for v in result.explained_variance.tolist())
    print(f"PCA over {len(features)} images (block {args.feature_block}, {args.facet}): explained variance {variance}")


def _unique_name(path: Path, used: set[str]) -> str:
    """The file's stem, numbered when two inputs share it (photos/a.jpg and other/a.png)."""
    name, counter = path.stem, 1
    while name in used:
        counter += 1
        name = f"{path.stem}-{counter}"
    used.add(name)
    return name


if __name__ == "__main__":
    sys.exit(main())
