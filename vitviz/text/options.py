"""The command-line options that make prompts the classes, shared by `vitviz explain` and `vitviz benchmark`:

--prompts "a dog" "a cat"        the classes, read as they are
--prompt-set imagenet            a ready set (imagenet, cifar10, cifar100), with "a photo of a {}."
--templates openai-80            OpenAI's 80 templates instead (80x the prompts, embedded once and kept on disk)
"""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from vitviz.model import ViT
from vitviz.text.prompts import PROMPT_SETS, TEMPLATE_SETS, PromptError, check_prompts, prompt_set, template_set
from vitviz.text.zero_shot import NO_TEXT_TOWER, zero_shot


def add_prompt_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "prompts", "for CLIP and SigLIP models (with a text tower): any prompt is a class"
    )
    which = group.add_mutually_exclusive_group()
    which.add_argument("--prompts", nargs="+", metavar="TEXT", help='the classes, e.g. --prompts "a dog" "a cat"')
    which.add_argument(
        "--prompt-set",
        choices=list(PROMPT_SETS),
        help="; ".join(f"{name}: {s.description}" for name, s in PROMPT_SETS.items()),
    )
    group.add_argument(
        "--templates",
        choices=list(TEMPLATE_SETS),
        help="photo: 'a photo of a {}.' (the default for --prompt-set); openai-80: OpenAI's 80 templates "
        "averaged per class (80x the prompts to embed, once: kept on disk). Without it --prompts "
        "are read as they are",
    )


def apply_prompt_options(model: ViT, args: argparse.Namespace) -> ViT:
    """The zero-shot model the options ask for, or ``model`` when they ask for none. Errors exit with a message."""
    if not args.prompts and not args.prompt_set:
        if args.templates:
            raise SystemExit("error: --templates needs --prompts or --prompt-set")
        return model
    tower = model.text_tower
    if tower is None:
        raise SystemExit(f"error: --prompts and --prompt-set: {NO_TEXT_TOWER}")
    try:
        prompts = check_prompts(args.prompts) if args.prompts else list(prompt_set(args.prompt_set))
        templates = template_set(args.templates or "photo") if (args.templates or args.prompt_set) else None
        for line, prompt in enumerate(prompts if templates is None else [], start=1):
            count = tower.token_count(prompt) if isinstance(prompt, str) else None
            if count is not None and count > tower.context_length:
                print(
                    f"note: prompt {line} is {count} tokens, longer than the text tower's {tower.context_length}: "
                    "only its first tokens are read",
                    file=sys.stderr,
                )
        total = len(prompts) * (len(templates) if templates else 1)
        with tqdm(total=total, desc="embedding prompts", unit="prompt", disable=None, file=sys.stderr) as bar:
            return zero_shot(model, prompts, templates, progress=lambda done, _: bar.update(done - bar.n))
    except PromptError as error:
        raise SystemExit(f"error: {error}") from None
