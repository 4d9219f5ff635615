"""Swin's head statistics inside windows (explain.window_head_statistics) against a direct implementation written
here: every block's window attention embedded in a dense (T, T) matrix per head, each token's row read over the
tokens of its own window (padded slots dropped, renormalised), distances between token centres computed from the
stage's grid coordinates (2^stage patches per token), and the means taken token by token."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_swins import PADDED_SIZE, tiny_swin

from vitviz.explain.statistics import window_head_statistics

SOURCES = [("huggingface", "swin"), ("timm", "swinv2")]


def reference(attention: torch.Tensor, layout, token_size: int, grid: tuple[int, int]) -> tuple[list, list]:
    """Per head, the entropy and distance in pixels of one image's block, token by token."""
    rows, cols = grid
    heads = attention.shape[1]
    entropies, distances = [], []
    for head in range(heads):
        matrix = np.zeros((rows * cols, rows * cols))
        members = {}
        for window, tokens in enumerate(layout.windows):
            for i, query in enumerate(tokens):
                if query < 0:
                    continue
                members[query] = [t for t in tokens if t >= 0]
                for j, key in enumerate(tokens):
                    if key >= 0:
                        matrix[query, key] = attention[window, head, i, j].item()
        entropy = distance = 0.0
        for query in range(rows * cols):
            keys = members[query]
            p = matrix[query, keys] / matrix[query, keys].sum()
            entropy -= sum(v * math.log(v) for v in p if v > 0)
            qy, qx = divmod(query, cols)
            for key, weight in zip(keys, p, strict=True):
                ky, kx = divmod(key, cols)
                distance += weight * token_size * math.hypot(qy - ky, qx - kx)
        entropies.append(entropy / (rows * cols))
        distances.append(distance / (rows * cols))
    return entropies, distances


@pytest.mark.parametrize("source, family", SOURCES)
def test_statistics_inside_windows_equal_the_token_by_token_definition(source, family):
    model = tiny_swin(source, family)
    pixels = torch.randn(2, 3, *PADDED_SIZE[source], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(pixels, output_attentions=True)
    entropy, distance, to_tokens = window_head_statistics(out.attentions, out.layouts)
    depths, heads = model.config.depths, model.config.num_heads
    assert entropy.shape == distance.shape == (2, sum(depths), max(heads))
    padded = [(layout.windows < 0).any() for layout in out.layouts]
    assert any(padded)  # the input pads: the padded slots are left out
    if source == "huggingface":  # transformers' padding takes attention
        assert (to_tokens[~torch.isnan(to_tokens)] < 1 - 1e-4).any()
    block = 0
    for stage, depth in enumerate(depths):
        for _ in range(depth):
            groups = len(out.layouts[block].windows)
            for image in range(2):
                attention = out.attentions[block][image * groups : (image + 1) * groups]
                expected_entropy, expected_distance = reference(
                    attention, out.layouts[block], model.config.patch_size * 2**stage, out.stage_grids[stage]
                )
                got = slice(0, heads[stage])
                np.testing.assert_allclose(entropy[image, block, got], expected_entropy, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(distance[image, block, got], expected_distance, rtol=1e-4, atol=1e-4)
                assert torch.isnan(entropy[image, block, heads[stage] :]).all()
                windows = out.layouts[block].windows
                for head in range(heads[stage]):  # each real query's weight on its window's real keys
                    rows = [
                        attention[w, head, i, windows[w] >= 0].sum().item()
                        for w in range(len(windows))
                        for i in np.flatnonzero(windows[w] >= 0)
                    ]
                    assert to_tokens[image, block, head].item() == pytest.approx(np.mean(rows), abs=1e-5)
            block += 1


def test_a_block_that_attends_globally_reads_its_patch_tokens_as_one_window():
    model = tiny_swin("timm", "swin")
    with torch.no_grad():
        out = model(torch.randn(1, 3, *PADDED_SIZE["timm"]), output_attentions=True)
    layout = out.layouts[-1]  # the last stage's grid of 5 x 3 tokens in windows of 4 x 3: two windows
    # a dense attention over every token of the stage, rows summing to 1, read as one global block
    weights = torch.rand(1, 4, len(layout), len(layout)).softmax(dim=-1)
    entropy, distance, _ = window_head_statistics([weights], [layout.__class__(**{**vars(layout), "windows": None})])
    expected = -(weights * weights.log()).sum(-1).mean(-1)
    np.testing.assert_allclose(entropy[0, 0], expected[0], rtol=1e-5)
    assert (distance > 0).all()


def test_attentions_that_do_not_fit_their_layouts_are_refused_in_one_line():
    model = tiny_swin("timm", "swin")
    with torch.no_grad():
        out = model(torch.randn(1, 3, *PADDED_SIZE["timm"]), output_attentions=True)
    with pytest.raises(ValueError, match="layouts for"):
        window_head_statistics(out.attentions[:-1], out.layouts)
    with pytest.raises(ValueError, match="does not fit"):
        window_head_statistics(out.attentions[1:2], out.layouts[-1:])


def reference_cells(grid, window, shift, padding) -> np.ndarray:
    """Each slot's drawn (row, col), written from the two orders: transformers pads the grid of places, then rolls
    it; timm rolls the real rows and columns, then appends the padding past the edge (a padded slot keeps the
    rolled place of the real column or row it extends)."""
    (H, W), (wh, ww) = grid, window
    Hp, Wp = -(-H // wh) * wh, -(-W // ww) * ww
    places = np.stack(np.meshgrid(np.arange(Hp), np.arange(Wp), indexing="ij"), axis=-1)  # (Hp, Wp, 2)
    if padding == "huggingface":
        rolled = np.roll(places, (-shift[0], -shift[1]), axis=(0, 1))
    else:
        rolled = places.copy()
        rolled[:H] = np.roll(rolled[:H], -shift[0], axis=0)
        rolled[:, :W] = np.roll(rolled[:, :W], -shift[1], axis=1)
    windows = rolled.reshape(Hp // wh, wh, Wp // ww, ww, 2).transpose(0, 2, 1, 3, 4)
    return windows.reshape(-1, wh * ww, 2)


@pytest.mark.parametrize("source, family", [("huggingface", "swin"), ("timm", "swin")])
def test_padded_slots_are_drawn_where_the_source_padded_and_take_the_rest_of_the_row(source, family):
    from vitviz.explain import window_attention_map
    from vitviz.model.windows import window_cells

    model = tiny_swin(source, family)
    with torch.no_grad():
        out = model(torch.randn(1, 3, *PADDED_SIZE[source]), output_attentions=True)
    seen_padding = 0
    for block, layout in enumerate(out.layouts):
        stage = next(s for s, grid in enumerate(out.stage_grids) if grid == layout.grid[1:])
        grid, window = out.stage_grids[stage], model.config.windows[stage]
        shift = model.block_shift(stage, block % 2, grid)
        cells = window_cells(grid, window, shift, model.config.padding).numpy()
        np.testing.assert_array_equal(cells, reference_cells(grid, window, shift, model.config.padding))
        real = layout.windows >= 0
        np.testing.assert_array_equal(cells[real][:, 0] * grid[1] + cells[real][:, 1], layout.windows[real])
        for token in (0, len(layout) - 1):
            view = window_attention_map(out.attentions, out.layouts, block, token, 0)
            assert (layout.windows[view.window][view.padded_slots] == -1).all()
            total = torch.nansum(view.values[0]) + view.padding[0].sum()
            assert total.item() == pytest.approx(1.0, abs=1e-5)  # the tokens shown and the padding: the whole row
            seen_padding += len(view.padded_slots)
    assert seen_padding  # the input pads
