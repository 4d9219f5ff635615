"""How long embedding a prompt set takes: ImageNet's 1,000 classes with one template and with OpenAI's 80.

    python bench/bench_prompts.py --towers open_clip:ViT-B-16 hf:siglip-base --templates photo openai-80 \
        --out bench/results/prompts.json

Random weights with the towers' real shapes (open_clip's ViT-B-16 text tower with its shipped BPE tokenizer,
77 tokens, cut after each group's longest prompt (vitviz.text.cut; bench_text_cut.py times it against the full
77); a SigLIP-base-sized transformers text tower padded to 64 tokens and read whole, byte tokens standing in for
its SentencePiece vocabulary): the time does not depend on the weights. Each run embeds without the disk cache
(``use_cache=False``), in fp32, with torch's threads as set (both cores here). ``--classes N`` times the first
N classes only, for a quick estimate (the time per prompt is constant).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from vitviz.text import class_embeddings, prompt_set, template_set


def open_clip_tower():
    import open_clip

    from vitviz import from_open_clip

    model = open_clip.create_model("ViT-B-16", pretrained=None)
    return from_open_clip(model, open_clip.get_tokenizer("ViT-B-16")).text_tower


class ByteTokenizer:
    """Bytes as token ids, padded to max_length: the SentencePiece tokenizer's cost is negligible beside the model."""

    def __call__(self, texts, padding=None, truncation=True, max_length=64, return_tensors="pt"):
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        for row, text in enumerate(texts):
            data = list(text.encode())[: max_length - 1]
            ids[row, : len(data)] = torch.tensor(data) + 2
            ids[row, len(data)] = 1
        return {"input_ids": ids}


def siglip_tower():
    import transformers

    from vitviz.text.towers import HuggingFaceTextTower

    config = transformers.SiglipTextConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=64,
    )
    model = transformers.SiglipTextModel(config)
    return HuggingFaceTextTower(
        model, ByteTokenizer(), "siglip", torch.tensor(10.0), torch.tensor(-10.0), None, "SigLIP-base-sized text tower"
    )


TOWERS = {"open_clip:ViT-B-16": open_clip_tower, "hf:siglip-base": siglip_tower}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--towers", nargs="+", choices=list(TOWERS), default=list(TOWERS))
    parser.add_argument("--templates", nargs="+", default=["photo", "openai-80"])
    parser.add_argument("--classes", type=int, default=1000, help="the first N ImageNet classes (default: all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    classes = list(prompt_set("imagenet"))[: args.classes]
    results = []
    for name in args.towers:
        tower = TOWERS[name]()
        for templates_name in args.templates:
            templates = list(template_set(templates_name))
            start = time.perf_counter()
            embeddings = class_embeddings(tower, classes, templates, use_cache=False)
            seconds = time.perf_counter() - start
            prompts = len(classes) * len(templates)
            results.append(
                dict(
                    tower=name,
                    templates=templates_name,
                    classes=len(classes),
                    prompts=prompts,
                    seconds=round(seconds, 2),
                    ms_per_prompt=round(1000 * seconds / prompts, 3),
                    shape=list(embeddings.shape),
                )
            )
            print(json.dumps(results[-1]), flush=True)
    report = {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
