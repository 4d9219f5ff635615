"""Precision "auto" (vitviz/model/precision.py): the choice from timings, which are stubbed here so the
machine's CPU does not decide the outcome; one real measurement on a tiny model; and the page's
``resolve``, run without a Streamlit server (outside one, st.cache_resource keeps its entries in
memory and sidebar writes are dropped)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from tiny_models import build_tiny_vit

from vitviz import ViT
from vitviz.model import precision as precision_module
from vitviz.model.precision import (
    BF16_MARGIN,
    PrecisionChoice,
    decide,
    forward_timer,
    measure_precision,
    resolve_precision,
)


def tiny_model() -> ViT:
    """2 blocks of 4 heads on a 32 x 48 input (non-square, so the input size is the model's own)."""
    return build_tiny_vit("non-square", image_size=(32, 48), num_layers=2)


def stub(fp32_s: float, bf16_s: float, calls: list | None = None):
    """A time_forward returning fixed seconds per precision, recording the order of its calls."""

    def time_forward(precision: str) -> float:
        if calls is not None:
            calls.append(precision)
        return {"fp32": fp32_s, "bf16": bf16_s}[precision]

    return time_forward


@pytest.mark.parametrize("fp32_s, bf16_s, chosen", [(0.083, 0.041, "bf16"), (0.171, 0.289, "fp32")])
def test_auto_picks_the_faster_precision(fp32_s, bf16_s, chosen):
    choice = measure_precision(tiny_model(), time_forward=stub(fp32_s, bf16_s), budget_s=math.inf)
    assert choice.precision == chosen
    assert choice.fp32_ms == pytest.approx(1000 * fp32_s) and choice.bf16_ms == pytest.approx(1000 * bf16_s)
    assert choice.repeats == 5
    assert f"bf16 took {bf16_s / fp32_s:.2f}x the time of fp32 on this CPU" in choice.reason


@pytest.mark.parametrize("ratio, chosen", [(0.5, "bf16"), (0.89, "bf16"), (0.9, "fp32"), (0.95, "fp32"), (1.0, "fp32")])
def test_bf16_must_beat_fp32_by_the_margin(ratio, chosen):
    """bf16 changes the maps slightly, so being a little faster is not enough."""
    assert BF16_MARGIN == 0.9
    choice = measure_precision(tiny_model(), time_forward=stub(0.1, 0.1 * ratio))
    assert choice.precision == chosen
    if 0.9 <= ratio < 1:  # faster, but not by the margin: the reason says so
        assert "not below 0.9x" in choice.reason


def test_runs_are_warmed_up_interleaved_and_reduced_to_medians():
    calls: list[str] = []
    fp32_times = iter([9.0, 0.10, 0.11, 5.0, 0.10, 0.12])  # a slow warm-up and one outlier: medians ignore both
    bf16_times = iter([9.0, 0.05, 0.04, 0.06, 3.0, 0.05])

    def time_forward(precision: str) -> float:
        calls.append(precision)
        return next(fp32_times if precision == "fp32" else bf16_times)

    choice = measure_precision(tiny_model(), repeats=5, time_forward=time_forward, budget_s=math.inf)
    # one warm-up each, then alternating order, so neither precision always runs right after the other
    assert calls == ["fp32", "bf16"] + ["fp32", "bf16", "bf16", "fp32"] * 2 + ["fp32", "bf16"]
    assert (choice.precision, choice.repeats) == ("bf16", 5)
    assert choice.fp32_ms == pytest.approx(110) and choice.bf16_ms == pytest.approx(50)


@pytest.mark.parametrize("seconds_per_run, repeats", [(0.01, 5), (0.2, 5), (0.3, 3), (0.6, 1), (2.0, 1)])
def test_a_big_model_gets_fewer_repeats(seconds_per_run, repeats):
    """The warm-ups estimate a run's cost: measuring fits in about MEASURE_BUDGET_S (2.5 s), at least 1 run each."""
    calls: list[str] = []
    choice = measure_precision(tiny_model(), time_forward=stub(seconds_per_run, seconds_per_run, calls))
    assert choice.repeats == repeats and len(calls) == 2 + 2 * repeats
    if repeats > 1:
        assert seconds_per_run * len(calls) <= 2.5 + 1e-9


def test_bf16_that_fails_falls_back_to_fp32():
    def time_forward(precision: str) -> float:
        if precision == "bf16":
            raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'BFloat16'\nmore detail")
        return 0.1

    choice = measure_precision(tiny_model(), time_forward=time_forward)
    assert choice.precision == "fp32" and math.isnan(choice.fp32_ms) and math.isnan(choice.bf16_ms)
    assert choice.reason == (
        "bf16 autocast failed on this CPU (\"addmm_impl_cpu_\" not implemented for 'BFloat16'), so fp32"
    )
    assert choice.summary() == f"auto chose fp32: {choice.reason}."


def test_no_bf16_on_the_device_takes_fp32_without_timing(monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(precision_module, "forward_timer", lambda *args: pytest.fail("nothing should be timed"))
    monkeypatch.setattr(precision_module, "bf16_unavailable", lambda device: "this CPU has no bf16 support in torch")
    choice = measure_precision(model)
    assert (choice.precision, choice.repeats) == ("fp32", 0)
    assert math.isnan(choice.fp32_ms) and math.isnan(choice.bf16_ms)
    assert choice.reason == "this CPU has no bf16 support in torch, so fp32 without timing"


def test_a_model_on_another_device_is_not_timed():
    """The meta device stands for any backend other than CPU and CUDA: no clock to trust there."""
    choice = measure_precision(tiny_model().to("meta"))
    assert (choice.precision, choice.repeats) == ("fp32", 0)
    assert choice.reason == (
        "auto times models on CPUs and CUDA GPUs only, and this one is on meta, so fp32 without timing"
    )


def test_real_measurement_on_a_tiny_model():
    model = tiny_model()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    choice = measure_precision(model, repeats=2)
    problem = precision_module.bf16_unavailable(torch.device("cpu"))
    if problem:  # a CPU without bf16: fp32, untimed, saying why
        assert (choice.precision, choice.repeats) == ("fp32", 0) and problem in choice.reason
    else:  # timed: positive medians, and the choice follows them
        assert choice.repeats == 2 and choice.fp32_ms > 0 and choice.bf16_ms > 0
        assert choice.precision == ("bf16" if choice.bf16_ms < BF16_MARGIN * choice.fp32_ms else "fp32")
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())
    assert not model.training and torch.is_grad_enabled()


def test_the_timer_is_injectable_and_runs_the_blocks_with_attention_weights():
    """forward_timer reads only the given clock, and runs the blocks as the page does: batch 1 at the model's own
    input size, returning attention weights; with ``blocks``, only the first ones."""
    model = tiny_model()
    seen = []
    for block in model.blocks:
        block.register_forward_hook(lambda module, args, output: seen.append((args[0].shape, output[1])))
    clock = itertools.count(step=0.25)
    time_forward = forward_timer(model, timer=lambda: next(clock))
    assert time_forward("fp32") == 0.25 and time_forward("bf16") == 0.25
    assert len(seen) == 4  # both blocks, twice
    tokens, weights = seen[0]
    assert tokens == (1, 1 + 4 * 6, 32) and weights.shape == (1, 4, 25, 25)  # a 32 x 48 input: 4 x 6 patches
    seen.clear()
    forward_timer(model, timer=lambda: next(clock), blocks=1)("fp32")
    assert len(seen) == 1


def test_a_big_model_is_timed_on_some_blocks_and_scaled(monkeypatch):
    model = tiny_model()
    built = []

    def fake_timer(model, timer, blocks=None):  # one block takes 0.1 s in fp32 and 0.04 s in bf16
        built.append(blocks)
        return lambda precision: (0.1 if precision == "fp32" else 0.04) * blocks

    monkeypatch.setattr(precision_module, "BLOCKS_BUDGET_S", 0.1)
    monkeypatch.setattr(precision_module, "forward_timer", fake_timer)
    monkeypatch.setattr(precision_module, "bf16_unavailable", lambda device: None)
    choice = measure_precision(model, repeats=3, budget_s=math.inf)
    assert built == [1, 1]  # one block to size the runs, then 0.1 s / 0.1 s per block = 1 of the 2 blocks
    assert choice.fp32_ms == pytest.approx(200) and choice.bf16_ms == pytest.approx(80)  # scaled to both blocks
    assert choice.summary() == (
        "auto chose bf16: 80 ms against 200 ms in fp32 (median of 3, 1 of 2 blocks timed and "
        "scaled, this model at batch 1)."
    )


def test_decide_reports_medians_in_milliseconds():
    choice = decide(0.083, 0.041, repeats=5)
    assert choice == PrecisionChoice(
        "bf16", pytest.approx(83), pytest.approx(41), "bf16 took 0.49x the time of fp32 on this CPU", 5
    )
    assert choice.summary() == "auto chose bf16: 41 ms against 83 ms in fp32 (median of 5, this model at batch 1)."
    slower = decide(0.000937, 0.0012, repeats=3)
    assert slower.summary() == "auto chose fp32: 0.94 ms against 1.2 ms in bf16 (median of 3, this model at batch 1)."


def test_resolve_precision(monkeypatch):
    measured = PrecisionChoice("bf16", 83.0, 41.0, "bf16 took 0.49x the time of fp32 on this CPU", 5)
    monkeypatch.setattr(precision_module, "measure_precision", lambda model: measured)
    assert resolve_precision("fp32", None) == ("fp32", None)  # given precisions need no model: nothing is run
    assert resolve_precision("bf16", None) == ("bf16", None)
    assert resolve_precision("auto", tiny_model()) == ("bf16", measured)
    with pytest.raises(ValueError, match="precision must be one of 'auto', 'fp32', 'bf16'; got 'fp16'"):
        resolve_precision("fp16", tiny_model())


def test_the_page_resolves_auto_once_per_model(monkeypatch):
    """sidebar.resolve: "auto" becomes the measured precision (what every cache is keyed by); the
    measurement runs once per model spec; a chosen precision is left alone."""
    from vitviz_dashboard.cache import budget, models
    from vitviz_dashboard.page import Settings
    from vitviz_dashboard.sidebar import model_picker as sidebar

    measurements = []

    def measure(model):
        measurements.append(model)
        return PrecisionChoice("bf16", 83.0, 41.0, "bf16 took 0.49x the time of fp32 on this CPU", 5)

    monkeypatch.setattr(models, "measure_precision", measure)
    budget.STORE.clear()
    model = tiny_model()
    auto = Settings("checkpoints/tiny.pt", "auto", "inferno", 0.5)
    assert sidebar.resolve(auto, model) == Settings("checkpoints/tiny.pt", "bf16", "inferno", 0.5)
    assert sidebar.resolve(auto, model).precision == "bf16" and measurements == [model]  # cached per spec
    other = Settings("checkpoints/other.pt", "auto", "inferno", 0.5)
    assert sidebar.resolve(other, model).precision == "bf16" and len(measurements) == 2
    fixed = Settings("checkpoints/tiny.pt", "fp32", "inferno", 0.5)
    assert sidebar.resolve(fixed, model) is fixed and len(measurements) == 2
    budget.STORE.clear()
