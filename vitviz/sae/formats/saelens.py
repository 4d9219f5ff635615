"""SAELens's folders (``sae_lens.saes``: ``SAE.load_from_disk``): ``cfg.json`` + ``sae_weights.safetensors``
(+ ``sparsity.safetensors``, the latents' log frequencies, not needed to compute them); and ``save``, which writes
vitviz's SAEs in SAELens 6's layout.

``cfg.json``, SAELens 6 (``metadata.sae_lens_version`` 6 or later): ``d_in``, ``d_sae``, ``architecture``
("standard": ReLU; "topk": ``k``, ReLU on the k kept, ``rescale_acts_by_decoder_norm``; "jumprelu": a per-latent
``threshold`` tensor; "gated": ``b_gate``, ``r_mag``, ``b_mag`` and no ``b_enc``), ``apply_b_dec_to_input``,
``normalize_activations``, ``reshape_activations``, ``metadata`` {``hook_name``, ``model_name``...}.

Before 6 (no version, or an older one) the config is flat: ``activation_fn_str`` ("topk" with
``activation_fn_kwargs.k`` makes a TopK SAE), ``hook_point``, ``hook_layer``, ``model_name``, ``architecture``
(default "standard"), ``apply_b_dec_to_input`` (default true), ``normalize_activations`` (a bool in the oldest:
true meant "expected_average_only_in"), and a ``scaling_factor`` tensor (the fine-tuning scale of the codes before
the decoder, folded into ``W_dec`` here).

``normalize_activations``: "none"; "expected_average_only_in" (a constant factor, folded into the weights when the
file was saved, so none at inference); "constant_norm_rescale" (x scaled to norm sqrt(d_in), undone after);
"layer_norm" (x standardised per token, undone after). ``hook_name`` ``blocks.N.hook_resid_post`` is vitviz's block
N. ``rescale_acts_by_decoder_norm`` is folded into the weights at load (the same codes and reconstructions).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from vitviz.messages import clip_text
from vitviz.sae.errors import SAEError, SAEFormatError
from vitviz.sae.formats.base import (
    SAEFileFormat,
    block_of_hook,
    check_size,
    fill,
    folder_of,
    integer,
    load_safetensors,
    read_config,
)
from vitviz.sae.formats.module import ExternalConfig, ExternalSAE
from vitviz.sae.model import TopKSAE

CONFIG, WEIGHTS, SPARSITY = "cfg.json", "sae_weights.safetensors", "sparsity.safetensors"
ARCHITECTURES = ("standard", "topk", "jumprelu", "gated")
NORMS = {
    "none": "none",
    "expected_average_only_in": "none",
    "layer_norm": "layer_norm",
    "constant_norm_rescale": "constant_norm_rescale",
}
WRITTEN_VERSION = "6.0.0"  # the layout save writes


def detect(path: Path) -> bool:
    folder = folder_of(path)
    return (folder / CONFIG).is_file() and (folder / WEIGHTS).is_file()


def load(path: Path) -> ExternalSAE:
    folder = folder_of(path)
    cfg = read_config(folder / CONFIG)
    cfg = cfg if _major_version(cfg) >= 6 else _from_pre_6(cfg)
    config = _config(cfg, folder / CONFIG)
    check_size(config.d_in, config.latents, str(folder / CONFIG))
    tensors = load_safetensors(folder / WEIGHTS)
    scaling = tensors.pop("scaling_factor", tensors.pop("finetuning_scaling_factor", None))
    known = {"W_enc", "b_enc", "W_dec", "b_dec", "threshold", "b_gate", "r_mag", "b_mag"}
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise SAEFormatError(
            f"{folder / WEIGHTS} holds tensors a {cfg.get('architecture')} SAE does not have: "
            f"{clip_text(str(unknown), 150)}"
        )
    sae = ExternalSAE(config)
    fill(sae, tensors, folder / WEIGHTS, optional=("b_enc",) if config.gated else ())
    with torch.no_grad():
        if scaling is not None:  # codes x scaling_factor before the decoder (SAELens 5's fine-tuning scale)
            if tuple(scaling.shape) != (config.latents,):
                raise SAEFormatError(
                    f"{folder / WEIGHTS}: scaling_factor is {tuple(scaling.shape)}, not ({config.latents},)"
                )
            sae.W_dec.mul_(scaling.float()[:, None])
        if cfg.get("rescale_acts_by_decoder_norm"):  # SAELens's own folding: the same codes and reconstructions
            norms = sae.W_dec.norm(dim=-1)
            sae.W_enc.mul_(norms)
            sae.b_enc.mul_(norms)
            sae.W_dec.div_(norms[:, None])
    return sae


def _major_version(cfg: dict) -> int:
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    version = cfg.get("sae_lens_version") or metadata.get("sae_lens_version")
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def _from_pre_6(cfg: dict) -> dict:
    """SAELens's own upgrade of a flat pre-6 config (``handle_pre_6_0_config``): the fields vitviz needs."""
    renamed = {"hook_point": "hook_name", "activation_fn_str": "activation_fn"}
    cfg = {renamed.get(key, key): value for key, value in cfg.items()}
    cfg.setdefault("architecture", "standard")
    kwargs = cfg.get("activation_fn_kwargs") if isinstance(cfg.get("activation_fn_kwargs"), dict) else {}
    if cfg.get("activation_fn") == "topk" and kwargs.get("k") is not None:
        cfg["architecture"], cfg["k"] = "topk", kwargs["k"]
    norm = cfg.get("normalize_activations")
    if isinstance(norm, bool):
        cfg["normalize_activations"] = "expected_average_only_in" if norm else "none"
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    top = {key: cfg[key] for key in ("hook_name", "model_name", "hook_layer") if cfg.get(key) is not None}
    cfg["metadata"] = metadata | top
    return cfg


