"""V-JEPA 2 ViT-L on 64 frames of 256 px (8,192 tubelet tokens): what the maps over space and time cost against the
plain passes, in time and peak memory (issue 46, section 4).

V-JEPA 2 ViT-L (vjepa2-vitl-fpc64-256's shape: 24 blocks, width 1024, 16 heads, its 3-D rotary embedding, the
attentive pooler's 3 blocks and query, 174 classes), random weights (seed 0, moved off the zero head), fp32, batch
1, one random clip (1, 64, 3, 256, 256); ``--layers`` keeps fewer encoder blocks (each block costs the same). The
contenders:

  forward      the plain forward (SDPA, no weights) under torch.no_grad
  rollout      vitviz.explain.video_rollout: the forward keeping each attention's input, then the blocks walked back
  block maps   frame_attention at the last block (every query row of every head: the costliest per-block view)
  patch row    video_patch_attention at the last block (the pass stops there; one chunk of query rows)
  fwd + bwd    the plain forward and torch.autograd.grad of the target logit w.r.t. the clip (parameters as loaded)
  relevance    vitviz.explain.video_relevance: the same passes with the relevance row folded in during the backward

Time: interleaved in one process (one warm-up each on 4 frames, then ``--rounds`` rounds calling each in turn; the
ratios are the median of each round's ratio, which cancels the load a busy machine puts on a round). Memory: each
contender once more in a fresh process of its own, which builds the model, warms up on 4 frames, resets the kernel's
high-water mark of its resident set (writing 5 to /proc/self/clear_refs) and runs the contender once: its peak is
VmHWM after minus VmRSS before (on CUDA, torch.cuda.max_memory_allocated above the memory allocated before).

Targets: rollout and block maps at most 1.5 GB added peak and 1.5x the forward's time; relevance at most 2 GB added
and 1.5x the forward and backward's. ``--small`` runs a tiny model on a short clip (seconds).

    .venv/bin/python bench/bench_video.py --out bench/results/video.json
    .venv/bin/python bench/bench_video.py --small
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import common  # bench/common.py
import torch

VIT_L = dict(hidden_size=1024, num_layers=24, num_heads=16, mlp_size=4096, patch_size=16, pool_layers=3)
SMALL = dict(hidden_size=64, num_layers=2, num_heads=4, mlp_size=128, patch_size=8, pool_layers=1)
BASELINES = {"rollout": "forward", "block maps": "forward", "patch row": "forward", "relevance": "fwd + bwd"}
TARGET_MB = {"rollout": 1536, "block maps": 1536, "patch row": 1536, "relevance": 2048}
CONTENDERS = ("forward", "rollout", "block maps", "patch row", "fwd + bwd", "relevance")


def build(small: bool, frames: int, side: int, device: str, layers: int | None = None):
    """V-JEPA 2 with random weights (seed 0) as vitviz builds it from transformers' config (``layers`` encoder blocks
    if given), and one random clip."""
    from vitviz.model import ViT, ViTConfig

    shape = (SMALL if small else VIT_L) | ({"num_layers": layers} if layers else {})
    config = ViTConfig(
        image_size=side,
        num_frames=frames,
        tubelet_size=2,
        class_token=False,
        absolute_positions=False,
        rotary="vjepa2",
        rotary_temperature=10000.0,
        pooling="attentive",
        num_classes=174,
        layer_norm_eps=1e-6,
        **shape,
    )
    torch.manual_seed(0)
    model = ViT(config).eval().to(device)
    with torch.no_grad():
        for param in model.parameters():  # off the zero head and biases, so that the target's gradient is not zero
            param.add_(torch.randn_like(param), alpha=0.02)
    return model, torch.randn(1, frames, 3, side, side, device=device)


def contender(name: str, model, clip: torch.Tensor, target: int):
    """The contender ``name`` as a function of no arguments."""
    from vitviz.explain import frame_attention, video_patch_attention, video_relevance, video_rollout

    def forward():
        with torch.no_grad():
            return model(clip).logits

    def forward_backward():
        leaf = clip.clone().requires_grad_()
        return torch.autograd.grad(model(leaf).logits[0, target], leaf)

    rows = clip.shape[-1] // model.config.patch_size
    middle = clip.shape[1] // 2 * rows * rows // 2  # a patch token in the middle of the clip (no prefix tokens)
    return {
        "forward": forward,
        "rollout": lambda: video_rollout(model, clip),
        "block maps": lambda: frame_attention(model, clip, layer=-1),
        "patch row": lambda: video_patch_attention(model, clip, layer=-1, token=middle),
        "fwd + bwd": forward_backward,
        "relevance": lambda: video_relevance(model, clip, target=target),
    }[name]


def resident_kb() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in kB."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def measure(name: str, small: bool, frames: int, side: int, device: str, layers: int | None) -> dict:
    """In a fresh process: the contender's time and its peak memory above the warmed-up process."""
    model, clip = build(small, frames, side, device, layers)
    target = 0
    contender(name, model, clip[:, :4], target)()  # warm-up on 4 frames: kernels and thread pools
    work = contender(name, model, clip, target)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # the high-water mark starts again from the resident set
        before = resident_kb()[0] * 1024
    start = time.perf_counter()
    work()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else resident_kb()[1] * 1024
    return {"contender": name, "seconds": seconds, "peak_above_before_mb": (peak - before) / 2**20}


