"""Maps over space and time on TimeSformer's divided blocks equal dense (T, T) products written here: the spatial
attention (B * frames, heads, 1 + HW, 1 + HW) and the temporal one (B * HW, heads, frames, frames) embedded in the
clip's token space ([CLS] first, then token 1 + n * frames + t), [CLS]'s per-frame copies averaged into its row,
each block (0.5 S + 0.5 I)(0.5 Tm + 0.5 I) (yiyixuxu/TimesFormer_rolled_attention, TimeSformer #106); relevance
R <- R + Ā R for the temporal then the spatial attention. A tiny random TimeSformer built with transformers' classes."""

import pytest
import torch
from test_import_timesformer import COLS, FRAMES, ROWS, clips, convert, hf_model

from vitviz.explain import (
    VideoMapError,
    frame_attention,
    readout_per_frame,
    video_patch_attention,
    video_relevance,
    video_rollout,
)

ATOL = 1e-5
N = ROWS * COLS  # patches per frame
T = 1 + N * FRAMES
CHUNK = 4 * 2 * FRAMES * 4 * (1 + N) * 3  # 3 query rows of the spatial attention at B = 2: several chunks


@pytest.fixture(scope="module")
def model():
    return convert(hf_model())


def token(n: int, t: int) -> int:
    return 1 + n * FRAMES + t


def embed_spatial(spatial: torch.Tensor, batch: int, cls_rows: str) -> torch.Tensor:
    """(B * F, 1 + HW, 1 + HW) -> (B, T, T): frame t's sequence placed on its tokens; [CLS]'s row the mean of its
    copies' rows ("mean", rollout) or their sum ("sum", relevance, whose gradients carry the 1/F)."""
    full = torch.zeros(batch, T, T)
    for b in range(batch):
        for t in range(FRAMES):
            seq = spatial[b * FRAMES + t]
            index = torch.tensor([0] + [token(m, t) for m in range(N)])
            full[b, index[1:, None], index[None, :]] = seq[1:]
            full[b, 0, index] += seq[0] / (FRAMES if cls_rows == "mean" else 1)
    return full


def embed_temporal(temporal: torch.Tensor, batch: int, cls_identity: bool) -> torch.Tensor:
    """(B * HW, F, F) -> (B, T, T): patch n's frames on its tokens; [CLS]'s row the identity (rollout) or 0."""
    full = torch.zeros(batch, T, T)
    for b in range(batch):
        full[b, 0, 0] = 1.0 if cls_identity else 0.0
        for n in range(N):
            index = torch.tensor([token(n, t) for t in range(FRAMES)])
            full[b, index[:, None], index[None, :]] = temporal[b * N + n]
    return full


def dense_rollout(out, batch: int, start: int = 0) -> torch.Tensor:
    eye = torch.eye(T)
    product = eye.expand(batch, T, T)
    for spatial, temporal in list(zip(out.attentions, out.temporal_attentions, strict=True))[start:]:
        s = embed_spatial(spatial.mean(dim=1), batch, "mean")
        tm = embed_temporal(temporal.mean(dim=1), batch, cls_identity=True)
        product = (0.5 * s + 0.5 * eye) @ (0.5 * tm + 0.5 * eye) @ product
    return product[:, 0, 1:]  # [CLS]'s row over the patches


def dense_relevance(model, clip: torch.Tensor, target: int) -> torch.Tensor:
    out = model(clip, output_attentions=True)
    weights = [w for pair in zip(out.temporal_attentions, out.attentions, strict=True) for w in pair]
    gradients = torch.autograd.grad(out.logits[:, target].sum(), weights)
    batch = clip.shape[0]
    relevance = torch.eye(T).repeat(batch, 1, 1)
    for index, (w, g) in enumerate(zip(weights, gradients, strict=True)):
        positive = (g * w).clamp(min=0).mean(dim=1).detach()
        if index % 2 == 0:  # temporal, first in the block
            factor = embed_temporal(positive, batch, cls_identity=False)
        else:
            factor = embed_spatial(positive, batch, "sum")
        relevance = relevance + factor @ relevance
    return relevance[:, 0, 1:]


def test_the_embeddings_in_the_test_keep_rows_summing_to_one(model):
    """The dense reference itself: embedded attentions are row-stochastic, so the rollout's rows are too."""
    with torch.no_grad():
        out = model(clips(), output_attentions=True)
    s = embed_spatial(out.attentions[0].mean(dim=1), 2, "mean")
    tm = embed_temporal(out.temporal_attentions[0].mean(dim=1), 2, cls_identity=True)
    torch.testing.assert_close(s.sum(dim=-1), torch.ones(2, T), atol=1e-5, rtol=0)
    torch.testing.assert_close(tm.sum(dim=-1), torch.ones(2, T), atol=1e-5, rtol=0)


