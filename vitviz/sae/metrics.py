"""How good an SAE is, on held-out tokens and images.

On activations (``evaluate``, streamed chunk by chunk over any source of ``vitviz.sae.data``), with saev's
definitions and thresholds (saev/framework/train.py's evaluation):
- ``normalised_mse``: saev's normalised MSE, sum |x - x̂|² / sum |x - mean(x)|², the reconstruction's squared error
  over the squared error of the evaluated tokens' own mean (both summed over tokens and features);
- ``explained_variance``: 1 - that ratio (Gao et al.), the same number from the other side;
- ``l0``: mean number of non-zero codes per token (≤ k for TopK);
- ``dead_fraction``: latents that never fire on these tokens (saev: frequency 0);
- ``dense_fraction``: latents that fire on more than ``dense_threshold`` of them (saev's 1e-2, 1 %).
``prefix_nmse`` gives a Matryoshka SAE's normalised MSE from each prefix of its dictionary alone.

Through the model (``top1_agreement``): block B's output on the patch tokens is replaced by the SAE's reconstruction
(prefix tokens, such as [CLS], are kept: the SAE never saw them) and the rest of the model runs on it:
- ``top1_agreement``: how often the top class is unchanged;
- ``ce_loss_recovered``: ViT-Prisma's (CE_zero - CE_sae) / (CE_zero - CE_clean), where CE_zero zeroes the same
  patch tokens; 1 means the reconstruction loses nothing, 0 that it is as bad as deleting them. The cross-entropy is
  taken against the labels when given, else against the unedited model's top class.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from vitviz.model import ViT
from vitviz.sae.data import Source, chunks
from vitviz.sae.editing import replace_with
from vitviz.sae.model import TopKSAE


def explained_variance(x: torch.Tensor, estimate: torch.Tensor) -> float:
    """1 - sum |x - x̂|² / sum |x - mean(x)|² over tokens (n, d)."""
    return 1.0 - float((x - estimate).double().square().sum() / (x - x.mean(dim=0)).double().square().sum())


def normalised_mse(x: torch.Tensor, estimate: torch.Tensor) -> float:
    """saev's: sum |x - x̂|² / sum |x - mean(x)|² over tokens (n, d)."""
    return float((x - estimate).double().square().sum() / (x - x.mean(dim=0)).double().square().sum())


def l0(codes: torch.Tensor) -> float:
    """Mean number of non-zero codes per token, codes (..., N)."""
    return float((codes != 0).sum(dim=-1).double().mean())


DENSE = 1e-2  # saev's dense_lim: a latent firing on more than 1 % of the tokens is dense


def device_of_sae(sae: torch.nn.Module) -> torch.device:
    return next(iter(sae.parameters()), torch.zeros(())).device


