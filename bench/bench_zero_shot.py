"""How exactly vitviz.zero_shot reproduces each source's image-text logits, on random weights.

    python bench/bench_zero_shot.py --out bench/results/zero_shot.json

Sources: transformers' CLIPModel and SiglipModel (tiny random models saved with save_pretrained and loaded from the
folder, tokenizers built by tests/tiny_text.py; reference: ``logits_per_image``), and open_clip's ViT-B-16
(OpenCLIP's own image tower) and ViT-B-16-SigLIP (a timm trunk) at full size through ``from_open_clip`` (reference:
``logit_scale.exp() * cos (+ logit_bias)`` from ``encode_image`` and ``encode_text``). Each difference is the
largest absolute one over 4 images x 4 prompts, with the logits' own spread beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tiny_text import clip_folder, siglip_folder

import vitviz

PROMPTS = ["a photo of a dog", "a photo of a cat", "a red car on the road", "the moon"]


def huggingface(kind: str, folder: Path) -> dict:
    reference, tokenizer, folder = (clip_folder if kind == "clip" else siglip_folder)(folder)
    model = vitviz.zero_shot(vitviz.load_model(str(folder)), PROMPTS, use_cache=False)
    pixels = torch.randn(4, 3, 32, 32)
    inputs = tokenizer(
        PROMPTS, padding="max_length" if kind == "siglip" else True, max_length=16, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        expected = reference(pixel_values=pixels, **inputs).logits_per_image
        logits = model(pixels).logits
    return {
        "source": f"transformers {type(reference).__name__}",
        "max_abs_difference": float((logits - expected).abs().max()),
        "logit_std": float(expected.std()),
    }


def open_clip_source(name: str) -> dict:
    import open_clip

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_import_open_clip import StandInTokenizer, perturbed_open_clip

    model = perturbed_open_clip(name)
    tokenizer = open_clip.get_tokenizer(name) if name == "ViT-B-16" else StandInTokenizer()
    zs = vitviz.zero_shot(vitviz.from_open_clip(model, tokenizer), PROMPTS, use_cache=False)
    pixels = torch.randn(4, 3, 224, 224)
    with torch.no_grad():
        image = model.encode_image(pixels, normalize=True)
        text = model.encode_text(tokenizer(PROMPTS), normalize=True)
        expected = model.logit_scale.exp() * image @ text.T + (model.logit_bias if model.logit_bias is not None else 0)
        logits = zs(pixels).logits
    return {
        "source": f"open_clip {name} ({type(model.visual).__name__})",
        "max_abs_difference": float((logits - expected).abs().max()),
        "logit_std": float(expected.std()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        rows = [huggingface("clip", Path(folder) / "clip"), huggingface("siglip", Path(folder) / "siglip")]
    rows += [open_clip_source("ViT-B-16"), open_clip_source("ViT-B-16-SigLIP")]
    for row in rows:
        print(f"{row['source']:55s} {row['max_abs_difference']:.2e}  (logits' std {row['logit_std']:.3g})")
    if args.out:
        args.out.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
