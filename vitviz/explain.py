"""Explanations: attention tensors in, patch maps and statistics out.

Conventions shared by every function:
- ``attentions`` is a sequence with one tensor per block, shape (B, heads, T, T), rows summing
  to 1, as returned by ``ViT(..., output_attentions=True)``.
- Tokens are ``num_prefix_tokens`` prefix tokens ([CLS] first, then distillation or register
  tokens) followed by the N = rows * cols patches in row-major order. The grid is passed in
  (``output.grid_size``); it is never guessed from sqrt(N), so non-square images work.
- Maps come back as (B, rows, cols) when ``grid_size`` is given, else (B, N). They are not
  rescaled: display scaling belongs to the plotting code.

The functions that need gradients (class-specific maps, faithfulness) take the model;
everything else is a pure function of tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

HeadFusion = Literal["mean", "max", "min"]
Pooling = Literal["cls", "mean"]
HEAD_FUSIONS = ("mean", "max", "min")


def _check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")


def _check_attentions(attentions: Sequence[torch.Tensor], num_prefix_tokens: int, grid_size) -> int:
    """Validate shapes; return T."""
    if len(attentions) == 0:
        raise ValueError("attentions is empty: run the model with output_attentions=True")
    T = attentions[0].shape[-1]
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-2:] != (T, T) or a.shape[:2] != attentions[0].shape[:2]:
            raise ValueError(f"attentions[{i}] has shape {tuple(a.shape)}; expected (B, heads, {T}, {T}) like block 0")
    if not 0 <= num_prefix_tokens < T:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} must be in [0, T={T})")
    if grid_size is not None and grid_size[0] * grid_size[1] != T - num_prefix_tokens:
        raise ValueError(
            f"grid {grid_size[0]}x{grid_size[1]} has {grid_size[0] * grid_size[1]} patches, "
            f"but T - num_prefix_tokens = {T - num_prefix_tokens}"
        )
    return T


def _as_map(values: torch.Tensor, grid_size: tuple[int, int] | None) -> torch.Tensor:
    """(..., N) -> (..., rows, cols) when the grid is known."""
    return values if grid_size is None else values.reshape(*values.shape[:-1], *grid_size)


def fuse_heads(attention: torch.Tensor, head_fusion: HeadFusion = "mean") -> torch.Tensor:
    """(B, heads, T, T) -> (B, T, T) by the mean, max or min over heads."""
    _check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    if head_fusion == "mean":
        return attention.mean(dim=1)
    return attention.amax(dim=1) if head_fusion == "max" else attention.amin(dim=1)


def discard_weakest(fused: torch.Tensor, discard_ratio: float, num_prefix_tokens: int) -> torch.Tensor:
    """Zero the ``discard_ratio`` fraction of the weakest patch-to-patch weights of each image.

    Attention to or from prefix tokens is never discarded ([CLS] included): only the
    (N x N) patch block competes. Returns a new tensor (B, T, T).
    """
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1); got {discard_ratio}")
    if discard_ratio == 0.0:
        return fused
    p = num_prefix_tokens
    patches = fused[:, p:, p:]  # (B, N, N)
    flat = patches.reshape(patches.shape[0], -1)
    k = int(flat.shape[1] * discard_ratio)
    if k == 0:
        return fused
    # Exactly the k weakest, as topk(k, largest=False) picks them, but through the k-th smallest
    # value: about 3x faster than topk on a CPU. Everything below it goes, and of the weights equal
    # to it, the first ones (by position) until k are gone; topk leaves the choice among ties open.
    threshold = flat.kthvalue(k, dim=1, keepdim=True).values  # (B, 1)
    below = flat < threshold
    tied = flat == threshold
    drop = below | (tied & (tied.cumsum(1) <= k - below.sum(1, keepdim=True)))
    out = fused.clone()
    out[:, p:, p:] = flat.masked_fill(drop, 0.0).reshape_as(patches)
    return out


def _readout(matrix: torch.Tensor, pooling: Pooling, num_prefix_tokens: int) -> torch.Tensor:
    """The row the classifier reads, over the patches: [CLS]'s (token 0), or the mean of the patch rows."""
    _check_choice("pooling", pooling, ("cls", "mean"))
    p = num_prefix_tokens
    if pooling == "cls":
        if p == 0:
            raise ValueError("pooling='cls' needs a [CLS] token (num_prefix_tokens >= 1); use pooling='mean'")
        return matrix[:, 0, p:]
    return matrix[:, p:, p:].mean(dim=1)


