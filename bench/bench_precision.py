"""fp32 against bf16 autocast on this CPU, and what precision "auto" chooses.

ViT-B/16 at 224x224, random weights (no downloads), the forward pass with attentions as the page runs
it (``torch.inference_mode()``, ``vitviz.autocast``), batch 1, as "auto" times it. The two precisions run
interleaved in one process, in alternating order, after one warm-up each; we report medians and the
bf16/fp32 ratio. Whether bf16 pays depends on the CPU (bf16 instructions, AMX, memory), so the script
prints the CPU's model name and its bf16 flags, then runs ``vitviz.model.precision.measure_precision`` on the
same model: the page's "auto" choice, with the time it took.

    python bench/bench_precision.py --repeats 15
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path

import common  # bench/common.py
import torch

import vitviz
from vitviz.model.precision import BF16_MARGIN, forward_timer, measure_precision

VIT_B_16 = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_size=3072)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")  # what the bf16 speed mostly depends on (x86)


def cpu_description() -> dict:
    """The CPU's model name and which bf16-related flags it has (Linux's /proc/cpuinfo; no flags elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {"model_name": platform.processor() or "unknown", "flags": {}}
    fields = dict(line.split(":", 1) for line in lines if ":" in line)  # the last CPU's values: all alike here
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    name = fields.get("model name", "unknown")
    if "cpu family" in fields and "model" in fields:  # virtual machines often show a bare vendor name
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return {"model_name": name, "flags": {flag: flag in flags for flag in BF16_FLAGS}}


def time_interleaved(model: vitviz.ViT, repeats: int) -> dict[str, list[float]]:
    """Seconds per forward pass with attentions, per precision: a warm-up each, then alternating order."""
    time_forward = forward_timer(model)  # exactly what "auto" times: batch 1, a seeded random image
    for precision in ("fp32", "bf16"):
        time_forward(precision)
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for index in range(repeats):
        for precision in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
            times[precision].append(time_forward(precision))
    return times


def bf16_error(model: vitviz.ViT) -> float:
    """Largest attention difference between bf16 autocast and fp32, on one random image."""
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        exact = model(x, output_attentions=True).attentions
        with vitviz.autocast("bf16"):
            fast = model(x, output_attentions=True).attentions
    return max((a - b).abs().max().item() for a, b in zip(exact, fast))


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="timed calls per precision")
    args = parser.parse_args(argv)

    cpu = cpu_description()
    results: dict = {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__}
    flags = ", ".join(f"{flag} {'yes' if has else 'no'}" for flag, has in cpu["flags"].items()) or "flags unknown"
    print(f"CPU: {cpu['model_name']} ({flags}); torch {torch.__version__}, {results['threads']} threads")

    torch.manual_seed(0)
    model = vitviz.ViT(vitviz.ViTConfig(**VIT_B_16)).eval()
    times = time_interleaved(model, args.repeats)
    medians = {precision: statistics.median(t) for precision, t in times.items()}
    ratio = medians["bf16"] / medians["fp32"]
    results |= {
        "median_s": medians,
        "all_s": times,
        "bf16_over_fp32": ratio,
        "max_abs_attention_error": bf16_error(model),
    }
    print(f"\nViT-B/16, 224x224, batch 1, with attentions, {args.repeats} interleaved repeats")
    print(f"{'precision':10s} {'median ms':>10s}")
    for precision, median in medians.items():
        print(f"{precision:10s} {1000 * median:10.1f}")
    print(f"bf16 / fp32: {ratio:.2f} ({'faster' if ratio < 1 else 'slower'}; auto takes bf16 below {BF16_MARGIN})")
    print(f"largest attention difference, bf16 against fp32: {results['max_abs_attention_error']:.1e}")

    start = time.perf_counter()
    choice = measure_precision(model)
    results["auto"] = {
        "precision": choice.precision,
        "fp32_ms": choice.fp32_ms,
        "bf16_ms": choice.bf16_ms,
        "repeats": choice.repeats,
        "reason": choice.reason,
        "seconds": time.perf_counter() - start,
    }
    print(
        f"\nmeasure_precision (the page's auto, {results['auto']['seconds']:.1f} s): {choice.summary()} "
        f"Reason: {choice.reason}."
    )
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
