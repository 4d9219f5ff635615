"""Maps over space and time (vitviz.explain.spacetime) equal dense computations written here from the full attentions
(``output_attentions=True``) and their autograd gradients, with (T, T) products, on tiny random VideoMAE (mean
readout) and ViViT ([CLS]) models built with transformers' classes; the chunks are made small so that every map is
folded from several of them."""

import pytest
import torch
from test_import_video import FAMILIES, clips, convert, hf_model

from vitviz.explain import (
    SpaceTimeMap,
    VideoMapError,
    frame_attention,
    readout_per_frame,
    video_patch_attention,
    video_relevance,
    video_rollout,
)
from vitviz.explain.long_sequences import row_chunks
from vitviz.model import Swin, SwinConfig, ViT, ViTConfig

ATOL = 1e-5  # fp32, the same products summed in another order
CHUNK = 4 * 2 * 4 * 33 * 5  # bytes of 5 query rows of (B=2, heads=4, T<=33) fp32: 7 chunks of a 33-token clip


@pytest.fixture(scope="module", params=list(FAMILIES))
def model(request) -> ViT:
    return convert(hf_model(request.param))


def dense(model: ViT, clip: torch.Tensor):
    """The eager pass: every block's (B, heads, T, T) attention, and the readout weights."""
    with torch.no_grad():
        return model(clip, output_attentions=True)


def dense_rollout(attentions, readout: torch.Tensor) -> torch.Tensor:
    """readout^T prod_l normalize_rows(mean_h A_l + I), later blocks on the left: (B, T)."""
    T = attentions[0].shape[-1]
    product = torch.eye(T).expand(readout.shape[0], T, T)
    for attention in attentions:
        step = attention.mean(dim=1) + torch.eye(T)
        product = (step / step.sum(dim=-1, keepdim=True)) @ product
    return torch.einsum("bt,bts->bs", readout, product)


