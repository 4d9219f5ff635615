"""What the LRP family, attention flow and the model-agnostic baselines cost on ViT-B/16 at 224 px (random weights,
fp32, batch 1), side by side with a plain forward pass and a plain forward and backward pass to the pixels.

Time: interleaved repeats, medians (bench/common.py), each method through vitviz.explain.method_maps (its shared
forward with attentions included, as the page and the CLI pay it). The goals of issue 53: attnlrp and cp-lrp at most
1.3x a forward and backward pass; integrated-gradients (32 steps) and smoothgrad (32 samples) at most 1.2x 32
forward and backward passes. Memory (--memory): each method in a process of its own, the peak resident memory above
the process's level once the model is built and has run one forward pass.

    python bench/bench_methods.py --repeats 3 --out bench/results/methods.json
    python bench/bench_methods.py --memory --out bench/results/methods_memory.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import common  # bench/common.py
import torch

from vitviz import ViT, ViTConfig
from vitviz.explain import method_maps
from vitviz.explain.lrp import lrp_relevance

VIT_B_16 = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_size=3072)
METHODS = ["attnlrp", "cp-lrp", "input-x-gradient", "integrated-gradients", "smoothgrad", "attention-flow", "relevance"]
# the sampling methods whose default costs thousands of passes: timed at these counts (each pass costs the same)
SAMPLED = {"occlusion": {}, "kernel-shap": {"samples": 64}, "rise": {"samples": 256}}


def model_and_image() -> tuple[ViT, torch.Tensor]:
    torch.manual_seed(0)
    model = ViT(ViTConfig(**VIT_B_16, num_classes=1000)).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model, torch.randn(1, 3, 224, 224)


def forward_backward(model: ViT, x: torch.Tensor) -> None:
    pixels = x.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(model(pixels).logits[0, 0], pixels)


def contenders(model: ViT, x: torch.Tensor, methods: list[str]) -> dict:
    found = {
        "forward": lambda: model(x),
        "forward and backward": lambda: forward_backward(model, x),
    }
    for rules in ("attnlrp", "cp-lrp"):  # the rules' own pass, without method_maps' shared forward
        if rules in methods:
            found[f"{rules} pass alone"] = lambda rules=rules: lrp_relevance(model, x, 0, rules)
    for name in methods:
        options = SAMPLED.get(name, {})
        found[name] = lambda name=name, options=options: method_maps(model, x, [name], target=0, **options)
    return found


def timing(repeats: int, methods: list[str]) -> dict:
    model, x = model_and_image()
    medians = common.interleaved_medians(contenders(model, x, methods), repeats)
    backward = medians["forward and backward"]
    ratios = {name: seconds / backward for name, seconds in medians.items()}
    notes = {name: f"at {options or 'its default'}" for name, options in SAMPLED.items() if name in methods}
    return common.batch_timings(1, repeats, medians) | {"ratio_to_forward_and_backward": ratios, "notes": notes}


def peak_above_start(method: str) -> float:
    """MB of resident memory above the level after one forward pass, for one run of ``method`` in a fresh process."""
    code = f"""
import re, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import bench_methods as b
model, x = b.model_and_image()
model(x)
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
start = rss()
name = {method!r}.removesuffix(" pass alone")
work = b.contenders(model, x, [] if name in ("forward", "forward and backward") else [name])[{method!r}]
work()
print(int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024 - start)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def memory(methods: list[str]) -> dict:
    alone = [f"{rules} pass alone" for rules in ("attnlrp", "cp-lrp") if rules in methods]
    return {name: peak_above_start(name) for name in ["forward", "forward and backward", *alone, *methods]}


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=[*METHODS, *SAMPLED])
    p.add_argument("--memory", action="store_true", help="peak memory of each method in its own process")
    args = p.parse_args()
    results = {"memory_mb": memory(args.methods)} if args.memory else timing(args.repeats, args.methods)
    print(json.dumps(results, indent=1))
    common.save(results, args.out)


if __name__ == "__main__":
    main()
