"""Tiny image-text models with tokenizers built here (no download): the stand-ins for CLIP and SigLIP.

    clip_tokenizer(folder)      a byte-level BPE vocabulary in CLIP's format (vocab.json, merges.txt)
    siglip_tokenizer(folder)    a SentencePiece model trained on a few lines (spiece.model)
    clip_folder / siglip_folder a random CLIPModel / SiglipModel saved with save_pretrained, tokenizer beside it
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers as hf

VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
              patch_size=8)  # fmt: skip
LINES = [
    "a photo of a dog", "a photo of a cat", "a photo of a bird", "a drawing of a red car on the road",
    "the quick brown fox jumps over the lazy dog", "an origami crane and a tiny paper boat",
    "a blurry photo of the moon", "many cats sleeping in the sun", "a picture of an astronaut riding a horse",
]  # fmt: skip


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's and CLIP's reversible map of bytes to printable characters (the byte-level BPE alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def clip_tokenizer(folder: Path):
    """A CLIPTokenizer over every byte (alone and ending a word) and a few merges for the common letters."""
    alphabet = list(_bytes_to_unicode().values())
    merges = [("o", "g</w>"), ("d", "og</w>"), ("t", "h"), ("th", "e</w>"), ("p", "h"), ("o", "t"), ("ph", "ot"),
              ("phot", "o</w>"), ("c", "a"), ("ca", "t</w>")]  # fmt: skip
    tokens = alphabet + [c + "</w>" for c in alphabet]
    tokens += [a + b for a, b in merges if a + b not in tokens] + ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    tokenizer = hf.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.model_max_length = 16
    return tokenizer


def siglip_tokenizer(folder: Path):
    """A SiglipTokenizer whose SentencePiece model is trained here on LINES (a 64-piece unigram vocabulary)."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(LINES * 4) + "\n")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "spiece"), vocab_size=64,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   hard_vocab_limit=False, minloglevel=2)  # fmt: skip
    corpus.unlink()
    (folder / "spiece.vocab").unlink(missing_ok=True)
    return hf.SiglipTokenizer(str(folder / "spiece.model"), model_max_length=16)


def perturbed(model: torch.nn.Module, std: float = 0.2, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn at random, so no mis-mapped weight hides behind an init of 0 or 1."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=std)
    return model.eval()


def clip_model(vocab_size: int, **vision) -> hf.CLIPModel:
    text = dict(vocab_size=vocab_size, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=16, eos_token_id=vocab_size - 1, bos_token_id=vocab_size - 2,
                pad_token_id=vocab_size - 1)  # fmt: skip
    config = hf.CLIPConfig(vision_config=VISION | vision, text_config=text, projection_dim=16,
                           attn_implementation="eager")  # fmt: skip
    model = perturbed(hf.CLIPModel(config))
    with torch.no_grad():
        model.logit_scale.fill_(2.3)  # exp: about 10, so the logits are far apart
    return model


def siglip_model(vocab_size: int, **vision) -> hf.SiglipModel:
    text = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=16, projection_size=32, pad_token_id=0, eos_token_id=1,
                bos_token_id=None)  # fmt: skip
    config = hf.SiglipConfig(vision_config=VISION | vision, text_config=text, attn_implementation="eager")
    model = perturbed(hf.SiglipModel(config))
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
        model.logit_bias.fill_(-3.0)
    return model


def clip_folder(folder: Path, save_tokenizer: bool = True) -> tuple[hf.CLIPModel, object, Path]:
    tokenizer = clip_tokenizer(folder / "tokenizer-source")
    model = clip_model(len(tokenizer))
    model.save_pretrained(folder)
    if save_tokenizer:
        tokenizer.save_pretrained(folder)
    return model, tokenizer, folder


def siglip_folder(folder: Path, save_tokenizer: bool = True) -> tuple[hf.SiglipModel, object, Path]:
    tokenizer = siglip_tokenizer(folder / "tokenizer-source")
    model = siglip_model(len(tokenizer))
    model.save_pretrained(folder)
    if save_tokenizer:
        tokenizer.save_pretrained(folder)
    return model, tokenizer, folder
