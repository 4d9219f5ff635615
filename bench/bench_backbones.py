"""The 2025-26 backbones' forward pass at 224: vitviz against timm's own model, fused and unfused attention.

    python bench/bench_backbones.py --repeats 7 --out bench/results/backbones.json

For each B-sized family (random weights, full depth, batch 1, fp32, torch's threads as set), interleaved in one
process so the machine's load falls on all alike: timm with fused attention (its default), timm with fused
attention off (what a hook-based tool must run to see the weights), vitviz without attentions (the fused kernel)
and vitviz returning every block's attention weights. Medians in ms, and each against timm fused.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import timm
import torch

import vitviz

MODELS = [
    "vit_base_patch16_dinov3",
    "eva02_base_patch14_224",
    "vit_pe_core_base_patch16_224",
    "vit_base_patch16_rope_224",
]


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return 1000 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        torch.manual_seed(0)
        kwargs = {"img_size": args.size} if "dinov3" not in name else {}
        fused = timm.create_model(name, pretrained=False, **kwargs).eval()
        unfused = timm.create_model(name, pretrained=False, **kwargs).eval()
        unfused.load_state_dict(fused.state_dict())
        for block in unfused.blocks:
            block.attn.fused_attn = False
        ours = vitviz.from_timm(fused)
        pixels = torch.randn(1, 3, args.size, args.size)
        runs = {
            "timm fused": lambda fused=fused, pixels=pixels: fused(pixels),
            "timm unfused": lambda unfused=unfused, pixels=pixels: unfused(pixels),
            "vitviz": lambda ours=ours, pixels=pixels: ours(pixels),
            "vitviz with attentions": lambda ours=ours, pixels=pixels: ours(pixels, output_attentions=True),
        }
        times = {key: [] for key in runs}
        with torch.inference_mode():
            for run in runs.values():  # warm-up
                run()
            for _ in range(args.repeats):
                for key, run in runs.items():
                    times[key].append(timed(run))
        medians = {key: statistics.median(values) for key, values in times.items()}
        row = {
            "model": name,
            "ms": {k: round(v, 1) for k, v in medians.items()},
            "vs_timm_fused": {k: round(v / medians["timm fused"], 2) for k, v in medians.items()},
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        report = {
            "torch": torch.__version__,
            "timm": timm.__version__,
            "threads": torch.get_num_threads(),
            "size": args.size,
            "repeats": args.repeats,
            "rows": rows,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