def encode_and_reconstruct(sae: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes (n, N), reconstruction (n, d)) of any SAE vitviz loads: ``reconstruct`` where an SAE has one (a
    per-token normalisation needs x's own statistics to decode), else ``decode(encode(x))``."""
    codes = sae.encode(x)
    if isinstance(sae, TopKSAE) or not hasattr(sae, "reconstruct"):
        return codes, sae.decode(codes)
    return codes, sae.reconstruct(x)


@torch.no_grad()
def evaluate(sae: TopKSAE, source: Source, dense_threshold: float = DENSE, batch: int = 8192) -> dict:
    """The activation metrics of the module docstring over every token of ``source``, streamed."""
    sae = sae.eval()
    device = device_of_sae(sae)
    error = squares = nonzero = 0.0  # squares: sum |x|², for sum |x - mean|² at the end
    sums = fired = None
    tokens = 0
    for chunk in chunks(source):
        for x in chunk.split(batch):
            x = x.to(device)
            codes, estimate = encode_and_reconstruct(sae, x)  # (n, N), (n, d)
            if sums is None:
                sums, fired = torch.zeros(x.shape[1], dtype=torch.float64), torch.zeros(codes.shape[1])
            error += float((x - estimate).double().square().sum())
            squares += float(x.double().square().sum())
            sums += x.double().sum(dim=0).cpu()
            nonzero += float((codes != 0).sum())
            fired += (codes != 0).sum(dim=0).float().cpu()
            tokens += len(x)
    spread = squares - float(sums.square().sum()) / tokens  # sum |x - mean|²
    return {
        "explained_variance": 1.0 - error / spread,
        "normalised_mse": error / spread,
        "l0": nonzero / tokens,
        "dead_fraction": float((fired == 0).float().mean()),
        "dense_fraction": float((fired / tokens > dense_threshold).float().mean()),
        "tokens": tokens,
    }


@torch.no_grad()
def prefix_nmse(sae: TopKSAE, source: Source, prefixes: tuple[int, ...], batch: int = 8192) -> list[float]:
    """Per prefix size m, the normalised MSE of the reconstruction from latents 0..m-1 alone (the codes of the others
    set to 0, b_dec kept): a Matryoshka SAE's nested dictionaries, each measured on its own."""
    sae = sae.eval()
    device = device_of_sae(sae)
    errors = torch.zeros(len(prefixes), dtype=torch.float64)
    squares, sums, tokens = 0.0, None, 0
    for chunk in chunks(source):
        for x in chunk.split(batch):
            x = x.to(device)
            codes = sae.encode(x)
            for i, m in enumerate(prefixes):
                kept = codes.clone()
                kept[:, m:] = 0
                errors[i] += float((x - sae.decode(kept)).double().square().sum())
            squares += float(x.double().square().sum())
            sums = x.double().sum(dim=0).cpu() + (0 if sums is None else sums)
            tokens += len(x)
    if not tokens:
        return [float("nan")] * len(prefixes)
    spread = squares - float(sums.square().sum()) / tokens
    return (errors / spread).tolist()


@torch.no_grad()
def largest_activations(sae: TopKSAE, source: Source, batch: int = 8192) -> torch.Tensor:
    """(N,) each latent's largest code over the source: what saev's "-2x its largest value" multiplies."""
    largest = torch.zeros(sae.config.latents)
    for chunk in chunks(source):
        for x in chunk.split(batch):
            largest = torch.maximum(largest, sae.encode(x.to(sae.W_enc.device)).amax(dim=0).cpu())
    return largest


@torch.no_grad()
def top1_agreement(
    model: ViT,
    sae: TopKSAE,
    block: int,
    images: Iterable[torch.Tensor] | torch.Tensor,
    labels: Iterable[torch.Tensor] | torch.Tensor | None = None,
) -> dict:
    """Top-1 agreement and CE loss recovered with block ``block``'s patch tokens replaced by the SAE's reconstruction
    (see the module docstring). ``images``: one tensor (B, C, H, W) or batches of them; ``labels`` alike, optional."""
    batches = [images] if isinstance(images, torch.Tensor) else images
    label_batches = [labels] if isinstance(labels, torch.Tensor) else labels
    label_iter = iter(label_batches) if label_batches is not None else None
    model = model.eval()
    reconstructed, zeroed = replace_with(model, sae, block), replace_with(model, None, block)
    device = next(model.parameters()).device
    same = count = 0
    ce = torch.zeros(3, dtype=torch.float64)  # clean, with the SAE, zero-ablated: summed over images
    for pixel_values in batches:
        pixel_values = pixel_values.to(device)
        clean = model(pixel_values).logits.float()
        edited = reconstructed(pixel_values).logits.float()
        ablated = zeroed(pixel_values).logits.float()
        targets = next(label_iter).to(device) if label_iter is not None else clean.argmax(dim=-1)
        same += int((edited.argmax(dim=-1) == clean.argmax(dim=-1)).sum())
        count += len(pixel_values)
        sums = [float(F.cross_entropy(logits, targets, reduction="sum")) for logits in (clean, edited, ablated)]
        ce += torch.tensor(sums, dtype=torch.float64)
    ce_clean, ce_sae, ce_zero = (ce / count).tolist()
    recovered = (ce_zero - ce_sae) / (ce_zero - ce_clean) if ce_zero != ce_clean else float("nan")
    return {
        "top1_agreement": same / count,
        "ce_loss_recovered": recovered,
        "ce_clean": ce_clean,
        "ce_sae": ce_sae,
        "ce_zero_ablation": ce_zero,
        "images": count,
    }