def dense_relevance(model: ViT, clip: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Chefer et al.: R = I; R <- R + mean_h((dy/dA * A)^+) R over the blocks; the readout's row (B, T)."""
    out = model(clip, output_attentions=True)
    score = out.logits.gather(1, targets[:, None]).sum()
    gradients = torch.autograd.grad(score, out.attentions)
    B, _, T, _ = out.attentions[0].shape
    relevance = torch.eye(T).repeat(B, 1, 1)
    for attention, gradient in zip(out.attentions, gradients, strict=True):
        relevance = relevance + (gradient * attention).clamp(min=0).mean(dim=1) @ relevance
    return torch.einsum("bt,bts->bs", out.readout.detach(), relevance.detach())


def test_the_chunks_cover_every_row_once():
    assert [(s.start, s.stop) for s in row_chunks(2, 4, 33, CHUNK)] == [(i, min(i + 5, 33)) for i in range(0, 33, 5)]
    assert len(list(row_chunks(1, 16, 8192, 1))) == 8192  # never fewer than one row


def test_rollout_equals_the_dense_product(model):
    clip = clips()
    out = dense(model, clip)
    result = video_rollout(model, clip, chunk_bytes=CHUNK)
    assert isinstance(result, SpaceTimeMap)
    p = out.num_prefix_tokens
    expected = dense_rollout(out.attentions, out.readout)[:, p:]
    assert result.values.shape == (2, 32) and result.values.dtype == torch.float32
    torch.testing.assert_close(result.values, expected, atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(result.logits, out.logits, atol=1e-5, rtol=0)
    assert result.layout.grid == (2, 4, 4) and len(result.layout.patch_indices) == 32
    assert result.layout.paint(result.values[0].numpy(), frame=3).shape == (32, 32)


def test_rollout_from_a_later_block(model):
    clip = clips()
    out = dense(model, clip)
    p = out.num_prefix_tokens
    result = video_rollout(model, clip, start_layer=1, chunk_bytes=CHUNK)
    expected = dense_rollout(out.attentions[1:], out.readout)[:, p:]
    torch.testing.assert_close(result.values, expected, atol=ATOL, rtol=1e-4)


def test_relevance_equals_the_dense_product_for_the_top_class_and_a_chosen_one(model):
    clip = clips()
    p = model.config.num_prefix_tokens
    result = video_relevance(model, clip, chunk_bytes=CHUNK)
    top = result.logits.argmax(dim=1)
    torch.testing.assert_close(result.values, dense_relevance(model, clip, top)[:, p:], atol=ATOL, rtol=1e-4)
    chosen = video_relevance(model, clip, target=3, chunk_bytes=CHUNK)
    expected = dense_relevance(model, clip, torch.tensor([3, 3]))[:, p:]
    torch.testing.assert_close(chosen.values, expected, atol=ATOL, rtol=1e-4)
    assert not torch.allclose(chosen.values, result.values) or bool((top == 3).all())  # the class matters


def test_relevance_leaves_no_gradients_on_the_parameters(model):
    video_relevance(model, clips(1))
    assert all(param.grad is None for param in model.parameters())


def test_maps_of_a_knocked_out_model_follow_its_masks(model):
    """Token 5 out of every query's view and head (0, 1) removed: the recomputed rows see the same masks."""
    knocked = model.knock_out(heads=[(0, 1)], tokens=[5])
    clip = clips()
    out = dense(knocked, clip)
    p = out.num_prefix_tokens
    expected = dense_rollout(out.attentions, out.readout)[:, p:]
    torch.testing.assert_close(video_rollout(knocked, clip, chunk_bytes=CHUNK).values, expected, atol=ATOL, rtol=1e-4)
    result = video_relevance(knocked, clip, target=1, chunk_bytes=CHUNK)
    expected = dense_relevance(knocked, clip, torch.tensor([1, 1]))[:, p:]
    torch.testing.assert_close(result.values, expected, atol=ATOL, rtol=1e-4)
    with pytest.raises(VideoMapError, match="batch mean"):
        video_relevance(model.knock_out(heads=[(0, 1)], ablation="mean"), clip)


@pytest.mark.parametrize("layer", [0, 1, -1])
def test_a_tokens_attention_over_every_frame_is_its_row(model, layer):
    clip = clips()
    out = dense(model, clip)
    p = out.num_prefix_tokens
    for token in (0, p + 21):
        rows = video_patch_attention(model, clip, layer=layer, token=token)
        assert rows.shape == (2, 4, 32)
        torch.testing.assert_close(rows, out.attentions[layer][:, :, token, p:], atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("layer", [0, 1])
def test_frame_attention_is_the_dense_block_sums(model, layer):
    clip = clips()
    out = dense(model, clip)
    p = out.num_prefix_tokens
    patches = out.attentions[layer][:, :, p:, p:]  # (B, heads, 32, 32): 2 token frames of 16 patches
    expected = patches.reshape(2, 4, 2, 16, 2, 16).sum(dim=-1).mean(dim=3)  # (B, heads, query frame, key frame)
    result = frame_attention(model, clip, layer=layer, chunk_bytes=CHUNK)
    torch.testing.assert_close(result, expected, atol=ATOL, rtol=1e-4)
    if p == 0:  # no prefix token to attend to: each frame's row sums to 1
        torch.testing.assert_close(result.sum(dim=-1), torch.ones(2, 4, 2), atol=1e-5, rtol=0)


@pytest.mark.parametrize("layer", [0, 1])
def test_the_readout_per_frame_is_its_row_summed_per_frame(model, layer):
    clip = clips()
    out = dense(model, clip)
    p = out.num_prefix_tokens
    row = torch.einsum("bt,bhts->bhs", out.readout, out.attentions[layer])[:, :, p:]  # (B, heads, 32)
    expected = row.reshape(2, 4, 2, 16).sum(dim=-1)
    result = readout_per_frame(model, clip, layer=layer, chunk_bytes=CHUNK)
    torch.testing.assert_close(result, expected, atol=ATOL, rtol=1e-4)


def test_progress_counts_every_block_of_both_walks(model):
    seen = []
    video_rollout(model, clips(1), progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 4) for i in range(1, 5)]  # 2 blocks forward, 2 walked back
    seen.clear()
    video_relevance(model, clips(1), progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 4) for i in range(1, 5)]


def test_what_is_not_a_video_model_or_a_clip_is_refused_in_a_line(model):
    image_model = ViT(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_size=64))
    with pytest.raises(VideoMapError, match="this is an image model"):
        video_rollout(image_model, torch.randn(1, 3, 32, 32))
    swin = Swin(SwinConfig(image_size=32, embed_dim=16, depths=(1,), num_heads=(2,), window_size=4, patch_size=4))
    with pytest.raises(VideoMapError, match="need a video ViT"):
        video_relevance(swin, torch.randn(1, 3, 32, 32))
    with pytest.raises(VideoMapError, match=r"a clip is a tensor \(B, frames, C, H, W\); got \(4, 3, 32, 32\)"):
        frame_attention(model, torch.randn(4, 3, 32, 32), layer=0)
    with pytest.raises(VideoMapError, match=r"layer must be in \[0, 1\]; got 2"):
        readout_per_frame(model, clips(1), layer=2)
    with pytest.raises(VideoMapError, match=r"token must be in \[0, "):
        video_patch_attention(model, clips(1), layer=0, token=99)
    with pytest.raises(VideoMapError, match=r"target must be in \[0, 4\]; got 7"):
        video_relevance(model, clips(1), target=7)
    with pytest.raises(VideoMapError, match=r"start_layer must be in \[0, 1\]"):
        video_rollout(model, clips(1), start_layer=2)


def test_a_backbone_has_no_class_to_explain():
    backbone = convert(hf_model("videomae", backbone=True))
    assert video_rollout(backbone, clips(1)).logits is None
    with pytest.raises(VideoMapError, match="needs a classification head"):
        video_relevance(backbone, clips(1))


def test_the_image_map_methods_refuse_a_clip_in_a_line(model):
    from vitviz.explain import method_maps

    with pytest.raises(ValueError, match=r"method_maps explains one image: pixels must be \(1, 3, H, W\)"):
        method_maps(model, clips(1), ["rollout", "relevance"])
