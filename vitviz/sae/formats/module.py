"""``ExternalSAE``: one module that computes every SAE another library publishes, exactly as that library does.

Each library's forward pass is a choice at each of these steps, in the order data flows (the format readers set the
choices from the file; ``ExternalConfig`` names them):

    x (..., d)                        one block's output tokens, in the model's units
    x = (x - input_mean) / scale      only with an input scaling set (``set_input_scaling``): saev's mean and
                                      scalar, which its sae.pt does not store, estimated by `vitviz sae calibrate`
    z = norm_in(x)                    "none"; "layer_norm": (x - mean(x)) / (std(x) + 1e-5), per token, std with
                                      n - 1 (SAELens, ViT-Prisma); "constant_norm_rescale": x * sqrt(d) / |x|
    z = z - b_dec                     when ``pre_encoder_bias`` (SAELens's apply_b_dec_to_input, ViT-Prisma,
                                      sparsify, saev's legacy and schema-1 files)
    pre = z W_enc + b_enc             (..., N)
    codes = act(pre)                  "relu"; "topk": the k largest, then ReLU (SAELens, ViT-Prisma, sparsify's
                                      ReLU-then-top-k is the same); "topk_signed": the k largest as they are (saev);
                                      "jumprelu": ReLU(pre) where pre > threshold (SAELens; saev's BatchTopK at
                                      inference, one threshold for all); "groupmax": the largest ReLU(pre) of each of
                                      k equal groups (sparsify); "tanh_relu": tanh(ReLU(pre)) (ViT-Prisma)
    gated:  codes = [z W_enc + b_gate > 0] * act(z (W_enc * exp(r_mag)) + b_mag)   (SAELens and ViT-Prisma "gated")
    ẑ = codes W_dec + b_dec
    x̂ = norm_out(ẑ) (+ x W_skipᵀ)     norm_in undone with x's own statistics; sparsify's skip connection
    x̂ = x̂ * scale + input_mean        the input scaling undone, when set

``encode(x)`` returns the codes; ``reconstruct(x)`` returns x̂ in x's units for any leading shape. ``decode(codes)``
needs x's statistics when the normalisation is per token: pass ``x=``, or use ``reconstruct``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn

from vitviz.sae.errors import SAEError

ACTIVATIONS = ("relu", "topk", "topk_signed", "jumprelu", "groupmax", "tanh_relu")
NORMS = ("none", "layer_norm", "constant_norm_rescale")
TOKENS = ("patches", "all", "cls")
LN_EPS = 1e-5  # SAELens's and ViT-Prisma's layer_norm epsilon, added to the std


@dataclass(frozen=True)
class ExternalConfig:
    d_in: int  # width of the activations it reads
    latents: int  # N
    activation: Literal["relu", "topk", "topk_signed", "jumprelu", "groupmax", "tanh_relu"] = "relu"
    k: int = 0  # latents kept per token ("topk", "topk_signed"), or the number of groups ("groupmax")
    gated: bool = False  # the gated encoder (b_gate, r_mag, b_mag); ``activation`` is then its magnitude path's
    pre_encoder_bias: bool = False  # subtract b_dec before the encoder
    input_norm: Literal["none", "layer_norm", "constant_norm_rescale"] = "none"
    skip: bool = False  # sparsify's linear skip connection W_skip (d, d)
    block: int | None = None  # the vitviz block whose output it reads, counted from 0
    block_from_end: int | None = None  # or counted from the end (saev's default layer -2), when only that is known
    hook: str | None = None  # the hook or layer as the file names it
    tokens: Literal["patches", "all", "cls"] = "all"  # the tokens it was trained on
    model: str | None = None  # the model it was trained on, as the file names it
    format: str = ""  # the library whose file it came from
    scaling_missing: str | None = None  # why the input scaling it was trained with is not in the file, if it is not

    def __post_init__(self) -> None:
        if self.d_in < 1 or self.latents < 1:
            raise SAEError(f"d_in and latents must be at least 1; got d_in={self.d_in}, latents={self.latents}")
        if self.activation not in ACTIVATIONS:
            raise SAEError(f"activation must be one of {ACTIVATIONS}; got {self.activation!r}")
        if self.input_norm not in NORMS:
            raise SAEError(f"input_norm must be one of {NORMS}; got {self.input_norm!r}")
        if self.tokens not in TOKENS:
            raise SAEError(f"tokens must be one of {TOKENS}; got {self.tokens!r}")
        if self.activation in ("topk", "topk_signed", "groupmax") and not 1 <= self.k <= self.latents:
            raise SAEError(f"k must be between 1 and latents = {self.latents}; got {self.k}")
        if self.activation == "groupmax" and self.latents % self.k:
            raise SAEError(f"groupmax needs latents ({self.latents}) to be a multiple of k ({self.k})")

    def to_dict(self) -> dict:
        return asdict(self)


class ExternalSAE(nn.Module):
    """An SAE read from another library's file (see the module docstring). Weights are fp32; eval mode always."""

    def __init__(self, config: ExternalConfig):
        super().__init__()
        self.config = config
        d, N = config.d_in, config.latents
        self.W_enc = nn.Parameter(torch.zeros(d, N))
        self.b_enc = nn.Parameter(torch.zeros(N))
        self.W_dec = nn.Parameter(torch.zeros(N, d))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.threshold = nn.Parameter(torch.zeros(N)) if config.activation == "jumprelu" else None
        self.b_gate = nn.Parameter(torch.zeros(N)) if config.gated else None
        self.r_mag = nn.Parameter(torch.zeros(N)) if config.gated else None
        self.b_mag = nn.Parameter(torch.zeros(N)) if config.gated else None
        self.W_skip = nn.Parameter(torch.zeros(d, d)) if config.skip else None
        self.register_buffer("scale", torch.ones(()))  # as TopKSAE's: a latent's direction is W_dec[j] * scale
        self.register_buffer("input_mean", None)  # (d,) with an input scaling set; else no scaling
        self.scaling_note: str | None = None  # where the input scaling came from, when set
        self.requires_grad_(False)

    def set_input_scaling(self, mean: torch.Tensor, scale: float, note: str) -> None:
        """Feed the SAE (x - mean) / scale and return reconstructions times scale plus mean: the input scaling it
        was trained with (saev's data loader), as ``note`` says it was found (e.g. estimated from an index)."""
        if tuple(mean.shape) != (self.config.d_in,) or not math.isfinite(scale) or scale <= 0:
            raise SAEError(f"an input scaling needs a ({self.config.d_in},) mean and a positive scale")
        if self.config.skip:
            raise SAEError("an SAE with a skip connection (sparsify) takes no input scaling: its file has it all")
        self.input_mean = mean.detach().to(self.W_enc)
        self.scale.fill_(scale)
        self.scaling_note = note

    # --- what the other parts of vitviz read ---------------------------------------------------------------------
    @property
    def block(self) -> int | None:
        return self.config.block

    @property
    def tokens(self) -> str:
        return self.config.tokens

    @property
    def model(self) -> str | None:
        return self.config.model

    @property
    def scaling_missing(self) -> str | None:
        return self.config.scaling_missing if self.input_mean is None else None

    def block_for(self, num_blocks: int) -> int | None:
        """The block it reads in a model of ``num_blocks`` blocks (resolving a block counted from the end)."""
        return block_for(self.config.block, self.config.block_from_end, num_blocks)

    # --- the normalisation ---------------------------------------------------------------------------------------
    def normalise(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """(..., d) in the model's units -> fp32 (..., d) and the statistics that undo it."""
        self._check_width(x)
        x = x.to(self.W_enc.dtype)
        if self.input_mean is not None:
            x = (x - self.input_mean) / self.scale
        if self.config.input_norm == "layer_norm":
            mean = x.mean(dim=-1, keepdim=True)
            centred = x - mean
            std = centred.std(dim=-1, keepdim=True)
            return centred / (std + LN_EPS), (std, mean)
        if self.config.input_norm == "constant_norm_rescale":
            coefficient = math.sqrt(self.config.d_in) / x.norm(dim=-1, keepdim=True)
            return x * coefficient, (coefficient,)
        return x, ()

    def denormalise(self, z: torch.Tensor, stats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if self.config.input_norm == "layer_norm":
            std, mean = stats
            z = z * std + mean
        elif self.config.input_norm == "constant_norm_rescale":
            z = z / stats[0]
        return z if self.input_mean is None else z * self.scale + self.input_mean

    # --- the encoder ---------------------------------------------------------------------------------------------
    def _linear(self, z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        flat = z.reshape(-1, z.shape[-1])
        return torch.addmm(bias, flat, weight).view(*z.shape[:-1], -1)

    def _activate(self, pre: torch.Tensor) -> torch.Tensor:
        kind, k = self.config.activation, self.config.k
        if kind == "relu":
            return pre.relu()
        if kind == "tanh_relu":
            return pre.relu().tanh()
        if kind == "jumprelu":
            return pre.relu() * (pre > self.threshold)
        if kind == "groupmax":
            values, inside = pre.relu().unflatten(-1, (k, -1)).max(dim=-1)
            offsets = torch.arange(0, self.config.latents, self.config.latents // k, device=pre.device)
            return torch.zeros_like(pre).scatter(-1, inside + offsets, values)
        values, indices = pre.topk(k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter(-1, indices, values.relu() if kind == "topk" else values)

    def _codes(self, z: torch.Tensor) -> torch.Tensor:
        if self.config.pre_encoder_bias:
            z = z - self.b_dec
        if not self.config.gated:
            return self._activate(self._linear(z, self.W_enc, self.b_enc))
        gate = self._linear(z, self.W_enc, self.b_gate) > 0
        magnitude = self._activate(self._linear(z, self.W_enc * self.r_mag.exp(), self.b_mag))
        return gate * magnitude

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) in the model's units -> codes (..., N)."""
        return self._codes(self.normalise(x)[0])

    # --- the decoder ---------------------------------------------------------------------------------------------
    def decode(self, codes: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Codes (..., N) -> (..., d) in the model's units. A per-token normalisation (and a skip connection) needs
        the tokens ``x`` the codes came from; without them it is refused (``reconstruct(x)`` always works)."""
        if codes.shape[-1] != self.config.latents:
            raise SAEError(f"codes have {codes.shape[-1]} latents; this SAE has {self.config.latents}")
        needs_x = self.config.input_norm != "none" or self.config.skip
        if needs_x and x is None:
            why = "a skip connection" if self.config.input_norm == "none" else f"{self.config.input_norm} of each token"
            raise SAEError(
                f"this SAE's decoder needs the input tokens ({why}): call decode(codes, x=tokens) or reconstruct(x)"
            )
        stats = self.normalise(x)[1] if x is not None else ()
        out = self.denormalise(self._linear(codes.to(self.W_dec.dtype), self.W_dec, self.b_dec), stats)
        if self.config.skip:
            out = out + self._linear(x.to(self.W_enc.dtype), self.W_skip.T, torch.zeros_like(self.b_dec))
        return out

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """x̂ (..., d) of x (..., d), in x's units."""
        z, stats = self.normalise(x)
        out = self.denormalise(self._linear(self._codes(z), self.W_dec, self.b_dec), stats)
        if self.config.skip:
            out = out + self._linear(x.to(self.W_enc.dtype), self.W_skip.T, torch.zeros_like(self.b_dec))
        return out

    def decoded_change(self, delta: torch.Tensor, latents: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """decode(codes + delta, x) - decode(codes, x) in the model's units, for ``delta`` (..., L) on the latents
        ``latents`` (L,) of the tokens ``x`` (..., d): the biases (and a skip connection) cancel; a per-token
        normalisation scales the change by that token's own factor."""
        change = (delta.to(self.W_dec.dtype) @ self.W_dec[latents]) * self.scale  # scale: 1 without input scaling
        if self.config.input_norm == "none":
            return change
        factor = self.normalise(x)[1][0]  # layer_norm: the token's std; constant_norm_rescale: sqrt(d) / |x|
        return change * factor if self.config.input_norm == "layer_norm" else change / factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reconstruct(x)

    def train(self, mode: bool = True) -> ExternalSAE:
        """Always evaluation: these SAEs are read, never trained here."""
        return super().train(False)

    def _check_width(self, x: torch.Tensor) -> None:
        if x.shape[-1] != self.config.d_in:
            raise SAEError(f"activations are {x.shape[-1]} wide; this SAE reads {self.config.d_in}-wide tokens")


def block_for(block: int | None, from_end: int | None, num_blocks: int) -> int | None:
    """A block counted from 0 or from the end, in a model of ``num_blocks`` blocks; None when neither is known."""
    if block is None and from_end is None:
        return None
    resolved = block if block is not None else num_blocks + from_end
    if not 0 <= resolved < num_blocks:
        named = f"block {block}" if block is not None else f"layer {from_end} (from the end)"
        raise SAEError(f"the SAE reads {named}, which a model of {num_blocks} blocks does not have")
    return resolved


def warn_scaling(config: ExternalConfig, source: str) -> None:
    """The warning line for an SAE whose file lacks the input scaling it was trained with."""
    if config.scaling_missing:
        warnings.warn(
            f"{source}: {config.scaling_missing}; `vitviz sae calibrate INDEX SAE` estimates it from an index",
            UserWarning,
            stacklevel=3,
        )