def _residual_step(fused: torch.Tensor) -> torch.Tensor:
    """One rollout factor: add the identity for the skip connection, then make every row sum to 1."""
    with_residual = fused + torch.eye(fused.shape[-1], dtype=fused.dtype, device=fused.device)
    return with_residual / with_residual.sum(dim=-1, keepdim=True)  # keepdim: each row by its own sum


def _rollout(fused: Sequence[torch.Tensor], start_layer: int, pooling: Pooling, num_prefix_tokens: int) -> torch.Tensor:
    """Shared rollout loop: R = prod_l normalize_rows(A_l + I), later layers on the left; (B, N)."""
    if not 0 <= start_layer < len(fused):
        raise ValueError(f"start_layer must be in [0, {len(fused) - 1}]; got {start_layer}")
    _check_choice("pooling", pooling, ("cls", "mean"))
    B, T, _ = fused[0].shape
    rollout = torch.eye(T, dtype=fused[0].dtype, device=fused[0].device).expand(B, T, T)
    for matrix in fused[start_layer:]:
        rollout = _residual_step(matrix) @ rollout  # (B, T, T), later layers on the left
    return _readout(rollout, pooling, num_prefix_tokens)


def attention_rollout(
    attentions: Sequence[torch.Tensor],
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    pooling: Pooling = "cls",
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how much each patch flows into the output.

    Per block: fuse heads, optionally discard the weakest patch-to-patch weights, add the
    identity for the residual path, renormalise rows; multiply from ``start_layer`` to the last
    block. Returns the [CLS] row over the patches, (B, rows, cols) or (B, N). For models pooled
    by the mean patch token (``pooling="mean"``, e.g. no [CLS] token) the rows of all patch
    queries are averaged instead, since that mean is what the head sees.
    """
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    fused = torch.stack([fuse_heads(a, head_fusion) for a in attentions])  # (L, B, T, T)
    L, B, T, _ = fused.shape  # discard in all blocks at once: one call instead of L
    fused = discard_weakest(fused.reshape(L * B, T, T), discard_ratio, num_prefix_tokens).reshape(L, B, T, T)
    return _as_map(_rollout(list(fused), start_layer, pooling, num_prefix_tokens), grid_size)


def cls_attention(
    attentions: Sequence[torch.Tensor],
    layer: int,
    head: int | HeadFusion = "mean",
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """What [CLS] attends to in one block: one head's row, or the heads fused; (B, rows, cols).

    Token 0 must be the [CLS] token: for a model without one there is no [CLS] row to show.
    """
    if num_prefix_tokens == 0:
        raise ValueError("this model has no [CLS] token (num_prefix_tokens=0); use query_attention on a patch")
    return query_attention(attentions, layer, 0, head, num_prefix_tokens, grid_size)


def query_attention(
    attentions: Sequence[torch.Tensor],
    layer: int,
    query: int | tuple[int, int],
    head: int | HeadFusion = "mean",
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """What one token attends to in one block, over the patches; (B, rows, cols) or (B, N).

    ``query`` is a token index (0 is [CLS]) or a patch position (row, col), which needs the grid.
    """
    T = _check_attentions(attentions, num_prefix_tokens, grid_size)
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(f"layer must be in [0, {len(attentions) - 1}]; got {layer}")
    if isinstance(query, tuple):
        if grid_size is None:
            raise ValueError("a (row, col) query needs grid_size")
        row, col = query
        if not (0 <= row < grid_size[0] and 0 <= col < grid_size[1]):
            raise ValueError(f"patch ({row}, {col}) is outside the {grid_size[0]}x{grid_size[1]} grid")
        query = num_prefix_tokens + row * grid_size[1] + col
    if not 0 <= query < T:
        raise ValueError(f"query token must be in [0, {T - 1}]; got {query}")
    attention = attentions[layer]  # (B, heads, T, T)
    if isinstance(head, str):
        rows = fuse_heads(attention[:, :, query : query + 1], head)[:, 0]  # (B, T)
    else:
        if not 0 <= head < attention.shape[1]:
            raise ValueError(f"head must be in [0, {attention.shape[1] - 1}] or one of {HEAD_FUSIONS}; got {head}")
        rows = attention[:, head, query]  # (B, T)
    return _as_map(rows[:, num_prefix_tokens:], grid_size)


def cls_attention_all(
    attentions: Sequence[torch.Tensor], num_prefix_tokens: int = 1, grid_size: tuple[int, int] | None = None
) -> torch.Tensor:
    """Every block's and head's [CLS] row over the patches: (B, layers, heads, rows, cols)."""
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    if num_prefix_tokens == 0:
        raise ValueError("this model has no [CLS] token (num_prefix_tokens=0)")
    rows = torch.stack([a[:, :, 0, num_prefix_tokens:] for a in attentions], dim=1)  # (B, L, heads, N)
    return _as_map(rows, grid_size)


class StreamingExplainer:
    """Rollout, [CLS] rows and head statistics computed block by block during the forward pass.

    Pass it as ``model(x, attention_sink=explainer)``: each block's (B, heads, T, T) weights are
    folded into a running rollout (B, T, T), the [CLS] rows (B, layers, heads, N), and the
    mean-distance and entropy tables, then dropped. Peak memory holds one block's attention
    instead of all of them. Results equal the keep-everything functions to float precision.
    """

    def __init__(
        self,
        grid_size: tuple[int, int],
        patch_size: int,
        num_prefix_tokens: int = 1,
        head_fusion: HeadFusion = "mean",
        discard_ratio: float = 0.0,
        start_layer: int = 0,
        pooling: Pooling = "cls",
    ):
        _check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
        _check_choice("pooling", pooling, ("cls", "mean"))
        if pooling == "cls" and num_prefix_tokens == 0:
            raise ValueError("pooling='cls' needs a [CLS] token (num_prefix_tokens >= 1); use pooling='mean'")
        self.pooling = pooling
        self.grid_size, self.patch_size, self.num_prefix_tokens = grid_size, patch_size, num_prefix_tokens
        self.head_fusion, self.discard_ratio, self.start_layer = head_fusion, discard_ratio, start_layer
        self._rollout: torch.Tensor | None = None
        self._cls_rows: list[torch.Tensor] = []
        self._distance: list[torch.Tensor] = []
        self._entropy: list[torch.Tensor] = []

    def __call__(self, layer: int, attention: torch.Tensor) -> None:
        attention = attention.detach()
        blocks = [attention]
        _check_attentions(blocks, self.num_prefix_tokens, self.grid_size)
        p = self.num_prefix_tokens
        # clone: a slice would keep this block's whole (B, heads, T, T) storage alive
        if self.pooling == "cls":
            self._cls_rows.append(attention[:, :, 0, p:].clone())
        else:
            self._cls_rows.append(attention[:, :, p:, p:].mean(dim=2))
        self._distance.append(mean_attention_distance(blocks, self.grid_size, self.patch_size, p)[:, 0])
        self._entropy.append(attention_entropy(blocks)[:, 0])
        if layer >= self.start_layer:
            fused = discard_weakest(fuse_heads(attention, self.head_fusion), self.discard_ratio, p)
            step = _residual_step(fused)
            self._rollout = step if self._rollout is None else step @ self._rollout

    def results(self) -> dict[str, torch.Tensor]:
        """rollout (B, rows, cols); cls_attention (B, layers, heads, rows, cols); mean_distance and
        entropy (B, layers, heads). With pooling="mean", rows are averaged over the patch queries."""
        if self._rollout is None:
            raise ValueError("no attention was streamed: pass the explainer as model(x, attention_sink=...)")
        rollout = _readout(self._rollout, self.pooling, self.num_prefix_tokens).clone()
        return {
            "rollout": _as_map(rollout, self.grid_size),
            "cls_attention": _as_map(torch.stack(self._cls_rows, dim=1), self.grid_size),
            "mean_distance": torch.stack(self._distance, dim=1),
            "entropy": torch.stack(self._entropy, dim=1),
        }


# --- class-specific maps -------------------------------------------------------------------------


def attention_gradients(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: int | Sequence[int] | torch.Tensor
) -> tuple[object, tuple[torch.Tensor, ...]]:
    """Forward with attentions, then the gradient of each image's target logit w.r.t. every block's
    attention. Returns (output, gradients); ``gradients[l]`` belongs to ``output.attentions[l]``.

    ``target`` is one class for all images or one per image (batch > 1 supported: images do not
    interact, so summing the chosen logits gives each image its own gradient).
    """
    output = model(pixel_values, output_attentions=True)
    if output.logits is None:
        raise ValueError("class-specific maps need a classification head (this model is a backbone)")
    B, num_classes = output.logits.shape
    targets = torch.as_tensor(target, device=output.logits.device).long().reshape(-1)
    if targets.numel() == 1:
        targets = targets.expand(B)
    if targets.shape != (B,) or not ((0 <= targets) & (targets < num_classes)).all():
        raise ValueError(f"target must be one class or one per image, each in [0, {num_classes - 1}]; got {target}")
    score = output.logits.gather(1, targets[:, None]).sum()
    gradients = torch.autograd.grad(score, output.attentions)
    return output, tuple(gradients)


def _positive_weighted(attention: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """mean_heads((grad * A)+): (B, heads, T, T) x2 -> (B, T, T)."""
    if attention.shape != gradient.shape:
        raise ValueError(f"gradient shape {tuple(gradient.shape)} differs from attention {tuple(attention.shape)}")
    return (gradient * attention).clamp(min=0).mean(dim=1)


def gradient_weighted_attention(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    start_layer: int = 0,
    pooling: Pooling = "cls",
) -> torch.Tensor:
    """Class-specific relevance of Chefer, Gur & Wolf (2021), "Generic Attention-model Explainability".

    R = I; for each block l (from ``start_layer``): R <- R + mean_heads((dy/dA_l * A_l)+) @ R, with
    each block's gradient paired with that same block's attention. Returns the [CLS] row over
    the patches (``pooling="mean"``: the mean of the patch rows, for mean-pooled models).
    """
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    if len(gradients) != len(attentions):
        raise ValueError(f"{len(gradients)} gradients for {len(attentions)} attention blocks")
    B, _, T, _ = attentions[0].shape
    relevance = torch.eye(T, dtype=attentions[0].dtype, device=attentions[0].device).repeat(B, 1, 1)
    for attention, gradient in list(zip(attentions, gradients))[start_layer:]:
        relevance = relevance + _positive_weighted(attention, gradient) @ relevance
    return _as_map(_readout(relevance, pooling, num_prefix_tokens), grid_size)


def gradient_weighted_rollout(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    start_layer: int = 0,
    discard_ratio: float = 0.0,
    pooling: Pooling = "cls",
) -> torch.Tensor:
    """Rollout of gradient-weighted attention: each block's heads are fused by
    mean((dy/dA * A)+) (its own gradient), then rolled out as in ``attention_rollout``."""
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    if len(gradients) != len(attentions):
        raise ValueError(f"{len(gradients)} gradients for {len(attentions)} attention blocks")
    fused = [
        discard_weakest(_positive_weighted(a, g), discard_ratio, num_prefix_tokens) for a, g in zip(attentions, gradients)
    ]
    return _as_map(_rollout(fused, start_layer, pooling, num_prefix_tokens), grid_size)


# --- model anatomy -------------------------------------------------------------------------------


def patch_distances(grid_size: tuple[int, int], patch_size: int = 1) -> torch.Tensor:
    """(N, N) Euclidean distances between patch centres, in pixels (patch_size per step)."""
    rows, cols = grid_size
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    centres = torch.stack([r.flatten(), c.flatten()], dim=1).double() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def mean_attention_distance(
    attentions: Sequence[torch.Tensor], grid_size: tuple[int, int], patch_size: int, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """The ViT paper's attention distance: (B, layers, heads), in pixels.

    Prefix tokens are dropped and each patch query's row renormalised over the patches;
    the attention-weighted distance to the keys is then averaged over the query patches.
    """
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    p = num_prefix_tokens
    distances = patch_distances(grid_size, patch_size).to(attentions[0].device, attentions[0].dtype)  # (N, N)
    per_layer = []
    for attention in attentions:
        patches = attention[:, :, p:, p:]  # (B, heads, N, N)
        patches = patches / patches.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(patches.dtype).tiny)
        per_layer.append((patches * distances).sum(dim=-1).mean(dim=-1))  # (B, heads)
    return torch.stack(per_layer, dim=1)


def attention_entropy(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean entropy of the attention rows, in nats: (B, layers, heads).

    0 means every query attends to a single token; log(T) means uniform attention.
    """
    _check_attentions(attentions, 0, None)
    per_layer = [-(a * a.clamp(min=1e-12).log()).sum(dim=-1).mean(dim=-1) for a in attentions]  # (B, heads)
    return torch.stack(per_layer, dim=1)


def position_embedding_similarity(
    pos_embed: torch.Tensor, grid_size: tuple[int, int], num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity of each patch's position embedding with every other's (ViT paper, Fig. 7
    centre): (rows, cols, rows, cols); [i, j] is the map for the patch at row i, column j."""
    patches = pos_embed.reshape(-1, pos_embed.shape[-1])[num_prefix_tokens:]  # (N, D)
    if patches.shape[0] != grid_size[0] * grid_size[1]:
        raise ValueError(f"{patches.shape[0]} patch position embeddings for a {grid_size[0]}x{grid_size[1]} grid")
    unit = F.normalize(patches.float(), dim=-1)
    return (unit @ unit.T).reshape(*grid_size, *grid_size)


def patch_embedding_components(weight: torch.Tensor, count: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

    ``weight`` is the Conv2d weight (D, C, p, p). Returns the top ``count`` components as
    (count, C, p, p) and the fraction of variance each explains, (count,).
    """
    D, C, p, q = weight.shape
    filters = weight.detach().reshape(D, -1).double()
    filters = filters - filters.mean(dim=0, keepdim=True)
    _, singular_values, components = torch.linalg.svd(filters, full_matrices=False)
    variance = singular_values**2
    count = min(count, components.shape[0])
    return components[:count].reshape(count, C, p, q).float(), (variance[:count] / variance.sum()).float()


# --- faithfulness --------------------------------------------------------------------------------

Baseline = Literal["mean", "blur"]


def perturbation_curve(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    order: Literal["most", "least"] = "most",
    baseline: Baseline = "mean",
    steps: int = 10,
) -> torch.Tensor:
    """Probability of ``target`` as patches are replaced, most- or least-relevant first.

    ``pixel_values`` is one normalised image (1, C, H, W); ``relevance`` its (rows, cols) map.
    Step k replaces the top k/steps of the patches by the baseline: "mean" is the normalisation
    mean (0 after normalising, i.e. the dataset's mean colour), "blur" a Gaussian blur of the image.
    All steps + 1 images run as one batch. Returns (steps + 1,) probabilities, step 0 intact.
    """
    _check_choice("order", order, ("most", "least"))
    _check_choice("baseline", baseline, ("mean", "blur"))
    if pixel_values.ndim != 4 or pixel_values.shape[0] != 1:
        raise ValueError(f"pixel_values must be one image (1, C, H, W); got {tuple(pixel_values.shape)}")
    _, C, H, W = pixel_values.shape
    rows, cols = relevance.shape
    if H % rows or W % cols or H // rows != W // cols:
        raise ValueError(f"a {rows}x{cols} relevance map does not tile a {H}x{W} image into square patches")
    patch = H // rows
    if baseline == "mean":
        replacement = torch.zeros_like(pixel_values)
    else:
        kernel = 2 * patch + 1
        replacement = gaussian_blur(pixel_values, kernel, sigma=patch)
    ranking = relevance.flatten().argsort(descending=order == "most")  # (N,)
    N = ranking.numel()
    masks = torch.zeros(steps + 1, N, dtype=torch.bool, device=pixel_values.device)
    for k in range(1, steps + 1):
        masks[k, ranking[: round(N * k / steps)]] = True
    pixel_masks = masks.reshape(steps + 1, 1, rows, cols).float()
    pixel_masks = F.interpolate(pixel_masks, scale_factor=patch, mode="nearest")  # (steps+1, 1, H, W)
    batch = pixel_values * (1 - pixel_masks) + replacement * pixel_masks
    with torch.inference_mode():
        probabilities = model(batch).logits.float().softmax(dim=-1)[:, target]
    return probabilities


def gaussian_blur(pixel_values: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (B, C, H, W) with reflect padding."""
    half = kernel_size // 2
    x = torch.arange(kernel_size, dtype=pixel_values.dtype, device=pixel_values.device) - half
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    C = pixel_values.shape[1]
    out = F.pad(pixel_values, (half, half, half, half), mode="reflect" if min(pixel_values.shape[-2:]) > half else "replicate")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(C, 1, 1, -1), groups=C)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(C, 1, -1, 1), groups=C)


def area_under_curve(probabilities: torch.Tensor) -> float:
    """Trapezoidal area under a perturbation curve over the replaced fraction 0..1."""
    steps = probabilities.numel() - 1
    return float(torch.trapezoid(probabilities.double(), dx=1.0 / steps))


def faithfulness(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    baseline: Baseline = "mean",
    steps: int = 10,
) -> dict[str, torch.Tensor | float]:
    """Both perturbation curves and their areas (Chefer et al. 2021's positive/negative tests).

    A faithful map gives a *low* area when the most relevant patches go first and a *high*
    area when the least relevant go first.
    """
    most = perturbation_curve(model, pixel_values, relevance, target, "most", baseline, steps)
    least = perturbation_curve(model, pixel_values, relevance, target, "least", baseline, steps)
    return {"most_first": most, "least_first": least, "auc_most_first": area_under_curve(most),
            "auc_least_first": area_under_curve(least)}  # fmt: skip


def fraction_replaced(steps: int = 10) -> torch.Tensor:
    """The x axis of a perturbation curve: 0, 1/steps, ..., 1."""
    return torch.linspace(0, 1, steps + 1)



if __name__ == "__main__":  # `python -m vitviz.explain`: the batch CLI lives in explain_cli.py
    import sys

    from vitviz.explain_cli import main

    sys.exit(main())
