"""Swin and Swin v2 from transformers and timm reproduce their sources: logits and every block's window attention
(tiny random models, every weight moved off its initial value, no downloads), with windows and padding that matter:
8-pixel windows of 2-pixel patches on 32-pixel inputs, non-square inputs and grids that are no multiple of the window.

The reference attentions are captured in the test only: transformers' eager attention module returns its weights
(Swin) or hands them to its dropout (Swin v2); timm's, with fused attention off, hands them to attn_drop.
"""

import math

import pytest
import timm
import torch
import transformers as hf

import vitviz
from vitviz import ModelLoadError
from vitviz.loading.sources.from_timm import timm_config
from vitviz.loading.sources.huggingface_folder import weight_limit
from vitviz.loading.sources.huggingface_swin import DEFAULTS, from_huggingface_swin
from vitviz.model import Swin, SwinConfig

ATOL = 1e-4  # the bound for logits and attentions, fp32
TINY = dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
# (height, width): the config's square; non-square, stage grids of 20 x 12 then 10 x 6 (padded to 12 x 8); and
# pixels no multiple of the patch (transformers pads them: 17 x 13, then 9 x 7)
HF_SIZES = [(32, 32), (40, 24), (34, 26)]
HF_FAMILIES = {
    "swin": (hf.SwinConfig, hf.SwinForImageClassification, hf.SwinModel),
    "swinv2": (hf.Swinv2Config, hf.Swinv2ForImageClassification, hf.Swinv2Model),
}


def perturbed(model: torch.nn.Module, noise: float = 0.3) -> torch.nn.Module:
    """Every parameter moved by Gaussian noise (seeded): the zero-initialised bias tables, v2's post-norms, the
    head and the biases all matter."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=noise)
    return model.eval()


def hf_model(family: str, backbone: bool = False, **overrides) -> torch.nn.Module:
    config_class, classifier, base = HF_FAMILIES[family]
    torch.manual_seed(0)
    config = config_class(**(TINY | dict(num_labels=5, attn_implementation="eager") | overrides))
    return perturbed((base if backbone else classifier)(config))


def hf_reference(model: torch.nn.Module, images: torch.Tensor, **kwargs):
    """transformers' output and every block's attention weights (its own output_attentions gives one per stage)."""
    captured, hooks = [], []
    for stage in model.base_model.encoder.layers:
        for block in stage.blocks:
            if isinstance(model.config, hf.Swinv2Config):
                hook = block.attention.self.dropout.register_forward_hook(lambda m, i, o: captured.append(i[0]))
            else:
                hook = block.attention.register_forward_hook(lambda m, i, o: captured.append(o[1]))
            hooks.append(hook)
    with torch.no_grad():
        output = model(images, **kwargs)
    for hook in hooks:
        hook.remove()
    return output, captured


def timm_model(name: str, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    sizes = dict(img_size=32, patch_size=2, embed_dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4)
    return perturbed(timm.create_model(name, pretrained=False, num_classes=5, **(sizes | kwargs)))


def timm_reference(model: torch.nn.Module, images: torch.Tensor):
    """timm's logits and each block's post-softmax attention (fused attention off, the input of attn_drop)."""
    captured, hooks = [], []
    for stage in model.layers:
        for block in stage.blocks:
            block.attn.fused_attn = False
            hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: captured.append(i[0])))
    with torch.no_grad():
        output = model(images)
    for hook in hooks:
        hook.remove()
    return output, captured


def assert_same(output, logits: torch.Tensor, attentions: list[torch.Tensor], blocks: int = 4) -> None:
    assert logits.abs().max() > 0.1  # not zeros against zeros
    assert (output.logits - logits).abs().max() <= ATOL
    assert len(output.attentions) == len(attentions) == blocks
    for ours, theirs in zip(output.attentions, attentions, strict=True):
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max() <= ATOL


@pytest.mark.parametrize("size", HF_SIZES)
@pytest.mark.parametrize("family", list(HF_FAMILIES))
def test_huggingface_folder_reproduces_logits_and_every_block_attention(tmp_path, family, size):
    # Swin v2 trained at smaller windows: its position MLP reads offsets on that window's scale
    reference = hf_model(family, **({"pretrained_window_sizes": [3, 2]} if family == "swinv2" else {}))
    reference.save_pretrained(tmp_path)  # transformers 5 still writes the 4.x names (attention.self.query...)
    model = vitviz.load_model(str(tmp_path))
    assert isinstance(model, Swin) and model.config.padding == "huggingface"
    assert model.class_names == [f"LABEL_{i}" for i in range(5)] and model.transform is not None
    images = torch.randn(2, 3, *size)
    expected, attentions = hf_reference(reference, images)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    assert_same(output, expected.logits, attentions)
    windows = [layout.windows.shape for layout in output.layouts]
    assert [a.shape[0] for a in output.attentions] == [2 * w[0] for w in windows]  # (B * nW, heads, N, N)


@pytest.mark.parametrize("family", list(HF_FAMILIES))
def test_huggingface_backbone_and_in_memory_names(family):
    """A SwinModel's state dict as transformers 5 holds it in memory (q_proj, o_proj, mlp.fc1... for Swin)."""
    reference = hf_model(family, backbone=True)
    model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    assert model.config.num_classes == 0
    images = torch.randn(2, 3, 40, 24)
    expected, attentions = hf_reference(reference, images)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    assert output.logits is None
    assert (output.pooled - expected.pooler_output).abs().max() <= ATOL
    assert (output.last_hidden_state - expected.last_hidden_state).abs().max() <= ATOL
    assert all((a - b).abs().max() <= ATOL for a, b in zip(output.attentions, attentions, strict=True))