def _config(cfg: dict, source: Path) -> ExternalConfig:
    architecture = cfg.get("architecture")
    if architecture not in ARCHITECTURES:
        raise SAEFormatError(
            f"{source}: architecture {clip_text(repr(architecture), 60)} is not one vitviz reads "
            f"({', '.join(ARCHITECTURES)})"
        )
    norm = cfg.get("normalize_activations") or "none"
    if not isinstance(norm, str) or norm not in NORMS:
        raise SAEFormatError(
            f"{source}: normalize_activations {clip_text(repr(norm), 60)} is not one SAELens defines "
            f"({', '.join(NORMS)})"
        )
    if cfg.get("reshape_activations", "none") not in ("none", None):
        raise SAEFormatError(
            f"{source}: reshape_activations {clip_text(repr(cfg['reshape_activations']), 40)} reads attention heads' "
            "outputs, not a block's output"
        )
    metadata = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    d_in = integer(cfg.get("d_in"), "d_in", source)
    latents = integer(cfg.get("d_sae"), "d_sae", source)
    k = min(integer(cfg.get("k", 100), "k", source), latents) if architecture == "topk" else 0
    hook = metadata.get("hook_name")
    from_end = metadata.get("vitviz_block_from_end")
    tokens = metadata.get("vitviz_tokens")
    return ExternalConfig(
        d_in=d_in,
        latents=latents,
        activation={"standard": "relu", "topk": "topk", "jumprelu": "jumprelu", "gated": "relu"}[architecture],
        k=k,
        gated=architecture == "gated",
        pre_encoder_bias=bool(cfg.get("apply_b_dec_to_input", True)),
        input_norm=NORMS[norm],
        block=block_of_hook(hook),
        block_from_end=from_end if isinstance(from_end, int) and from_end < 0 else None,
        hook=hook if isinstance(hook, str) else None,
        tokens=tokens if tokens in ("patches", "all", "cls") else "all",
        model=metadata.get("model_name") if isinstance(metadata.get("model_name"), str) else None,
        format="saelens",
        scaling_missing=metadata.get("vitviz_scaling_missing") or None,
    )


