"""Text towers and prompts: CLIP and SigLIP read any prompt as a class.

towers.py      the text encoder and tokenizer from transformers or open_clip, and the logit scale and bias
prompts.py     ready prompt sets (ImageNet, CIFAR-10, CIFAR-100), templates, and checks on prompts
embeddings.py  class embeddings (templates averaged as CLIP's recipe does), cached on disk, resumable; the
               estimated time of a long set
cut.py         causal CLIP text towers run only as far as each group's longest prompt reaches (exact)
zero_shot.py   zero_shot(model, prompts): the image tower with a head that scores the prompts
options.py     the command-line options that make prompts the classes (`vitviz explain`, `vitviz benchmark`)
"""

from vitviz.text.embeddings import class_embeddings
from vitviz.text.prompts import (
    PROMPT_SETS,
    TEMPLATE_SETS,
    PromptError,
    check_prompts,
    parse_prompts,
    prompt_set,
    template_set,
)
from vitviz.text.towers import HuggingFaceTextTower, OpenClipTextTower, TextTower
from vitviz.text.zero_shot import PromptHead, zero_shot

__all__ = [
    "PROMPT_SETS",
    "TEMPLATE_SETS",
    "HuggingFaceTextTower",
    "OpenClipTextTower",
    "PromptError",
    "PromptHead",
    "TextTower",
    "check_prompts",
    "class_embeddings",
    "parse_prompts",
    "prompt_set",
    "template_set",
    "zero_shot",
]