def test_huggingface_swin_with_absolute_positions_at_another_size():
    reference = hf_model("swin", use_absolute_embeddings=True)
    model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    for size in [(32, 32), (40, 24)]:
        images = torch.randn(1, 3, *size)
        expected, attentions = hf_reference(reference, images, interpolate_pos_encoding=True)
        with torch.no_grad():
            assert_same(model(images, output_attentions=True), expected.logits, attentions)


def test_huggingface_swinv2_cuts_its_windows_to_small_grids():
    """transformers' Swin v2 fixes windows from the config's image size: at 16 px the second stage's 4 x 4 grid is one
    window, not shifted; Swin decides that per input."""
    for family in HF_FAMILIES:
        reference = hf_model(family, image_size=16)
        model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
        images = torch.randn(2, 3, 16, 16)
        expected, attentions = hf_reference(reference, images)
        with torch.no_grad():
            output = model(images, output_attentions=True)
        assert_same(output, expected.logits, attentions)
        assert output.layouts[3].windows.shape == (1, 16)


# name, creation arguments: square; non-square (grids of 20 x 12, then 10 x 6 padded after the shift); a window
# per stage (swin_s3's form); v2 with smaller pretraining windows; windows larger than the last grid, kept whole
TIMM_MODELS = [
    ("swin_tiny_patch4_window7_224", {}),
    ("swin_tiny_patch4_window7_224", dict(img_size=(40, 24))),
    ("swin_s3_tiny_224", dict(window_size=(4, 2))),
    ("swinv2_tiny_window8_256", {}),
    ("swinv2_tiny_window8_256", dict(img_size=(40, 24), pretrained_window_sizes=(3, 2))),
    ("swinv2_tiny_window8_256", dict(img_size=24, window_size=4, always_partition=True)),
]


@pytest.mark.parametrize("name, kwargs", TIMM_MODELS)
def test_timm_reproduces_logits_and_every_block_attention(name, kwargs):
    reference = timm_model(name, **kwargs)
    model = vitviz.from_timm(reference)
    assert isinstance(model, Swin) and model.config.padding == "timm"
    images = torch.randn(2, 3, *reference.patch_embed.img_size)
    expected, attentions = timm_reference(reference, images)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    assert_same(output, expected, attentions)


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256"])
def test_sdpa_and_explicit_attention_agree(name):
    model = vitviz.from_timm(timm_model(name, img_size=(40, 24)))
    images = torch.randn(2, 3, 40, 24)
    with torch.no_grad():
        fast = model(images)
        explicit = model(images, output_attentions=True)
        model.attn_implementation = "eager"
        eager = model(images)
    assert fast.attentions is None and explicit.attentions is not None
    assert (fast.logits - explicit.logits).abs().max() <= 1e-5
    assert (fast.logits - eager.logits).abs().max() <= 1e-5
    for weights in explicit.attentions:
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)


