"""Rollout and relevance across windows and stages (vitviz.explain.stages), against dense implementations written
here from the rules alone: every block's attention embedded in a (T, T) matrix, merge matrices between stages, and
the products formed in full. Synthetic window layouts stand in for a hierarchical model: two stages of a 4 x 6 grid
of 4-pixel tokens in 2 x 2 windows (the second block shifted by one token, cyclically), merged 2 x 2 into a 2 x 3
grid attended globally; and a 3 x 5 grid whose windows are padded (-1 slots) as a model pads its input.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitviz.explain import attention_gradients, attention_rollout, gradient_weighted_attention
from vitviz.explain.stages import merge_targets, relevance_across_stages, rollout_across_stages
from vitviz.layout import TokenLayout, grid_layout


def windowed(layout: TokenLayout, window: int, shift: int = 0) -> TokenLayout:
    """``layout`` (a one-frame grid without prefix tokens) with window x window windows, the grid rolled by -shift
    first (a cyclic shift as Swin's), padded with -1 slots to a multiple of the window."""
    _, rows, cols = layout.grid
    index = np.arange(rows * cols).reshape(rows, cols)
    index = np.roll(index, (-shift, -shift), axis=(0, 1))
    padded = np.full((-(-rows // window) * window, -(-cols // window) * window), -1)
    padded[:rows, :cols] = index
    R, C = padded.shape
    windows = padded.reshape(R // window, window, C // window, window).transpose(0, 2, 1, 3).reshape(-1, window**2)
    return TokenLayout(
        kinds=layout.kinds,
        boxes=layout.boxes,
        frames=layout.frames,
        image_size=layout.image_size,
        grid=layout.grid,
        windows=windows,
    )


def random_window_attention(layout: TokenLayout, batch: int, heads: int, generator) -> torch.Tensor:
    """Softmax rows over each window's slots, padded slots included (a model attends to its padding)."""
    groups, size = layout.windows.shape
    return torch.randn(batch * groups, heads, size, size, generator=generator, dtype=torch.float64).softmax(-1)


def dense(attention: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """(B, T, T): the windows' weights at their tokens' places, 0 across windows; padded slots dropped."""
    if layout.windows is None:
        return attention
    groups, size = layout.windows.shape
    batch = attention.shape[0] // groups
    out = torch.zeros(batch, len(layout), len(layout), dtype=attention.dtype)
    blocks = attention.reshape(batch, groups, size, size)
    for b in range(batch):
        for w, tokens in enumerate(layout.windows):
            for i, ti in enumerate(tokens):
                for j, tj in enumerate(tokens):
                    if ti >= 0 and tj >= 0:
                        out[b, ti, tj] = blocks[b, w, i, j]
    return out


def merge_matrix(later: TokenLayout, earlier: TokenLayout) -> torch.Tensor:
    """(T_later, T_earlier): each later token the mean of the earlier tokens whose box centre it holds."""
    M = torch.zeros(len(later), len(earlier), dtype=torch.float64)
    for i, (x0, y0, x1, y1) in enumerate(earlier.boxes):
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        for j, (a0, b0, a1, b1) in enumerate(later.boxes):
            if a0 <= cx < a1 and b0 <= cy < b1:
                M[j, i] = 1
    return M / M.sum(dim=1, keepdim=True)


def dense_product(matrices, layouts, step) -> torch.Tensor:
    """prod_l step(A_l) with the merge matrices between, later blocks on the left: (B, T_last, T_first)."""
    batch = matrices[0].shape[0]
    product = torch.eye(len(layouts[0]), dtype=torch.float64).expand(batch, -1, -1)
    for index, (matrix, layout) in enumerate(zip(matrices, layouts, strict=True)):
        if index and len(layout) != len(layouts[index - 1]):
            product = merge_matrix(layout, layouts[index - 1]) @ product
        product = step(matrix) @ product
    return product


def rollout_step(matrix: torch.Tensor) -> torch.Tensor:
    with_residual = matrix + torch.eye(matrix.shape[-1], dtype=matrix.dtype)
    return with_residual / with_residual.sum(dim=-1, keepdim=True)


def two_stages():
    first = grid_layout((), (4, 6), 4)
    second = grid_layout((), (2, 3), 8)
    return [windowed(first, 2), windowed(first, 2, shift=1), second, second]


def stage_attentions(layouts, batch, heads, generator):
    return [
        random_window_attention(layout, batch, heads, generator)
        if layout.windows is not None
        else torch.randn(batch, heads, len(layout), len(layout), generator=generator, dtype=torch.float64).softmax(-1)
        for layout in layouts
    ]


@pytest.mark.parametrize("readout", ["mean", "given"])
def test_rollout_across_windows_and_a_merge_equals_the_dense_product(readout):
    generator = torch.Generator().manual_seed(0)
    layouts = two_stages()
    attentions = stage_attentions(layouts, batch=2, heads=3, generator=generator)
    weights = torch.rand(2, 6, generator=generator, dtype=torch.float64) if readout == "given" else None
    got = rollout_across_stages(attentions, layouts, readout=weights)
    product = dense_product([dense(a.mean(1), lay) for a, lay in zip(attentions, layouts)], layouts, rollout_step)
    row = weights if weights is not None else torch.full((2, 6), 1 / 6, dtype=torch.float64)
    expected = (row[:, None, :] @ product)[:, 0].reshape(2, 4, 6)
    assert got.shape == (2, 4, 6)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_relevance_across_windows_and_a_merge_equals_the_dense_product():
    generator = torch.Generator().manual_seed(1)
    layouts = two_stages()
    attentions = stage_attentions(layouts, batch=2, heads=3, generator=generator)
    gradients = [torch.randn(a.shape, generator=generator, dtype=torch.float64) for a in attentions]
    got = relevance_across_stages(attentions, gradients, layouts)
    weighted = [dense((g * a).clamp(min=0).mean(1), lay) for a, g, lay in zip(attentions, gradients, layouts)]
    product = dense_product(weighted, layouts, lambda m: m + torch.eye(m.shape[-1], dtype=m.dtype))
    expected = product.mean(dim=1).reshape(2, 4, 6)  # the mean of the last stage's rows
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_padded_slots_are_dropped_and_each_row_renormalised():
    generator = torch.Generator().manual_seed(2)
    grid = grid_layout((), (3, 5), 4)
    layouts = [windowed(grid, 2), windowed(grid, 2, shift=1)]
    assert (layouts[0].windows == -1).any()
    attentions = [random_window_attention(layout, 1, 2, generator) for layout in layouts]
    got = rollout_across_stages(attentions, layouts)
    product = dense_product([dense(a.mean(1), lay) for a, lay in zip(attentions, layouts)], layouts, rollout_step)
    torch.testing.assert_close(got, product.mean(dim=1).reshape(1, 3, 5), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got.sum(), torch.tensor(1.0, dtype=torch.float64))  # renormalised: nothing lost


def test_on_a_plain_vit_both_equal_the_existing_maps(tiny_vit):
    """Global attention and one layout for every block: the stage rules are vitviz's rollout and relevance."""
    size = tiny_vit.config.image_size
    height, width = (size, size) if isinstance(size, int) else size
    images = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(3))
    output, gradients = attention_gradients(tiny_vit, images, target=1)
    prefix, grid = output.num_prefix_tokens, output.grid_size
    torch.testing.assert_close(
        rollout_across_stages(output.attentions, output.layouts, readout=output.readout),
        attention_rollout(output.attentions, prefix, grid, readout=output.readout),
        rtol=1e-4,
        atol=1e-6,
    )
    torch.testing.assert_close(
        relevance_across_stages(output.attentions, gradients, output.layouts, readout=output.readout),
        gradient_weighted_attention(output.attentions, gradients, prefix, grid, readout=output.readout),
        rtol=1e-4,
        atol=1e-6,
    )


def test_merge_targets_follow_the_boxes():
    targets = merge_targets(grid_layout(("cls",), (2, 3), 8), grid_layout(("cls",), (4, 6), 4))
    expected = 1 + (np.arange(4)[:, None] // 2 * 3 + np.arange(6)[None, :] // 2).ravel()
    np.testing.assert_array_equal(targets, np.concatenate([[0], expected]))
    with pytest.raises(ValueError, match="different prefix tokens"):
        merge_targets(grid_layout((), (2, 3), 8), grid_layout(("cls",), (4, 6), 4))
    with pytest.raises(ValueError, match="do not nest"):
        merge_targets(grid_layout((), (1, 1), 8), grid_layout((), (4, 6), 4))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a, lay: (a[:1], lay), "layouts for 1 attention blocks"),
        (lambda a, lay: ([a[0][:, :, :3]] + a[1:], lay), "its layout says"),
        (lambda a, lay: ([a[0][:6]] + a[1:], lay), "holds 2 images, block 0 1"),
        (lambda a, lay: ([], []), "attentions is empty"),
    ],
)
def test_bad_arguments_are_one_clear_error(change, message):
    layouts = two_stages()
    attentions = stage_attentions(layouts, batch=2, heads=1, generator=torch.Generator().manual_seed(4))
    attentions, layouts = change(attentions, layouts)
    with pytest.raises(ValueError, match=message):
        rollout_across_stages(attentions, layouts)


def test_a_patch_major_clip_comes_back_in_grid_order_and_divided_attention_is_refused():
    """TimeSformer lists its tokens patch by patch (1 + n * frames + t): the map must be read through the layout's
    grid_order, as grid_view reads it (TimeSformer #76 is the bug of reshaping by the grid), and its divided
    attention, which is no (T, T) matrix, is refused in one line."""
    from test_import_timesformer import clips, convert, hf_model

    joint = convert(hf_model(attention_type="joint_space_time"))
    with torch.no_grad():
        out = joint(clips(1), output_attentions=True)
    frames, rows, cols = out.layout.grid
    token = 1 + (1 * cols + 1) * frames + (frames - 1)  # patch (1, 1) in the last frame
    readout = torch.zeros(1, len(out.layout))
    readout[0, token] = 1.0
    zeros = [torch.zeros_like(a) for a in out.attentions]  # no attention: the map is the readout itself
    drawn = rollout_across_stages(zeros, out.layouts, readout=readout)
    assert drawn.shape == (1, frames, rows, cols)
    assert np.argwhere(drawn[0].numpy() > 0).tolist() == [[frames - 1, 1, 1]]
    np.testing.assert_array_equal(drawn[0].numpy(), out.layout.grid_view(readout[0].numpy()))
    divided = convert(hf_model())
    with torch.no_grad():
        out = divided(clips(1), output_attentions=True)
    with pytest.raises(ValueError, match="divided space-time") as refused:
        rollout_across_stages(out.attentions, out.layouts, readout=out.readout)
    assert "\n" not in str(refused.value)
