"""Every reader of per-patch values takes the token layout: the attention distance, the position and rotary
similarities, the matches and the grid of patch rows, the click-a-patch rows, and the painted PCA colours. A plain
ViT's layout gives what the pair (num_prefix_tokens, grid_size) gives; a layout that lists its patches in another
order (TimeSformer's patch-major tokens, a column-major one) gives each grid cell its own token's value, checked
against references written here with loops over the cells."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_models import build_tiny_vit

from vitviz import Preprocessing
from vitviz.analysis import analyse_image, patch_attention
from vitviz.explain.feature_views import patch_rows_as_grid, top_matches
from vitviz.explain.statistics import mean_attention_distance, position_embedding_similarity, rotary_similarity
from vitviz.layout import TokenLayout, grid_layout
from vitviz.render.feature_pictures import paint_patches


def attentions(generator: torch.Generator, tokens: int, blocks: int = 2, heads: int = 3) -> list[torch.Tensor]:
    return [torch.rand(2, heads, tokens, tokens, generator=generator).softmax(-1) for _ in range(blocks)]


def column_major(rows: int, cols: int, patch: int) -> TokenLayout:
    """[CLS], then an image's patches listed column by column: token 1 + c rows + r covers cell (r, c)."""
    cells = [(r, c) for c in range(cols) for r in range(rows)]  # in token order
    boxes = np.array([[np.nan] * 4] + [[c * patch, r * patch, (c + 1) * patch, (r + 1) * patch] for r, c in cells])
    order = np.array([c * rows + r for r in range(rows) for c in range(cols)])  # the patch of each row-major cell
    return TokenLayout(
        kinds=("cls",) + ("patch",) * len(cells),
        boxes=boxes.astype(np.float32),
        frames=np.zeros((len(cells) + 1, 2), np.int64),
        image_size=(rows * patch, cols * patch),
        grid=(1, rows, cols),
        grid_order=order,
    )


def patch_major_cell(n: int, frames: int, cols: int) -> tuple[int, int, int]:
    """The (frame, row, col) of patch n (among the patch tokens) of a TimeSformer-order layout."""
    spatial, t = divmod(n, frames)
    return t, spatial // cols, spatial % cols


def test_attention_distance_from_the_layout():
    generator = torch.Generator().manual_seed(0)
    grid, patch = (3, 4), 8
    maps = attentions(generator, 1 + 12)
    plain = grid_layout(("cls",), grid, patch)
    torch.testing.assert_close(mean_attention_distance(maps, plain), mean_attention_distance(maps, grid, patch, 1))
    registers = grid_layout(("cls", "register", "register"), grid, patch)
    maps = attentions(generator, 3 + 12)
    torch.testing.assert_close(mean_attention_distance(maps, registers), mean_attention_distance(maps, grid, patch, 3))

    # patch-major tokens, non-square patches (6 px high, 10 px wide): the distance between box centres, brute force
    frames, rows, cols = 2, 2, 3
    layout = grid_layout(("cls",), (rows, cols), (6, 10), num_frames=frames, patch_major=True)
    N = frames * rows * cols
    maps = attentions(generator, 1 + N, blocks=1)
    centres = [
        (patch_major_cell(n, frames, cols)[1] * 6 + 3, patch_major_cell(n, frames, cols)[2] * 10 + 5) for n in range(N)
    ]
    expected = torch.zeros(2, 1, 3, dtype=torch.float64)
    for b in range(2):
        for h in range(3):
            total = 0.0
            for q in range(N):
                row = maps[0][b, h, 1 + q, 1:].double()
                total += sum(float(row[k]) * math.dist(centres[q], centres[k]) for k in range(N)) / float(row.sum())
            expected[b, 0, h] = total / N
    torch.testing.assert_close(mean_attention_distance(maps, layout).double(), expected, rtol=1e-5, atol=1e-5)


def test_attention_distance_refuses_mixed_arguments():
    layout = grid_layout(("cls",), (2, 2), 8)
    maps = attentions(torch.Generator().manual_seed(1), 5)
    with pytest.raises(ValueError, match="not both"):
        mean_attention_distance(maps, layout, 8)
    with pytest.raises(ValueError, match="needs patch_size"):
        mean_attention_distance(maps, (2, 2))


