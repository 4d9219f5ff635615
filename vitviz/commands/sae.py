"""`vitviz sae train`: train a TopK SAE on one block's output tokens and write it with its held-out metrics;
`vitviz sae ablate`: suppress (or scale) one of its latents over an index's images, per-class accuracy as a table;
`vitviz sae latents`: per-latent statistics and top images over an index, beside the SAE (the Dataset page's);
`vitviz sae evaluate`: one table of metrics for several SAEs on an index's held-out images;
`vitviz sae calibrate`: the input scaling an SAE's file lacks (saev's), estimated from an index, stored beside it.

Every command takes any SAE ``vitviz.sae.load_sae`` reads: a local file or folder in any format, or
``hf:<repo>[/<subfolder>]``; its width and block are checked against the index's model.

    vitviz sae train INDEX --block 3 --latents 1536 --k 16 --out runs/sae
    vitviz sae train --images DIR --model default --block 3 --latents 1536 --k 16 --out runs/sae
    vitviz sae train --activations acts.npy --holdout-activations held.npy --latents 1536 --k 16 --out runs/sae
    vitviz sae ablate INDEX runs/sae --latent 12 --scale 0
    vitviz sae latents INDEX runs/sae
    vitviz sae evaluate INDEX runs/sae hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K
    vitviz sae calibrate INDEX hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K

From an index made with `vitviz index SOURCE --out INDEX --activations 3`, the tokens are read from its activation
shards in order, memory-mapped (the patch tokens by default; --tokens all adds [CLS] and the registers), and a
seeded --holdout share of its images, chosen by a hash of each image_id, is never trained on: the metrics are
measured on them, top-1 agreement included (the index's model from its manifest, its images read again from the
source it records, against their labels when they are the model's classes).

From images, the model runs up to block B and its patch tokens' outputs (prefix tokens left out) are the data; a
seeded share of the images (``--holdout``) is kept out of training for the metrics, top-1 agreement included (against
the labels when the images sit in folders named after the model's classes). From ``.npy`` files (n, d), read
memory-mapped in order, the held-out tokens are ``--holdout-activations`` or the last ``--holdout`` share of them.
DIR receives ``sae.safetensors``, ``config.json`` (``vitviz.sae.files``), ``metrics.json`` and ``checkpoint.pt``
(removed at the end; a run that finds one resumes it). The run itself is the library's ``vitviz.sae.train``
(vitviz/sae/run.py); ``--matryoshka 64,256,1024`` trains nested prefixes of the dictionary (vitviz/sae/training.py).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

from vitviz.sae.errors import SAEError
from vitviz.sae.run import train
from vitviz.sae.training import TrainConfig, device_of

SAE_SPEC = (
    "the SAE: a folder written by `vitviz sae train`, saev's sae.pt, a SAELens, ViT-Prisma or sparsify folder, or "
    "hf:<repo>[/<subfolder>] (docs/sae.md)"
)
SCALING_HELP = (
    "an input scaling file written by `vitviz sae calibrate` for an SAE whose file lacks its own (default: the "
    "input_scaling.json beside the SAE, when there is one)"
)
INDEX_HELP = "an index folder made with `vitviz index ... --activations B`"


# --- the argument groups several subcommands share: one place for each flag's type, default and help -------------


def add_index_and_sae(parser: argparse.ArgumentParser, index_help: str = INDEX_HELP) -> None:
    """The two positionals of calibrate, latents and ablate: INDEX, then one SAE."""
    parser.add_argument("index", type=Path, help=index_help)
    parser.add_argument("sae", help=SAE_SPEC)


def add_scaling(parser: argparse.ArgumentParser) -> None:
    """``--scaling``: an input scaling for an SAE whose file lacks its own (latents, ablate)."""
    parser.add_argument("--scaling", type=Path, help=SCALING_HELP)


def add_block(parser: argparse.ArgumentParser, reader: str = "the SAE reads", default: str = "its file says") -> None:
    """``--block``: the block the SAE reads, by default the one it says itself."""
    parser.add_argument("--block", type=int, help=f"the block {reader} (default: the one {default})")


def add_index_model(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--source`` and ``--batch-size``: the index's model run again on its images (evaluate,
    ablate)."""
    parser.add_argument("--model", help="model spec (default: the index's own; its weights must be the index's)")
    parser.add_argument("--source", help="where the index's images are now, if they moved (default: the manifest's)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass (default: %(default)s)")


