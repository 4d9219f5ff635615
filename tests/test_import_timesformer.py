"""TimeSformer from transformers reproduces its source in vitviz's own ViT: logits, the spatial attention transformers
returns, the temporal attention it computes and never returns (read here by a hook on its temporal attention module
and recomputed from that module's input), and the patch-major token order (token 1 + n * frames + t). Tiny random
models built with transformers' own classes, every weight moved off its initial value, no downloads: 32-pixel
frames, 8-pixel patches, 3 frames, so [CLS] + 16 x 3 tokens.
"""

import numpy as np
import pytest
import torch
import transformers as hf
from hub_cache import cached_snapshot

import vitviz
from vitviz import ModelLoadError
from vitviz.explain import StreamingExplainer
from vitviz.layout import grid_layout
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.loading.sources.huggingface_video import DEFAULTS
from vitviz.model.divided import DividedAttention

ATOL = 1e-4  # the bound for logits and attentions, fp32
FRAMES, SIDE, PATCH = 3, 32, 8
ROWS = COLS = SIDE // PATCH
TINY = dict(
    image_size=SIDE,
    patch_size=PATCH,
    num_frames=FRAMES,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    num_labels=5,
    attn_implementation="eager",
)


def hf_model(backbone: bool = False, **overrides) -> torch.nn.Module:
    """A tiny TimeSformer, every parameter moved by seeded Gaussian noise (the zero [CLS], positions, time table and
    biases all matter)."""
    torch.manual_seed(0)
    config = hf.TimesformerConfig(**(TINY | overrides))
    model = (hf.TimesformerModel if backbone else hf.TimesformerForVideoClassification)(config)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    return model.eval()


def clips(batch: int = 2) -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randn(batch, FRAMES, 3, SIDE, SIDE)  # (B, frames, C, H, W), as TimeSformer's video processor gives


def convert(model: torch.nn.Module) -> vitviz.ViT:
    return from_huggingface(model.state_dict(), model.config.to_dict())