def test_position_and_rotary_similarity_from_the_layout():
    generator = torch.Generator().manual_seed(2)
    table = torch.randn(1, 1 + 6, 16, generator=generator)
    plain = grid_layout(("cls",), (2, 3), 8)
    torch.testing.assert_close(
        position_embedding_similarity(table, plain), position_embedding_similarity(table, (2, 3))
    )
    sin, cos = torch.randn(6, 8, generator=generator), torch.randn(6, 8, generator=generator)
    torch.testing.assert_close(rotary_similarity(sin, cos, plain), rotary_similarity(sin, cos, (2, 3)))

    # column-major tokens: cell (r, c)'s map is the similarity of its own token with each cell's token
    layout, rows, cols = column_major(2, 3, 8), 2, 3
    similarity = position_embedding_similarity(table, layout)
    assert similarity.shape == (rows, cols, rows, cols)
    unit = torch.nn.functional.normalize(table[0, 1:], dim=-1)
    for r, c, r2, c2 in np.ndindex(rows, cols, rows, cols):
        expected = float(unit[c * rows + r] @ unit[c2 * rows + r2])
        assert float(similarity[r, c, r2, c2]) == pytest.approx(expected, abs=1e-6)
    rotary = rotary_similarity(sin, cos, layout)
    for r, c, r2, c2 in np.ndindex(rows, cols, rows, cols):
        i, j = c * rows + r, c2 * rows + r2
        expected = float((cos[i] * cos[j] + sin[i] * sin[j]).mean())
        assert float(rotary[r, c, r2, c2]) == pytest.approx(expected, abs=1e-6)


def test_matches_and_patch_rows_on_the_layout():
    generator = torch.Generator().manual_seed(3)
    similarity = torch.rand(12, generator=generator)
    plain = grid_layout(("cls",), (3, 4), 8)
    for exclude, radius in [(5, 1), (0, 2), (11, 0)]:
        assert torch.equal(
            top_matches(similarity, 20, plain, exclude=exclude, radius=radius),
            top_matches(similarity, 20, (3, 4), exclude=exclude, radius=radius),
        )
    rows = torch.randn(12, 5, generator=generator)
    torch.testing.assert_close(patch_rows_as_grid(rows, plain), rows.reshape(3, 4, 5))

    # patch-major tokens of 2 frames on a 2 x 3 grid: neighbourhoods and cells by (frame, row, col)
    frames, r_, c_ = 2, 2, 3
    layout = grid_layout(("cls",), (r_, c_), 8, num_frames=frames, patch_major=True)
    similarity = torch.rand(12, generator=generator)
    cells = [patch_major_cell(n, frames, c_) for n in range(12)]
    for exclude, radius in [(4, 0), (7, 1)]:
        near = {n for n in range(12) if max(abs(a - b) for a, b in zip(cells[n], cells[exclude])) <= radius}
        expected = sorted(set(range(12)) - near, key=lambda n: (-float(similarity[n]), n))
        assert top_matches(similarity, 20, layout, exclude=exclude, radius=radius).tolist() == expected
    grid = patch_rows_as_grid(rows, layout)
    assert grid.shape == (frames, r_, c_, 5)
    for n, (t, r, c) in enumerate(cells):
        assert torch.equal(grid[t, r, c], rows[n])
    with pytest.raises(ValueError, match="one row per patch"):
        patch_rows_as_grid(rows[:5], layout)


