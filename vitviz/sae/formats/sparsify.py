"""EleutherAI sparsify's folders (``sparsify.SparseCoder.load_from_disk``): one folder per hookpoint,
``<hookpoint>/cfg.json`` + ``<hookpoint>/sae.safetensors``, the run's ``config.json`` one level up.

``cfg.json``: ``d_in``, ``num_latents`` (0 means d_in x ``expansion_factor``, default 32), ``k`` (default 32),
``activation`` ("topk" or "groupmax"), ``normalize_decoder``, ``skip_connection``, ``transcode``.
``sae.safetensors`` (often bf16): ``encoder.weight`` (N, d) -- an ``nn.Linear``'s, the transpose of SAELens's
``W_enc`` --, ``encoder.bias`` (N), ``W_dec`` (N, d), ``b_dec`` (d), and ``W_skip`` (d, d) with a skip connection.

The forward pass (``SparseCoder.encode`` / ``decode``): pre = ReLU((x - b_dec) Wᵀ + b); "topk" keeps the k largest,
"groupmax" the largest of each of k equal groups of latents; x̂ = codes W_dec + b_dec (+ x W_skipᵀ). The b_dec
subtraction is always there for an autoencoder, whatever ``normalize_decoder`` says (SAELens's converter reads it
from that field; sparsify's code does not). A transcoder (``transcode``) predicts another module's output and is
refused. The hookpoint ``layers.N`` (or ``<prefix>.layers.N``, ``encoder.layer.N``, ``blocks.N``) is the output of the
model's layer N: vitviz's block N; a hookpoint inside a layer (``layers.N.mlp``) is no block's output.
"""

from __future__ import annotations

import re
from pathlib import Path

from vitviz.messages import clip_text
from vitviz.sae.errors import SAEFormatError
from vitviz.sae.formats.base import (
    SAEFileFormat,
    check_size,
    fill,
    folder_of,
    integer,
    json_object,
    load_safetensors,
    read_config,
)
from vitviz.sae.formats.module import ExternalConfig, ExternalSAE

CONFIG, WEIGHTS, RUN_CONFIG = "cfg.json", "sae.safetensors", "config.json"
_LAYER = re.compile(r"(?:.*[._])?(?:layers?|blocks)[._](\d+)")  # layers.5, encoder.layer.5, blocks.5


def detect(path: Path) -> bool:
    folder = folder_of(path)
    return (folder / CONFIG).is_file() and (folder / WEIGHTS).is_file()


def load(path: Path) -> ExternalSAE:
    folder = folder_of(path)
    source = folder / CONFIG
    cfg = read_config(source)
    if cfg.get("transcode"):
        raise SAEFormatError(f"{source} is a transcoder (transcode: true): it predicts another module's output")
    if cfg.get("signed"):
        raise SAEFormatError(f"{source}: signed activations (signed: true) are not ones vitviz reads")
    activation = cfg.get("activation", "topk")
    if activation not in ("topk", "groupmax"):
        raise SAEFormatError(
            f"{source}: activation {clip_text(repr(activation), 60)} is not one sparsify has (topk, groupmax)"
        )
    d_in = integer(cfg.get("d_in"), "d_in", source)
    latents = integer(cfg.get("num_latents", 0), "num_latents", source) or d_in * integer(
        cfg.get("expansion_factor", 32), "expansion_factor", source
    )
    k = integer(cfg.get("k", 32), "k", source)
    found = _LAYER.fullmatch(folder.name)
    run = json_object(folder.parent / RUN_CONFIG) or {}
    config = ExternalConfig(
        d_in=d_in,
        latents=latents,
        activation="topk" if activation == "topk" else "groupmax",
        k=min(k, latents) if activation == "topk" else k,
        pre_encoder_bias=True,
        skip=bool(cfg.get("skip_connection")),
        block=int(found[1]) if found else None,
        hook=folder.name,
        tokens="all",
        model=run.get("model") if isinstance(run.get("model"), str) else None,
        format="sparsify",
    )
    check_size(d_in, latents, str(source))
    tensors = load_safetensors(folder / WEIGHTS)
    renamed = {"encoder.weight": "W_enc", "encoder.bias": "b_enc"}
    unknown = sorted(set(tensors) - {*renamed, "W_dec", "b_dec", "W_skip"})
    if unknown:
        raise SAEFormatError(
            f"{folder / WEIGHTS} holds tensors sparsify's SAE does not have: {clip_text(str(unknown), 150)}"
        )
    if "encoder.weight" in tensors:
        tensors["encoder.weight"] = tensors["encoder.weight"].T  # nn.Linear's (N, d) -> (d, N)
    sae = ExternalSAE(config)
    fill(sae, {renamed.get(name, name): t for name, t in tensors.items()}, folder / WEIGHTS)
    return sae


FORMAT = SAEFileFormat(
    name="sparsify",
    description="sparsify's hookpoint folder (cfg.json + sae.safetensors)",
    detect=detect,
    load=load,
)
