"""Matryoshka TopK against plain TopK at equal L0, on the shipped default model's CIFAR-10 activations.

    python bench/bench_matryoshka.py --cifar /tmp/cifar10 --threads 1 --out bench/results/sae_matryoshka.json

The data and the SAE are bench_sae.py quality's: block 3's output patch tokens of --train-images CIFAR-10 training
images, 8x expansion (1,536 latents), k = 16, vitviz's full recipe (data initialisation, AuxK, warm-up and decay);
held out: --test-images CIFAR-10 test images. The two contenders differ only in the objective: plain TopK's error of
the whole dictionary, or the mean of the errors of the nested prefixes --prefixes (saev's Matryoshka; the codes are
the same top k of all latents, so L0 is k in both). Each contender is measured on the held-out tokens (explained
variance, saev's normalised MSE, L0, dead and dense latents; the normalised MSE of each prefix alone) and through the
model (top-1 agreement and ViT-Prisma's CE loss recovered, block 3's patch tokens replaced). The two train side by
side, one process and one thread each, on the same tokens.
"""

from __future__ import annotations

import multiprocessing
import sys
import time

import common  # bench/common.py
import torch
from bench_sae import add_cifar_options, cifar_files, cifar_tokens

from vitviz.loading import load_model
from vitviz.sae import SAEConfig, TrainConfig, evaluate, top1_agreement, train_sae
from vitviz.sae.metrics import prefix_nmse
from vitviz.sae.run import pixels


def contender(name: str, prefixes: tuple[int, ...] | None, train: list, held: list, config: SAEConfig, args) -> dict:
    torch.set_num_threads(args.threads or 1)
    model = load_model("default")
    batches = list(pixels(model, cifar_files(args, "test")))
    train_config = TrainConfig(epochs=args.epochs, batch=args.batch, device="cpu", matryoshka=prefixes)
    start = time.perf_counter()
    sae, history = train_sae(train, config, train_config, progress=False)
    seconds = time.perf_counter() - start
    metrics = evaluate(sae, held)
    sizes = train_config.prefixes(config.latents) if prefixes else tuple(args.prefixes)
    metrics["prefix_nmse"] = dict(zip(map(str, sizes), prefix_nmse(sae, held, sizes)))
    metrics |= top1_agreement(model, sae, args.block, [b[0] for b in batches], [b[1] for b in batches])
    print(f"{name}: done in {seconds:.0f} s", file=sys.stderr)
    return dict(metrics, training_seconds=seconds, history=history, prefixes=list(prefixes or ()))


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    add_cifar_options(parser)
    parser.add_argument("--k", type=int, default=16, help="latents kept per token (both contenders)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per contender")
    parser.add_argument("--batch", type=int, default=2048, help="tokens per step")
    parser.add_argument(
        "--prefixes", type=int, nargs="+", default=[64, 256, 1024, 1536], help="Matryoshka's prefix sizes"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per contender")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model("default")
    data = cifar_tokens(model, args)
    train, held = data.train, data.held
    d = model.config.hidden_size
    config = SAEConfig(d_in=d, latents=args.expansion * d, k=args.k, block=args.block)
    prefixes = tuple(args.prefixes)
    contenders = {"TopK": None, f"Matryoshka TopK {','.join(map(str, prefixes))}": prefixes}
    jobs = [(name, sizes, train, held, config, args) for name, sizes in contenders.items()]
    with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
        runs = dict(zip(contenders, pool.starmap(contender, jobs)))
    for name, run in runs.items():
        prefix = "  ".join(f"{m}: {v:.3f}" for m, v in run["prefix_nmse"].items())
        print(
            f"{name:>34}: EV {run['explained_variance']:.4f}  NMSE {run['normalised_mse']:.4f}  L0 {run['l0']:.1f}  "
            f"dead {run['dead_fraction']:.4f}  dense {run['dense_fraction']:.4f}  top-1 {run['top1_agreement']:.4f}  "
            f"CE rec {run['ce_loss_recovered']:.4f}  {run['training_seconds']:.0f} s  prefix NMSE {prefix}",
            file=sys.stderr,
        )
    results = {
        "model": "default",
        **data.about(config, args),
        "runs": runs,
        "side_by_side": f"2 processes, {args.threads} thread(s) each",
        "torch": torch.__version__,
    }
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
