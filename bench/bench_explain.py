"""What explanations cost: time against the forward pass, and memory of the streaming path.

1. Time. ViT-B/16 at 224, batch 1: one forward with attentions against computing every map
   of the dashboard from them (rollout, every layer x head [CLS] map, mean attention distance
   and entropy for every head). Interleaved repeats, medians. Goal: maps < 10 % of a forward.
2. Memory. ViT-L/16 at 512 (1025 tokens): keeping all 24 x 16 attention matrices against
   vitviz.explain.StreamingExplainer, which folds each block into rollout, [CLS] rows and head
   statistics during the forward pass. Each mode runs in its own process; we report the peak
   resident memory above the process's level once the model is built.

    python bench/bench_explain.py --repeats 9 --out bench/results/explain.json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import common  # bench/common.py
import torch

from vitviz import ViT, ViTConfig, explain

VIT_B_16 = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_size=3072)
VIT_L_16_512 = dict(image_size=512, patch_size=16, hidden_size=1024, num_layers=24, num_heads=16, mlp_size=4096)


def all_maps(output, patch_size: int) -> dict:
    shared = dict(num_prefix_tokens=output.num_prefix_tokens, grid_size=output.grid_size)
    return {
        "rollout": explain.attention_rollout(output.attentions, **shared),
        "cls": explain.cls_attention_all(output.attentions, **shared),
        "distance": explain.mean_attention_distance(
            output.attentions, output.grid_size, patch_size, output.num_prefix_tokens
        ),
        "entropy": explain.attention_entropy(output.attentions),
    }


def time_maps(repeats: int) -> dict:
    torch.manual_seed(0)
    model = ViT(ViTConfig(**VIT_B_16)).eval()
    x = torch.randn(1, 3, 224, 224)
    forward_s, maps_s = [], []
    with torch.inference_mode():
        output = model(x, output_attentions=True)
        all_maps(output, 16)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            output = model(x, output_attentions=True)
            forward_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            all_maps(output, 16)
            maps_s.append(time.perf_counter() - start)
    forward, maps = statistics.median(forward_s), statistics.median(maps_s)
    print(
        f"ViT-B/16 224, batch 1: forward with attentions {1000 * forward:.1f} ms, all maps {1000 * maps:.1f} ms "
        f"= {100 * maps / forward:.1f} % of the forward"
    )
    return {"forward_median_s": forward, "maps_median_s": maps, "maps_over_forward": maps / forward}


def peak_memory(mode: str) -> dict:
    """Run in a child process: build ViT-L/16 at 512, then one forward in ``mode``."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(**VIT_L_16_512)).eval()
    x = torch.randn(1, 3, 512, 512)
    with torch.inference_mode():
        model(torch.randn(1, 3, 32, 32))  # allocate kernels' workspaces outside the measurement
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        if mode == "keep":
            output = model(x, output_attentions=True)
            maps = all_maps(output, 16)
        else:
            streamer = explain.StreamingExplainer(model.config.grid_size, 16, model.config.num_prefix_tokens)
            model(x, attention_sink=streamer)
            maps = streamer.results()
        elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "mode": mode,
        "peak_above_model_mb": (peak - baseline) / 1024,
        "seconds": elapsed,
        "rollout_sum": float(maps["rollout"].sum()),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats for the maps-cost part")
    parser.add_argument("--child", choices=["keep", "stream"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(peak_memory(args.child)))
        return {}

    results = {"maps_cost": time_maps(args.repeats), "memory": {}}
    for mode in ("keep", "stream"):
        run = subprocess.run([sys.executable, __file__, "--child", mode], capture_output=True, text=True, check=True)
        results["memory"][mode] = json.loads(run.stdout.strip().splitlines()[-1])
    keep, stream = results["memory"]["keep"], results["memory"]["stream"]
    print(
        "ViT-L/16 512 (1025 tokens): peak memory above the model, "
        f"keep everything {keep['peak_above_model_mb']:.0f} MB "
        f"({keep['seconds']:.1f} s), streaming {stream['peak_above_model_mb']:.0f} MB ({stream['seconds']:.1f} s); "
        f"same rollout: {abs(keep['rollout_sum'] - stream['rollout_sum']) < 1e-4}"
    )
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