@pytest.mark.parametrize("source", ["huggingface", "timm"])
def test_a_painted_region_changes_the_tokens_whose_boxes_hold_it_inside_their_windows(source):
    """Paint a square of the photo: the first block's most changed tokens are those whose boxes hold it, and every
    token that changes at all shares one of their windows."""
    if source == "huggingface":
        reference = hf_model("swin")
        model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    else:
        model = vitviz.from_timm(timm_model("swin_tiny_patch4_window7_224", img_size=(40, 24)))
    torch.manual_seed(2)
    images = torch.randn(1, 3, 40, 24)
    painted = images.clone()
    painted[:, :, 12:16, 8:12] = 4.0  # rows 12-15, columns 8-11: the 2 x 2 patches of rows 6-7, columns 4-5
    with torch.no_grad():
        before, after = (model(x, output_hidden_states=True) for x in (images, painted))
    layout = after.layouts[0]
    change = (after.hidden_states[0] - before.hidden_states[0]).norm(dim=-1)[0]  # (T,) stage 1's tokens
    boxes = layout.boxes
    holds = (boxes[:, 0] < 12) & (boxes[:, 2] > 8) & (boxes[:, 1] < 16) & (boxes[:, 3] > 12)
    painted_tokens = set(holds.nonzero()[0].tolist())
    assert set(change.topk(len(painted_tokens)).indices.tolist()) == painted_tokens
    windows = [set(w.tolist()) - {-1} for w in layout.windows]
    touched = set().union(*(w for w in windows if w & painted_tokens))
    assert set((change > 0).nonzero()[:, 0].tolist()) <= touched
    assert (change > 1e-6).sum() > len(painted_tokens)  # attention spread it inside the windows


