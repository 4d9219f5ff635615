"""Per-head statistics as records (vitviz.explain.head_statistics): each record computes what the keep-everything
function computes, the streaming explainer returns every record under its name, and the index's heads table has
exactly the records' columns."""

from __future__ import annotations

import pytest
import torch

from vitviz import explain
from vitviz.explain.head_statistics import HEAD_STATISTICS, BlockGeometry, block_statistics, head_statistic


def random_attention(batch=2, heads=3, tokens=1 + 6, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(batch, heads, tokens, tokens, generator=generator).softmax(dim=-1)


def test_each_record_equals_its_keep_everything_function():
    attention, geometry = random_attention(), BlockGeometry((2, 3), 8, 1)
    found = block_statistics(attention, geometry)
    assert list(found) == [s.name for s in HEAD_STATISTICS]
    torch.testing.assert_close(found["entropy"], explain.attention_entropy([attention])[:, 0])
    distance = explain.mean_attention_distance([attention], (2, 3), 8, 1)[:, 0]
    torch.testing.assert_close(found["distance_px"], distance)
    torch.testing.assert_close(found["distance_patches"], distance / 8)
    torch.testing.assert_close(found["prefix_shares"], explain.attention_to_prefix_tokens([attention], 1)[:, 0])
    assert found["prefix_shares"].shape == (2, 3, 2)


def test_columns_units_and_lookup():
    assert head_statistic("prefix_shares").columns(["cls", "reg0"]) == ["to_cls", "to_reg0", "to_patches"]
    assert head_statistic("entropy").columns(["cls"]) == ["entropy"]
    assert head_statistic("distance_px").chart_label() == "mean attention distance (px)"
    assert len({s.name for s in HEAD_STATISTICS}) == len(HEAD_STATISTICS)
    with pytest.raises(ValueError, match="no head statistic 'nope'; known: entropy"):
        head_statistic("nope")


def test_named_records_are_the_list_and_say_how_their_extremes_read():
    from vitviz.explain.head_statistics import DISTANCE_PATCHES, DISTANCE_PX, ENTROPY, PREFIX_SHARES

    assert (ENTROPY, DISTANCE_PX, DISTANCE_PATCHES, PREFIX_SHARES) == HEAD_STATISTICS
    assert ENTROPY.title() == "Attention entropy" and ENTROPY.chart_label() == "attention entropy (nats)"
    assert DISTANCE_PX.lowest == "attends nearest" and DISTANCE_PX.highest == "attends farthest away"
    assert PREFIX_SHARES.highest.format(column="to_cls") == "attends most to_cls"
    assert [s.name for s in HEAD_STATISTICS if not s.shown] == ["distance_patches"]  # distance_px in patch steps


def test_a_new_record_reaches_the_streamed_results(monkeypatch):
    """Adding a statistic is one record: the streaming explainer returns it without another change."""
    import vitviz.explain.head_statistics as records

    extra = records.HeadStatistic(
        "max_weight",
        "share",
        "largest weight",
        "the mean over queries of the row's largest weight",
        lambda attention, geometry, done: attention.amax(dim=-1).mean(dim=-1),
    )
    monkeypatch.setattr(records, "HEAD_STATISTICS", (*records.HEAD_STATISTICS, extra))
    import vitviz.explain.streaming as streaming

    monkeypatch.setattr(streaming, "HEAD_STATISTICS", records.HEAD_STATISTICS)
    explainer = explain.StreamingExplainer((2, 3), 8, 1)
    blocks = [random_attention(seed=s) for s in range(2)]
    for layer, attention in enumerate(blocks):
        explainer(layer, attention)
    expected = torch.stack([a.amax(dim=-1).mean(dim=-1) for a in blocks], dim=1)
    torch.testing.assert_close(explainer.results()["max_weight"], expected)
