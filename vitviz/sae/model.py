"""A TopK sparse autoencoder (Gao et al. 2024, "Scaling and evaluating sparse autoencoders"), in the order data flows:

    x (..., d)                    one block's output tokens, in the model's units
    z = (x - mean) / scale        normalised: the training data's mean removed, mean squared norm 1
    pre = (z - b_dec) W_enc + b_enc   (..., N) the pre-encoder bias b_dec subtracted first
    codes = TopK(ReLU(pre))       k latents kept per token, the rest 0
    ẑ = codes W_dec + b_dec       W_dec's rows (the paper's decoder columns) have unit norm
    x̂ = ẑ * scale + mean          back in the model's units

``encode`` and ``decode`` include the normalisation, so ``decode(encode(x))`` is in x's units; the codes are in the
normalised units (a latent's value is the length it adds along its unit direction in z). With unit-norm rows and a
unit mean squared norm, the training loss is close to the normalised MSE (1 - explained variance).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn

from vitviz.sae.errors import SAEError

Activation = Literal["topk", "batchtopk", "relu"]
ACTIVATIONS = ("topk", "batchtopk", "relu")


@dataclass(frozen=True)
class SAEConfig:
    d_in: int  # width of the activations: the model's hidden size
    latents: int  # N, the number of dictionary directions (8x or 16x d_in is usual)
    k: int = 16  # latents kept per token ("topk"), or on average per token over a batch ("batchtopk")
    aux_k: int = 256  # at most this many dead latents reconstruct the residual in the AuxK loss (Gao et al. use 512)
    activation: Activation = "topk"  # "relu": a plain ReLU SAE (saev's and ViT-Prisma's L1-trained files)
    pre_encoder_bias: bool = True  # subtract b_dec before the encoder (Gao et al.); newer saev files do not
    block: int | None = None  # the model block whose output it reads (0-based), when known

    def __post_init__(self) -> None:
        if self.d_in < 1 or self.latents < 1:
            raise SAEError(f"d_in and latents must be at least 1; got d_in={self.d_in}, latents={self.latents}")
        if self.activation not in ACTIVATIONS:
            raise SAEError(f"activation must be one of {ACTIVATIONS}; got {self.activation!r}")
        if self.activation != "relu" and not 1 <= self.k <= self.latents:
            raise SAEError(f"k must be between 1 and latents = {self.latents}; got {self.k}")
        if self.aux_k < 0:
            raise SAEError(f"aux_k must be >= 0; got {self.aux_k}")

    def to_dict(self) -> dict:
        return asdict(self)


class SparseDecode(torch.autograd.Function):
    """sum_j values[:, j] * W[indices[:, j]]: (B, k) values and indices, W (N, d) -> (B, d). Its backward touches only
    the k chosen rows per token (an index_add), where a dense product would cost B x N x d and F.embedding_bag's
    backward sorts the indices (3x slower on a CPU)."""

    @staticmethod
    def forward(ctx, values: torch.Tensor, indices: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        rows = weight.index_select(0, indices.flatten()).view(
            *indices.shape, -1
        )  # (B, k, d); faster than weight[indices]
        ctx.save_for_backward(values, indices, weight)
        return torch.bmm(values.unsqueeze(1), rows).squeeze(1)  # (B, d)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # grad (B, d)
        values, indices, weight = ctx.saved_tensors
        grad_values = None
        if ctx.needs_input_grad[0]:
            rows = weight.index_select(0, indices.flatten()).view(*indices.shape, -1)  # (B, k, d)
            grad_values = torch.bmm(rows, grad.unsqueeze(-1)).squeeze(-1)  # (B, k)
        grad_weight = None
        if ctx.needs_input_grad[2]:
            per_row = values.unsqueeze(-1) * grad.unsqueeze(1)  # (B, k, d)
            grad_weight = torch.zeros_like(weight).index_add_(0, indices.flatten(), per_row.flatten(0, 1))
        return grad_values, None, grad_weight


class TopKSAE(nn.Module):
    """encode(x) -> codes (..., N); decode(codes) -> x in the input's units. Weights are fp32."""

    def __init__(self, config: SAEConfig):
        super().__init__()
        self.config = config
        d, N = config.d_in, config.latents
        self.W_enc = nn.Parameter(torch.empty(d, N))  # (d, N)
        self.b_enc = nn.Parameter(torch.zeros(N))
        self.W_dec = nn.Parameter(torch.empty(N, d))  # (N, d): row j is latent j's unit direction
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.register_buffer("mean", torch.zeros(d))  # the training data's mean token
        self.register_buffer("scale", torch.ones(()))  # sqrt of its mean squared distance from the mean
        self.register_buffer("threshold", torch.zeros(()))  # BatchTopK's inference threshold (running estimate)
        self.model: str | None = None  # the model it was trained on, when its file says
        with torch.no_grad():  # random unit directions, the encoder their transpose (Gao et al.)
            self.W_dec.normal_()
            self.normalise_decoder_()
            self.W_enc.copy_(self.W_dec.T)

    # --- normalisation -------------------------------------------------------------------------------------------
    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) in the model's units -> (..., d) normalised, fp32."""
        return (x.to(self.W_enc.dtype) - self.mean) / self.scale

    def denormalise(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.scale + self.mean

    # --- the encoder ---------------------------------------------------------------------------------------------
    def pre_activations(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised (..., d) -> (..., N) before the ReLU and the top-k."""
        # (z - b_dec) W_enc + b_enc, with b_dec folded into the bias: its gradient is then a (d, N) product with a
        # vector, not a third (B, N) x (N, d) matrix product in every backward pass
        bias = self.b_enc - self.b_dec @ self.W_enc if self.config.pre_encoder_bias else self.b_enc  # (N,)
        return torch.addmm(bias, z.reshape(-1, z.shape[-1]), self.W_enc).view(*z.shape[:-1], -1)

    def top_k(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., N) -> the k kept values (ReLU applied) and their latent indices, each (..., k)."""
        values, indices = pre.topk(self.config.k, dim=-1, sorted=False)
        return values.relu(), indices

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """(..., N) pre-activations -> dense codes (..., N)."""
        kind = self.config.activation
        if kind == "relu":
            return pre.relu()
        if kind == "batchtopk" and self.training:
            flat = pre.reshape(-1, pre.shape[-1]).relu()  # (tokens, N): k x tokens values kept over the whole batch
            kept = flat.flatten().topk(min(flat.numel(), self.config.k * flat.shape[0]), sorted=False)
            codes = torch.zeros_like(flat).flatten().scatter(0, kept.indices, kept.values).view_as(flat)
            with torch.no_grad():  # the inference threshold: a running mean of the smallest value kept
                smallest = kept.values[kept.values > 0].min() if (kept.values > 0).any() else self.threshold
                self.threshold.lerp_(smallest.to(self.threshold), 0.01)
            return codes.view_as(pre)
        if kind == "batchtopk":
            return pre * (pre > self.threshold)
        values, indices = self.top_k(pre)
        return torch.zeros_like(pre).scatter(-1, indices, values)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) in the model's units -> codes (..., N), at most k non-zero per token for "topk"."""
        self._check_width(x)
        return self.activate(self.pre_activations(self.normalise(x)))

    # --- the decoder ---------------------------------------------------------------------------------------------
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (..., N) -> (..., d) in the model's units."""
        if codes.shape[-1] != self.config.latents:
            raise SAEError(f"codes have {codes.shape[-1]} latents; this SAE has {self.config.latents}")
        flat = codes.reshape(-1, codes.shape[-1]).to(self.W_dec.dtype)
        z = torch.addmm(self.b_dec, flat, self.W_dec).view(*codes.shape[:-1], -1)  # (..., d)
        return self.denormalise(z)

    def decode_sparse(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The k kept values and indices (B, k) -> normalised ẑ (B, d): reads k rows of W_dec per token, not N."""
        return SparseDecode.apply(values, indices, self.W_dec) + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction (..., d) of x (..., d), in x's units."""
        return self.decode(self.encode(x))

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """The same as calling it: the name every SAE vitviz loads has (vitviz.sae.formats)."""
        return self.decode(self.encode(x))

    def decoded_change(self, delta: torch.Tensor, latents: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """decode(codes + delta) - decode(codes) in the model's units, for ``delta`` (..., L) on the latents
        ``latents`` (L,) of the tokens ``x`` (..., d): the biases and the mean cancel, the scale stays."""
        return (delta.to(self.W_dec.dtype) @ self.W_dec[latents]) * self.scale

    # --- what the other parts of vitviz read (the same names as vitviz.sae.formats.module.ExternalSAE's) ---------
    @property
    def block(self) -> int | None:
        return self.config.block

    @property
    def tokens(self) -> str:
        return "patches"  # vitviz trains on the patch tokens

    @property
    def scaling_missing(self) -> str | None:
        return None  # its input normalisation (mean, scale) is in its file

    def block_for(self, num_blocks: int) -> int | None:
        """The block it reads in a model of ``num_blocks`` blocks."""
        block = self.config.block
        if block is not None and not 0 <= block < num_blocks:
            raise SAEError(f"the SAE reads block {block}, which a model of {num_blocks} blocks does not have")
        return block

    # --- the unit-norm constraint --------------------------------------------------------------------------------
    @torch.no_grad()
    def normalise_decoder_(self) -> None:
        """Rescale every row of W_dec to unit norm (after each optimiser step)."""
        self.W_dec.div_(self.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12))

    @torch.no_grad()
    def remove_parallel_gradient_(self) -> None:
        """Drop the part of W_dec's gradient along each row: the renormalisation would undo it anyway."""
        if self.W_dec.grad is not None:
            along = (self.W_dec.grad * self.W_dec).sum(dim=-1, keepdim=True)  # (N, 1)
            self.W_dec.grad.sub_(along * self.W_dec)

    def _check_width(self, x: torch.Tensor) -> None:
        if x.shape[-1] != self.config.d_in:
            raise SAEError(
                f"activations are {x.shape[-1]} wide; this SAE reads {self.config.d_in}-wide tokens "
                f"(block {self.config.block if self.config.block is not None else '?'} of its model)"
            )
