"""Precision "auto": time the loaded model in fp32 and in bf16 autocast, and keep the faster.

Whether bf16 pays depends on the machine, not on the model alone. ViT-B/16 at batch 1 took 171 ms in
fp32 and 289 ms in bf16 (1.7x slower) on an Intel Xeon with avx512_bf16 and no AMX, and about half the
fp32 time on an AMD EPYC (bench/bench_precision.py). So "auto" measures: the model's own blocks with
attention weights, batch 1, at its own input size, a warm-up each, then fp32 and bf16 runs interleaved,
medians. Every block has the same shapes, so a big model (ViT-H/14 at 518: about 20 s a pass on 2 cores) is
timed on as many of its blocks as fit ``BLOCKS_BUDGET_S`` and the times scaled to the whole stack.
bf16 must win by a margin (``BF16_MARGIN``), since it changes the maps slightly (< 1e-3).

``measure_precision`` takes the timing as a function (``time_forward``), so tests can hand it any timings.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vitviz.model import AttentionControls, Precision, ViT, autocast

PRECISION_CHOICES = ("auto", "fp32", "bf16")  # what the page, and the command lines, accept
BF16_MARGIN = 0.9  # bf16 is chosen only below this fraction of the fp32 time
MEASURE_BUDGET_S = 2.5  # about how long a measurement may take, warm-ups included (at least 1 run each)
BLOCKS_BUDGET_S = 0.15  # about how long one timed run may take in fp32: that many blocks are timed


@dataclass(frozen=True)
class PrecisionChoice:
    """What "auto" chose, the times it saw, and why."""

    precision: Precision
    fp32_ms: float  # median milliseconds of one forward pass with attentions at batch 1; nan if not timed
    bf16_ms: float  # the same in bf16 autocast; nan if not timed
    reason: str  # one sentence: "bf16 took 0.52x the time of fp32 on this CPU", ...
    repeats: int = 0  # timed runs behind each median (after one warm-up each); 0 if nothing was timed
    blocks: str = ""  # "6 of 32 blocks" when only some were timed (the times are scaled to all of them)

    def summary(self) -> str:
        """One line for people: "auto chose bf16: 41 ms against 83 ms in fp32 (median of 5, ...)"."""
        if not self.repeats:
            return f"auto chose {self.precision}: {self.reason}."
        other = "fp32" if self.precision == "bf16" else "bf16"
        chosen_ms, other_ms = (self.bf16_ms, self.fp32_ms) if self.precision == "bf16" else (self.fp32_ms, self.bf16_ms)
        timed = f", {self.blocks} timed and scaled" if self.blocks else ""
        return (
            f"auto chose {self.precision}: {_ms(chosen_ms)} ms against {_ms(other_ms)} ms in {other} "
            f"(median of {self.repeats}{timed}, this model at batch 1)."
        )


def _ms(value: float) -> str:
    """Milliseconds as people read them: 289, 41, 9.9, 0.94."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def model_device(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where the model's parameters live, and their dtype (the input is made to match)."""
    param = next(model.parameters(), None)
    return (param.device, param.dtype) if param is not None else (torch.device("cpu"), torch.float32)


def describe_device(device: torch.device) -> str:
    """ "this CPU", "this GPU (NVIDIA H100...)", ...: where the reasons say the timing happened."""
    if device.type == "cpu":
        return "this CPU"
    if device.type == "cuda":
        return f"this GPU ({torch.cuda.get_device_name(device)})"
    return f"this {device.type} device"


def bf16_unavailable(device: torch.device) -> str | None:
    """Why bf16 autocast cannot be fast on ``device`` (then "auto" takes fp32 untimed), or None: time it."""
    if device.type == "cpu":
        try:  # oneDNN runs bf16 matrix products only on CPUs with bf16 instructions (avx512_bf16, AMX, ...)
            supported = torch.ops.mkldnn._is_mkldnn_bf16_supported()
        except (AttributeError, RuntimeError):  # a private op: without it, the timing decides
            return None
        return None if supported else "this CPU has no bf16 support in torch (oneDNN reports none)"
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else f"{describe_device(device)} has no bf16 support in torch"
    # other backends (mps, xpu, meta...): no way to wait for their queue here, so no honest timing
    return f"auto times models on CPUs and CUDA GPUs only, and this one is on {device.type}"


