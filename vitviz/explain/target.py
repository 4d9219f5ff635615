"""What a map explains, as one record: ``vitviz.Target``.

    Target.of_class(3)            # the logit of class 3
    Target.prompt("a dog")        # a CLIP or SigLIP prompt: one of the model's prompt classes, or read by its tower
    Target.answer_token(2)        # a VLM answer's third token (vitviz.vlm's maps and relevance)

Every map method that explains something takes a ``Target`` where it takes a class index: ``method_maps(model,
pixels, ["relevance"], target=Target.prompt("a dog"))``. An int is read as ``Target.of_class(int)`` and a string as
``Target.prompt(string)``, so ``target=3`` and ``target=Target.of_class(3)`` give the same maps; None is the top
class, where a function allows it.

A prompt that is one of the model's classes (``model.class_names``, which ``vitviz.zero_shot`` sets to the prompts)
is that class. ``method_maps`` also reads a prompt that is none of them, through the model's text tower: the model's
classes with the prompt added, as ``vitviz.zero_shot`` builds them (``explained_model``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch

from vitviz.messages import echo

TargetKind = Literal["class", "prompt", "answer_token"]
TARGET_KINDS: tuple[TargetKind, ...] = get_args(TargetKind)


def _is_index(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class Target:
    """One thing a map explains: ``kind`` says what, ``index`` (a class, an answer token) or ``text`` (a prompt)
    which one. Build it with the class methods, which check their argument."""

    kind: TargetKind
    index: int | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"a target's kind is one of {', '.join(map(repr, TARGET_KINDS))}; got {self.kind!r}")
        if self.kind == "prompt":
            if not isinstance(self.text, str) or not self.text.strip():
                raise ValueError(f"a prompt target needs the prompt's text; got {echo(self.text)}")
        elif not _is_index(self.index) or self.index < 0:
            what = "a class index" if self.kind == "class" else "an answer token's index"
            raise ValueError(f"a {self.kind} target needs {what} (an int >= 0); got {echo(self.index)}")

    @classmethod
    def of_class(cls, index: int) -> Target:
        """The logit of class ``index`` (counted from 0, as the head's outputs are)."""
        return cls("class", index=index)

    @classmethod
    def prompt(cls, text: str) -> Target:
        """A text prompt's score (CLIP, SigLIP): one of the model's prompt classes, or read through its text tower."""
        return cls("prompt", text=text)

    @classmethod
    def answer_token(cls, index: int) -> Target:
        """A VLM answer's token ``index`` (counted from 0 over the answer's tokens)."""
        return cls("answer_token", index=index)

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        """In words, for captions and errors: "class 3 (cat)", "the prompt 'a dog'", "answer token 2"."""
        if self.kind == "prompt":
            return f"the prompt {echo(self.text)}"
        if self.kind == "answer_token":
            return f"answer token {self.index}"
        if class_names is not None and self.index < len(class_names):
            return f"class {self.index} ({class_names[self.index]})"
        return f"class {self.index}"


TargetLike = Target | int | str


def as_target(target: TargetLike | None) -> Target | None:
    """A ``Target`` from what a caller may pass: a Target, a class index (int), a prompt (str), or None (the top
    class), unchanged; anything else is a one-line ValueError."""
    if target is None or isinstance(target, Target):
        return target
    if _is_index(target):
        return Target.of_class(int(target))
    if isinstance(target, str):
        return Target.prompt(target)
    if isinstance(target, torch.Tensor) and target.numel() == 1 and not target.is_floating_point():
        return Target.of_class(int(target))
    raise ValueError(
        f"target is a class index, a prompt, a vitviz.Target or None; got {echo(target)} ({type(target).__name__})"
    )


def class_index(target: TargetLike, class_names: Sequence[str]) -> int:
    """The head's output that ``target`` names: a class's index, or the class whose name is the prompt. A prompt that
    is none of the classes, or a VLM answer token, is a one-line ValueError."""
    target = as_target(target)
    if target.kind == "class":
        return target.index  # checked against the head's size where the logits are
    if target.kind == "prompt":
        if target.text in class_names:
            return list(class_names).index(target.text)
        raise ValueError(
            f"{target.describe()} is none of this model's {len(class_names)} classes; make it one with "
            "vitviz.zero_shot(model, prompts), or pass it to vitviz.explain.method_maps, which reads it through the "
            "model's text tower"
        )
    raise ValueError(f"{target.describe()} is a VLM answer's token: explain it with vitviz.vlm, not an image model")


def class_target(model: torch.nn.Module, target: TargetLike | Sequence[int] | torch.Tensor | None):
    """What the class-specific functions pass on to ``common.target_indices``: a Target or a prompt becomes the class
    index it names in ``model.class_names``; a sequence or tensor of indices (one per image) and None pass as they
    are."""
    if isinstance(target, Target | str):
        return class_index(target, getattr(model, "class_names", []))
    return target


def explained_model(model: torch.nn.Module, target: TargetLike | None) -> tuple[torch.nn.Module, int | None]:
    """The model whose logit ``target`` is and that logit's index (None: the top class). A prompt that is none of
    ``model``'s classes is read by its text tower: a copy of the model (sharing its modules) whose classes are its
    own prompts and this one (``vitviz.zero_shot``); a model without a text tower refuses it in one line."""
    target = as_target(target)
    if target is None:
        return model, None
    names = list(getattr(model, "class_names", []))
    if target.kind != "prompt" or target.text in names:
        return model, class_index(target, names)
    if getattr(model, "text_tower", None) is None:
        raise ValueError(
            f"{target.describe()} is none of this model's classes, and the model has no text tower to read it "
            "(CLIP and SigLIP models have one)"
        )
    from vitviz.text import PromptHead, zero_shot  # the text towers are loaded only when a prompt needs them

    prompts = names if isinstance(getattr(model, "head", None), PromptHead) else []  # keep the prompts it has
    return zero_shot(model, [*prompts, target.text]), len(prompts)
