"""What ranking every head costs: explain.head_importance (each of ViT-B/16's 144 heads knocked out in turn) and
explain.direct_logit_attribution on one image, beside the forward pass, on the CPU.

    python bench/bench_heads.py --out bench/results/heads.json

ViT-B/16 at 224 (timm's vit_base_patch16_224 architecture, random weights), one random image, fp32 and bf16
autocast, both cores. Also checked here: head_importance against plain forward passes with the head masked, for a
few heads, and that the logit attribution sums to the logit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from vitviz import explain
from vitviz.model import ViT, ViTConfig, autocast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, parser, save


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--repeats", type=int, default=3)
    args = args.parse_args()
    torch.manual_seed(0)
    model = ViT(ViTConfig()).eval()  # ViT-B/16 at 224, 1000 classes
    with torch.no_grad():
        model.head.weight.normal_(std=0.02)
    pixels = torch.randn(1, 3, 224, 224)
    results = {"model": "ViT-B/16 at 224 (random weights)", "threads": torch.get_num_threads(), "repeats": args.repeats}
    with torch.inference_mode():
        model(pixels)  # warm-up
        for precision in ("fp32", "bf16"):
            with autocast(precision):
                results[f"forward_{precision}_s"] = median_seconds(lambda: model(pixels), args.repeats * 3)
    for precision in ("fp32", "bf16"):
        results[f"head_importance_{precision}_s"] = median_seconds(
            lambda precision=precision: explain.head_importance(model, pixels, precision=precision), args.repeats
        )
    results["logit_attribution_s"] = median_seconds(
        lambda: explain.direct_logit_attribution(model, pixels), args.repeats
    )
    ranking = explain.head_importance(model, pixels)
    worst = 0.0
    for layer, head in [(0, 0), (5, 7), (11, 11)]:
        mask = torch.ones(12, 12)
        mask[layer, head] = 0
        with torch.no_grad():
            logit = model(pixels, head_mask=mask).logits[0, ranking.target[0]]
        worst = max(worst, abs(float(logit - ranking.logit[0]) - float(ranking.logit_change[0, layer, head])))
    parts = explain.direct_logit_attribution(model, pixels)
    total = parts.embeddings + parts.heads.sum(dim=(1, 2)) + parts.mlps.sum(dim=1) + parts.biases
    results["head_importance_vs_masked_forward_max_abs"] = worst
    results["logit_attribution_sum_error"] = float((total - parts.logit).abs().max())
    for name, value in results.items():
        print(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
    save(results, args.out)


if __name__ == "__main__":
    main()
