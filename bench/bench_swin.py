"""Swin-B at 384 px: what rollout and relevance across windows and stages cost against the plain passes.

Swin-B (embed 128, depths (2, 2, 18, 2), heads (4, 8, 16, 32), window 12) at 384 x 384 (96 x 96 = 9,216
first-stage tokens), random weights, fp32, batch 1, on the CPU. Four contenders, interleaved in one process
(medians of --repeats rounds after one warm-up each):

  (a) forward        the plain forward (SDPA, no attentions) under torch.inference_mode
  (b) rollout        forward with output_attentions=True + rollout_across_stages, under torch.inference_mode
  (c) fwd + bwd      the plain forward and the gradient of the target logit w.r.t. the input pixels
                     (torch.autograd.grad; the parameters require grad as loaded, their gradients are not computed)
  (d) relevance      forward with attentions + the target logit's gradient w.r.t. every block's attention
                     (torch.autograd.grad) + relevance_across_stages

and, to say where the time goes, the forward with attentions alone, the forward with attention gradients alone, and
the two maps alone from attentions (and gradients) already computed. Issue 45's targets: (b) / (a) and (d) / (c) at
most 1.5, and at most 1.5 GB added peak memory. Memory: each of (a)-(d) runs once more in a fresh process of its
own, which builds the model, warms up on a 192 px input, resets the kernel's high-water mark of its resident set
(writing 5 to /proc/self/clear_refs), then runs the contender once at full size; the high-water mark (VmHWM, which
sees torch's CPU allocations that tracemalloc does not) above the resident set just before is the contender's peak,
and (b) - (a), (d) - (c) the added memory.

    .venv/bin/python bench/bench_swin.py --repeats 3 --out bench/results/swin.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import common  # bench/common.py
import torch

SWIN_B = dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), window_size=12)
TARGETS = {"rollout / forward": ("rollout", "forward"), "relevance / fwd + bwd": ("relevance", "fwd + bwd")}
MEMORY_TARGET_MB = 1536
WARM_UP_SIZE = 192


def build(image_size: int):
    """Swin-B with random weights (seed 0), and one random image (B, 3, side, side)."""
    from vitviz.model import Swin, SwinConfig

    torch.manual_seed(0)
    model = Swin(SwinConfig(image_size=image_size, **SWIN_B)).eval()
    return model, torch.randn(1, 3, image_size, image_size)


def contenders(model, pixels: torch.Tensor, target: int) -> dict:
    """The four contenders (a)-(d) by name, each a function of no arguments."""
    from vitviz.explain.stages import relevance_across_stages, rollout_across_stages

    def forward():
        with torch.inference_mode():
            return model(pixels).logits

    def rollout():
        with torch.inference_mode():
            out = model(pixels, output_attentions=True)
            return rollout_across_stages(out.attentions, out.layouts)

    def forward_backward():
        leaf = pixels.clone().requires_grad_()
        return torch.autograd.grad(model(leaf).logits[0, target], leaf)

    def relevance():
        out = model(pixels, output_attentions=True)
        gradients = torch.autograd.grad(out.logits[0, target], out.attentions)
        return relevance_across_stages(out.attentions, gradients, out.layouts)

    return {"forward": forward, "rollout": rollout, "fwd + bwd": forward_backward, "relevance": relevance}


def parts(model, pixels: torch.Tensor, target: int) -> dict:
    """The pieces of (b) and (d): the passes with attentions without the maps, and the maps alone."""
    from vitviz.explain.stages import relevance_across_stages, rollout_across_stages

    out = model(pixels, output_attentions=True)
    gradients = torch.autograd.grad(out.logits[0, target], out.attentions)
    attentions = [a.detach() for a in out.attentions]
    layouts = out.layouts
    del out

    def forward_attentions():
        with torch.inference_mode():
            return model(pixels, output_attentions=True).logits

    def attention_gradients():
        out = model(pixels, output_attentions=True)
        return torch.autograd.grad(out.logits[0, target], out.attentions)

    def rollout_alone():
        with torch.inference_mode():
            return rollout_across_stages(attentions, layouts)

    def relevance_alone():
        with torch.inference_mode():
            return relevance_across_stages(attentions, gradients, layouts)

    return {
        "forward + attentions": forward_attentions,
        "forward + attention gradients": attention_gradients,
        "rollout alone": rollout_alone,
        "relevance alone": relevance_alone,
    }


def attention_sizes(model, pixels: torch.Tensor) -> dict:
    """Bytes of the returned window attentions against the same weights embedded densely, and of the rollout's
    carried row against the product matrix a dense rollout would keep."""
    with torch.inference_mode():
        out = model(pixels, output_attentions=True)
    tokens = [len(layout) for layout in out.layouts]
    heads = [a.shape[1] for a in out.attentions]
    return {
        "blocks": len(out.attentions),
        "stage_tokens": sorted(set(tokens), reverse=True),
        "window_attentions_mb": sum(a.numel() * a.element_size() for a in out.attentions) / 2**20,
        "dense_fused_mb": sum(4 * t * t for t in tokens) / 2**20,  # one (T, T) per block, heads fused
        "dense_per_head_mb": sum(4 * h * t * t for h, t in zip(heads, tokens)) / 2**20,  # (heads, T, T) per block
        "dense_rollout_product_mb": 4 * tokens[0] ** 2 / 2**20,  # R over the first stage, (T_1, T_1)
        "carried_row_kb": 4 * max(tokens) / 2**10,  # what rollout_across_stages carries instead: (B, T)
    }


def resident_kb() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in kB: resident now, and the high-water mark."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def peak_memory(name: str, image_size: int, target: int) -> dict:
    """In a child process: the contender's peak resident memory above the resident level before it ran."""
    model, pixels = build(image_size)
    small = torch.randn(1, 3, WARM_UP_SIZE, WARM_UP_SIZE)
    contenders(model, small, target)[name]()  # thread pools, kernels and caches outside the measurement
    work = contenders(model, pixels, target)[name]
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the high-water mark starts again from the resident set: the warm-up's peak is forgotten
    before, mark = resident_kb()
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    peak = resident_kb()[1]
    return {
        "contender": name,
        "resident_before_mb": before / 1024,
        "mark_reset": mark == before,
        "peak_above_before_mb": (peak - before) / 1024,
        "lifetime_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # building the model's, too
        "seconds": seconds,
    }


