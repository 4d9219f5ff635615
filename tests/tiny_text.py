"""Tiny image-text models with tokenizers built here (no download): the stand-ins for CLIP and SigLIP.

clip_tokenizer(folder)      a byte-level BPE vocabulary in CLIP's format (vocab.json, merges.txt)
siglip_tokenizer(folder)    a SentencePiece model trained on a few lines (spiece.model)
clip_folder / siglip_folder a random CLIPModel / SiglipModel saved with save_pretrained, tokenizer beside it
open_clip_clip(**text)      a random open_clip CLIP with a 77-token causal text tower (text_cfg overridable)
open_clip_siglip(reference) open_clip's SigLIP text tower holding a transformers SiglipModel's text weights
spied(module)               the keyword arguments of every call of a module, while the context lasts
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers as hf

VISION = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
)
LINES = [
    "a photo of a dog",
    "a photo of a cat",
    "a photo of a bird",
    "a drawing of a red car on the road",
    "the quick brown fox jumps over the lazy dog",
    "an origami crane and a tiny paper boat",
    "a blurry photo of the moon",
    "many cats sleeping in the sun",
    "a picture of an astronaut riding a horse",
]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's and CLIP's reversible map of bytes to printable characters (the byte-level BPE alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
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
    merges = [
        ("o", "g</w>"),
        ("d", "og</w>"),
        ("t", "h"),
        ("th", "e</w>"),
        ("p", "h"),
        ("o", "t"),
        ("ph", "ot"),
        ("phot", "o</w>"),
        ("c", "a"),
        ("ca", "t</w>"),
    ]
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
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(folder / "spiece"),
        vocab_size=64,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
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
    text = dict(
        vocab_size=vocab_size,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
        eos_token_id=vocab_size - 1,
        bos_token_id=vocab_size - 2,
        pad_token_id=vocab_size - 1,
    )
    config = hf.CLIPConfig(
        vision_config=VISION | vision, text_config=text, projection_dim=16, attn_implementation="eager"
    )
    model = perturbed(hf.CLIPModel(config))
    with torch.no_grad():
        model.logit_scale.fill_(2.3)  # exp: about 10, so the logits are far apart
    return model


def siglip_model(vocab_size: int, **vision) -> hf.SiglipModel:
    text = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
        projection_size=32,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
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


TINY_VISION = dict(image_size=32, layers=1, width=32, patch_size=8, head_width=8)  # open_clip's vision_cfg


def open_clip_clip(custom_text: bool = False, **text) -> torch.nn.Module:
    """A random open_clip CLIP (``custom_text``: a CustomTextCLIP holding a TextTransformer) with a 77-token causal
    text tower of 2 layers, every parameter perturbed; ``text`` overrides its text_cfg (pool_type, embed_cls...)."""
    import open_clip

    cfg = dict(context_length=77, vocab_size=49408, width=32, heads=4, layers=2) | text
    kind = open_clip.CustomTextCLIP if custom_text else open_clip.CLIP
    return perturbed(kind(embed_dim=16, vision_cfg=TINY_VISION, text_cfg=cfg))


def open_clip_siglip(reference: hf.SiglipModel) -> torch.nn.Module:
    """open_clip's SigLIP text tower (bidirectional, pooled at the last position, as its ViT-B-16-SigLIP config)
    holding ``reference``'s text weights, logit scale and bias: the same model through the other library."""
    import open_clip

    config = reference.config.text_config
    text_cfg = dict(
        context_length=config.max_position_embeddings,
        vocab_size=config.vocab_size,
        width=config.hidden_size,
        heads=config.num_attention_heads,
        layers=config.num_hidden_layers,
        mlp_ratio=config.intermediate_size / config.hidden_size,
        no_causal_mask=True,
        pool_type="last",
        proj_bias=True,
        norm_kwargs={"eps": config.layer_norm_eps},
        act_kwargs={"approximate": "tanh"},
    )  # transformers' gelu_pytorch_tanh
    model = open_clip.CustomTextCLIP(
        embed_dim=config.projection_size, vision_cfg=TINY_VISION, text_cfg=text_cfg, init_logit_bias=0.0
    ).eval()
    hf_weights = {
        k.removeprefix("text_model."): v for k, v in reference.state_dict().items() if k.startswith("text_model.")
    }
    weights = {
        "token_embedding.weight": hf_weights["embeddings.token_embedding.weight"],
        "positional_embedding": hf_weights["embeddings.position_embedding.weight"],
    }
    for i in range(config.num_hidden_layers):
        hf_layer, layer = f"encoder.layers.{i}.", f"transformer.resblocks.{i}."
        for kind in ("weight", "bias"):
            q, k, v = (hf_weights[f"{hf_layer}self_attn.{p}_proj.{kind}"] for p in "qkv")
            weights[f"{layer}attn.in_proj_{kind}"] = torch.cat([q, k, v])
            for mine, theirs in [
                ("attn.out_proj", "self_attn.out_proj"),
                ("ln_1", "layer_norm1"),
                ("ln_2", "layer_norm2"),
                ("mlp.c_fc", "mlp.fc1"),
                ("mlp.c_proj", "mlp.fc2"),
            ]:
                weights[f"{layer}{mine}.{kind}"] = hf_weights[f"{hf_layer}{theirs}.{kind}"]
    for mine, theirs in [("ln_final", "final_layer_norm"), ("text_projection", "head")]:
        for kind in ("weight", "bias"):
            weights[f"{mine}.{kind}"] = hf_weights[f"{theirs}.{kind}"]
    model.text.load_state_dict(weights, strict=True)
    with torch.no_grad():
        model.logit_scale.copy_(reference.logit_scale.reshape(()))
        model.logit_bias.copy_(reference.logit_bias.reshape(()))
    return model


@contextmanager
def spied(module: torch.nn.Module) -> Iterator[list[dict]]:
    """Records the keyword arguments of every call of ``module`` (the positional ones under "args") until the
    context ends."""
    calls: list[dict] = []
    handle = module.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(kwargs | {"args": args}), with_kwargs=True
    )
    try:
        yield calls
    finally:
        handle.remove()
