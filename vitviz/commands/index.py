"""`vitviz index SOURCE --model SPEC --out DIR`: index a dataset once, then query it (docs/dataset-index.md).

    vitviz index /data/cifar10/test --model default --out cifar-index/
    vitviz index photos.zip --model open_clip:ViT-B-16/openai --prompt-set imagenet --out photos-index/
    vitviz index images.csv --label-column species --model default --out index/ --limit 1000
    torchrun --standalone --nproc-per-node 2 -m vitviz index /data/test --model default --out index/
    vitviz index --verify cifar-index/     every file's checksum, one line per problem (opening checks sizes only)

Stored per image: path, label, size, sha256, the top-5 classes, per-head entropy, attention distance and prefix
shares, the rollout and the last block's readout attention per head (fp16), high-norm patches, the pooled embedding
and patch features (fp16), and with --activations B the whole output of block B (fp16, for `vitviz sae train`);
then FAISS indexes over the features and embeddings. Unreadable files get a row with `error` set and the run goes
on. Open the result with `vitviz.open_index(DIR)`, DuckDB, pandas or polars.

A Swin (give --no-features) is indexed on its first stage's patch grid: the rollout across windows and stages, the
last block's heads read out by the mean pooling, head statistics measured inside the windows (one row per head a
block has), the pooled vector as the embedding; no patch features or --activations, since its tokens change grid
and width at every stage.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from vitviz.dataset.build import build_index, check_model
from vitviz.dataset.indexing import IndexOptions
from vitviz.dataset.sources import SourceError, open_source
from vitviz.dataset.storage import IndexBusyError, IndexFormatError
from vitviz.explain.facets import FACETS
from vitviz.loading import ModelLoadError, load_model
from vitviz.model.precision import PRECISION_CHOICES, resolve_precision
from vitviz.preprocessing import ImageError
from vitviz.text.options import add_prompt_options, apply_prompt_options


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz index", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "source",
        nargs="?",
        help="a folder of images (class sub-folders give labels), a .zip, a .csv/.parquet with a "
        "path column, a folder saved with datasets.save_to_disk, or hf:<dataset id> (streamed)",
    )
    p.add_argument("--model", default="default", help="model spec for vitviz.load_model (default: %(default)s)")
    p.add_argument("--out", type=Path, help="index folder (created; must be new unless --resume); required")
    p.add_argument(
        "--verify",
        type=Path,
        metavar="DIR",
        help="check the index in DIR instead of making one: every check of opening it, then every file's sha256 "
        "against the manifest and both search indexes; one line per problem, exit status 1 if any",
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="fp32",
        help="inference precision; auto times fp32 against bf16 on this model first (under torchrun the "
        "first process decides for all)",
    )
    p.add_argument("--batch-size", type=int, default=64, help="images per forward pass (default: %(default)s)")
    p.add_argument("--limit", type=int, help="index only the first N images of the source")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed run from its last complete shard (refused if the model or options differ)",
    )
    p.add_argument(
        "--device", default="auto", help="auto (CUDA when present; under torchrun cuda:LOCAL_RANK), cpu, cuda or cuda:N"
    )
    source = p.add_argument_group("source")
    source.add_argument(
        "--path-column",
        default="path",
        help="CSV/Parquet: the column of image paths, relative to the table's folder (default: %(default)s)",
    )
    source.add_argument("--label-column", help="CSV/Parquet/datasets: the label column (default: 'label' if present)")
    source.add_argument("--split", help="datasets: the split (default: the only one; 'train' for the Hub)")
    stored = p.add_argument_group("what is stored")
    stored.add_argument(
        "--no-features",
        action="store_true",
        help="store no patch features (and no patch search): the largest item, rows x cols x D fp16 per image",
    )
    stored.add_argument("--features-block", type=int, default=-1, help="block whose patch features (default: the last)")
    stored.add_argument(
        "--facet",
        choices=FACETS,
        default="token",
        help="token after the block (free: from the pass "
        "itself), or the attention's key, query or value (a second pass up to that block)",
    )
    stored.add_argument(
        "--pca",
        type=int,
        metavar="N",
        help="reduce the patch features to N PCA components, fitted on "
        "the first --pca-sample images (one extra partial pass over them)",
    )
    stored.add_argument(
        "--pca-sample", type=int, default=512, help="images the PCA is fitted on (default: %(default)s)"
    )
    stored.add_argument(
        "--relevance",
        action="store_true",
        help="also store class-specific relevance (Chefer et al.) "
        "for the top class: one more forward and a backward pass per image, one image at a time (several times the "
        "pass's cost)",
    )
    stored.add_argument(
        "--faithfulness",
        action="store_true",
        help="also store per-image perturbation AUCs of the "
        "relevance map (else the rollout): 22 more forward passes per image (11 perturbed copies, twice)",
    )
    stored.add_argument(
        "--activations",
        type=int,
        nargs="+",
        metavar="B",
        default=[],
        help="also store block B's output, output.hidden_states[B] (0-based; the residual stream after the block), "
        "every token: prefix tokens ([CLS], registers) then patches, fp16, one content-hash-named file per shard and "
        "block, for `vitviz sae train INDEX --block B`. Disk: tokens x width x 2 bytes per image and block "
        "(ViT-B/16 at 224 px: 197 x 768 x 2 = 296 KiB; CIFAR-10's 50,000 images: 15 GB per block); a shard's are "
        "held in memory until it is written (--shard-size bounds that)",
    )
    stored.add_argument("--shard-size", type=int, default=1024, help="images per shard (default: %(default)s)")
    add_prompt_options(p)
    return p


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.verify is not None:
        if args.source is not None or args.out is not None:
            parser.error("--verify DIR checks an index: give no SOURCE and no --out with it")
        return
    if args.source is None or args.out is None:
        parser.error("give a SOURCE and --out DIR (or --verify DIR to check an index)")
    for name in ("batch_size", "shard_size", "pca_sample"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.pca is not None and (args.pca < 1 or args.no_features):
        parser.error("--pca must be at least 1, and needs patch features (not --no-features)")


def pick_device(choice: str) -> torch.device:
    if choice == "auto":
        if torch.cuda.is_available():
            return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
        return torch.device("cpu")
    return torch.device(choice)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if args.verify is not None:
        return verify(args.verify)
    device = pick_device(args.device)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's barriers run on the current device: this process's own
    if distributed:  # under torchrun: gloo on CPUs, NCCL on GPUs, torchrun's rendezvous across machines
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    try:
        return run(args, device, rank, world, distributed)
    except (SourceError, IndexFormatError, IndexBusyError, ImageError) as error:
        raise SystemExit(f"error: {error}") from None
    finally:
        if distributed:
            dist.destroy_process_group()


def run(args: argparse.Namespace, device: torch.device, rank: int, world: int, distributed: bool) -> int:
    source = open_source(args.source, args.path_column, args.label_column, args.split)
    try:
        model = load_model(args.model)
    except ModelLoadError as error:
        raise SystemExit(f"error: {error}") from None
    barrier = dist.barrier if distributed else (lambda: None)
    if rank > 0:  # the first process embeds the prompts; the others then read them from the disk cache
        barrier()
    model = apply_prompt_options(model, args).to(device)
    if rank == 0 and world > 1:
        barrier()
    check_model(model)
    if not -model.config.num_layers <= args.features_block < model.config.num_layers:
        parser_error = f"--features-block must be in [0, {model.config.num_layers - 1}] (or -1 for the last)"
        raise SystemExit(f"error: {parser_error}")
    layers = model.config.num_layers
    if not all(-layers <= b < layers for b in args.activations):
        raise SystemExit(
            f"error: --activations blocks must be in [0, {layers - 1}] (or -1 for the last); got {args.activations}"
        )
    precision = args.precision
    if precision == "auto":  # decided once, by the first process, so that every process uses the same
        choice = [resolve_precision("auto", model)[1] if rank == 0 else None]
        if distributed:
            dist.broadcast_object_list(choice, src=0)
        precision = choice[0].precision
        if rank == 0:
            print(choice[0].summary(), file=sys.stderr)
    options = IndexOptions(
        precision=precision,
        features=not args.no_features,
        features_block=args.features_block,
        facet=args.facet,
        pca=args.pca,
        pca_sample=args.pca_sample,
        relevance=args.relevance,
        faithfulness=args.faithfulness,
        shard_size=args.shard_size,
        limit=args.limit,
        activations=tuple(sorted({b % layers for b in args.activations})),
    )
    extra = {"prompts": args.prompts, "prompt_set": args.prompt_set, "templates": args.templates}
    total = source.count if args.limit is None else min(args.limit, source.count or args.limit)
    share = None if total is None else len(range(rank, -(-total // args.shard_size), world)) * args.shard_size
    label = f"indexing (process {rank + 1} of {world})" if world > 1 else "indexing"
    with tqdm(
        total=min(share, total) if share else total,
        desc=label,
        unit="image",
        disable=None,
        file=sys.stderr,
        position=rank,
    ) as bar:
        started = time.perf_counter()
        done = [0, started]  # images, and when the last was done: this process's pass, without the search indexes

        def progress(count: int) -> None:
            bar.update(count)
            done[:] = [done[0] + count, time.perf_counter()]

        manifest = build_index(
            model,
            source,
            args.out,
            options,
            args.model,
            args.batch_size,
            args.resume,
            rank,
            world,
            barrier,
            progress,
            extra,
        )
    seconds = done[1] - started
    rate = f" ({done[0] / seconds:.1f} images/s)" if seconds > 0 and done[0] else ""
    print(f"{label}: {done[0]} images in {seconds:.2f} s{rate}", file=sys.stderr)
    if manifest is not None:
        failed = _count_errors(args.out)
        print(f"indexed {manifest['count']} images into {args.out} ({failed} unreadable, recorded with their error)")
    return 0


def verify(folder: Path) -> int:
    """`--verify DIR`: opening's checks, then every checksum and both search indexes; prints one line per problem."""
    from vitviz.dataset import search
    from vitviz.dataset.checks import verify_checksums
    from vitviz.dataset.index import open_index

    try:
        index = open_index(folder)
    except IndexFormatError as error:
        print(f"error: {error}")
        return 1
    problems = verify_checksums(index.folder, index.manifest)
    for kind, info in index.manifest.get("search", {}).items():
        try:
            search.load(index.folder / search.SEARCH / f"{kind}.faiss", info["dimension"], info["vectors"])
        except IndexFormatError as error:
            problems.append(str(error))
    for problem in problems:
        print(f"error: {problem}")
    files = sum(len(s["files"]) for s in index.shards)
    if not problems:
        print(f"{index.folder}: {len(index.shards)} shards, {files} files and {index.count} images verified")
    return 1 if problems else 0


def _count_errors(out: Path) -> int:
    from vitviz.dataset.index import open_index

    return int(open_index(out).query("SELECT count(*) AS n FROM images WHERE error IS NOT NULL")["n"][0])


if __name__ == "__main__":
    sys.exit(main())
