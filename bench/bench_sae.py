"""Sparse autoencoders: quality on the shipped model, training speed against the matmul floor, and scale.

    python bench/bench_sae.py quality --cifar /tmp/cifar10 --out bench/results/sae_quality.json
    python bench/bench_sae.py speed --out bench/results/sae_speed.json
    python bench/bench_sae.py scale --tokens 1000000 --fraction 0.1 --out bench/results/sae_scale.json

quality: the shipped default model (32 x 32 CIFAR-10 ViT, 8 x 8 patches), block 3's output patch tokens of 3,000
CIFAR-10 training images (192,000 tokens), 8x expansion (1,536 latents), k = 16; held out: 2,000 test images. An
ablation side by side, same epochs and batch: plain TopK (random directions, b_dec 0, constant rate), + data
initialisation, + AuxK, + the warm-up/decay schedule (= vitviz's defaults).
speed: one training step of that SAE against the dense matrix products of its shapes (the floor), interleaved.
scale: a 16x SAE (12,288 latents) on width-768 synthetic tokens (sparse sums of random directions plus noise,
written as fp16 .npy shards and read memory-mapped); a stated fraction is run and the whole extrapolated.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import common  # bench/common.py
import numpy as np
import torch

from vitviz.loading import load_model
from vitviz.sae import SAEConfig, TopKSAE, TrainConfig, evaluate, top1_agreement, train_sae
from vitviz.sae.run import block_tokens, pixels
from vitviz.sae.training import losses

ABLATION = {  # cumulative: each adds one part of the recipe to the one before
    "plain TopK": {"init": "random", "b_dec_init": "zero", "aux_alpha": 0.0, "schedule": "constant"},
    "+ data init": {"init": "data", "b_dec_init": "median", "aux_alpha": 0.0, "schedule": "constant"},
    "+ AuxK": {"init": "data", "b_dec_init": "median", "aux_alpha": 1 / 32, "schedule": "constant"},
    "+ schedule": {"init": "data", "b_dec_init": "median", "aux_alpha": 1 / 32, "schedule": "warmup-decay"},
}


def pick(files: list[Path], count: int, seed: int) -> list[Path]:
    order = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed))[:count]
    return sorted(files[i] for i in order.tolist())


def add_cifar_options(parser) -> None:
    """The data options of the SAE benchmarks (this one and bench_matryoshka.py): the photos and the block read."""
    parser.add_argument("--cifar", type=Path, default=Path("/tmp/cifar10"), help="CIFAR-10 unzipped: train/, test/")
    parser.add_argument("--train-images", type=int, default=3000, help="training images (x 64 patch tokens)")
    parser.add_argument("--test-images", type=int, default=2000, help="held-out test images")
    parser.add_argument("--block", type=int, default=3, help="the block whose output is read")
    parser.add_argument("--expansion", type=int, default=8, help="latents per input dimension")


def cifar_files(args, part: str) -> list[Path]:
    """``args.train_images`` photos of CIFAR-10's train/ or ``args.test_images`` of its test/ (``part``), drawn by a
    fixed seed: the same photos in every run and every contender."""
    count, seed = (args.train_images, 0) if part == "train" else (args.test_images, 1)
    return pick(sorted((args.cifar / part).rglob("*.jpg")), count, seed)


@dataclass
class CifarTokens:
    """The training and test photos, their block ``args.block`` tokens, and the seconds the extraction took."""

    train_files: list[Path]
    test_files: list[Path]
    train: list[torch.Tensor]
    held: list[torch.Tensor]
    seconds: float

    def about(self, config: SAEConfig, args) -> dict:
        """What a result records of the data and the run's shape."""
        return {
            "block": args.block,
            "train_images": len(self.train_files),
            "test_images": len(self.test_files),
            "train_tokens": sum(len(t) for t in self.train),
            "held_out_tokens": sum(len(t) for t in self.held),
            "latents": config.latents,
            "k": config.k,
            "epochs": args.epochs,
            "batch": args.batch,
            "extraction_seconds": self.seconds,
        }


