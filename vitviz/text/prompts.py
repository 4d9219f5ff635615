"""Prompts: the ready prompt sets, templates, and the checks every list of prompts goes through.

    PROMPT_SETS["imagenet"]       ImageNet-1k's class names, from open_clip's zero-shot metadata
    PROMPT_SETS["cifar10"]        CIFAR-10's 10 classes
    PROMPT_SETS["cifar100"]       CIFAR-100's 100 classes (the data set's fine labels, underscores as spaces)
    TEMPLATE_SETS["photo"]        one template, "a photo of a {}." (the default for a ready set)
    TEMPLATE_SETS["openai-80"]    OpenAI's 80 ImageNet templates (CLIP's ensemble), from open_clip

A class's text embedding with templates is the renormalised mean of its normalised template embeddings (CLIP's
ImageNet recipe, ``vitviz.text.embeddings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_PROMPT_CHARS = 1000  # longer lines are refused before anything is tokenized
SHOWN_CHARS = 80  # a message echoes at most about this much of a prompt or template


class PromptError(ValueError):
    """A list of prompts or templates that cannot be used, with a message that says why and what to do."""


CIFAR10 = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR100 = (
    "apple",
    "aquarium fish",
    "baby",
    "bear",
    "beaver",
    "bed",
    "bee",
    "beetle",
    "bicycle",
    "bottle",
    "bowl",
    "boy",
    "bridge",
    "bus",
    "butterfly",
    "camel",
    "can",
    "castle",
    "caterpillar",
    "cattle",
    "chair",
    "chimpanzee",
    "clock",
    "cloud",
    "cockroach",
    "couch",
    "crab",
    "crocodile",
    "cup",
    "dinosaur",
    "dolphin",
    "elephant",
    "flatfish",
    "forest",
    "fox",
    "girl",
    "hamster",
    "house",
    "kangaroo",
    "keyboard",
    "lamp",
    "lawn mower",
    "leopard",
    "lion",
    "lizard",
    "lobster",
    "man",
    "maple tree",
    "motorcycle",
    "mountain",
    "mouse",
    "mushroom",
    "oak tree",
    "orange",
    "orchid",
    "otter",
    "palm tree",
    "pear",
    "pickup truck",
    "pine tree",
    "plain",
    "plate",
    "poppy",
    "porcupine",
    "possum",
    "rabbit",
    "raccoon",
    "ray",
    "road",
    "rocket",
    "rose",
    "sea",
    "seal",
    "shark",
    "shrew",
    "skunk",
    "skyscraper",
    "snail",
    "snake",
    "spider",
    "squirrel",
    "streetcar",
    "sunflower",
    "sweet pepper",
    "table",
    "tank",
    "telephone",
    "television",
    "tiger",
    "tractor",
    "train",
    "trout",
    "tulip",
    "turtle",
    "wardrobe",
    "whale",
    "willow tree",
    "wolf",
    "woman",
    "worm",
)


def _imagenet() -> tuple[str, ...]:
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    return tuple(IMAGENET_CLASSNAMES)


def _openai_templates() -> tuple[str, ...]:
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    return tuple(template("{}") for template in OPENAI_IMAGENET_TEMPLATES)  # lambdas there: "{}" gives the text


@dataclass(frozen=True)
class PromptSet:
    name: str
    description: str
    loader: object  # () -> class names

    @property
    def classes(self) -> tuple[str, ...]:
        return self.loader() if callable(self.loader) else tuple(self.loader)


PROMPT_SETS = {
    "imagenet": PromptSet("imagenet", "ImageNet-1k's 1,000 classes (open_clip's class names)", _imagenet),
    "cifar10": PromptSet("cifar10", "CIFAR-10's 10 classes", CIFAR10),
    "cifar100": PromptSet("cifar100", "CIFAR-100's 100 classes", CIFAR100),
}
DEFAULT_TEMPLATE = "a photo of a {}."
TEMPLATE_SETS = {
    "photo": lambda: (DEFAULT_TEMPLATE,),
    "openai-80": _openai_templates,
}


def prompt_set(name: str) -> tuple[str, ...]:
    """The class names of a ready set (PROMPT_SETS), or a PromptError listing the sets."""
    if name not in PROMPT_SETS:
        raise PromptError(f"unknown prompt set {name!r}; choose one of {', '.join(PROMPT_SETS)}")
    return PROMPT_SETS[name].classes


def template_set(name: str) -> tuple[str, ...]:
    if name not in TEMPLATE_SETS:
        raise PromptError(f"unknown template set {name!r}; choose one of {', '.join(TEMPLATE_SETS)}")
    return TEMPLATE_SETS[name]()


def parse_prompts(text: str) -> list[str]:
    """A text box's content, one prompt per line, as a list: surrounding spaces stripped, trailing blank lines
    dropped. Blank lines in between are kept, so ``check_prompts`` can name them."""
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def check_prompts(prompts: Sequence[str], max_prompts: int | None = None, unique: bool = True) -> list[str]:
    """The prompts as a list of strings, or a PromptError naming the first problem: none at all, more than
    ``max_prompts``, an empty one, one that is not text or is absurdly long, or (with ``unique``) the same prompt
    twice. Typed prompts must be unique; a ready set may name two classes alike (open_clip's ImageNet names
    'missile' and 'sunglasses' twice each: different classes, one text)."""
    if isinstance(prompts, str):
        raise PromptError("prompts must be a list of texts, not one string (split it into lines first)")
    prompts = list(prompts)
    if not prompts:
        raise PromptError("no prompts: give at least one, e.g. 'a photo of a dog'")
    if max_prompts is not None and len(prompts) > max_prompts:
        raise PromptError(f"{len(prompts)} prompts, more than the limit of {max_prompts}; use fewer, or a ready set")
    seen: dict[str, int] = {}
    for line, prompt in enumerate(prompts, start=1):
        if not isinstance(prompt, str):
            raise PromptError(f"prompt {line} is a {type(prompt).__name__}, not text")
        if not prompt.strip():
            raise PromptError(f"prompt {line} is empty: remove the blank line")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise PromptError(f"prompt {line} has {len(prompt)} characters, more than the limit of {MAX_PROMPT_CHARS}")
        check_text(prompt, f"prompt {line}")
        if unique and prompt in seen:
            raise PromptError(
                f"prompt {line} ({shown(prompt)}) repeats prompt {seen[prompt]}: each class needs its own text"
            )
        seen[prompt] = line
    return prompts


def check_templates(templates: Sequence[str]) -> list[str]:
    """Templates as a list, each with exactly one "{}" where the class name goes; else a PromptError."""
    if isinstance(templates, str):
        raise PromptError("templates must be a list of texts, e.g. ['a photo of a {}.']")
    templates = list(templates)
    if not templates:
        raise PromptError(
            "no templates: give at least one, e.g. 'a photo of a {}.', or none to use prompts as they are"
        )
    for template in templates:
        if not isinstance(template, str) or template.count("{}") != 1:
            raise PromptError(f"template {shown(template)} must hold exactly one '{{}}', where the class name goes")
        check_text(template, f"template {shown(template)}")
    return templates


def check_text(text: str, what: str) -> None:
    """A PromptError if ``text`` cannot be written as UTF-8: a lone surrogate, which Python makes of bytes that are
    not UTF-8 in a command-line argument (``'\\udcff'``), and no tokenizer can read."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PromptError(
            f"{what} is not valid text: character {error.start + 1} is {text[error.start]!r}, a lone "
            "surrogate (bytes that are not UTF-8?); retype it or save it as UTF-8"
        ) from None


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for messages that echo a prompt back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 12]}...' ({len(str(value)):,} characters)"


def fill(template: str, name: str) -> str:
    """The template with the class name in its "{}" (str.replace: braces in a name are text, not fields)."""
    return template.replace("{}", name, 1)