@pytest.mark.parametrize("source", ["huggingface", "timm"])
def test_each_block_windows_list_the_tokens_its_attention_mixes(source):
    """For every block, shifted or not, padded or not: a change to one token of its input reaches, through the
    attention, only the tokens of the window ``layouts[l].windows`` lists it in."""
    if source == "huggingface":
        reference = hf_model("swinv2")
        model = vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    else:
        model = vitviz.from_timm(timm_model("swin_tiny_patch4_window7_224", img_size=(40, 24)))
    torch.manual_seed(3)
    with torch.no_grad():
        output = model(torch.randn(1, 3, 40, 24), output_hidden_states=True)
        for index, block in enumerate(model.blocks):
            layout = output.layouts[index]
            rows, cols = layout.grid[1:]
            x = output.hidden_states[index - 1] if index else model.embed(torch.randn(1, 3, 40, 24)).flatten(1, 2)
            if x.shape[1] != rows * cols:  # the first block of a stage: its input is the merged previous stage
                x = model.stages[1].merge(x.view(1, *output.stage_grids[0], -1)).flatten(1, 2)
            x = x.view(1, rows, cols, -1)
            token = rows * cols - 1  # the bottom-right token: wrapped round by the shift, next to the padding
            y = x.clone()
            y[0, token // cols, token % cols] += 1.0
            stage = 0 if rows * cols == output.stage_grids[0][0] * output.stage_grids[0][1] else 1
            shift = model.block_shift(stage, index % 2, (rows, cols))
            change = (block(y, shift, False)[0] - block(x, shift, False)[0]).norm(dim=-1).flatten()
            window = next(set(w.tolist()) - {-1} for w in layout.windows if token in w)
            changed = set((change > 1e-6).nonzero()[:, 0].tolist())
            assert token in changed and changed <= window, (index, changed, window)


def test_timm_names_convert_on_the_meta_device_with_their_windows():
    """What load_model("timm:<name>") checks before downloading: the config, from a model built without weights."""
    expected = {
        "swin_tiny_patch4_window7_224": ((7, 7),) * 4,
        "swin_s3_tiny_224": ((7, 7), (7, 7), (14, 14), (7, 7)),
        "swinv2_tiny_window8_256": ((8, 8),) * 4,
        "swinv2_base_window12to16_192to256": ((16, 16), (16, 16), (16, 16), (8, 8)),
        "swinv2_cr_tiny_224": ((7, 7),) * 4,
        "swinv2_cr_tiny_ns_224": ((7, 7),) * 4,
    }
    for name, windows in expected.items():
        with torch.device("meta"):
            config = timm_config(timm.create_model(name, pretrained=False))
        assert isinstance(config, SwinConfig) and config.windows == windows
        assert config.shifts[-1] == (0, 0)  # the last stage's grid is one window
    with torch.device("meta"):
        config = timm_config(timm.create_model("swinv2_base_window12to16_192to256", pretrained=False))
    assert config.pretrained_windows == (12, 12, 12, 6)
    assert 80e6 < config.num_parameters < 95e6
    for name, main_norms in [("swinv2_cr_tiny_224", (11,)), ("swinv2_cr_tiny_ns_224", (1, 3, 9, 11))]:
        with torch.device("meta"):
            reference = timm.create_model(name, pretrained=False)
        config = timm_config(reference)
        assert (config.main_norms, config.final_norm, config.merge_norm, config.position_mlp) == (
            main_norms,
            False,
            "before",
            "cr",
        )
        assert config.num_parameters == sum(p.numel() for p in reference.parameters())


def test_num_parameters_counts_the_built_model():
    cr = dict(version=2, position_mlp="cr", merge_norm="before", final_norm=False, main_norms=(1, 3, 9, 11))
    for config in (
        SwinConfig(),
        SwinConfig(version=2, pretrained_windows=(0, 0, 0, 0), num_classes=0),
        SwinConfig(**cr),
    ):
        with torch.device("meta"):
            model = Swin(config)
        assert config.num_parameters == sum(p.numel() for p in model.parameters())


def test_refused_by_name():
    with torch.device("meta"):
        with pytest.raises(ModelLoadError, match="Hiera"):
            timm_config(timm.create_model("hiera_tiny_224", pretrained=False))
        with pytest.raises(ModelLoadError, match="global_pool='max'"):  # swinv2_cr is read, but pools by the mean
            timm_config(timm.create_model("swinv2_cr_tiny_224", pretrained=False, global_pool="max"))
    with pytest.raises(ModelLoadError, match="Hiera"):
        vitviz.from_huggingface({}, {"model_type": "hiera"})
    reference = hf_model("swinv2", backbone=True)
    config = reference.config.to_dict() | {"use_absolute_embeddings": True}
    with pytest.raises(ModelLoadError, match="use_absolute_embeddings"):
        from_huggingface_swin(reference.state_dict(), config)


def test_mismatched_weights_and_hostile_configs_are_refused():
    reference = hf_model("swin")
    weights = dict(reference.state_dict())
    weights.pop("classifier.bias")
    with pytest.raises(ModelLoadError, match="missing weights head.bias"):
        vitviz.from_huggingface(weights, reference.config.to_dict())
    with pytest.raises(ModelLoadError, match="window_size"):
        vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict() | {"window_size": "7"})
    with pytest.raises(ModelLoadError, match="blocks|parameters"):
        vitviz.from_huggingface({}, {"model_type": "swin", "depths": [10**6], "num_heads": [1], "embed_dim": 8})
    assert weight_limit({"model_type": "swin", "depths": [2, 2, 18, 2], "num_layers": 4}) == 64 + 32 * 24


def test_huggingface_defaults_are_transformers():
    for config_class in (hf.SwinConfig, hf.Swinv2Config):
        config = config_class().to_dict()
        for key, value in DEFAULTS.items():
            if key in config:
                assert list(config[key]) == value if isinstance(value, list) else config[key] == value, key


