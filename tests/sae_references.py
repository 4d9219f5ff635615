"""Reference forward passes of the SAEs that other libraries publish, written from each library's own code (saev
``saev/nn/modeling.py`` at each header schema, SAELens ``sae_lens/saes/*.py`` and its pre-6 config upgrade, ViT-Prisma
``vit_prisma/sae/sae.py``, sparsify ``sparsify/sparse_coder.py`` + ``fused_encoder.py``), step by step as they compute,
from the raw config and state dict -- independent of vitviz's loader (no shared code, per-architecture formulas).

Each ``*_forward(config, state, x)`` returns (codes, reconstruction) for x of any leading shape.
"""

from __future__ import annotations

import torch


def keep_top(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Zero all but the k largest entries of each row (by sorting, not torch.topk), values unchanged."""
    order = pre.argsort(dim=-1, descending=True)[..., :k]
    mask = torch.zeros_like(pre, dtype=torch.bool).scatter(-1, order, True)
    return torch.where(mask, pre, torch.zeros_like(pre))


# --- saev -----------------------------------------------------------------------------------------------------------
def saev_forward(header: dict, state: dict, x: torch.Tensor):
    """saev.nn.modeling: legacy and schema-1 encoders subtract b_dec first (removed 2025-07-31 with schema 2)."""
    if "schema" not in header:
        cls, params, subtract = "Relu", {}, True
    elif header["schema"] == 1 and header.get("cls") in ("Relu", "TopK", "BatchTopK"):
        cls, params, subtract = header["cls"], {"top_k": header["cfg"].get("top_k", 32)}, True
    else:
        act = header["cfg"]["activation"]
        cls, params, subtract = act["cls"], act["params"], header["schema"] == 1
    x_in = x - state["b_dec"] if subtract else x
    h = torch.einsum("...d,dn->...n", x_in, state["W_enc"]) + state["b_enc"]
    if cls == "Relu":
        f = torch.nn.functional.relu(h)
    elif cls == "TopK":  # TopKActivation: mask * x, no ReLU
        f = keep_top(h, min(params.get("top_k", 32), h.shape[-1]))
    else:  # BatchTopKActivation in eval: x where x > threshold, or x where x > 0 for a threshold <= 0
        theta = float(state.get("activation.threshold", torch.tensor(0.0)))
        f = torch.where(h > theta, h, torch.zeros_like(h)) if theta > 0 else torch.where(h > 0, h, torch.zeros_like(h))
    return f, torch.einsum("...n,nd->...d", f, state["W_dec"]) + state["b_dec"]


# --- SAELens and ViT-Prisma share their run-time normalisations -----------------------------------------------------
def norm_in(x: torch.Tensor, kind: str, d_in: int):
    if kind == "layer_norm":
        mu = x.mean(dim=-1, keepdim=True)
        centred = x - mu
        std = centred.std(dim=-1, keepdim=True)
        return centred / (std + 1e-5), lambda y: y * std + mu
    if kind == "constant_norm_rescale":
        coeff = (d_in**0.5) / x.norm(dim=-1, keepdim=True)
        return x * coeff, lambda y: y / coeff
    return x, lambda y: y


def saelens_forward(cfg: dict, state: dict, x: torch.Tensor):
    """sae_lens.saes: process_sae_in (normalise, subtract b_dec), the architecture's encode, decode, norm out."""
    version = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version")
    if not version or int(str(version).split(".")[0]) < 6:  # handle_pre_6_0_config
        cfg = dict(cfg)
        fn = cfg.get("activation_fn_str", cfg.get("activation_fn", "relu"))
        cfg.setdefault("architecture", "standard")
        if fn == "topk" and (cfg.get("activation_fn_kwargs") or {}).get("k") is not None:
            cfg["architecture"], cfg["k"] = "topk", cfg["activation_fn_kwargs"]["k"]
        if isinstance(cfg.get("normalize_activations"), bool):
            cfg["normalize_activations"] = "expected_average_only_in" if cfg["normalize_activations"] else "none"
    arch = cfg["architecture"]
    kind = cfg.get("normalize_activations") or "none"
    sae_in, out = norm_in(x, kind, cfg["d_in"])
    if cfg.get("apply_b_dec_to_input", True):
        sae_in = sae_in - state["b_dec"]
    W_dec = state["W_dec"]
    if "scaling_factor" in state:
        W_dec = W_dec * state["scaling_factor"][:, None]
    if arch == "gated":
        gate = ((sae_in @ state["W_enc"] + state["b_gate"]) > 0).float()
        mag = torch.relu(sae_in @ (state["W_enc"] * state["r_mag"].exp()) + state["b_mag"])
        acts = gate * mag
    else:
        hidden = sae_in @ state["W_enc"] + state["b_enc"]
        if arch == "standard":
            acts = torch.relu(hidden)
        elif arch == "jumprelu":
            acts = torch.relu(hidden) * (hidden > state["threshold"]).float()
        else:  # topk: torch.topk, ReLU of the kept values
            if cfg.get("rescale_acts_by_decoder_norm"):
                hidden = hidden * W_dec.norm(dim=-1)
            acts = torch.relu(keep_top(hidden, cfg.get("k", 100)))
            if cfg.get("rescale_acts_by_decoder_norm"):
                return acts, out((acts / W_dec.norm(dim=-1)) @ W_dec + state["b_dec"])
    return acts, out(acts @ W_dec + state["b_dec"])


def prisma_forward(cfg: dict, state: dict, x: torch.Tensor):
    """vit_prisma.sae.sae: Standard or Gated SparseAutoencoder with the config's defaults."""
    kind = cfg.get("normalize_activations", "layer_norm")
    sae_in, out = norm_in(x, kind, cfg.get("d_in", 768))
    sae_in = sae_in - state["b_dec"]
    fn = cfg.get("activation_fn_str", "topk")

    def act(h):
        if fn == "relu":
            return torch.relu(h)
        if fn == "tanh-relu":
            return torch.tanh(torch.relu(h))
        return torch.relu(keep_top(h, cfg["activation_fn_kwargs"]["k"]))

    if cfg.get("architecture", "standard") == "gated":
        gate = ((sae_in @ state["W_enc"] + state["b_gate"]) > 0).float()
        acts = gate * act(sae_in @ (state["W_enc"] * state["r_mag"].exp()) + state["b_mag"])
    else:
        acts = act(torch.einsum("...d,dn->...n", sae_in, state["W_enc"]) + state["b_enc"])
    return acts, out(torch.einsum("...n,nd->...d", acts, state["W_dec"]) + state["b_dec"])


def sparsify_forward(cfg: dict, state: dict, x: torch.Tensor):
    """sparsify.SparseCoder.encode / decode: ReLU(linear(x - b_dec)), top-k or group max, embedding-bag decode."""
    s = {name: t.float() for name, t in state.items()}
    flat = x.reshape(-1, x.shape[-1])
    pre = torch.relu(torch.nn.functional.linear(flat - s["b_dec"], s["encoder.weight"], s["encoder.bias"]))
    k = cfg.get("k", 32)
    if cfg.get("activation", "topk") == "groupmax":
        values, inside = pre.unflatten(-1, (k, -1)).max(dim=-1)
        indices = inside + torch.arange(0, pre.shape[1], pre.shape[1] // k)
    else:
        values, indices = pre.topk(k, dim=-1, sorted=False)
    recon = torch.nn.functional.embedding_bag(indices, s["W_dec"], mode="sum", per_sample_weights=values) + s["b_dec"]
    if "W_skip" in s:
        recon = recon + flat @ s["W_skip"].mT
    codes = torch.zeros_like(pre).scatter(-1, indices, values)
    return codes.reshape(*x.shape[:-1], -1), recon.reshape(x.shape)


def vitviz_forward(config: dict, state: dict, x: torch.Tensor):
    """vitviz's TopKSAE, from its paper formulas: z = (x - mean) / scale, TopK(ReLU((z - b_dec) W_enc + b_enc))."""
    z = (x - state["mean"]) / state["scale"]
    if config.get("pre_encoder_bias", True):
        z = z - state["b_dec"]
    pre = z @ state["W_enc"] + state["b_enc"]
    codes = torch.relu(keep_top(pre, config["k"])) if config["activation"] == "topk" else torch.relu(pre)
    return codes, (codes @ state["W_dec"] + state["b_dec"]) * state["scale"] + state["mean"]