def add_device(parser: argparse.ArgumentParser) -> None:
    """``--device``, as every subcommand that computes takes it."""
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (CUDA when present)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz sae", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = p.add_subparsers(dest="command", required=True)
    add_train_parser(commands)
    add_ablate_parser(commands)
    add_latents_parser(commands)
    add_evaluate_parser(commands)
    add_calibrate_parser(commands)
    return p


def add_train_parser(commands) -> None:
    t = commands.add_parser(
        "train",
        help="train an SAE on one block's output tokens",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "index",
        nargs="?",
        type=Path,
        help=f"{INDEX_HELP}: the tokens come from its shards",
    )
    data = t.add_mutually_exclusive_group()
    data.add_argument("--images", type=Path, help="a folder of images (searched recursively) run through --model")
    data.add_argument("--activations", type=Path, nargs="+", help=".npy files of (tokens, width) activations")
    t.add_argument(
        "--model", default=None, help="model spec for --images (default: default), or for INDEX (default: its own)"
    )
    t.add_argument(
        "--block", type=int, default=None, help="the block whose output is read, 0-based (needed with INDEX, --images)"
    )
    t.add_argument(
        "--tokens",
        choices=("patches", "all"),
        default="patches",
        help="INDEX: train on the patch tokens only (the default: the prefix tokens, [CLS] and registers, stay in "
        "the shards for other uses), or on all of them. Edits and top-1 agreement act on the patch tokens",
    )
    t.add_argument("--source", help="INDEX: where its images are now, if they moved (default: the manifest's source)")
    t.add_argument("--holdout", type=float, default=0.1, help="share of the images (or tokens) kept for the metrics")
    t.add_argument("--holdout-activations", type=Path, nargs="+", help=".npy files of held-out activations")
    t.add_argument("--latents", type=int, required=True, help="number of latents N (8x or 16x the width is usual)")
    t.add_argument("--k", type=int, default=16, help="latents kept per token")
    t.add_argument("--aux-k", type=int, default=256, help="dead latents the AuxK loss uses")
    t.add_argument(
        "--matryoshka",
        metavar="M1,M2,...",
        help="train a Matryoshka TopK SAE (as saev does): latents 0..M1-1, 0..M2-1, ... and all of them each "
        "reconstruct the input on their own, the loss the mean of their errors; increasing sizes, such as 64,256,1024",
    )
    t.add_argument("--epochs", type=int, default=8, help="passes over the training tokens")
    t.add_argument("--batch", type=int, default=4096, help="tokens per step")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate (default 2e-4 / sqrt(N / 2^14))")
    t.add_argument("--seed", type=int, default=0, help="seed for the initialisation, the split and the shuffling")
    add_device(t)
    t.add_argument("--max-images", type=int, default=None, help="use at most this many images (the first, sorted)")
    t.add_argument("--out", type=Path, required=True, help="folder for the SAE, its config and metrics.json")


def add_calibrate_parser(commands) -> None:
    c = commands.add_parser(
        "calibrate",
        help="estimate the input scaling an SAE's file lacks (saev's mean and scalar) from an index's activations",
        description="saev trains on (x - mean) / s, s the mean norm of the centred tokens over sqrt(width), and its "
        "sae.pt stores neither. This estimates both from every readable image of INDEX at the SAE's block (its "
        "patch tokens, or all tokens for an SAE trained on all) and writes them beside the SAE as "
        "input_scaling.json (or to --out), marked estimated, with the index they came from. load_sae and every "
        "`vitviz sae` command then apply it, saying it is estimated (vitviz/sae/scaling.py).",
    )
    add_index_and_sae(c)
    add_block(c)
    c.add_argument("--out", type=Path, help="the JSON file to write (default: input_scaling.json beside the SAE)")