def interleaved_times(args, frames: int, side: int, device: str, names: list[str]) -> dict[str, list[float]]:
    """Every contender's wall time in this one process, ``args.rounds`` rounds each calling every contender in turn
    after one warm-up on 4 frames: a ratio taken within a round cancels the load a busy machine puts on that round."""
    model, clip = build(args.small, frames, side, device, args.layers)
    for name in names:
        contender(name, model, clip[:, :4], 0)()
    works = {name: contender(name, model, clip, 0) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, work in works.items():
            start = time.perf_counter()
            work()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
            print(json.dumps({"contender": name, "seconds": times[name][-1]}), flush=True)
    return times


def peak_memories(args, frames: int, side: int, names: list[str]) -> dict[str, dict]:
    """Each contender once in a fresh process of its own (``measure``): its peak above the warmed-up process."""
    records = {}
    for name in names:
        command = [sys.executable, __file__, "--child", name, "--frames", str(frames), "--size", str(side)]
        command += (["--small"] if args.small else []) + (["--threads", str(args.threads)] if args.threads else [])
        command += ["--layers", str(args.layers)] if args.layers else []
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode:
            records[name] = {"contender": name, "failed": (run.stderr.strip().splitlines() or ["killed"])[-1]}
        else:
            records[name] = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps(records[name]), flush=True)
    return records


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--small", action="store_true", help="a tiny model on 8 frames of 32 px (seconds)")
    parser.add_argument("--frames", type=int, default=None, help="clip frames (default 64; --small: 8)")
    parser.add_argument("--size", type=int, default=None, help="frame side in pixels (default 256; --small: 32)")
    parser.add_argument(
        "--layers", type=int, default=None, help="encoder blocks (default 24; fewer: each block costs the same)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS), help="contenders to run")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved timing rounds in one process (default 1)")
    parser.add_argument("--no-timing", action="store_true", help="skip the interleaved timing")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak memory, one process per contender")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    frames = args.frames or (8 if args.small else 64)
    side = args.size or (32 if args.small else 256)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(measure(args.child, args.small, frames, side, device, args.layers)))
        return {}
    tokens = frames // 2 * (side // (8 if args.small else 16)) ** 2
    load = [os.getloadavg()]
    times = {} if args.no_timing else interleaved_times(args, frames, side, device, args.only)
    load.append(os.getloadavg())
    memory = {} if args.no_memory else peak_memories(args, frames, side, args.only)
    load.append(os.getloadavg())
    model = "tiny V-JEPA 2" if args.small else "V-JEPA 2 ViT-L"
    model += f" with {args.layers} encoder blocks" if args.layers else ""
    print(f"{model}, {frames} frames of {side} px ({tokens} tokens), fp32, batch 1, {device}, {torch.__version__}")
    comparisons = {}
    for name, baseline in BASELINES.items():
        record = {"baseline": baseline, "target_added_mb": TARGET_MB[name]}
        if name in times and baseline in times:
            ratios = [ours / base for ours, base in zip(times[name], times[baseline], strict=True)]
            record["time_ratio"] = statistics.median(ratios)
        ours, base = memory.get(name, {}), memory.get(baseline, {})
        if "peak_above_before_mb" in ours and "peak_above_before_mb" in base:
            record["added_peak_mb"] = ours["peak_above_before_mb"] - base["peak_above_before_mb"]
        if len(record) > 2:
            comparisons[name] = record
    for name in args.only:
        line = f"  {name:12s}"
        if name in times:
            line += f" {statistics.median(times[name]):9.2f} s"
        if "peak_above_before_mb" in memory.get(name, {}):
            line += f"  peak {memory[name]['peak_above_before_mb']:8.0f} MB"
        elif name in memory:
            line += f"  memory run failed: {memory[name]['failed']}"
        if name in comparisons:
            c = comparisons[name]
            if "time_ratio" in c:
                line += f"  {c['time_ratio']:.2f}x {c['baseline']}"
            if "added_peak_mb" in c:
                line += f"  {c['added_peak_mb']:+.0f} MB over {c['baseline']}"
        print(line)
    print(f"  load average (1, 5, 15 min): before {load[0]}, after timing {load[1]}, after memory {load[2]}")
    results = {
        "model": model + " (random weights)",
        "layers": args.layers or (SMALL if args.small else VIT_L)["num_layers"],
        "frames": frames,
        "size": side,
        "tokens": tokens,
        "device": device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": load,
        "times_s": times,
        "memory": memory,
        "comparisons": comparisons,
    }
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
