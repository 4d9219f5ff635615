"""Every map method by name: the records the modules of this package declare, and ``method_maps``, which runs
several of them on one image. The batch CLI, the benchmark and the dashboard read their lists from here.

    result = method_maps(model, pixels, ["rollout", "relevance", "lens"])
    result.maps["relevance"]          # (rows, cols), for the top class unless ``target`` is given
    result.lens.probability[:, 0]     # with "lens": (layers, rows, cols)
    get_method("tam").cost_note       # "20 forward and backward passes"

A method is found wherever a module of ``vitviz.explain`` declares a ``Method`` at its top level: adding one
takes its own file and its test, no list here. The methods come cheapest first (``Method.cost``), in the order of
their modules' names and then of their declarations within a cost.

One forward pass serves every method: the attention-only maps read its attentions, Chefer et al.'s two gradient
maps its one backward pass, the lens its hidden states; LeGrad, TAM and Grad-CAM run the passes their definition
needs.

A model that attends in windows and merges tokens between stages (Swin) gets the methods whose record says they
handle it (``Method.windowed is None``: rollout, relevance, grad-rollout, Grad-CAM and the logit lens), every map
over its first stage's grid; any other is refused in one line that says why (``refusal``, ``refusals``). Whether a
model is one is what its layouts say (``common.is_windowed``: the model's ``input_layouts()``, then the pass's own).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from vitviz.explain.common import HeadFusion, class_probabilities, is_windowed, traced
from vitviz.explain.method import COSTS, METHOD_OPTIONS, LogitLens, MapInputs, MapOptions, Method
from vitviz.explain.target import Target, TargetLike, as_target, explained_model
from vitviz.layout import is_hierarchical
from vitviz.model import Precision, autocast


def _declared_methods() -> dict[str, Method]:
    """The ``Method`` records at the top level of every module of this package, cheapest first."""
    package = importlib.import_module(__package__)  # vitviz.explain, importing this module as it starts
    found: dict[str, Method] = {}
    for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if module.name.startswith("_") or module.name == "registry":
            continue  # __main__ would run the CLI; this module declares none
        for value in vars(importlib.import_module(f"{__package__}.{module.name}")).values():
            if isinstance(value, Method) and found.setdefault(value.name, value) is not value:
                raise ValueError(f"two methods are named {value.name!r}; names must be unique")
    ordered = sorted(found.values(), key=lambda m: COSTS.index(m.cost))  # stable: module order within a cost
    return {method.name: method for method in ordered}


METHODS: dict[str, Method] = _declared_methods()
CLASS_SPECIFIC = tuple(name for name, method in METHODS.items() if method.class_specific)


def get_method(name: str) -> Method:
    """The method called ``name``, or an error that lists every name there is."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


def refusal(name: str, windowed: bool) -> str | None:
    """Why method ``name`` cannot explain a model that attends in windows and merges tokens (``windowed``), in one
    line; None when it can."""
    method = get_method(name)
    if windowed and method.windowed is not None:
        return f"{name!r} {method.windowed}"
    return None


def refusals(model: torch.nn.Module, methods: Sequence[str]) -> dict[str, str]:
    """The methods among ``methods`` that cannot explain ``model``, each with its one-line reason: what the CLI and the
    benchmark skip, and what the dashboard says in their place."""
    windowed = is_windowed(model)  # what its blocks' layouts say: they attend in windows or merge tokens (Swin)
    found = {name: refusal(name, windowed) for name in methods}
    return {name: reason for name, reason in found.items() if reason is not None}


@dataclass(frozen=True)
class MethodMaps:
    probabilities: torch.Tensor  # (num_classes,) float32
    target: int  # the class the class-specific maps explain (its index in ``probabilities``)
    maps: dict[str, torch.Tensor]  # method -> (rows, cols) float32, detached
    lens: LogitLens | None = None  # with "lens": every block's maps, (layers, 1, rows, cols)
    explained: Target | None = None  # the target as given (None: the top class); a prompt read by the text tower
    class_names: tuple[str, ...] = ()  # the classes ``probabilities`` is over (the prompt added, for such a prompt)
    pixels: dict[str, torch.Tensor] = field(default_factory=dict)  # pixel-level methods: method -> (H, W) float32