def add_evaluate_parser(commands) -> None:
    e = commands.add_parser(
        "evaluate",
        help="one table of metrics for one or more SAEs on an index's held-out images",
        description="Each SAE (vitviz's folder, saev's sae.pt, a SAELens, ViT-Prisma or sparsify folder, or "
        "hf:<repo>[/<subfolder>]) on the same held-out images of INDEX (its stored activations of the SAE's block, "
        "and its model on the images read again): L0, explained variance, saev's normalised MSE, dead and dense "
        "latents (never firing; firing on more than 1 %% of the tokens), ViT-Prisma's CE loss recovered and top-1 "
        "agreement, one row per SAE (vitviz/sae/evaluation.py).",
    )
    e.add_argument("index", type=Path, help=INDEX_HELP)
    e.add_argument("sae", nargs="+", help="one or more SAEs: a folder or file, or hf:<repo>[/<subfolder>]")
    add_block(e, "the SAEs read", "each SAE's file says")
    e.add_argument("--holdout", type=float, default=0.1, help="share of the images held out (default: %(default)s)")
    e.add_argument("--seed", type=int, default=0, help="the split's seed, as at training (default: %(default)s)")
    e.add_argument("--max-images", type=int, help="split only the first N readable images, as at training")
    add_index_model(e)
    add_device(e)
    e.add_argument("--out", type=Path, help="also write the rows, every metric, as JSON here")


def add_latents_parser(commands) -> None:
    la = commands.add_parser(
        "latents",
        help="per-latent statistics and top images over an index, written beside the SAE for the Dataset page",
        description="One pass over INDEX's stored activations of the SAE's block (shard by shard): per latent, how "
        "often it fires, its mean and largest code, a histogram and its top images as (value, image_id, patch). "
        "Writes latents.parquet and top_images.parquet beside the SAE (vitviz/sae/browse.py), which the Dataset "
        "page's Features tab reads instead of computing them.",
    )
    add_index_and_sae(la)
    add_scaling(la)
    add_block(la)
    la.add_argument("--top", type=int, default=12, help="top images kept per latent (default: %(default)s)")
    add_device(la)


def add_ablate_parser(commands) -> None:
    a = commands.add_parser(
        "ablate",
        help="per-class accuracy with one latent suppressed (or scaled) over an index's images, as a Parquet table",
        description="Every labelled, readable image of INDEX through the index's model and through the same model "
        "with latent J of the SAE scaled by --scale (or set to --set-to, or to --set-to-max times its largest "
        "activation) on block B's patch tokens (vitviz.sae.with_sae: the reconstruction error is kept, so --scale 1 "
        "changes nothing). Writes one row per class: label, images, correct, correct_edited, accuracy, "
        "accuracy_edited, accuracy_change, predictions_changed, latent, scale, set_to, block "
        "(vitviz/sae/ablation.py).",
    )
    add_index_and_sae(a, "an index folder made with `vitviz index` (labels from its source)")
    add_scaling(a)
    a.add_argument("--latent", type=int, required=True, help="the latent J to edit, from 0")
    edit = a.add_mutually_exclusive_group()
    edit.add_argument(
        "--scale", type=float, default=0.0, help="its codes' factor: 0 suppresses it (default), 2 doubles"
    )
    edit.add_argument(
        "--set-to", type=float, help="set its code to this value on every patch instead (the SAE's normalised units)"
    )
    edit.add_argument(
        "--set-to-max",
        type=float,
        metavar="M",
        help="set its code to M times its largest activation on every patch (saev's protocol: -2), read from the "
        "latents.parquet that `vitviz sae latents` writes beside the SAE",
    )
    add_block(a)
    a.add_argument(
        "--out",
        type=Path,
        help="a .parquet file, or a folder for ablate-latent<J>-scale<S>.parquet (default: the SAE's folder)",
    )
    a.add_argument("--limit", type=int, help="only the first N labelled images")
    add_index_model(a)
    add_device(a)


def main(argv: list[str] | None = None) -> dict | Path:
    args = build_parser().parse_args(argv)
    from vitviz.dataset import IndexFormatError, SourceError
    from vitviz.loading.errors import ModelLoadError
    from vitviz.preprocessing import ImageError

    try:
        commands = {
            "ablate": ablate_command,
            "calibrate": calibrate_command,
            "evaluate": evaluate_command,
            "latents": latents_command,
            "train": train_command,
        }
        with warnings.catch_warnings():  # each warning one line on stderr, as the errors are
            warnings.simplefilter("always", UserWarning)
            warnings.showwarning = lambda message, *_, **__: print(f"warning: {message}", file=sys.stderr)
            return commands[args.command](args)
    except (SAEError, OSError, IndexFormatError, SourceError, ModelLoadError, ImageError) as error:
        print(f"vitviz sae {args.command}: error: {error}", file=sys.stderr)  # one line, as argparse's: no traceback
        raise SystemExit(2) from None