def interleaved_times(timed: dict, repeats: int) -> dict[str, list[float]]:
    """common.interleaved_medians, keeping every round's times: a ratio taken within each round cancels the load
    that a busy machine puts on that round."""
    for work in timed.values():
        work()
    times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(repeats):
        for name, work in timed.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds after the warm-up (default 3)")
    parser.add_argument("--image-size", type=int, default=384, help="input side in pixels (default 384)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--no-parts", action="store_true", help="time only (a)-(d), not the pieces of (b) and (d)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak memory of (a)-(d)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--target", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(peak_memory(args.child, args.image_size, args.target)))
        return {}

    model, pixels = build(args.image_size)
    with torch.inference_mode():
        target = int(model(pixels).logits.argmax())  # the top class, as the dashboard explains by default
    load = [os.getloadavg()]
    timed = contenders(model, pixels, target) | ({} if args.no_parts else parts(model, pixels, target))
    times = interleaved_times(timed, args.repeats)
    medians = {name: statistics.median(t) for name, t in times.items()}
    load.append(os.getloadavg())
    ratios = {label: medians[a] / medians[b] for label, (a, b) in TARGETS.items()}
    round_ratios = {
        label: statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
        for label, (a, b) in TARGETS.items()
    }
    print(f"Swin-B {args.image_size} px, batch 1, fp32, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for name, seconds in medians.items():
        print(f"  {name:32s} {1000 * seconds:9.1f} ms")
    for label, ratio in ratios.items():
        print(f"  {label:32s} {ratio:9.2f} (median of the rounds' ratios {round_ratios[label]:.2f}; target <= 1.5)")
    sizes = attention_sizes(model, pixels)
    print(
        f"  attentions as returned {sizes['window_attentions_mb']:.1f} MB; embedded densely, (T, T) per block "
        f"{sizes['dense_fused_mb']:.1f} MB, (heads, T, T) {sizes['dense_per_head_mb']:.1f} MB; "
        f"rollout's product as a matrix {sizes['dense_rollout_product_mb']:.1f} MB, carried row "
        f"{sizes['carried_row_kb']:.1f} kB"
    )
    del model, timed
    results = {
        "model": "Swin-B (random weights)",
        "config": SWIN_B,
        "image_size": args.image_size,
        "target_class": target,
        "load_average": {"before": load[0], "after_timing": load[1]},
        "timing": common.batch_timings(1, args.repeats, medians) | {"times_s": times},
        "ratios": ratios,
        "round_ratio_medians": round_ratios,
        "attention_sizes": sizes,
    }
    if not args.no_memory:
        memory = {}
        for name in ("forward", "rollout", "fwd + bwd", "relevance"):
            command = [sys.executable, __file__, "--child", name, "--image-size", str(args.image_size)]
            command += ["--target", str(target)] + (["--threads", str(args.threads)] if args.threads else [])
            run = subprocess.run(command, capture_output=True, text=True, check=True)
            memory[name] = json.loads(run.stdout.strip().splitlines()[-1])
        added = {
            "rollout - forward": memory["rollout"]["peak_above_before_mb"] - memory["forward"]["peak_above_before_mb"],
            "relevance - fwd + bwd": memory["relevance"]["peak_above_before_mb"]
            - memory["fwd + bwd"]["peak_above_before_mb"],
        }
        for name, record in memory.items():
            print(f"  peak memory {name:20s} {record['peak_above_before_mb']:8.0f} MB above the warmed-up process")
        for label, megabytes in added.items():
            print(f"  added {label:26s} {megabytes:8.0f} MB (target <= {MEMORY_TARGET_MB})")
        load.append(os.getloadavg())
        results |= {"memory": memory, "added_peak_mb": added}
        results["load_average"]["after_memory"] = load[2]
    print(f"  load average (1, 5, 15 min): before {load[0]}, after {load[-1]}")
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