@pytest.mark.parametrize("start", [0, 1])
def test_rollout_composes_space_and_time_as_the_dense_product(model, start):
    clip = clips()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
    result = video_rollout(model, clip, start_layer=start, chunk_bytes=CHUNK)
    assert result.values.shape == (2, N * FRAMES)
    torch.testing.assert_close(result.values, dense_rollout(out, 2, start), atol=ATOL, rtol=1e-4)
    assert result.layout.frames[1:, 0].tolist() == list(range(FRAMES)) * N  # patch-major, as the values


@pytest.mark.parametrize("target", [None, 2])
def test_relevance_is_the_dense_product_over_both_attentions(model, target):
    clip = clips()
    result = video_relevance(model, clip, target=target, chunk_bytes=CHUNK)
    if target is None:  # the top class of each clip, checked one clip at a time
        for b in range(2):
            expected = dense_relevance(model, clip[b : b + 1], int(result.logits[b].argmax()))
            torch.testing.assert_close(result.values[b : b + 1], expected, atol=ATOL, rtol=1e-4)
    else:
        torch.testing.assert_close(result.values, dense_relevance(model, clip, target), atol=ATOL, rtol=1e-4)


def test_a_tokens_spatial_and_temporal_rows(model):
    clip = clips()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
    n, t = 5, 1
    spatial = video_patch_attention(model, clip, layer=1, token=token(n, t))  # (B, heads, N * F)
    expected = torch.zeros(2, 4, T)
    for b in range(2):
        row = out.attentions[1][b * FRAMES + t, :, 1 + n]  # (heads, 1 + HW)
        expected[b, :, [token(m, t) for m in range(N)]] = row[:, 1:]
    torch.testing.assert_close(spatial, expected[:, :, 1:], atol=ATOL, rtol=1e-4)
    temporal = video_patch_attention(model, clip, layer=1, token=token(n, t), part="temporal")
    expected = torch.zeros(2, 4, T)
    for b in range(2):
        expected[b, :, [token(n, f) for f in range(FRAMES)]] = out.temporal_attentions[1][b * N + n, :, t]
    torch.testing.assert_close(temporal, expected[:, :, 1:], atol=ATOL, rtol=1e-4)
    cls = video_patch_attention(model, clip, layer=0, token=0)  # [CLS]: its copies' rows, each 1/F of a frame
    expected = torch.zeros(2, 4, T)
    for b in range(2):
        for f in range(FRAMES):
            expected[b, :, [token(m, f) for m in range(N)]] = out.attentions[0][b * FRAMES + f, :, 0, 1:] / FRAMES
    torch.testing.assert_close(cls, expected[:, :, 1:], atol=ATOL, rtol=1e-4)


def test_frame_attention_is_the_temporal_attention_averaged_over_patches(model):
    clip = clips()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
    expected = out.temporal_attentions[0].reshape(2, N, 4, FRAMES, FRAMES).mean(dim=1)  # (B, heads, F, F)
    torch.testing.assert_close(frame_attention(model, clip, layer=0, chunk_bytes=CHUNK), expected, atol=ATOL, rtol=1e-4)


def test_the_readout_per_frame_is_cls_copies_over_their_frames(model):
    clip = clips()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
    cls_rows = out.attentions[1][:, :, 0, 1:].reshape(2, FRAMES, 4, N)  # (B, F, heads, HW)
    expected = cls_rows.sum(dim=-1).transpose(1, 2) / FRAMES  # (B, heads, F)
    torch.testing.assert_close(readout_per_frame(model, clip, layer=1), expected, atol=ATOL, rtol=1e-4)
    with pytest.raises(VideoMapError, match="part must be 'spatial' or 'temporal'"):
        readout_per_frame(model, clip, layer=1, part="both")


def test_cls_in_the_temporal_attention_is_refused_not_drawn_as_zeros(model):
    """[CLS] takes no part in a divided block's temporal attention: asking for its temporal row, or the readout's, is
    refused in one line rather than answered with zeros."""
    clip = clips()
    for ask in (
        lambda: video_patch_attention(model, clip, layer=0, token=0, part="temporal"),
        lambda: readout_per_frame(model, clip, layer=0, part="temporal"),
    ):
        with pytest.raises(VideoMapError, match="temporal attention") as refused:
            ask()
        assert "\n" not in str(refused.value)


def test_image_functions_that_need_one_attention_per_block_refuse_divided_attention(model):
    """Attention gradients (Chefer's relevance, grad-rollout) and direct logit attribution pair each block's one
    (T, T) attention with its gradient or its heads: a TimeSformer block has two, so they refuse in one line and
    name the video maps, instead of quietly reading the spatial half."""
    from vitviz.explain import attention_gradients, direct_logit_attribution

    clip = clips(1)
    for ask in (lambda: attention_gradients(model, clip, 0), lambda: direct_logit_attribution(model, clip, 0)):
        with pytest.raises(ValueError, match="video_rollout") as refused:
            ask()
        assert "\n" not in str(refused.value)