def matryoshka_sizes(text: str | None) -> tuple[int, ...] | None:
    """``"64,256,1024"`` -> (64, 256, 1024)."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SAEError(
            f"--matryoshka takes increasing sizes separated by commas, such as 64,256,1024; got {text!r}"
        ) from None


def train_command(args: argparse.Namespace) -> dict:
    """``vitviz.sae.train`` with the flags; prints the main metrics and returns metrics.json's numbers."""
    config = TrainConfig(
        epochs=args.epochs,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        matryoshka=matryoshka_sizes(args.matryoshka),
    )
    _, record = train(
        args.out,
        latents=args.latents,
        k=args.k,
        aux_k=args.aux_k,
        index=args.index,
        images=args.images,
        activations=args.activations,
        holdout_activations=args.holdout_activations,
        block=args.block,
        model=args.model,
        tokens=args.tokens,
        source=args.source,
        holdout=args.holdout,
        max_images=args.max_images,
        config=config,
    )
    metrics = record.metrics
    for name in ("explained_variance", "l0", "dead_fraction", "top1_agreement", "ce_loss_recovered"):
        if name in metrics:
            print(f"{name:>20}: {metrics[name]:.4f}")
    for size, value in (metrics.get("prefix_nmse") or {}).items():
        print(f"{'NMSE, ' + size + ' latents':>20}: {value:.4f}")
    print(f"{'training time':>20}: {record.seconds:.1f} s -> {record.folder}")
    return metrics