# --- writing -----------------------------------------------------------------------------------------------------
def save(sae: nn.Module, folder: Path, model: str | None = None) -> Path:
    """Write ``sae`` (a TopKSAE or an ExternalSAE) as SAELens 6 writes one: ``cfg.json`` and
    ``sae_weights.safetensors`` in ``folder`` (created). vitviz's input normalisation (mean, scale) is folded into
    the weights, so SAELens computes the same codes and reconstructions."""
    cfg, tensors = _from_topk(sae) if isinstance(sae, TopKSAE) else _from_external(sae)
    config = sae.config
    block = getattr(config, "block", None)
    metadata = {
        "sae_lens_version": WRITTEN_VERSION,
        "sae_lens_training_version": WRITTEN_VERSION,
        "hook_name": f"blocks.{block}.hook_resid_post" if block is not None else getattr(config, "hook", None),
        "model_name": model or getattr(sae, "model", None),
        "vitviz_tokens": getattr(sae, "tokens", "patches"),
    }
    if getattr(config, "block_from_end", None) is not None:
        metadata["vitviz_block_from_end"] = config.block_from_end
    if getattr(sae, "scaling_missing", None):
        metadata["vitviz_scaling_missing"] = sae.scaling_missing
    cfg = {
        "d_in": config.d_in,
        "d_sae": config.latents,
        "dtype": "float32",
        "device": "cpu",
        "reshape_activations": "none",
        **cfg,
        "metadata": metadata,
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file({name: t.detach().float().cpu().contiguous() for name, t in tensors.items()}, folder / WEIGHTS)
    (folder / CONFIG).write_text(json.dumps(cfg, indent=1))
    return folder


def _from_topk(sae: TopKSAE) -> tuple[dict, dict[str, torch.Tensor]]:
    """z = (x - mean) / scale folded in: with b_dec' = mean + scale b_dec, x - b_dec' = scale (z - b_dec)."""
    c, scale = sae.config, sae.scale.detach().float()
    W_enc, b_enc, b_dec = sae.W_enc.detach().float(), sae.b_enc.detach().float(), sae.b_dec.detach().float()
    tensors = {
        "W_enc": W_enc / scale,
        "b_enc": b_enc if c.pre_encoder_bias else b_enc + b_dec @ W_enc,
        "W_dec": sae.W_dec.detach().float() * scale,
        "b_dec": sae.mean.detach().float() + scale * b_dec,
    }
    cfg = {"apply_b_dec_to_input": True, "normalize_activations": "none"}
    if c.activation == "topk":
        cfg |= {"architecture": "topk", "k": c.k, "rescale_acts_by_decoder_norm": False}
    elif c.activation == "batchtopk":  # at inference: the codes above one threshold
        cfg["architecture"] = "jumprelu"
        tensors["threshold"] = sae.threshold.detach().float().expand(c.latents).clone()
    else:
        cfg["architecture"] = "standard"
    return cfg, tensors


def _from_external(sae: ExternalSAE) -> tuple[dict, dict[str, torch.Tensor]]:
    c = sae.config
    unsupported = (
        "a skip connection" if c.skip else None,
        "an input scaling set beside its file (vitviz sae calibrate)" if sae.input_mean is not None else None,
        f"the {c.activation} activation" if c.activation not in ("relu", "topk", "jumprelu") else None,
        "a gated encoder with another activation than ReLU" if c.gated and c.activation != "relu" else None,
    )
    reason = next((r for r in unsupported if r), None)
    if reason:
        raise SAEError(
            f"SAELens has no SAE with {reason}: this {c.format or 'external'} SAE cannot be written in its layout"
        )
    names = ["W_enc", "W_dec", "b_dec"]
    if c.gated:
        architecture, names = "gated", names + ["b_gate", "r_mag", "b_mag"]
    else:
        architecture = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}[c.activation]
        names += ["b_enc"] + (["threshold"] if architecture == "jumprelu" else [])
    cfg = {
        "architecture": architecture,
        "apply_b_dec_to_input": c.pre_encoder_bias,
        "normalize_activations": c.input_norm,
    }
    if architecture == "topk":
        cfg |= {"k": c.k, "rescale_acts_by_decoder_norm": False}
    return cfg, {name: getattr(sae, name) for name in names}


FORMAT = SAEFileFormat(
    name="saelens",
    description="SAELens's folder (cfg.json + sae_weights.safetensors)",
    detect=detect,
    load=load,
)
