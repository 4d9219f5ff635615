"""Patch-feature views: the PCA "rainbow" of DINOv2 (Oquab et al. 2023, its figure 1 and the recipe in the
dinov2 issues #23, #220 and #412), cosine correspondences between patches, and part clusters by k-means over
the patches of several images (Amir et al. 2021, "Deep ViT Features as Dense Visual Descriptors").

Every function takes patch features as they come out of the model, one (N_i, D) tensor per image, and fits
jointly over all images, so that a colour or a cluster label means the same thing in every image. Per-patch
results are in the model's token order; ``patch_rows_as_grid`` lays them out on the token layout's grid (through
its ``grid_order``), and ``top_matches`` measures neighbourhoods on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vitviz.explain.common import TokenGrid, token_grid
from vitviz.layout import TokenLayout


@dataclass(frozen=True)
class PCAColours:
    colours: list[torch.Tensor]  # one (N_i, n_components) tensor per image, in [0, 1]
    explained_variance: torch.Tensor  # (n_components,) the fraction of the total variance each component explains
    foreground: list[torch.Tensor] | None  # one (N_i,) bool mask per image with the foreground recipe, else None


def _check_features(features: Sequence[torch.Tensor]) -> torch.Tensor:
    """Validate one (N_i, D) tensor per image; return them concatenated, (sum N_i, D)."""
    if len(features) == 0:
        raise ValueError("features is empty: pass one (N, D) tensor of patch features per image")
    D = features[0].shape[-1]
    for i, f in enumerate(features):
        if f.ndim != 2 or f.shape[1] != D:
            raise ValueError(f"features[{i}] has shape {tuple(f.shape)}; expected (N, {D}) like features[0]")
        if not torch.isfinite(f).all():
            raise ValueError(f"features[{i}] holds NaN or infinite values")
    x = torch.cat(list(features))
    if x.shape[0] == 0:
        raise ValueError("features hold no patches")
    return x


def _fit_pca(x: torch.Tensor, n_components: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact PCA of the rows of x (N, D) by SVD. Returns the scores (N, n_components), the explained-variance
    ratios (n_components,) and a (n_components,) mask of flat components.

    Sign rule: each component (a direction in D-space) is turned so that its entry of largest magnitude is
    positive (the first such entry on ties). A component is flat, its scores noise, when its singular value
    is at most max(N, D) * eps * the largest one (numpy's matrix_rank rule), or when every patch is the same.
    """
    centred = x - x.mean(dim=0)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    components = vh[:n_components]
    pivot = components.abs().argmax(dim=1, keepdim=True)
    signs = components.gather(1, pivot).sign()
    components = components * torch.where(signs == 0, 1.0, signs)
    variance = s.square()
    total = variance.sum()
    ratio = variance[:n_components] / total if total > 0 else torch.zeros_like(variance[:n_components])
    tolerance = max(x.shape) * torch.finfo(x.dtype).eps * s[0]
    flat = (s[:n_components] <= tolerance) | (s[0] == 0)
    return centred @ components.T, ratio, flat


def _unit(scores: torch.Tensor, flat: torch.Tensor, clip: float) -> torch.Tensor:
    """Map each column of (N, C) scores to [0, 1] over all N rows: min-max after clipping the fraction ``clip``
    of the values at each end (the clip-quantiles become 0 and 1). Flat or constant columns become 0.5."""
    if clip > 0:
        lo, hi = torch.quantile(scores, torch.tensor([clip, 1 - clip], dtype=scores.dtype, device=scores.device), dim=0)
    else:
        lo, hi = scores.min(dim=0).values, scores.max(dim=0).values
    span = hi - lo
    usable = (span > 0) & ~flat
    unit = (scores.clamp(lo, hi) - lo) / torch.where(usable, span, 1.0)
    return torch.where(usable, unit, torch.full_like(unit, 0.5))


