"""The registry of map methods: every record complete, one per name, and the CLI, the benchmark and the dashboard
offering exactly what it holds."""

import dataclasses
import importlib
import pkgutil

import pytest

import vitviz.explain
from vitviz.commands import benchmark
from vitviz.commands import explain as explain_cli
from vitviz.explain import COSTS, METHODS, Method, MethodOutput, get_method

# the methods vitviz has today, by name: a refactor that loses one (or a module the registry fails to read) fails
BASELINES = {"input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion", "kernel-shap", "rise"}
CLASS_SPECIFIC = {"relevance", "grad-rollout", "legrad", "tam", "gradcam", "lens", "attnlrp", "cp-lrp", *BASELINES}
NAMES = {"rollout", "cls", "attention-flow", *CLASS_SPECIFIC}


def declared_records() -> list[Method]:
    """Every Method object at the top level of any module of vitviz.explain, read here without the registry."""
    records = []
    for module in pkgutil.iter_modules(vitviz.explain.__path__):
        if module.name.startswith("_"):
            continue
        for value in vars(importlib.import_module(f"vitviz.explain.{module.name}")).values():
            if isinstance(value, Method) and all(value is not record for record in records):
                records.append(value)
    return records


def test_the_registry_holds_every_declared_method_once_by_its_own_name():
    assert set(METHODS) == NAMES
    assert all(name == method.name for name, method in METHODS.items())
    records = declared_records()
    assert len(records) == len({record.name for record in records}) == len(METHODS)  # names are unique
    assert {record.name for record in records if record.class_specific} == CLASS_SPECIFIC


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_record_has_every_field(name):
    method = METHODS[name]
    assert method.description and not method.description.endswith(")")  # the paper is its own field
    assert method.caption.endswith(".") and method.caption[0].isupper()
    assert method.cost in COSTS
    # a method past the shared forward pass says what it costs; attention flow's maximum flows cost CPU time
    assert bool(method.cost_note) == (method.cost != "forward" or name == "attention-flow")
    assert callable(method.compute)
    assert method.paper is None or method.paper[-4:].isdigit()
    assert method.summary.startswith(method.description)
    with pytest.raises(dataclasses.FrozenInstanceError):
        method.name = "renamed"


def test_methods_come_cheapest_first():
    ranks = [COSTS.index(method.cost) for method in METHODS.values()]
    assert ranks == sorted(ranks)
    assert list(METHODS)[-1] == "tam"  # its 20 forward and backward passes are the costliest


def test_an_unknown_name_is_refused_with_the_names_there_are():
    assert get_method("legrad") is METHODS["legrad"]
    with pytest.raises(ValueError, match="unknown method 'deeplift'; choose from rollout, cls, attention-flow, "):
        get_method("deeplift")


def test_a_record_refuses_an_unknown_cost_or_need():
    fields = dict(
        name="x",
        description="x",
        compute=lambda inputs: MethodOutput(inputs.attentions[0]),
        class_specific=False,
        cost_note="",
        caption="X.",
    )
    with pytest.raises(ValueError, match="cost must be one of 'forward', 'backward'"):
        Method(cost="cheap", **fields)
    with pytest.raises(ValueError, match="needs must be among 'attention_gradients', 'hidden_states'"):
        Method(cost="forward", needs=("gradients",), **fields)


def methods_choices(parser) -> list[str]:
    return next(action.choices for action in parser._actions if "--methods" in action.option_strings)


def test_the_cli_and_the_benchmark_offer_the_registry():
    assert methods_choices(explain_cli.build_parser()) == list(METHODS)
    assert methods_choices(benchmark.build_parser()) == list(METHODS)
    assert benchmark.build_parser().parse_args(["photos", "--out", "x"]).methods == list(METHODS)
    help_text = " ".join(explain_cli.build_parser().format_help().split())  # argparse wraps the lines
    for method in METHODS.values():
        assert method.name in help_text and (method.paper or method.name) in help_text


def test_the_class_specific_tab_offers_the_registrys_class_specific_maps():
    from vitviz_dashboard.tabs import class_specific

    # the lens has its own section on the tab
    assert class_specific.GRADIENT_METHODS == [n for n, m in METHODS.items() if m.class_specific and n != "lens"]
    assert class_specific.method_label("relevance") == "relevance (Chefer et al. 2021)"
    assert class_specific.method_label("grad-rollout") == "grad-rollout"  # no paper of its own
    assert "tam costs 20 forward and backward passes" in class_specific.METHODS_HELP
