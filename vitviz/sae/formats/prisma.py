"""ViT-Prisma's SAE folders (``vit_prisma.sae.SparseAutoencoder.load_from_pretrained``): ``config.json`` (its
``VisionModelSAERunnerConfig``) beside a ``.pt`` file (``n_images_<count>.pt``) holding a plain state dict (or one
under "state_dict"): ``W_enc`` (d, N), ``b_enc``, ``W_dec`` (N, d), ``b_dec``; gated SAEs add ``b_gate``,
``r_mag``, ``b_mag``.

The config's fields and ViT-Prisma's defaults where a field is absent: ``d_in`` (768), ``expansion_factor`` (16; N =
d_in x expansion_factor, a ``d_sae`` field is dropped by its reader), ``architecture`` ("standard" or "gated"),
``activation_fn_str`` ("topk", with ``activation_fn_kwargs.k``; or "relu", "tanh-relu"), ``normalize_activations``
("layer_norm": each token standardised by its own mean and std, undone after decoding; "constant_norm_rescale";
anything else none), ``hook_point_layer`` (9) and ``layer_subtype`` ("ln2.hook_normalized"; the hook is
``blocks.<layer>.<subtype>``, and ``hook_resid_post`` is vitviz's block <layer>), ``cls_token_only`` and
``use_patches_only`` (the tokens it was trained on), ``model_name``.

The forward pass: z = norm(x) - b_dec; codes = act(z W_enc + b_enc) (TopK: the k largest, then ReLU); gated:
[z W_enc + b_gate > 0] * act(z (W_enc * exp(r_mag)) + b_mag); x̂ = norm⁻¹(codes W_dec + b_dec).
"""

from __future__ import annotations

from pathlib import Path

from vitviz.messages import clip_text
from vitviz.sae.errors import SAEFormatError
from vitviz.sae.formats.base import (
    SAEFileFormat,
    block_of_hook,
    check_size,
    fill,
    folder_of,
    integer,
    json_object,
    load_torch,
    read_config,
    state_dict_of,
)
from vitviz.sae.formats.module import ExternalConfig, ExternalSAE

CONFIG = "config.json"
ACTIVATIONS = {"relu": "relu", "topk": "topk", "tanh-relu": "tanh_relu"}
KNOWN = {"W_enc", "b_enc", "W_dec", "b_dec", "b_gate", "r_mag", "b_mag"}


def detect(path: Path) -> bool:
    header = json_object(folder_of(path) / CONFIG)
    return header is not None and "d_in" in header and header.get("format") != "vitviz-sae"


def _weights(path: Path) -> Path:
    if path.is_file() and path.suffix in (".pt", ".pth"):
        return path
    folder = folder_of(path)
    found = sorted(p for p in folder.iterdir() if p.suffix in (".pt", ".pth") and p.is_file())
    if len(found) != 1:
        named = ", ".join(p.name for p in found[:5]) or "none"
        raise SAEFormatError(
            f"{folder}: expected one .pt weights file beside config.json, found {len(found)} ({named}); "
            "name the file to read"
        )
    return found[0]


def load(path: Path) -> ExternalSAE:
    folder = folder_of(path)
    source = folder / CONFIG
    cfg = read_config(source)
    if cfg.get("is_transcoder"):
        raise SAEFormatError(f"{source} is a transcoder (is_transcoder), not an SAE of one block's output")
    architecture = cfg.get("architecture", "standard")
    if architecture not in ("standard", "gated"):
        raise SAEFormatError(
            f"{source}: architecture {clip_text(repr(architecture), 60)} is not one ViT-Prisma loads (standard, gated)"
        )
    kind = cfg.get("activation_fn_str", "topk")
    if not isinstance(kind, str) or kind not in ACTIVATIONS:
        raise SAEFormatError(
            f"{source}: activation_fn_str {clip_text(repr(kind), 60)} is not one vitviz reads (relu, topk, tanh-relu)"
        )
    d_in = integer(cfg.get("d_in", 768), "d_in", source)
    if "expansion_factor" in cfg or "d_sae" not in cfg:
        latents = d_in * integer(cfg.get("expansion_factor", 16), "expansion_factor", source)
    else:
        latents = integer(cfg["d_sae"], "d_sae", source)
    kwargs = cfg.get("activation_fn_kwargs") if isinstance(cfg.get("activation_fn_kwargs"), dict) else {}
    if kind == "topk" and "k" not in kwargs:
        raise SAEFormatError(f"{source}: a topk SAE's activation_fn_kwargs has no k")
    k = min(integer(kwargs["k"], "activation_fn_kwargs.k", source), latents) if kind == "topk" else 0
    norm = cfg.get("normalize_activations", "layer_norm")
    layer, subtype = cfg.get("hook_point_layer", 9), cfg.get("layer_subtype", "ln2.hook_normalized")
    hook = f"blocks.{layer}.{subtype}" if isinstance(layer, int) else None
    tokens = "cls" if cfg.get("cls_token_only") else "patches" if cfg.get("use_patches_only") else "all"
    config = ExternalConfig(
        d_in=d_in,
        latents=latents,
        activation=ACTIVATIONS[kind],
        k=k,
        gated=architecture == "gated",
        pre_encoder_bias=True,
        input_norm=norm if norm in ("layer_norm", "constant_norm_rescale") else "none",
        block=block_of_hook(hook),
        hook=hook,
        tokens=tokens,
        model=cfg.get("model_name") if isinstance(cfg.get("model_name"), str) else None,
        format="vit-prisma",
    )
    check_size(d_in, latents, str(source))
    weights = _weights(path)
    state = state_dict_of(load_torch(weights), weights)
    unknown = sorted(set(state) - KNOWN)
    if unknown:
        raise SAEFormatError(f"{weights} holds tensors a ViT-Prisma SAE does not have: {clip_text(str(unknown), 150)}")
    sae = ExternalSAE(config)
    fill(
        sae,
        {name: t for name, t in state.items() if name in sae.state_dict()},
        weights,
        optional=("b_enc",) if config.gated else (),
    )
    return sae


FORMAT = SAEFileFormat(
    name="vit-prisma",
    description="ViT-Prisma's folder (config.json + a .pt state dict)",
    detect=detect,
    load=load,
)