def test_click_a_patch_picks_the_layouts_token():
    model = build_tiny_vit(image_size=(24, 40))  # a 3 x 5 grid behind [CLS]
    model.transform = Preprocessing(resize=(24, 40), crop=None)
    photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 40, 3), dtype=np.uint8))
    analysis = analyse_image(model, photo)
    streamed = analyse_image(model, photo, max_attention_bytes=0)
    plain = dataclasses.replace(analysis, layout=grid_layout(("cls",), (3, 5), 8))
    for layer, query in [(0, (2, 4)), (1, (1, 0))]:
        torch.testing.assert_close(
            patch_attention(model, plain, layer, query),
            patch_attention(model, dataclasses.replace(analysis, layout=None), layer, query),
        )
    # tokens listed column by column: the clicked cell's token, and every cell its own token's weight
    layout = column_major(3, 5, 8)
    generator = torch.Generator().manual_seed(4)
    kept = tuple(attentions(generator, 16, blocks=len(analysis.attentions), heads=analysis.attentions[0].shape[1]))
    kept = tuple(a[:1] for a in kept)
    shuffled = dataclasses.replace(analysis, layout=layout, attentions=kept)
    rows = patch_attention(model, shuffled, 1, (2, 1))
    token = 1 + 1 * 3 + 2
    for h, r, c in np.ndindex(*rows.shape):
        assert float(rows[h, r, c]) == float(kept[1][0, h, token, 1 + c * 3 + r])
    # the streamed pass reads the block the same way: the model's own block, over the shuffled cells
    shuffled_stream = dataclasses.replace(streamed, layout=layout)
    streamed_rows = patch_attention(model, shuffled_stream, 0, (2, 1))
    block = analysis.attentions[0][0]
    for h, r, c in np.ndindex(*streamed_rows.shape):
        assert float(streamed_rows[h, r, c]) == pytest.approx(float(block[h, token, 1 + c * 3 + r]), abs=1e-6)
    with pytest.raises(ValueError, match="outside"):
        patch_attention(model, shuffled, 0, (3, 0))


@pytest.mark.parametrize("box", [None, (3.0, -4.0, 45.0, 26.0)])
@pytest.mark.parametrize("alpha", [1.0, 0.4])
def test_painted_colours_through_the_layout(box, alpha):
    photo = Image.fromarray(np.random.default_rng(1).integers(0, 256, (24, 40, 3), dtype=np.uint8))
    colours = np.random.default_rng(2).random((3, 5, 3))
    plain = grid_layout(("cls",), (3, 5), 8)
    by_grid = np.asarray(paint_patches(photo, colours, box, alpha))
    by_layout = np.asarray(paint_patches(photo, colours.reshape(15, 3), box, alpha, layout=plain))
    np.testing.assert_array_equal(by_layout, by_grid)
    # column-major tokens: each token's colour lands on its own cell
    shuffled = colours.transpose(1, 0, 2).reshape(15, 3)  # token 1 + c rows + r holds cell (r, c)
    np.testing.assert_array_equal(
        np.asarray(paint_patches(photo, shuffled, box, alpha, layout=column_major(3, 5, 8))), by_grid
    )


def test_painting_leaves_pixels_no_token_covers():
    photo = Image.fromarray(np.full((16, 16, 3), 90, dtype=np.uint8))
    layout = TokenLayout(
        kinds=("patch",),
        boxes=np.array([[0, 0, 8, 8]], np.float32),
        frames=np.zeros((1, 2), np.int64),
        image_size=(16, 16),
    )
    pixels = np.asarray(paint_patches(photo, np.array([[255, 0, 0]]), layout=layout))
    assert (pixels[:8, :8] == (255, 0, 0)).all() and (pixels[8:] == 90).all() and (pixels[:, 8:] == 90).all()
    with pytest.raises(ValueError, match="one per token"):
        paint_patches(photo, np.zeros((1, 1, 3)), layout=layout)


def tiles() -> TokenLayout:
    """Two overlapping tiles of a 16 x 24 input, each a 2 x 2 grid of 4 px patches at 2x scale: no one grid."""
    boxes = [[x + c * 4, r * 4, x + (c + 1) * 4, (r + 1) * 4] for x in (0, 4) for r in range(2) for c in range(2)]
    return TokenLayout(
        kinds=("cls",) + ("patch",) * 8,
        boxes=np.array([[np.nan] * 4] + boxes, np.float32),
        frames=np.zeros((9, 2), np.int64),
        image_size=(8, 12),
    )


