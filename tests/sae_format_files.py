"""Tiny SAE files in each library's exact layout (saev, SAELens 6 and pre-6, ViT-Prisma, sparsify), written here with
random weights, and the reference forward pass of each (tests/sae_references.py): ``CASES`` maps a case's name to a
function ``write(folder) -> (path to load, reference(x) -> (codes, reconstruction))``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import torch
from sae_references import prisma_forward, saelens_forward, saev_forward, sparsify_forward
from safetensors.torch import save_file

D, N = 16, 64
Reference = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def weights(seed: int, d: int = D, n: int = N) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "W_enc": torch.randn(d, n, generator=g) * 0.4,
        "b_enc": torch.randn(n, generator=g) * 0.3,
        "W_dec": torch.randn(n, d, generator=g) * 0.4,
        "b_dec": torch.randn(d, generator=g) * 0.5,
    }


def write_saev(path: Path, header: dict, state: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes((json.dumps(header) + "\n").encode() + buffer.getvalue())
    return path


def saev_case(header: dict, threshold: float | None = None, where: str = "clip/sae.pt"):
    def write(folder: Path):
        state = weights(1)
        if threshold is not None:
            state["activation.threshold"] = torch.tensor(threshold)
        path = write_saev(folder / where, header, state)
        return path, lambda x: saev_forward(header, state, x)

    return write


def saelens_cfg(architecture: str, norm: str = "none", **extra) -> dict:
    return {
        "d_in": D,
        "d_sae": N,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": norm,
        "reshape_activations": "none",
        "architecture": architecture,
        "metadata": {"sae_lens_version": "6.5.1", "hook_name": "blocks.7.hook_resid_post", "model_name": "vit-b"},
        **extra,
    }


def saelens_case(cfg: dict, d: int = D, n: int = N):
    def write(folder: Path):
        state = weights(2, d, n)
        g = torch.Generator().manual_seed(5)
        if cfg.get("architecture") == "jumprelu":
            state["threshold"] = torch.rand(n, generator=g) * 0.5
        if cfg.get("architecture") == "gated":
            del state["b_enc"]
            state |= {name: torch.randn(n, generator=g) * 0.3 for name in ("b_gate", "r_mag", "b_mag")}
        if cfg.get("rescale_acts_by_decoder_norm"):
            state["W_dec"] = state["W_dec"] * torch.rand(n, 1, generator=g) * 3
        if cfg.get("finetuning_scaling_factor"):
            state["scaling_factor"] = torch.rand(n, generator=g) + 0.5
        folder.mkdir(parents=True, exist_ok=True)
        save_file(state, folder / "sae_weights.safetensors")
        save_file({"sparsity": torch.zeros(n)}, folder / "sparsity.safetensors")
        (folder / "cfg.json").write_text(json.dumps(cfg))
        return folder, lambda x: saelens_forward(cfg, state, x)

    return write


def prisma_case(cfg: dict, gated: bool = False, d: int = D):
    def write(folder: Path):
        n = d * cfg.get("expansion_factor", 16)
        state = weights(3, d, n)
        if gated:
            g = torch.Generator().manual_seed(6)
            state |= {name: torch.randn(n, generator=g) * 0.3 for name in ("b_gate", "r_mag", "b_mag")}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg))
        torch.save(state, folder / "n_images_2600058.pt")
        return folder, lambda x: prisma_forward(cfg, state, x)

    return write


def prisma_cfg(**extra) -> dict:
    # absent: normalize_activations (ViT-Prisma's default is layer_norm), architecture ("standard")
    return {
        "d_in": D,
        "expansion_factor": N // D,
        "activation_fn_str": "topk",
        "activation_fn_kwargs": {"k": 6},
        "hook_point_layer": 10,
        "layer_subtype": "hook_resid_post",
        "model_name": "open-clip:laion/CLIP-ViT-B-32-DataComp.XL-s13B-b90K",
        **extra,
    }


def sparsify_case(cfg: dict, dtype=torch.bfloat16, skip: bool = False, hookpoint: str = "layers.5", d: int = D):
    def write(folder: Path):
        n = cfg.get("num_latents") or d * cfg["expansion_factor"]
        g = torch.Generator().manual_seed(4)
        state = {
            "encoder.weight": (torch.randn(n, d, generator=g) * 0.4).to(dtype),
            "encoder.bias": (torch.randn(n, generator=g) * 0.3).to(dtype),
            "W_dec": (torch.randn(n, d, generator=g) * 0.4).to(dtype),
            "b_dec": (torch.randn(d, generator=g) * 0.5).to(dtype),
        }
        if skip:
            state["W_skip"] = (torch.randn(d, d, generator=g) * 0.1).to(dtype)
        where = folder / hookpoint
        where.mkdir(parents=True, exist_ok=True)
        save_file(state, where / "sae.safetensors")
        (where / "cfg.json").write_text(json.dumps({**cfg, "d_in": d}))
        (folder / "config.json").write_text(json.dumps({"model": "facebook/dinov2-small", "batch_size": 8}))
        return where, lambda x: sparsify_forward(cfg, state, x)

    return write


CASES = {
    "saev-legacy": saev_case({"d_vit": D, "exp_factor": N // D, "n_reinit_samples": 10, "l1_coeff": 4e-4}),
    "saev-1-topk": saev_case({"schema": 1, "cls": "TopK", "cfg": {"d_vit": D, "exp_factor": N // D, "top_k": 6}}),
    "saev-1-config": saev_case(
        {
            "schema": 1,
            "cls": "SparseAutoencoderConfig",
            "cfg": {"d_vit": D, "exp_factor": N // D, "activation": {"cls": "TopK", "params": {"top_k": 6}}},
        }
    ),
    "saev-2": saev_case(
        {"schema": 2, "cfg": {"d_vit": D, "exp_factor": N // D, "activation": {"cls": "Relu", "params": {}}}}
    ),
    "saev-3": saev_case(
        {
            "schema": 3,
            "cfg": {"d_model": D, "exp_factor": N // D, "activation": {"cls": "TopK", "params": {"top_k": 5}}},
        }
    ),
    "saev-4-batchtopk": saev_case(
        {"schema": 4, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "BatchTopK", "params": {"top_k": 5}}}},
        threshold=0.6,
    ),
    "saev-5-topk": saev_case(
        {
            "schema": 5,
            "cfg": {
                "d_model": D,
                "d_sae": N,
                "activation": {"cls": "TopK", "params": {"top_k": 7, "sparsity": {"cls": "NoSparsity", "params": {}}}},
            },
            "commit": "abc",
            "lib": "1.2",
        }
    ),
    "saev-5-batchtopk-dinov3": saev_case(
        {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "BatchTopK", "params": {"top_k": 4}}}},
        threshold=0.4,
        where="layer_11/abc123xy/sae.pt",
    ),
    "saelens-standard": saelens_case(saelens_cfg("standard")),
    "saelens-topk": saelens_case(saelens_cfg("topk", k=6, rescale_acts_by_decoder_norm=False)),
    "saelens-topk-rescaled": saelens_case(saelens_cfg("topk", k=6, rescale_acts_by_decoder_norm=True)),
    "saelens-jumprelu": saelens_case(saelens_cfg("jumprelu")),
    "saelens-gated": saelens_case(saelens_cfg("gated")),
    "saelens-layer-norm": saelens_case(saelens_cfg("topk", "layer_norm", k=6)),
    "saelens-constant-norm": saelens_case(saelens_cfg("jumprelu", "constant_norm_rescale")),
    "saelens-expected-average": saelens_case(saelens_cfg("standard", "expected_average_only_in")),
    "saelens-no-b-dec": saelens_case(saelens_cfg("gated", "layer_norm", apply_b_dec_to_input=False)),
    "saelens-6-unversioned-gated": saelens_case(  # no version anywhere: SAELens upgrades it as a pre-6 config
        {k: v for k, v in saelens_cfg("gated").items() if k != "metadata"}
        | {"metadata": {"hook_name": "blocks.2.hook_resid_post"}}
    ),
    "saelens-5-relu": saelens_case(
        {
            "d_in": D,
            "d_sae": N,
            "activation_fn_str": "relu",
            "hook_point": "blocks.3.hook_resid_pre",
            "hook_layer": 3,
            "model_name": "gpt2-small",
            "normalize_activations": False,
            "sae_lens_training_version": "3.2.0",
            "dtype": "float32",
        }
    ),
    "saelens-5-topk": saelens_case(
        {
            "d_in": D,
            "d_sae": N,
            "activation_fn_str": "topk",
            "activation_fn_kwargs": {"k": 5},
            "hook_point": "blocks.4.hook_resid_post",
            "hook_layer": 4,
            "apply_b_dec_to_input": False,
            "normalize_activations": "constant_norm_rescale",
            "finetuning_scaling_factor": True,
            "sae_lens_version": "5.9.1",
        }
    ),
    "prisma-default-layer-norm": prisma_case(prisma_cfg()),
    "prisma-relu-none": prisma_case(prisma_cfg(activation_fn_str="relu", normalize_activations="none")),
    "prisma-gated-cls": prisma_case(prisma_cfg(architecture="gated", cls_token_only=True), gated=True),
    "prisma-patches-tanh": prisma_case(prisma_cfg(activation_fn_str="tanh-relu", use_patches_only=True)),
    "sparsify-bf16": sparsify_case({"num_latents": 0, "expansion_factor": N // D, "k": 6, "normalize_decoder": True}),
    "sparsify-fp32-latents": sparsify_case({"num_latents": 48, "k": 5}, dtype=torch.float32, hookpoint="layers.0"),
    "sparsify-groupmax-skip": sparsify_case(
        {"num_latents": N, "k": 8, "activation": "groupmax", "skip_connection": True}, skip=True
    ),
}