def pca_rgb(
    features: Sequence[torch.Tensor],
    n_components: int = 3,
    foreground: float | None = None,
    flip_first: bool = False,
    clip: float = 0.0,
) -> PCAColours:
    """Colour every patch by the first ``n_components`` principal components of the patch features, fitted
    jointly on the patches of all images (one (N_i, D) tensor each), so that colours compare across images.

    Each component's scores are mapped to [0, 1] jointly over all patches (``_unit``: plain min-max, or
    min-max between the ``clip`` and 1 - ``clip`` quantiles). The sign of each component follows a fixed rule
    (``_fit_pca``: its largest-magnitude entry in D-space is positive); ``flip_first`` negates the first.

    With ``foreground`` (a threshold in [0, 1]), DINOv2's recipe: a 1-component PCA over all patches, its
    scores min-maxed to [0, 1], splits foreground (score > threshold) from background; ``flip_first`` negates
    that component, choosing which side is foreground, and does not touch the colours. The ``n_components``
    PCA is then fitted on the foreground patches alone and colours them; background patches are 0 (black),
    and ``explained_variance`` is that second PCA's. Works in float64 for float64 input, else float32.
    """
    x = _check_features(features)
    x = x.detach().to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    N, D = x.shape
    if not 1 <= n_components <= min(N, D):
        raise ValueError(
            f"n_components must be in [1, {min(N, D)}] for {N} patches of dimension {D}; got {n_components}"
        )
    if not 0 <= clip < 0.5:
        raise ValueError(f"clip is the fraction clipped at each end and must be in [0, 0.5); got {clip}")
    sizes = [f.shape[0] for f in features]
    if foreground is None:
        scores, ratio, flat = _fit_pca(x, n_components)
        if flip_first:
            scores[:, 0] = -scores[:, 0]
        return PCAColours(list(_unit(scores, flat, clip).split(sizes)), ratio, None)

    if not 0 <= foreground <= 1:
        raise ValueError(f"the foreground threshold must be in [0, 1]; got {foreground}")
    first, _, flat = _fit_pca(x, 1)
    if flip_first:
        first = -first
    mask = _unit(first, flat, 0.0)[:, 0] > foreground
    count = int(mask.sum())
    if count == 0:
        raise ValueError(
            f"no patch scores above the foreground threshold {foreground} on the first component: "
            "lower the threshold or flip the first component (flip_first)"
        )
    if count < n_components:
        raise ValueError(f"only {count} foreground patches, fewer than n_components={n_components}")
    scores, ratio, flat = _fit_pca(x[mask], n_components)
    colours = torch.zeros(N, n_components, dtype=x.dtype, device=x.device)
    colours[mask] = _unit(scores, flat, clip)
    return PCAColours(list(colours.split(sizes)), ratio, list(mask.split(sizes)))