def temporal_reference(module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """TimesformerSelfAttention's softmax written out from its input (B * HW, frames, D): softmax(q k^T / sqrt(d))."""
    rows, frames, width = hidden.shape
    heads = module.num_heads
    q, k, _ = module.qkv(hidden).reshape(rows, frames, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
    return torch.softmax(q @ k.transpose(-2, -1) / (width // heads) ** 0.5, dim=-1)


@pytest.mark.parametrize("attention_type", ["divided_space_time", "joint_space_time"])
def test_logits_and_attentions_match_transformers(attention_type):
    source = hf_model(attention_type=attention_type)
    x = clips()
    with torch.no_grad():
        expected = source(x, output_attentions=True)
        model = convert(source)
        out = model(x, output_attentions=True)
    torch.testing.assert_close(out.logits, expected.logits, atol=ATOL, rtol=0)
    tokens = 1 + ROWS * COLS if attention_type == "divided_space_time" else 1 + ROWS * COLS * FRAMES
    batch = 2 * FRAMES if attention_type == "divided_space_time" else 2
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        assert ours.shape == theirs.shape == (batch, 4, tokens, tokens)
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    assert model.config.attention == ("divided" if attention_type == "divided_space_time" else "joint")
    assert (out.temporal_attentions is None) == (attention_type == "joint_space_time")
    assert model.config.num_parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("attention_type", ["divided_space_time", "joint_space_time"])
@pytest.mark.parametrize("size", [(48, 48), (32, 48), (16, 48), (16, 64)])
def test_other_frame_sizes_match_transformers_resized_position_table(attention_type, size):
    """transformers' TimesformerEmbeddings resizes the 4 x 4 position table by nearest neighbour where the patch count
    differs (48 x 48: 6 x 6 patches; 32 x 48: 4 x 6), and uses it as it is where the count is the same (16 x 64: 2 x 8,
    16 patches): vitviz's logits and attentions are transformers' at every such size."""
    source = hf_model(attention_type=attention_type)
    torch.manual_seed(2)
    x = torch.randn(2, FRAMES, 3, *size)
    with torch.no_grad():
        expected = source(x, output_attentions=True)
        model = convert(source)
        out = model(x, output_attentions=True)
    rows, cols = size[0] // PATCH, size[1] // PATCH
    assert out.grid_size == (FRAMES, rows, cols) and out.layout.image_size == size
    torch.testing.assert_close(out.logits, expected.logits, atol=ATOL, rtol=0)
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match=r"reads clips of shape \(B, 3, 3, H, W\)") as error:
        model(torch.randn(1, FRAMES + 1, 3, *size))  # other frame counts: refused (the time table is not resized)
    assert "\n" not in str(error.value)


def test_temporal_attention_matches_a_hook_on_transformers_temporal_module():
    source = hf_model()
    seen = []
    hooks = [
        layer.temporal_attention.attention.register_forward_hook(
            lambda module, args, output: seen.append(temporal_reference(module, args[0]))
        )
        for layer in source.timesformer.encoder.layer
    ]
    x = clips()
    with torch.no_grad():
        source(x)
        out = convert(source)(x, output_attentions=True)
    for hook in hooks:
        hook.remove()
    assert len(out.temporal_attentions) == len(seen) == 2
    for ours, theirs in zip(out.temporal_attentions, seen, strict=True):
        assert ours.shape == theirs.shape == (2 * ROWS * COLS, 4, FRAMES, FRAMES)  # row b * HW + n: patch n's frames
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def test_backbone_matches_last_hidden_state():
    source = hf_model(backbone=True)
    x = clips()
    with torch.no_grad():
        expected = source(x).last_hidden_state
        out = convert(source)(x)
    assert out.logits is None
    torch.testing.assert_close(out.last_hidden_state, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pooled, expected[:, 0], atol=ATOL, rtol=0)  # [CLS]


def test_save_pretrained_folder_loads_to_the_same_logits(tmp_path):
    source = hf_model()
    source.config.id2label = {i: f"action {i}" for i in range(5)}
    source.save_pretrained(tmp_path)
    model = vitviz.load_model(str(tmp_path))
    x = clips()
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, source(x).logits, atol=ATOL, rtol=0)
    assert model.class_names[:2] == ["action 0", "action 1"]


def test_a_cached_hub_repository_loads_by_its_hf_id(offline):
    """``hf:`` ids go the same way as folders: a repository laid out in an offline Hub cache (nothing downloaded)."""
    source = hf_model()
    source.save_pretrained(cached_snapshot(offline, "someone/tiny-timesformer"))
    model = vitviz.load_model("hf:someone/tiny-timesformer")
    x = clips(1)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, source(x).logits, atol=ATOL, rtol=0)


def test_layout_is_patch_major_and_grid_view_reads_it_frame_by_frame():
    out = convert(hf_model())(clips(1))
    layout = out.layout
    assert out.grid_size == layout.grid == (FRAMES, ROWS, COLS) and layout.num_frames == FRAMES
    assert len(layout) == 1 + ROWS * COLS * FRAMES and layout.kinds[0] == "cls"
    # token 1 + n * frames + t is patch n = r * cols + c in frame t
    t, r, c = 2, 1, 3
    index = 1 + (r * COLS + c) * FRAMES + t
    assert layout.frames[index].tolist() == [t, t]
    assert layout.boxes[index].tolist() == [c * PATCH, r * PATCH, (c + 1) * PATCH, (r + 1) * PATCH]
    assert layout.frames[1:, 0].tolist() == [0, 1, 2] * (ROWS * COLS)
    grid = layout.grid_view(np.arange(len(layout)))  # each token's own index, as (frames, rows, cols)
    frame, row, col = np.meshgrid(np.arange(FRAMES), np.arange(ROWS), np.arange(COLS), indexing="ij")
    np.testing.assert_array_equal(grid, 1 + (row * COLS + col) * FRAMES + frame)
    assert len(out.layouts) == 2 and all(each.grid_order is not None for each in out.layouts)


@pytest.mark.parametrize("frame", [0, 2])
def test_a_region_painted_in_one_frame_moves_the_tokens_that_hold_it_most(frame):
    """Paint pixels (y 10..21, x 3..12) of one frame: after block 1, the tokens that changed most are those whose boxes
    and frames hold a painted pixel (2 x 2 patches of that frame), in the model's own patch-major order."""
    model = convert(hf_model())
    x = clips(1)
    painted = x.clone()
    painted[0, frame, :, 10:22, 3:13] = 5.0
    with torch.no_grad():
        before, after = (model(clip, output_hidden_states=True).hidden_states[0][0] for clip in (x, painted))
    change = (after - before).norm(dim=-1).numpy()  # (T,)
    layout = model(x).layout
    boxes, frames = layout.boxes, layout.frames
    holds = (
        (frames[:, 0] <= frame)
        & (frame <= frames[:, 1])
        & (boxes[:, 0] < 13)
        & (boxes[:, 2] > 3)
        & (boxes[:, 1] < 22)
        & (boxes[:, 3] > 10)
    )
    assert holds.sum() == 4
    most = np.argsort(change)[::-1][:4]
    assert set(most.tolist()) == set(np.flatnonzero(holds).tolist())
    # drawn over frame `frame`, the map is high exactly over the painted patches; other frames hold none of them
    painted_map = layout.paint(holds.astype(float), frame=frame)
    assert painted_map[16, 8] == 1 and painted_map[0, 31] == 0
    assert np.nanmax(layout.paint(holds.astype(float), frame=(frame + 1) % FRAMES)) == 0


def test_key_mask_takes_a_token_out_of_both_attentions():
    """Block 0's temporal attention comes first, so it sees the same input with and without the mask: a patch token's
    column is zero in its patch's temporal attention, each row renormalised over the rest; in the spatial attention
    that follows, its column is zero in its frame only. [CLS] (no temporal part) leaves every frame's spatial rows
    renormalised. Every frame of a patch knocked out leaves the outputs finite."""
    model = convert(hf_model())
    x = clips(1)
    n, t = 5, 1
    tokens = 1 + ROWS * COLS * FRAMES

    def masked(*taken: int) -> vitviz.ViTOutput:
        mask = torch.ones(1, tokens, dtype=torch.bool)
        mask[0, list(taken)] = False
        with torch.no_grad():
            return model(x, output_attentions=True, key_mask=mask)

    def renormalised(weights: torch.Tensor, column: int) -> torch.Tensor:
        weights = weights.clone()
        weights[..., column] = 0
        return weights / weights.sum(dim=-1, keepdim=True)

    with torch.no_grad():
        plain = model(x, output_attentions=True)
    patch = masked(1 + n * FRAMES + t)
    expected = renormalised(plain.temporal_attentions[0][n], t)
    torch.testing.assert_close(patch.temporal_attentions[0][n], expected, atol=1e-6, rtol=0)
    spatial = patch.attentions[0][:, :, :, 1 + n]  # (frames, heads, 1 + HW): what each frame's tokens give patch n
    assert (spatial[t] == 0).all() and (spatial[[0, 2]] > 0).all()
    cls = masked(0)
    torch.testing.assert_close(cls.attentions[0], renormalised(plain.attentions[0], 0), atol=1e-6, rtol=0)
    whole_patch = masked(*range(1 + n * FRAMES, 1 + (n + 1) * FRAMES))
    assert torch.isfinite(whole_patch.logits).all() and torch.isfinite(whole_patch.temporal_attentions[1]).all()


def test_attention_sink_gets_both_attentions_and_the_streaming_explainer_refuses_them():
    model = convert(hf_model())
    received = []
    with torch.no_grad():
        out = model(clips(1), output_attentions=True, attention_sink=lambda index, w: received.append(w))
    assert all(isinstance(w, DividedAttention) for w in received) and len(received) == 2
    assert received[1].spatial is out.attentions[1] and received[1].temporal is out.temporal_attentions[1]
    explainer = StreamingExplainer((FRAMES, ROWS, COLS), PATCH)
    with pytest.raises(ValueError, match="divided space-time"), torch.no_grad():
        model(clips(1), attention_sink=explainer)


def test_refusals_are_one_line():
    with pytest.raises(ModelLoadError, match="space_only"):
        convert(hf_model(attention_type="space_only"))
    model = convert(hf_model())
    with pytest.raises(ValueError, match=r"needs clips of 3 frames.*give it 3 frames"):
        model(torch.randn(1, 3, SIDE, SIDE))  # an image: TimeSformer's processor would make it a 1-frame clip
    with pytest.raises(ValueError, match="'mean' is not supported in divided"):
        model(clips(1), head_mask=torch.ones(2, 4), head_ablation="mean")


def test_head_mask_removes_spatial_heads_only():
    """Every spatial head of every block removed: each block's spatial attention adds only its output projection's
    bias. Compared with a model whose spatial output projections' weights are zeroed, which computes exactly that
    (the temporal heads, and so the temporal projections, untouched)."""
    model = convert(hf_model())
    x = clips(1)
    with torch.no_grad():
        masked = model(x, head_mask=torch.zeros(2, 4)).logits
        for block in model.blocks:
            block.attn.proj.weight.zero_()
        torch.testing.assert_close(masked, model(x).logits, atol=1e-5, rtol=0)


def test_defaults_match_transformers_config_class():
    config = hf.TimesformerConfig()
    for key, value in DEFAULTS["timesformer"].items():
        assert getattr(config, key) == value, key


def test_patch_major_layouts_read_back_in_grid_order():
    layout = grid_layout(("cls",), (2, 3), 8, 4, patch_major=True)
    assert layout.grid == (4, 2, 3) and layout.frames[1:5, 0].tolist() == [0, 1, 2, 3]
    assert layout.boxes[1:5].tolist() == [[0, 0, 8, 8]] * 4  # patch 0's four frames, side by side
    values = np.arange(24)  # per patch token, in the layout's (patch-major) order
    view = layout.grid_view(values)
    assert view[3, 1, 2] == (1 * 3 + 2) * 4 + 3 and view[0, 0, 1] == 4
    time_major = grid_layout(("cls",), (2, 3), 8, 4)
    assert time_major.grid_order is None and time_major.grid_view(values)[0, 0, 1] == 1


def test_config_refuses_divided_attention_without_timesformers_layout():
    video = dict(image_size=16, patch_size=8, hidden_size=8, num_heads=2, mlp_size=8, num_layers=1, num_frames=2)
    with pytest.raises(ValueError, match="needs patch_major=True"):
        vitviz.ViTConfig(**video, attention="divided")
    with pytest.raises(ValueError, match="for clips"):
        vitviz.ViTConfig(image_size=16, patch_size=8, attention="divided", patch_major=True)
    with pytest.raises(ValueError, match="attention must be one of joint, divided"):
        vitviz.ViTConfig(**video, attention="factorised")
    config = vitviz.ViTConfig(**video, attention="divided", patch_major=True, time_embeddings=True)
    assert config.num_parameters == sum(p.numel() for p in vitviz.ViT(config).parameters())
