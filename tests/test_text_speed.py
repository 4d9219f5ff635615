"""Prompt sets in minutes: causal CLIP text towers cut after each group's longest prompt, equal to open_clip's own
encode_text to 1e-5 in fp32; every tower that reads its padding left at full length; transformers' CLIP grouped by
length; the estimate before a long set and what is left after an interruption. Tiny random open_clip models
(tests/tiny_text.py) with open_clip's shipped BPE tokenizer; nothing is downloaded."""

import open_clip
import pytest
import torch
from tiny_text import TINY_VISION, clip_folder, open_clip_clip, spied

import vitviz
from vitviz.text import class_embeddings
from vitviz.text import cut as cut_module
from vitviz.text import embeddings as embeddings_module
from vitviz.text.cut import causal_parts
from vitviz.text.embeddings import estimated_seconds, prompts_left
from vitviz.text.towers import OpenClipTextTower

TOKENIZER = open_clip.get_tokenizer("ViT-B-16")  # CLIP's BPE, shipped with open_clip: no download
PROMPTS = [
    "a photo of a dog",
    "a",
    "a bad photo of the great white shark, a type of fish.",
    "itap of a cat.",
    "a photo of the " + "very " * 80 + "long prompt",  # past 77 tokens: truncated, its end of text at 76
    "a low resolution photo of a tench",
    "cat",
    "an origami crane",
    "the moon",
]
ATOL = 1e-5  # the bound, fp32


@pytest.mark.parametrize(
    "text", [{}, {"pool_type": "eos", "eos_id": 49407}, {"pool_type": "first"}], ids=["argmax", "eos", "first"]
)
@pytest.mark.parametrize("custom_text", [False, True], ids=["CLIP", "CustomTextCLIP"])
def test_the_cut_equals_open_clips_encode_text(custom_text, text, monkeypatch):
    model = open_clip_clip(custom_text, **text)
    tower = OpenClipTextTower(model, TOKENIZER, None, "tiny open_clip")
    assert tower.causal is not None and tower.cut
    monkeypatch.setattr(cut_module, "GROUP_SIZE", 3)  # several groups, of different lengths
    with spied((model.text if custom_text else model).transformer) as calls, torch.no_grad():
        got = tower.encode(PROMPTS)
        expected = model.encode_text(TOKENIZER(PROMPTS))
        alone = tower.encode(PROMPTS[:1])
    assert got.shape == expected.shape and (got - expected).abs().max() < ATOL and expected.std() > 0.05
    assert (alone - expected[:1]).abs().max() < ATOL
    lengths = sorted(call["attn_mask"].shape[0] for call in calls[:3])
    first = text.get("pool_type") == "first"  # read at position 0: one position is all it needs
    assert lengths[0] < 77 and lengths[-1] == (1 if first else 77)  # cut; the truncated prompt reads every position


def test_the_cut_makes_b16_text_prompts_short():
    """ViT-B-16's own text config is cut; ImageNet's template prompts run at a fraction of its 77 positions."""
    cfg = open_clip.get_model_config("ViT-B-16")
    text_cfg = cfg["text_cfg"] | dict(width=32, heads=4, layers=1)
    tower = OpenClipTextTower(open_clip_clip(**text_cfg), TOKENIZER, None, "ViT-B-16-shaped")
    parts = tower.causal
    assert parts is not None and parts.pool_type == "argmax"
    ends = cut_module.pooled_positions(parts, TOKENIZER(["a bad photo of a tench.", "itap of the great white shark."]))
    assert ends.max() < 16


@pytest.mark.parametrize(
    "custom_text, text",
    [
        (True, {"no_causal_mask": True, "pool_type": "last"}),  # SigLIP: bidirectional, pooled at the last position
        (False, {"pool_type": "last"}),  # causal, but the last position reads the padding
        (True, {"embed_cls": True}),  # CoCa: a class token appended after the padding
        (True, {"pool_type": "none"}),  # every position comes back
    ],
    ids=["siglip", "last", "coca-cls", "no-pool"],
)
def test_towers_that_read_their_padding_run_at_full_length(custom_text, text):
    model = open_clip_clip(custom_text, **text)
    tower = OpenClipTextTower(model, TOKENIZER, None, "tiny open_clip")
    assert tower.causal is None
    with spied((model.text if custom_text else model).transformer) as calls, torch.no_grad():
        got = tower.encode(PROMPTS[:4])
        expected = model.encode_text(TOKENIZER(PROMPTS[:4]))
    assert torch.equal(got, expected)  # open_clip's own forward, whole
    assert [call["args"][0].shape[:2] for call in calls] == [(4, 77 + bool(text.get("embed_cls")))] * 2