def patch_similarity(query: torch.Tensor, features: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine similarity of one (D,) feature with every row of (M, D): (M,), in at least fp32. Each norm is
    clamped to ``eps``, so a zero vector has similarity 0 with everything."""
    if query.ndim != 1 or features.ndim != 2 or features.shape[1] != query.shape[0]:
        raise ValueError(
            f"expected a (D,) query and (M, D) features; got {tuple(query.shape)} and {tuple(features.shape)}"
        )
    dtype = torch.promote_types(torch.promote_types(query.dtype, features.dtype), torch.float32)
    query, features = query.to(dtype), features.to(dtype)
    return (features @ query) / (features.norm(dim=1).clamp_min(eps) * query.norm().clamp_min(eps))


def patch_rows_as_grid(rows: torch.Tensor, layout: TokenLayout | tuple[int, int]) -> torch.Tensor:
    """One row per patch token, (N, C) (an image's PCA colours, its features), as the grid (*shape, C): (rows, cols, C)
    for an image, (frames, rows, cols, C) for a clip, through the layout's own order (``TokenLayout.grid_view``), or
    row-major for a plain ViT's ``grid_size`` (rows, cols)."""
    grid = _grid(layout, "patch_rows_as_grid")
    if rows.ndim != 2 or rows.shape[0] != grid.num_patches:
        raise ValueError(f"expected one row per patch, ({grid.num_patches}, C); got {tuple(rows.shape)}")
    return grid.as_map(rows.T).movedim(0, -1)


def _grid(layout: TokenLayout | tuple[int, ...], function: str) -> TokenGrid:
    """The grid of per-patch values (no prefix tokens): the layout's, or a plain ViT's ``grid_size``."""
    if isinstance(layout, TokenLayout):
        return token_grid(layout, function=function)
    return token_grid(0, tuple(layout), function=function)


def _cells(grid: TokenGrid, device: torch.device) -> torch.Tensor:
    """(N, axes) long: the map position (row, col), or a clip's (frame, row, col), of each patch in sequence order."""
    cell_of_patch = torch.arange(grid.num_patches)
    if grid.order is not None:
        cell_of_patch[torch.tensor(grid.order)] = torch.arange(grid.num_patches)
    return torch.stack(torch.unravel_index(cell_of_patch, grid.shape), dim=1).to(device)


def top_matches(
    similarity: torch.Tensor,
    k: int,
    layout: TokenLayout | tuple[int, int] | None = None,
    exclude: int | None = None,
    radius: int = 0,
) -> torch.Tensor:
    """Flat indices of the k highest entries of ``similarity`` (M,), highest first (ties: lower index first).

    ``exclude`` (a patch index in sequence order, e.g. the clicked patch) is skipped together with every patch
    within Chebyshev distance ``radius`` of it on the grid, so that a patch's own neighbourhood does not count as a
    match. The grid is the token layout's (``output.layout``: each patch's place read through its ``grid_order``;
    a clip's distance counts frames too), or a plain ViT's ``grid_size`` = (rows, cols), patches row-major.
    Returns (min(k, eligible patches),) long indices.
    """
    if similarity.ndim != 1:
        raise ValueError(f"similarity must be (M,); got {tuple(similarity.shape)}")
    if similarity.isnan().any():
        raise ValueError("similarity holds NaN values")
    M = similarity.shape[0]
    if k < 1:
        raise ValueError(f"k must be at least 1; got {k}")
    if radius < 0:
        raise ValueError(f"radius must be non-negative; got {radius}")
    grid = None if layout is None else _grid(layout, "top_matches")
    if grid is not None and grid.num_patches != M:
        raise ValueError(f"grid {'x'.join(map(str, grid.shape))} does not hold {M} patches")
    eligible = torch.ones(M, dtype=torch.bool, device=similarity.device)
    if exclude is not None:
        if not 0 <= exclude < M:
            raise ValueError(f"exclude must be a patch index in [0, {M - 1}]; got {exclude}")
        if grid is None:
            if radius > 0:
                raise ValueError("excluding a neighbourhood (radius > 0) needs grid_size (or the layout)")
            eligible[exclude] = False
        else:
            cells = _cells(grid, similarity.device)
            eligible = (cells - cells[exclude]).abs().amax(dim=1) > radius
    candidates = eligible.nonzero()[:, 0]
    order = similarity[candidates].sort(descending=True, stable=True).indices
    return candidates[order[:k]]


def feature_clusters(features: Sequence[torch.Tensor], k: int, seed: int = 0) -> list[torch.Tensor]:
    """Part co-segmentation: k-means over the patches of all images jointly (one (N_i, D) tensor each);
    returns one (N_i,) long tensor of labels per image, and a label names the same part in every image.

    Features are L2-normalised first, so k-means works in the cosine geometry in which ViT features are
    compared (Amir et al. 2021): a patch's norm (high-norm artifacts, contrast) does not decide its part.
    Labels are ordered: 0 is the largest cluster over all images, ties going to the cluster met first.
    Needs scikit-learn (``KMeans(n_clusters=k, random_state=seed, n_init=10)``), imported when called.
    """
    x = _check_features(features)
    if not 1 <= k <= x.shape[0]:
        raise ValueError(f"k must be in [1, {x.shape[0]}] (the number of patches); got {k}")
    try:
        from sklearn.cluster import KMeans
    except ImportError as error:
        raise ImportError("feature_clusters needs scikit-learn: pip install scikit-learn") from error

    points = F.normalize(x.detach().float(), dim=1).cpu().numpy()
    labels = torch.from_numpy(KMeans(n_clusters=k, random_state=seed, n_init=10).fit_predict(points)).long()
    counts = torch.bincount(labels, minlength=k)
    first = torch.full((k,), x.shape[0], dtype=torch.long).scatter_reduce(
        0, labels, torch.arange(x.shape[0]), reduce="amin"
    )
    order = sorted(range(k), key=lambda c: (-int(counts[c]), int(first[c])))  # new label -> old label
    relabel = torch.empty(k, dtype=torch.long)
    relabel[order] = torch.arange(k)
    return list(relabel[labels].to(x.device).split([f.shape[0] for f in features]))