def test_load_model_timm_spec_gives_a_swin_with_class_names_and_preprocessing(monkeypatch):
    """``load_model("timm:swin...")`` end to end, with timm's download replaced by a tiny random model of that name."""
    import vitviz.loading.sources.timm as timm_source

    create = timm.create_model
    tiny = dict(img_size=32, patch_size=2, embed_dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4)
    monkeypatch.setattr(timm, "create_model", lambda name, pretrained=False, **kwargs: create(name, **tiny))
    monkeypatch.setattr(timm_source, "hub_file", lambda *args, **kwargs: None)
    monkeypatch.setattr(timm_source, "open_clip_for_timm", lambda name: None)
    for name in ("swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256", "swinv2_cr_tiny_ns_224"):
        model = vitviz.load_model(f"timm:{name}")
        assert isinstance(model, Swin) and model.config.version == (2 if "v2" in name else 1)
        assert len(model.class_names) == 1000 and model.class_names[0].startswith("tench")
        assert model.transform is not None
        with torch.no_grad():
            assert model(torch.randn(1, 3, 32, 32)).logits.shape == (1, 1000)


# timm's swinv2_cr (SwinTransformerV2Cr): its attention module takes the windows and the shift's mask; the reference
# weights are recomputed here from those inputs and the module's own weights, written out as timm's forward does
CR_MODELS = [
    ("swinv2_cr_tiny_224", {}, None),  # square; the last stage's last block norms the main branch, no final norm
    ("swinv2_cr_tiny_ns_224", dict(img_size=(40, 24)), None),  # every stage ends with a norm; padded after the shift
    # a norm every second block, a non-square window per stage on a non-square input
    (
        "swinv2_cr_tiny_224",
        dict(depths=(3, 2), extra_norm_period=2, window_size=((4, 2), (2, 4)), img_size=(40, 24)),
        None,
    ),
    # an 8 x 8 window kept whole (padded, shifted) over the last stage's 6 x 6 grid
    ("swinv2_cr_tiny_224", dict(img_size=24, window_size=8, always_partition=True), None),
    ("swinv2_cr_tiny_ns_224", dict(dynamic_img_size=True), (40, 24)),  # another, non-square input than img_size
]


def cr_reference(model: torch.nn.Module, images: torch.Tensor):
    """timm's logits and each block's attention recomputed from its attention module's inputs (forward pre-hooks);
    each recomputation checked against the weights timm hands to attn_drop."""
    recomputed, handed, hooks = [], [], []

    def recompute(attn, args, kwargs):
        x, mask = args[0], kwargs.get("mask", args[1] if len(args) > 1 else None)
        Bw, L, C = x.shape
        heads = attn.num_heads
        q, k, _ = torch.nn.functional.linear(x, attn.qkv.weight, attn.qkv.bias).view(Bw, L, 3, heads, -1).unbind(2)
        q, k = (torch.nn.functional.normalize(t.transpose(1, 2), dim=-1) for t in (q, k))  # (Bw, heads, L, hd)
        scores = q @ k.transpose(-2, -1) * attn.logit_scale.clamp(max=math.log(100.0)).exp().view(1, heads, 1, 1)
        scores = scores + attn.meta_mlp(attn.relative_coordinates_log).T.reshape(1, heads, L, L)  # raw MLP output
        if mask is not None:
            nW = mask.shape[0]
            scores = (scores.view(Bw // nW, nW, heads, L, L) + mask[None, :, None]).view(Bw, heads, L, L)
        recomputed.append(scores.softmax(dim=-1))

    for stage in model.stages:
        for block in stage.blocks:
            hooks.append(block.attn.register_forward_pre_hook(recompute, with_kwargs=True))
            hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: handed.append(i[0])))
    with torch.no_grad():
        logits = model(images)
    for hook in hooks:
        hook.remove()
    assert all((a - b).abs().max() <= 1e-6 for a, b in zip(recomputed, handed, strict=True))
    return logits, recomputed