def evaluate_command(args: argparse.Namespace) -> list[dict]:
    """Print the table of ``vitviz.sae.evaluation``; returns its rows."""
    import json

    from vitviz.sae.evaluation import evaluate_on_index, table

    if args.batch_size < 1:
        raise SAEError("--batch-size must be at least 1")
    rows = evaluate_on_index(
        args.index,
        args.sae,
        block=args.block,
        holdout=args.holdout,
        seed=args.seed,
        max_images=args.max_images,
        model=args.model,
        source=args.source,
        device=args.device,
        batch=args.batch_size,
    )
    print(table(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
        print(f"-> {args.out}")
    return rows


def largest_activation(folder: Path, latent: int) -> float:
    """The latent's largest code over the index, from the latents.parquet `vitviz sae latents` wrote in ``folder``."""
    import pyarrow.parquet as pq

    from vitviz.sae.browse import LATENTS_FILE

    path = folder / LATENTS_FILE
    if not path.is_file():
        raise SAEError(
            f"--set-to-max needs each latent's largest activation: run `vitviz sae latents INDEX {folder}` first "
            f"(it writes {LATENTS_FILE}), or give --set-to VALUE"
        )
    rows = pq.read_table(path, columns=["latent", "max_activation"], filters=[("latent", "=", latent)]).to_pylist()
    if not rows:
        raise SAEError(f"{path} has no row for latent {latent}")
    return float(rows[0]["max_activation"])


def ablate_command(args: argparse.Namespace) -> Path:
    """Run the edit over the index's labelled images and write the table; returns its path."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from vitviz.dataset import open_index
    from vitviz.sae.ablation import ablate
    from vitviz.sae.browse import check_fit
    from vitviz.sae.indexed import index_labels, index_model, index_pixels, readable_images

    if args.batch_size < 1 or (args.limit is not None and args.limit < 1):
        raise SAEError("--batch-size and --limit must be at least 1")
    index = open_index(args.index)
    sae, folder = opened_sae(args.sae, args.scaling)
    if not 0 <= args.latent < sae.config.latents:
        raise SAEError(f"latent {args.latent} is out of range: this SAE has latents 0 to {sae.config.latents - 1}")
    model = index_model(index, args.model).to(device_of(args.device))
    spec = args.model or index.manifest["model"].get("spec")
    block = check_fit(sae, model.config.num_layers, model.config.hidden_size, spec, args.block)
    ids = readable_images(index)
    labels = index_labels(index, ids)
    labelled = [(i, label) for i, label in zip(ids.tolist(), labels) if label is not None][: args.limit]
    if not labelled:
        raise SAEError(f"{args.index} has no labelled images: per-class accuracy needs the source's labels")
    ids, labels = [i for i, _ in labelled], [label for _, label in labelled]
    pixels = index_pixels(index, model, ids, args.batch_size, args.source)
    batches = ((p, labels[i * args.batch_size : (i + 1) * args.batch_size]) for i, p in enumerate(pixels))
    about = {"sae": args.sae if is_hub(args.sae) else str(Path(args.sae).resolve()), "index": str(index.folder)}
    set_to = args.set_to if args.set_to_max is None else args.set_to_max * largest_activation(folder, args.latent)
    edit = f"x {args.scale:g}" if set_to is None else f"set to {set_to:g}"
    with tqdm(total=len(ids), desc=f"latent {args.latent} {edit}", unit="image", disable=None) as bar:
        table = ablate(model, sae, block, batches, args.latent, args.scale, bar.update, about, set_to)
    out = args.out or folder
    name = f"scale{args.scale:g}" if set_to is None else f"set{set_to:.4g}"
    path = out if out.suffix == ".parquet" else out / f"ablate-latent{args.latent}-{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")  # a half-written table never reads as complete
    pq.write_table(table, temporary)
    temporary.replace(path)
    for row in table.to_pylist():
        print(f"{row['label']:>20}: {row['accuracy']:.3f} -> {row['accuracy_edited']:.3f} ({row['images']} images)")
    print(f"-> {path}")
    return path


def latents_command(args: argparse.Namespace) -> Path:
    """Compute the latent tables over every readable image of the index and write them beside the SAE."""
    from vitviz.dataset import open_index
    from vitviz.sae.browse import latent_statistics, write_latent_tables
    from vitviz.sae.indexed import readable_images

    if args.top < 1:
        raise SAEError("--top must be at least 1")
    index = open_index(args.index)
    sae, folder = opened_sae(args.sae, args.scaling)
    statistics = latent_statistics(sae.to(device_of(args.device)), index, readable_images(index), args.block, args.top)
    latents, _ = write_latent_tables(statistics, folder)
    dead = int((statistics.frequency == 0).sum())
    print(f"{statistics.images} images, {statistics.tokens} patch tokens; {dead} of {len(statistics.frequency)} dead")
    print(f"-> {latents.parent}")
    return latents.parent


def calibrate_command(args: argparse.Namespace) -> Path:
    """Estimate the SAE's input scaling from the index and write it; returns the file."""
    from vitviz.dataset import open_index
    from vitviz.sae import scaling
    from vitviz.sae.browse import check_block
    from vitviz.sae.files import load_sae
    from vitviz.sae.formats.hub import local_path

    index = open_index(args.index)
    path = local_path(args.sae)
    with warnings.catch_warnings():  # its scaling is missing (or estimated before): what this command is for
        warnings.simplefilter("ignore", UserWarning)
        sae = load_sae(path)
    if not getattr(sae.config, "scaling_missing", None):
        raise SAEError(f"{args.sae} has its input normalisation in its own file: there is nothing to calibrate")
    block = check_block(index, sae, args.block)
    tokens = sae.tokens if sae.tokens in ("patches", "all") else "patches"
    estimated = scaling.from_index(index, block, tokens, sae=args.sae)
    out = scaling.write(estimated, args.out or scaling.beside(path))
    print(f"mean norm {float(np.linalg.norm(estimated.mean)):.4g}, scale {estimated.scale:.4g}: {estimated.note()}")
    print(f"-> {out}")
    return out


def is_hub(spec: str) -> bool:
    from vitviz.sae.formats.hub import PREFIX

    return spec.startswith(PREFIX)


def opened_sae(spec: str, scaling: Path | None):
    """(the SAE a spec names, the local folder its tables and edits are written to: its own, or its snapshot in
    the Hub's cache), its input scaling applied when one is given or beside it (a line says so)."""
    from vitviz.sae.files import load_sae
    from vitviz.sae.formats.hub import local_path

    path = local_path(spec)
    return load_sae(path, scaling=scaling), path if path.is_dir() else path.parent


if __name__ == "__main__":
    main()