@pytest.mark.parametrize("box", [None, (3.0, -4.0, 45.0, 26.0)])
@pytest.mark.parametrize("value_range", [None, (-1.0, 2.0)])
def test_overlays_and_masks_through_the_layout(box, value_range):
    from vitviz.render.overlays import masked_image, overlay

    photo = Image.fromarray(np.random.default_rng(3).integers(0, 256, (24, 40, 3), dtype=np.uint8))
    grid = np.random.default_rng(4).random((3, 5)).astype(np.float32)
    by_grid = np.asarray(overlay(photo, grid, "viridis", 0.6, box, value_range))
    plain = grid_layout(("cls",), (3, 5), 8)
    values = np.concatenate([[7.0], grid.ravel()])  # [CLS]'s value is not drawn
    np.testing.assert_array_equal(np.asarray(overlay(photo, values, "viridis", 0.6, box, value_range, plain)), by_grid)
    shuffled = grid.T.ravel()  # column-major: token 1 + c rows + r holds cell (r, c)
    np.testing.assert_array_equal(
        np.asarray(overlay(photo, shuffled, "viridis", 0.6, box, value_range, column_major(3, 5, 8))), by_grid
    )
    mask = grid > 0.5
    expected = np.asarray(masked_image(photo, mask, box))
    np.testing.assert_array_equal(np.asarray(masked_image(photo, mask.ravel(), box, plain)), expected)
    np.testing.assert_array_equal(np.asarray(masked_image(photo, mask.T.ravel(), box, column_major(3, 5, 8))), expected)


def test_an_overlay_of_tiles_is_painted_token_by_token():
    from vitviz.render.overlays import colormap_table, overlay

    photo = Image.fromarray(np.full((16, 24, 3), 100, dtype=np.uint8))
    values = np.array([0.0, 0, 1, 2, 3, 4, 5, 6, 7])  # [CLS], then tile 1's patches, then tile 2's
    pixels = np.asarray(overlay(photo, values, "greys", 1.0, layout=tiles())).astype(int)
    # input pixel (x, y) is photo pixel (2x, 2y); tile 1 covers x in [0, 8), tile 2 x in [4, 12): overlap averaged
    table = colormap_table("greys").astype(int)
    reference = np.full((16, 24, 3), -1)
    for y, x in np.ndindex(16, 24):
        ix, iy = x // 2, y // 2
        held = [v for v, (x0, y0, x1, y1) in zip(values[1:], tiles().boxes[1:]) if x0 <= ix < x1 and y0 <= iy < y1]
        reference[y, x] = table[int(np.mean(held) / 7 * 255 + 0.5)]
    np.testing.assert_array_equal(pixels, reference)


def test_an_overlay_leaves_the_photo_where_no_token_lies():
    from vitviz.render.overlays import overlay

    photo = Image.fromarray(np.full((16, 16, 3), 90, dtype=np.uint8))
    layout = TokenLayout(
        kinds=("patch", "patch"),
        boxes=np.array([[0, 0, 8, 8], [8, 0, 16, 8]], np.float32),
        frames=np.zeros((2, 2), np.int64),
        image_size=(16, 16),
    )
    pixels = np.asarray(overlay(photo, np.array([0.0, 1.0]), "greys", 1.0, layout=layout))
    assert (pixels[8:] == 90).all()  # the lower half: no token, the photo undimmed
    assert not (pixels[:8] == 90).all()


def test_the_index_stores_each_cells_own_features(monkeypatch):
    """The index's per-patch features are laid out through the analysis' layout: with tokens listed column by
    column, cell (r, c) holds token 1 + c rows + r's features."""
    import vitviz.dataset.indexing as indexing

    model = build_tiny_vit(image_size=(24, 40))
    pixels = torch.randn(2, 3, 24, 40, generator=torch.Generator().manual_seed(5))
    plain = indexing.analyse_batch(model, pixels, indexing.IndexOptions())
    analyse = indexing.analyse

    def shuffled(*args, **kwargs):
        return dataclasses.replace(analyse(*args, **kwargs), layout=column_major(3, 5, 8))

    monkeypatch.setattr(indexing, "analyse", shuffled)
    found = indexing.analyse_batch(model, pixels, indexing.IndexOptions())["features"]
    assert found.shape == plain["features"].shape == (2, 3, 5, model.config.hidden_size)
    tokens = plain["features"].reshape(2, 15, -1)  # the plain layout's cells: the tokens in row-major order
    for b, r, c in np.ndindex(2, 3, 5):
        assert torch.equal(found[b, r, c], tokens[b, c * 3 + r])