def method_maps(
    model: torch.nn.Module,
    pixels: torch.Tensor,
    methods: Sequence[str],
    target: TargetLike | None = None,
    precision: Precision = "fp32",
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
    **options,
) -> MethodMaps:
    """The maps of ``methods`` for one image ``pixels`` (1, 3, H, W), each read out through what the head reads
    (``output.readout``). ``target`` is what the class-specific maps explain (``vitviz.Target``: a class index, a prompt
    or a Target; ``target=3`` is ``Target.of_class(3)``), by default the top class; a prompt that is none of the
    model's classes is read through its text tower (``target.explained_model``). ``head_fusion`` and
    ``discard_ratio`` shape the rollout; ``start_layer`` is the first block of rollout, LeGrad and TAM. A method that
    cannot explain this model (``refusals``) is a ValueError naming it and why. ``options`` are the sampling and
    perturbation methods' own (``MapOptions``: ``steps``, ``samples``, ``noise``, ``window``, ``stride``, ``cells``,
    ``keep``, ``batch``, ``seed``, ``flow_limit``), each checked in one line."""
    chosen = [get_method(name) for name in methods]
    if unknown := sorted(set(options) - set(METHOD_OPTIONS)):
        known = ", ".join(METHOD_OPTIONS)
        raise ValueError(f"unknown option {', '.join(map(repr, unknown))}; method_maps takes {known}")
    map_options = MapOptions(precision, head_fusion, discard_ratio, start_layer, **options)
    if pixels.ndim != 4 or pixels.shape[0] != 1:
        raise ValueError(f"method_maps explains one image: pixels must be (1, 3, H, W); got {tuple(pixels.shape)}")
    explained = as_target(target)
    model, target = explained_model(model, explained)
    if refused := refusals(model, methods):
        raise ValueError("; ".join(refused.values()))
    needs = {need for method in chosen for need in method.needs}
    gradients_needed = "attention_gradients" in needs
    # the pixels ask for a gradient too, so the attentions have one whether or not the model's parameters do (a
    # model frozen with requires_grad_(False) still gets its gradient maps)
    seen = traced(pixels) if gradients_needed else pixels
    with autocast(precision, pixels.device.type), torch.set_grad_enabled(gradients_needed):
        output = model(seen, output_attentions=True, output_hidden_states="hidden_states" in needs)
    if output.logits is None and any(method.class_specific for method in chosen):
        raise ValueError("class-specific maps need a classification head; this model is a backbone (num_classes=0)")
    probabilities = (
        class_probabilities(model, output.logits.float())[0].detach() if output.logits is not None else torch.zeros(0)
    )
    if target is None:
        target = int(probabilities.argmax()) if probabilities.numel() else 0
    elif probabilities.numel() and not 0 <= target < probabilities.numel():  # a backbone has no class to check
        raise ValueError(f"target must be in [0, {probabilities.numel() - 1}]; got {target}")
    windowed = is_hierarchical(output.layouts)  # what the blocks say, for a windowed model of another class too
    if reasons := [reason for name in methods if (reason := refusal(name, windowed))]:
        raise ValueError("; ".join(reasons))
    gradients = None
    if "attention_gradients" in needs:  # one backward pass for every method that reads it
        gradients = tuple(g.float() for g in torch.autograd.grad(output.logits[0, target], output.attentions))
    inputs = MapInputs(
        model=model,
        pixels=pixels,
        target=target,
        attentions=tuple(a.detach().float() for a in output.attentions),
        readout=output.readout.detach().float(),  # explain what the classifier actually reads
        num_prefix_tokens=output.num_prefix_tokens,
        grid_size=output.grid_size,
        options=map_options,
        attention_gradients=gradients,
        hidden_states=tuple(h.detach() for h in output.hidden_states) if "hidden_states" in needs else None,
        layouts=output.layouts,
        token_layout=output.layout,
    )
    outputs = {method.name: method.compute(inputs) for method in chosen}
    lens = next((out.lens for out in outputs.values() if out.lens is not None), None)
    maps = {name: out.map[0].detach().float() for name, out in outputs.items()}
    names = tuple(getattr(model, "class_names", ()))
    pixel_maps = {name: out.pixels[0].detach().float() for name, out in outputs.items() if out.pixels is not None}
    return MethodMaps(probabilities, target, maps, lens, explained, names, pixel_maps)
