"""What the page calls things: the model's classes (or prompts), its prefix tokens, what its head reads (``Readout``),
and the sentences made of them (the prediction line above the tabs, why a model has no classes)."""

from __future__ import annotations

from enum import Enum

import numpy as np

import vitviz
from vitviz_dashboard.page import Page, Settings

# --- classes ------------------------------------------------------------------------------------------------------


def has_classifier(model: vitviz.ViT) -> bool:
    return model.config.num_classes > 0


def class_name(model: vitviz.ViT, index: int) -> str:
    return model.class_names[index] if index < len(model.class_names) else f"class {index}"


def is_zero_shot(model: vitviz.ViT) -> bool:
    """A model whose classes are prompts read by its text tower (vitviz.zero_shot)."""
    return model.text_tower is not None and has_classifier(model)


def probability_kind(model: vitviz.ViT) -> str:
    """How the page's probabilities were made, in a few words."""
    if model.config.probabilities == "sigmoid":
        return "sigmoid: each prompt scored on its own"
    return "softmax over the prompts" if is_zero_shot(model) else "softmax over the classes"


def top_class(probabilities: np.ndarray) -> int:
    """The most probable class; among tied classes the first, as np.argmax and classes_by_probability agree."""
    return int(np.argmax(probabilities))


def classes_by_probability(probabilities: np.ndarray) -> list[int]:
    """Every class, most probable first; tied classes in their own order, so the first is always ``top_class``.
    (Reversing an ascending argsort would put the last of tied classes first.)"""
    return [int(i) for i in np.argsort(-np.asarray(probabilities), kind="stable")]


# --- the sentences: the prediction line, and why there are no classes ----------------------------------------------


def prediction_line(page: Page) -> str:
    """One line above every tab: the top prediction, and the input the model actually saw."""
    model, analysis = page.model, page.analysis
    height, width = analysis.pixel_values.shape[-2:]
    rows, cols = analysis.grid_size
    saw = f"the model saw the photo as a {width}x{height} input ({cols}x{rows} patches of {model.config.patch_size} px)"
    if page.settings.prompt_error:
        return f"**No predictions: the prompts cannot be used** ({prompts_to_fix(page.settings)}); {saw}."
    if not has_classifier(model):
        return f"No predictions (the model is a backbone); {saw}."
    top = top_class(analysis.probabilities)
    if is_zero_shot(model):
        return (
            f"**Zero-shot prediction: '{class_name(model, top)}' ({analysis.probabilities[top]:.1%}, "
            f"{probability_kind(model)})**; {saw}."
        )
    return f"**Prediction: {class_name(model, top)} ({analysis.probabilities[top]:.1%})**; {saw}."


def prompts_to_fix(settings: Settings) -> str:
    """What is wrong with the typed prompts, and where to fix them (the sidebar may be collapsed)."""
    return f"{settings.prompt_error}: fix them under Prompts in the sidebar"


def without_classes(settings: Settings) -> str:
    """Why the page's model has no classes, as a sentence without its full stop: its typed prompts cannot be used,
    or it is a backbone. Every tab that needs classes says this, so the cause is in the main area."""
    if settings.prompt_error:
        return f"The prompts cannot be used ({prompts_to_fix(settings)}), so the model has no classes"
    return "This model has no classifier (a backbone)"


# --- prefix tokens ------------------------------------------------------------------------------------------------


def prefix_token_names(config: vitviz.ViTConfig) -> list[str]:
    """The prefix tokens in the model's order: "[CLS]", "distillation", "register 1".."register R"."""
    names = ["[CLS]"] if config.class_token else []
    names += ["distillation"] if config.distillation_token else []
    return names + [f"register {i + 1}" for i in range(config.num_register_tokens)]


def describe_prefix_tokens(config: vitviz.ViTConfig) -> str:
    """E.g. "[CLS] + 4 registers", "[CLS] + distillation", "no prefix tokens"."""
    parts = ["[CLS]"] if config.class_token else []
    parts += ["distillation"] if config.distillation_token else []
    registers = config.num_register_tokens
    parts += [f"{registers} register{'s' if registers > 1 else ''}"] if registers else []
    return " + ".join(parts) or "no prefix tokens"


# --- what the head reads ------------------------------------------------------------------------------------------


class Readout(Enum):
    """What the head (or, for a backbone, the pooled output) reads: ViTConfig.pooling, with [CLS] and a distillation
    token read by two heads told apart from [CLS] alone. Captions about the readout are keyed by it."""

    CLS = "cls"
    MEAN = "mean"
    CLS_AND_MEAN = "cls+mean"
    POOLING_HEAD = "map"
    ATTENTIVE = "attentive"  # V-JEPA 2's pooler: blocks over every token, then a query
    DISTILLED = "distilled"


def readout_kind(config: vitviz.ViTConfig) -> Readout:
    # a Swin's config has no pooling field: its head reads the mean of its last stage's tokens
    pooling = getattr(config, "pooling", "mean")
    return Readout.DISTILLED if pooling == "cls" and getattr(config, "distillation_head", False) else Readout(pooling)


READOUT_DESCRIPTIONS = {  # a few words for the sidebar
    Readout.POOLING_HEAD: "an attention-pooling head over the patches",
    Readout.ATTENTIVE: "an attentive pooler: self-attention blocks over every token, then one query",
    Readout.MEAN: "the mean of the patch tokens",
    Readout.CLS_AND_MEAN: "[CLS] and the mean patch token, side by side",
    Readout.DISTILLED: "[CLS] and distillation tokens (two heads, averaged)",
    Readout.CLS: "the [CLS] token",
}
READOUT_TITLES = {  # the title of the attention rows a readout map shows
    Readout.POOLING_HEAD: "rows weighted by the pooling head",
    Readout.ATTENTIVE: "rows weighted by the pooler (its query, carried back through its blocks)",
    Readout.MEAN: "mean of the patch rows",
    Readout.CLS_AND_MEAN: "[CLS] row and mean patch row, half each",
    Readout.DISTILLED: "[CLS] and distillation rows, half each",
    Readout.CLS: "[CLS] attention",
}


def describe_pooling(config: vitviz.ViTConfig) -> str:
    """What the head (or, for a backbone, the pooled output) reads, in a few words."""
    return READOUT_DESCRIPTIONS[readout_kind(config)]


def readout_title(config: vitviz.ViTConfig) -> str:
    """The name of the attention row a readout map shows: the rows of the tokens the head reads,
    weighted as it weighs them (explain.readout_attention_all with analysis.readout)."""
    return READOUT_TITLES[readout_kind(config)]


def readout_file_name(config: vitviz.ViTConfig) -> str:
    """The stem of readout maps in downloads: "cls" where the head reads [CLS] alone, else "readout"."""
    return "cls" if readout_kind(config) is Readout.CLS else "readout"