def cifar_tokens(model, args) -> CifarTokens:
    """The CIFAR photos (``cifar_files``) and their block ``args.block`` tokens, timed."""
    train_files, test_files = cifar_files(args, "train"), cifar_files(args, "test")
    began = time.perf_counter()
    train, held = block_tokens(model, train_files, args.block), block_tokens(model, test_files, args.block)
    return CifarTokens(train_files, test_files, train, held, time.perf_counter() - began)


def quality(args) -> dict:
    model = load_model("default")
    data = cifar_tokens(model, args)
    train_files, train, held, extraction = data.train_files, data.train, data.held, data.seconds
    tokens = sum(len(t) for t in train)
    grid = model.config.grid_size
    print(
        f"{tokens:,} training tokens ({len(train_files)} images x {grid[0]} x {grid[1]}), extracted in "
        f"{extraction:.0f} s",
        file=sys.stderr,
    )
    d = model.config.hidden_size
    config = SAEConfig(d_in=d, latents=args.expansion * d, k=args.k, block=args.block)
    # the contenders run side by side, one process (one thread) each, on the same tokens
    chosen = {name: options for name, options in ABLATION.items() if not args.contenders or name in args.contenders}
    jobs = [(name, options, train, held, config, args) for name, options in chosen.items()]
    with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
        runs = dict(zip(chosen, pool.starmap(contender, jobs)))
    for name, run in runs.items():
        print(
            f"{name:>14}: EV {run['explained_variance']:.4f}  dead {run['dead_fraction']:.4f}  L0 {run['l0']:.1f}  "
            f"top-1 {run['top1_agreement']:.4f}  CE rec {run['ce_loss_recovered']:.4f}  "
            f"{run['training_seconds']:.0f} s",
            file=sys.stderr,
        )
    return {
        "model": "default",
        **data.about(config, args),
        "runs": runs,
        "side_by_side": "4 processes, 1 thread each",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def contender(name: str, options: dict, train: list, held: list, config: SAEConfig, args) -> dict:
    torch.set_num_threads(1)
    model = load_model("default")
    batches = list(pixels(model, cifar_files(args, "test")))
    train_config = TrainConfig(epochs=args.epochs, batch=args.batch, lr=args.lr, device="cpu", **options)
    start = time.perf_counter()
    sae, history = train_sae(train, config, train_config, progress=False)
    seconds = time.perf_counter() - start
    metrics = evaluate(sae, held)
    metrics |= top1_agreement(model, sae, args.block, [b[0] for b in batches], [b[1] for b in batches])
    if args.save and name == "+ schedule":
        from vitviz.sae import save_sae

        save_sae(sae, args.save, model="default", training={"history": history, "seconds": seconds})
        (args.save / "metrics.json").write_text(json.dumps(dict(metrics, training_seconds=seconds), indent=1))
    return dict(metrics, training_seconds=seconds, history=history, options=options)


def step_function(sae: TopKSAE, batch: torch.Tensor):
    optimiser = torch.optim.Adam(sae.parameters(), lr=1e-4)
    dead = torch.zeros(sae.config.latents, dtype=torch.bool)
    dead[::8] = True  # AuxK does its work too

    def step() -> None:
        loss, *_ = losses(sae, batch, dead, 1 / 32)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_parallel_gradient_()
        optimiser.step()
        sae.normalise_decoder_()

    return step


def floor_function(batch: int, d: int, latents: int):
    """The dense products of an SAE step: x W_enc and its weight gradient, codes W_dec and both its gradients."""
    x, codes, grad_pre, grad_out = (
        torch.randn(batch, d),
        torch.randn(batch, latents),
        torch.randn(batch, latents),
        torch.randn(batch, d),
    )
    W_enc, W_dec = torch.randn(d, latents), torch.randn(latents, d)

    def products() -> None:
        x @ W_enc  # encoder forward (B, N)
        x.T @ grad_pre  # encoder weight gradient (d, N)
        codes @ W_dec  # decoder forward (B, d)
        codes.T @ grad_out  # decoder weight gradient (N, d)
        grad_out @ W_dec.T  # gradient to the codes (B, N)

    return products


def speed(args) -> dict:
    d, latents = args.width, args.expansion * args.width
    torch.manual_seed(0)
    sae = TopKSAE(SAEConfig(d_in=d, latents=latents, k=args.k, aux_k=256))
    contenders = {
        "SAE training step": step_function(sae, torch.randn(args.batch, d)),
        "matmul floor (5 dense products)": floor_function(args.batch, d, latents),
    }
    medians = common.interleaved_medians(contenders, args.repeats)
    rates = {name: args.batch / m for name, m in medians.items()}
    ratio = rates["SAE training step"] / rates["matmul floor (5 dense products)"]
    for name in contenders:
        print(f"{name:>32}: {1000 * medians[name]:8.1f} ms  {rates[name]:10,.0f} tokens/s", file=sys.stderr)
    print(f"throughput / floor: {ratio:.2f}", file=sys.stderr)
    return {
        "width": d,
        "latents": latents,
        "k": args.k,
        "batch": args.batch,
        "repeats": args.repeats,
        "median_s": medians,
        "tokens_per_s": rates,
        "ratio_to_floor": ratio,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def synthetic(folder: Path, tokens: int, width: int, shard: int = 50_000, seed: int = 0) -> list[Path]:
    """fp16 shards of sparse sums (8 of 20,000 random unit directions, exponential amplitudes) plus noise."""
    g = torch.Generator().manual_seed(seed)
    atoms = torch.nn.functional.normalize(torch.randn(20_000, width, generator=g), dim=-1)
    paths = []
    for index, start in enumerate(range(0, tokens, shard)):
        n = min(shard, tokens - start)
        chosen = torch.randint(0, len(atoms), (n, 8), generator=g)
        amplitudes = torch.empty(n, 8, 1).exponential_(generator=g)
        x = (amplitudes * atoms[chosen]).sum(1) + 0.05 * torch.randn(n, width, generator=g)
        paths.append(folder / f"{index:04d}.npy")
        np.save(paths[-1], x.half().numpy())
    return paths


def scale(args) -> dict:
    width, latents = 768, 16 * 768
    run_tokens = int(args.tokens * args.fraction)
    with tempfile.TemporaryDirectory() as folder:
        paths = synthetic(Path(folder), run_tokens + 20_000, width)
        arrays = [np.load(p, mmap_mode="r") for p in paths]
        held, train = [arrays[-1][-20_000:]], arrays[:-1] + [arrays[-1][:-20_000]]
        config = SAEConfig(d_in=width, latents=latents, k=32, aux_k=512)
        train_config = TrainConfig(epochs=1, batch=args.batch, device="cpu")
        start = time.perf_counter()
        sae, history = train_sae(train, config, train_config)
        seconds = time.perf_counter() - start
        metrics = evaluate(sae, held)
    rate = history[0]["tokens_per_s"]
    print(
        f"{run_tokens:,} tokens in {seconds:.0f} s ({rate:,.0f} tokens/s in the loop); 1,000,000 tokens: about "
        f"{args.tokens / rate / 60:.0f} min; held-out EV {metrics['explained_variance']:.3f}",
        file=sys.stderr,
    )
    return {
        "width": width,
        "latents": latents,
        "k": 32,
        "batch": args.batch,
        "tokens_run": run_tokens,
        "seconds": seconds,
        "loop_seconds": history[0]["seconds"],
        "tokens_per_s": rate,
        "extrapolated_seconds_for": {
            "tokens": args.tokens,
            "seconds": args.tokens / rate + (seconds - history[0]["seconds"]) * args.tokens / run_tokens,
        },
        "held_out": metrics,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("part", choices=["quality", "speed", "scale"], help="which measurement")
    add_cifar_options(parser)
    parser.add_argument("--k", type=int, default=16, help="latents kept per token")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per contender (quality)")
    parser.add_argument("--batch", type=int, default=1024, help="tokens per step")
    parser.add_argument("--width", type=int, default=192, help="token width (speed)")
    parser.add_argument("--repeats", type=int, default=15, help="timed steps per contender (speed)")
    parser.add_argument("--tokens", type=int, default=1_000_000, help="tokens the scale figure is for")
    parser.add_argument("--fraction", type=float, default=0.1, help="share of --tokens actually run (scale)")
    parser.add_argument("--save", type=Path, help="quality: write the full recipe's SAE here")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (default: Gao et al.'s rule)")
    parser.add_argument("--contenders", nargs="+", choices=list(ABLATION), help="quality: run only these")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {"quality": quality, "speed": speed, "scale": scale}[args.part](args)
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