def assert_cr_windows(reference: torch.nn.Module, output) -> None:
    """Each block's ``layouts[l].windows`` is timm's own partition of the token indices, rolled by the block's shift
    and padded after it (-1), and its attention has one (heads, S, S) matrix per window of each image."""
    from timm.models.swin_transformer_v2_cr import window_partition

    blocks = [(s, block) for s, stage in enumerate(reference.stages) for block in stage.blocks]
    for index, (s, block) in enumerate(blocks):
        (rows, cols), window = output.stage_grids[s], block.window_size
        grid = torch.arange(1, rows * cols + 1, dtype=torch.float32).view(1, rows, cols, 1)
        grid = torch.roll(grid, (-block.shift_size[0], -block.shift_size[1]), (1, 2))
        grid = torch.nn.functional.pad(grid, (0, 0, 0, -cols % window[1], 0, -rows % window[0]))
        expected = window_partition(grid, window).reshape(-1, window[0] * window[1]).long() - 1
        layout = output.layouts[index]
        assert torch.equal(torch.from_numpy(layout.windows.copy()), expected), index
        assert output.attentions[index].shape[0] == output.logits.shape[0] * len(expected)
    assert any(any(block.shift_size) for _, block in blocks)  # some block is shifted


@pytest.mark.parametrize("name, kwargs, size", CR_MODELS)
def test_timm_swinv2_cr_reproduces_logits_attentions_and_windows(name, kwargs, size):
    reference = timm_model(name, **kwargs)
    model = vitviz.from_timm(reference)
    assert model.config.position_mlp == "cr" and isinstance(model.norm, torch.nn.Identity)
    images = torch.randn(2, 3, *(size or reference.patch_embed.img_size))
    expected, attentions = cr_reference(reference, images)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    assert_same(output, expected, attentions, blocks=sum(kwargs.get("depths", (2, 2))))
    assert_cr_windows(reference, output)


@pytest.mark.parametrize("name", ["swinv2_cr_tiny_ns_224"])
def test_timm_swinv2_cr_at_full_size(name):
    """A registered model itself (28 M parameters, 224 px, twelve blocks), random weights: the "ns" variant, whose
    every stage ends with a norm (the plain variant's one end norm is covered at a small size in CR_MODELS)."""
    torch.manual_seed(0)
    reference = perturbed(timm.create_model(name, pretrained=False), noise=0.05)
    model = vitviz.from_timm(reference)
    images = torch.randn(1, 3, 224, 224)
    expected, attentions = cr_reference(reference, images)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    assert_same(output, expected, attentions, blocks=12)
    assert_cr_windows(reference, output)


def test_maps_across_stages_run_on_swinv2_cr():
    """Rollout's row stays a distribution over the first stage's patches; every windowed method gives a finite map."""
    from vitviz.explain import method_maps, rollout_across_stages

    model = vitviz.from_timm(timm_model("swinv2_cr_tiny_ns_224", img_size=(40, 24)))
    images = torch.randn(1, 3, 40, 24)
    with torch.no_grad():
        output = model(images, output_attentions=True)
    rollout = rollout_across_stages(output.attentions, output.layouts, readout=output.readout)
    assert rollout.shape == (1, 20, 12) and (rollout >= 0).all()
    assert abs(rollout.sum().item() - 1) <= 1e-4
    maps = method_maps(model, images, ["rollout", "relevance", "grad-rollout", "gradcam", "lens"], target=3).maps
    assert set(maps) == {"rollout", "relevance", "grad-rollout", "gradcam", "lens"}
    assert all(torch.as_tensor(m).isfinite().all() for m in maps.values())
    assert torch.allclose(torch.as_tensor(maps["rollout"]).float().flatten(), rollout.flatten(), atol=1e-5)


def test_swin_config_refuses_cr_fields_that_do_not_fit():
    with pytest.raises(ValueError, match="main_norms must be block indices in \\[0, 12\\)"):
        SwinConfig(version=2, main_norms=(12,))
    with pytest.raises(ValueError, match="position_mlp 'cr' is a Swin v2 position MLP"):
        SwinConfig(position_mlp="cr")
    with pytest.raises(ValueError, match="merge_norm must be one of"):
        SwinConfig(merge_norm="middle")
