"""Facets from a partial pass: patch_features and one head's queries and keys equal what the whole forward pass
returns (output_qkv, output_hidden_states), for every tiny family."""

import pytest
import torch
from tiny_models import TINY_FAMILIES, build_tiny_vit

from vitviz import explain


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_one_heads_queries_and_keys_equal_the_full_passes(family):
    model = build_tiny_vit(family)
    size = model.config.image_size
    pixels = torch.randn(
        2, 3, *(size if isinstance(size, tuple) else (size, size)), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        qkv = model(pixels, output_qkv=True).qkv
    p = model.config.num_prefix_tokens
    for block, head in [(0, 0), (-1, model.config.num_heads - 1)]:
        queries, keys = explain.head_queries_and_keys(model, pixels, block, head)
        torch.testing.assert_close(queries, qkv[block].q[:, head, p:].float())
        torch.testing.assert_close(keys, qkv[block].k[:, head, p:].float())
        facet = explain.patch_features(model, pixels, block, "key")  # the heads side by side
        width = keys.shape[-1]
        torch.testing.assert_close(facet[..., head * width : (head + 1) * width], keys)


def test_a_head_or_block_out_of_range_is_refused():
    model = build_tiny_vit()
    pixels = torch.zeros(1, 3, 32, 32)
    with pytest.raises(ValueError, match="head must be in"):
        explain.head_queries_and_keys(model, pixels, 0, model.config.num_heads)
    with pytest.raises(ValueError, match="block must be in"):
        explain.head_queries_and_keys(model, pixels, model.config.num_layers, 0)