def forward_timer(
    model: ViT, timer: Callable[[], float] = time.perf_counter, blocks: int | None = None
) -> Callable[[str], float]:
    """A function timing the model's first ``blocks`` blocks (all by default) at a precision, returning seconds
    (``timer``'s units). They run as the page runs them, returning their attention weights, on the tokens of a
    seeded random image (random rather than zeros: every patch the same is not a real input) at batch 1 and
    the model's own input size (``config.image_hw``), in the dtype of its parameters, under
    ``torch.inference_mode()``. The embedding and the head, a small part of a pass, are left out. On a GPU it
    waits for the queue before reading the clock.
    """
    device, dtype = model_device(model)
    height, width = model.config.image_hw
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(1, model.config.num_channels, height, width, generator=generator).to(device, dtype)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda device=None: None)
    timed = model.blocks[: len(model.blocks) if blocks is None else blocks]
    with torch.inference_mode():
        tokens, grid = model.embed(pixels)  # (1, T, D) the first block's input
        ropes = model.rotary_embeddings(grid)

    def time_forward(precision: str) -> float:
        with torch.inference_mode(), autocast(precision, device.type):
            synchronize(device)
            start = timer()
            x = tokens
            for block, rope in zip(timed, ropes):
                x = block(x, AttentionControls(rope), need_weights=True).hidden  # (1, T, D); the weights dropped
            synchronize(device)
            return timer() - start

    return time_forward


def measure_precision(
    model: ViT,
    repeats: int = 5,
    timer: Callable[[], float] = time.perf_counter,
    time_forward: Callable[[str], float] | None = None,
    budget_s: float = MEASURE_BUDGET_S,
) -> PrecisionChoice:
    """Time ``model`` in fp32 and bf16 and choose: bf16 only if its median is below BF16_MARGIN x fp32's.

    One warm-up each (first calls allocate and pick kernels), then ``repeats`` runs of each, interleaved
    and in alternating order (fp32 first, then bf16 first...), so noise from other work on the machine
    hits both alike. The warm-ups estimate the cost of a run: a big model gets fewer repeats (at least
    1), so measuring takes about ``budget_s`` at most where one run of each fits. ``time_forward(precision)``
    returns the seconds of one pass (by default ``forward_timer(model, timer)``); given one, it stands
    for the whole measurement and the device is not checked.
    """
    device, _ = model_device(model)
    where = describe_device(device)
    scale, blocks = 1.0, ""
    if time_forward is None:
        problem = bf16_unavailable(device)
        if problem:
            return PrecisionChoice("fp32", math.nan, math.nan, f"{problem}, so fp32 without timing")
        one_block = forward_timer(model, timer, blocks=1)
        one_block("fp32")  # the first call allocates and picks kernels
        count = len(model.blocks)
        timed = min(count, max(1, int(BLOCKS_BUDGET_S / max(one_block("fp32"), 1e-9))))
        time_forward = forward_timer(model, timer, timed)
        scale, blocks = count / timed, f"{timed} of {count} blocks" if timed < count else ""
    warm_fp32 = time_forward("fp32")
    try:
        warm_bf16 = time_forward("bf16")
    except RuntimeError as error:  # an operation with no bf16 kernel on this device
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return PrecisionChoice("fp32", math.nan, math.nan, f"bf16 autocast failed on {where} ({first_line}), so fp32")
    # warm-ups are the slowest runs, so this estimate errs towards fewer repeats
    per_pair = warm_fp32 + warm_bf16
    if per_pair > 0 and (budget_s - per_pair) / per_pair < repeats:
        repeats = int((budget_s - per_pair) / per_pair)
    repeats = max(1, repeats)
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for index in range(repeats):
        for precision in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
            times[precision].append(time_forward(precision))
    choice = decide(scale * statistics.median(times["fp32"]), scale * statistics.median(times["bf16"]), repeats, where)
    return dataclasses.replace(choice, blocks=blocks)


def decide(fp32_s: float, bf16_s: float, repeats: int, where: str = "this CPU") -> PrecisionChoice:
    """The choice from two median times in seconds: bf16 only below BF16_MARGIN x the fp32 time."""
    ratio = bf16_s / fp32_s if fp32_s > 0 else math.inf
    took = f"bf16 took {ratio:.2f}x the time of fp32 on {where}"
    if ratio < BF16_MARGIN:
        precision, reason = "bf16", took
    elif ratio < 1:  # faster, but not by enough to pay for maps that differ slightly
        precision, reason = "fp32", f"{took}, not below {BF16_MARGIN}x, so the exact fp32 maps are kept"
    else:
        precision, reason = "fp32", took
    return PrecisionChoice(precision, 1000 * fp32_s, 1000 * bf16_s, reason, repeats)


def resolve_precision(choice: str, model: ViT) -> tuple[Precision, PrecisionChoice | None]:
    """The precision to run ``model`` at: "fp32" and "bf16" as given (no measurement: None), "auto" measured."""
    if choice in ("fp32", "bf16"):
        return choice, None
    if choice == "auto":
        measured = measure_precision(model)
        return measured.precision, measured
    raise ValueError(f"precision must be one of {', '.join(repr(c) for c in PRECISION_CHOICES)}; got {choice!r}")