def test_a_mask_that_is_not_causal_or_an_encode_text_of_its_own_is_not_cut():
    model = open_clip_clip()
    model.attn_mask = torch.zeros_like(model.attn_mask)  # reads every position: the padding too
    assert causal_parts(model) is None

    class Custom(open_clip.CLIP):
        def encode_text(self, text, normalize=False):
            return super().encode_text(text, normalize)

    text_cfg = dict(context_length=77, width=32, heads=4, layers=1)
    assert causal_parts(Custom(embed_dim=16, vision_cfg=TINY_VISION, text_cfg=text_cfg)) is None
    assert causal_parts(torch.nn.Linear(2, 2)) is None


def test_switching_the_cut_off_gives_the_full_length_result():
    tower = OpenClipTextTower(open_clip_clip(), TOKENIZER, None, "tiny open_clip")
    with torch.no_grad():
        cut = tower.encode(PROMPTS)
        tower.cut = False
        full = tower.encode(PROMPTS)
    assert (cut - full).abs().max() < ATOL


def test_hf_clip_groups_by_length_and_equals_one_padded_batch(tmp_path, monkeypatch):
    reference, tokenizer, folder = clip_folder(tmp_path / "clip")
    tower = vitviz.load_model(str(folder)).text_tower
    monkeypatch.setattr(cut_module, "GROUP_SIZE", 2)
    texts = ["a photo of a dog", "a", "the dog", "cat", "a photo of the moon and many stars"]  # the last truncated
    inputs = tokenizer(texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        expected = reference.get_text_features(**inputs).pooler_output
        assert (tower.encode(texts) - expected).abs().max() < ATOL


def test_prompts_left_and_the_estimate_follow_the_cache(tmp_path, monkeypatch):
    tower = OpenClipTextTower(open_clip_clip(), TOKENIZER, None, "tiny open_clip")
    monkeypatch.setattr(embeddings_module, "PROMPTS_PER_CHUNK", 4)  # 2 classes x 2 templates per chunk
    names, templates = [f"thing {i}" for i in range(5)], ["a {}", "the {}"]
    assert prompts_left(tower, names, templates, tmp_path) == 10
    assert estimated_seconds(tower, names, templates, tmp_path) is None  # short: not worth a sample
    seconds = estimated_seconds(tower, names, templates, tmp_path, least=1)
    assert seconds is not None and 0 < seconds < 60
    encode, calls = tower.encode, []

    def interrupted(texts):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(texts)
        return encode(texts)

    monkeypatch.setattr(tower, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        class_embeddings(tower, names, templates, cache_dir=tmp_path)
    assert prompts_left(tower, names, templates, tmp_path) == 6  # the first chunk is on disk
    monkeypatch.setattr(tower, "encode", encode)
    class_embeddings(tower, names, templates, cache_dir=tmp_path)
    assert prompts_left(tower, names, templates, tmp_path) == 0
    assert estimated_seconds(tower, names, templates, tmp_path, least=1) is None


def test_the_page_states_a_long_sets_estimated_time_before_it_starts(tmp_path, monkeypatch):
    import streamlit as st

    from vitviz_dashboard.cache.models import zero_shot_model

    monkeypatch.setenv("VITVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(embeddings_module, "LONG_SET", 6)
    model = vitviz.load_model(str(clip_folder(tmp_path / "clip")[2]))
    bars = []

    class Bar:  # the page's tqdm class, recorded
        def __init__(self, total, desc, unit):
            self.total, self.desc, self.n, self.updates = total, desc, 0, []
            bars.append(self)

        def update(self, step):
            self.n += step
            self.updates.append(self.n)

        def close(self):
            pass

    st.cache_resource.clear()
    zero_shot_model(model, "tiny", ("dog", "cat", "bird"), ("a {}", "the {}"), _bar=Bar)
    (bar,) = bars
    assert bar.total == 6 and bar.desc.startswith("Embedding prompts (estimated ") and bar.updates[-1] == 6
    zero_shot_model(model, "tiny", ("dog", "cat"), ("a {}",), _bar=Bar)  # 2 prompts: no estimate, a plain bar
    assert len(bars) == 2 and bars[1].desc == "Embedding prompts"
    st.cache_resource.clear()
