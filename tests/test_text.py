"""Open vocabulary: Hugging Face CLIP and SigLIP folders with their text towers, zero_shot against the models' own
logits_per_image, templates against the same recipe done with transformers, the disk cache and its resumption,
and every check on prompts. Tiny random models and tokenizers built in tests/tiny_text.py; nothing is downloaded."""

import pytest
import torch
import torch.nn.functional as F
from tiny_text import clip_folder, open_clip_siglip, siglip_folder, spied

import vitviz
from vitviz import explain
from vitviz.explain.registry import CLASS_SPECIFIC, method_maps
from vitviz.text import PromptError, check_prompts, class_embeddings, parse_prompts, prompt_set, template_set, zero_shot
from vitviz.text import embeddings as embeddings_module
from vitviz.text.prompts import check_templates
from vitviz.text.towers import OpenClipTextTower

ATOL = 1e-4  # the bound on logits
PROMPTS = ["a photo of a dog", "a photo of a cat", "a red car on the road", "the moon"]
MAKERS = {"clip": clip_folder, "siglip": siglip_folder}
LONE = "a photo of a \udcff dog"  # what Python makes of the byte 0xff in a command-line argument


@pytest.fixture(scope="module", params=["clip", "siglip"])
def saved(request, tmp_path_factory):
    """(kind, the transformers model, its tokenizer, the vitviz model loaded from the saved folder)."""
    reference, tokenizer, folder = MAKERS[request.param](tmp_path_factory.mktemp(request.param) / "model")
    return request.param, reference, tokenizer, vitviz.load_model(str(folder))


def reference_inputs(kind, tokenizer, texts):
    """What transformers' model reads: CLIP padded to the longest with a mask; SigLIP padded to its full length, as
    the model cards instruct, and without the mask SiglipTokenizer returns (SigLIP was trained without one)."""
    padding = "max_length" if kind == "siglip" else True
    inputs = tokenizer(texts, padding=padding, max_length=16, truncation=True, return_tensors="pt")
    return {"input_ids": inputs["input_ids"]} if kind == "siglip" else dict(inputs)


def reference_logits(kind, reference, tokenizer, texts, pixels):
    with torch.no_grad():
        return reference(pixel_values=pixels, **reference_inputs(kind, tokenizer, texts)).logits_per_image


def test_a_saved_folder_loads_its_text_tower_and_zero_shot_logits_equal_logits_per_image(saved, tmp_path):
    kind, reference, tokenizer, model = saved
    assert model.text_tower is not None and model.text_tower.kind == kind
    assert model.config.num_classes == 0 and model.head is None  # the image tower alone is a backbone
    zs = zero_shot(model, PROMPTS, cache_dir=tmp_path)
    torch.manual_seed(1)
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        logits = zs(pixels).logits
    expected = reference_logits(kind, reference, tokenizer, PROMPTS, pixels)
    assert (logits - expected).abs().max() < ATOL
    assert expected.std() > 0.05  # the prompts are told apart: a wrong text or image side would show
    assert zs.class_names == PROMPTS and zs.config.num_classes == len(PROMPTS)
    assert zs.config.probabilities == ("sigmoid" if kind == "siglip" else "softmax")
    probabilities = zs.probabilities(logits)
    if kind == "siglip":
        assert torch.allclose(probabilities, torch.sigmoid(expected), atol=1e-5)  # independent, need not sum to 1
    else:
        assert torch.allclose(probabilities.sum(-1), torch.ones(3))


def test_siglip_text_is_read_without_an_attention_mask_and_clip_text_with_one(saved, tmp_path):
    kind, _, tokenizer, model = saved
    assert "attention_mask" in tokenizer(["a dog"])  # SiglipTokenizer returns one too: the tower must drop it
    with spied(model.text_tower.text_model) as calls:
        zero_shot(model, ["a dog", "a photo of a cat"], cache_dir=tmp_path)
    assert calls
    if kind == "siglip":  # as big_vision trained it: the padding is read, to the full length
        assert all(call.get("attention_mask") is None and call["input_ids"].shape[1] == 16 for call in calls)
    else:
        assert all(call["attention_mask"] is not None for call in calls)


def test_open_clip_siglip_reads_no_mask_either_and_equals_the_hf_tower(tmp_path):
    reference, tokenizer, folder = siglip_folder(tmp_path / "siglip")
    clip_model = open_clip_siglip(reference)  # the same weights in open_clip's SigLIP text tower

    def ids(texts):  # open_clip's kind of tokenizer: (N, 16) ids padded to the full length
        return tokenizer(texts, padding="max_length", max_length=16, truncation=True, return_tensors="pt")["input_ids"]

    tower = OpenClipTextTower(clip_model, ids, None, "open_clip SigLIP")
    assert tower.kind == "siglip" and tower.causal is None  # reads its padding: never cut short
    texts = ["a photo of a dog", "cat", "the quick brown fox jumps over the lazy dog", "many cats sleeping in the sun"]
    with spied(clip_model.text.transformer.resblocks[0]) as calls, torch.no_grad():
        theirs = tower.encode(texts)
        mine = vitviz.load_model(str(folder)).text_tower.encode(texts)
        masked = reference.text_model(
            **tokenizer(texts, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
        ).pooler_output
    assert calls and all(call["attn_mask"] is None for call in calls)
    assert (mine - theirs).abs().max() < 1e-5 and theirs.std() > 0.1
    assert (masked - mine).abs().max() > 1e-2  # with the mask, the two loaders would disagree: the test can tell


def test_the_image_towers_attentions_equal_the_eager_ones(saved, tmp_path):
    kind, reference, _, model = saved
    zs = zero_shot(model, PROMPTS[:2], cache_dir=tmp_path)
    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        mine = zs(pixels, output_attentions=True).attentions
        theirs = reference.vision_model(pixel_values=pixels, output_attentions=True).attentions
    assert len(mine) == len(theirs) == 2
    for a, b in zip(mine, theirs):
        assert (a - b).abs().max() < ATOL


def test_zero_shot_shares_the_image_tower_and_leaves_the_model_alone(saved, tmp_path):
    _, _, _, model = saved
    first = zero_shot(model, PROMPTS[:2], cache_dir=tmp_path)
    second = zero_shot(first, PROMPTS[2:], cache_dir=tmp_path)  # prompts changed again: no reload
    assert first.blocks is model.blocks and second.blocks is model.blocks
    assert first.blocks[0].attn.qkv.weight is model.blocks[0].attn.qkv.weight
    assert model.head is None and model.config.num_classes == 0 and model.class_names == []
    assert second.class_names == PROMPTS[2:] and second.head is not first.head
    assert dict(model.named_modules()).keys().isdisjoint({"head.text_embeddings"})


def test_templates_are_averaged_as_clips_recipe_does_with_transformers(saved, tmp_path):
    kind, reference, tokenizer, model = saved
    templates = ["a photo of a {}.", "a drawing of the {}", "{}"]
    names = ["dog", "cat", "car"]
    zs = zero_shot(model, names, templates, cache_dir=tmp_path)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        per_class = []
        for name in names:
            inputs = reference_inputs(kind, tokenizer, [t.format(name) for t in templates])
            text = F.normalize(reference.get_text_features(**inputs).pooler_output, dim=-1)
            per_class.append(F.normalize(text.mean(dim=0), dim=-1))
        text = torch.stack(per_class)
        image = F.normalize(reference.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
        expected = reference.logit_scale.exp() * image @ text.T
        if kind == "siglip":
            expected = expected + reference.logit_bias
        logits = zs(pixels).logits
    assert (logits - expected).abs().max() < ATOL


def test_every_class_specific_method_works_for_a_prompt_and_its_map_follows_the_prompt(saved, tmp_path):
    _, _, _, model = saved
    zs = zero_shot(model, PROMPTS, cache_dir=tmp_path)
    torch.manual_seed(3)
    pixels = torch.randn(1, 3, 32, 32)
    methods = list(CLASS_SPECIFIC)
    first = method_maps(zs, pixels, methods, target=0)
    second = method_maps(zs, pixels, methods, target=2)
    for method in methods:
        assert first.maps[method].shape == (4, 4)
        assert torch.isfinite(first.maps[method]).all()
        assert not torch.allclose(first.maps[method], second.maps[method]), method
    # the text lens: the last block's per-patch reading, through the final norm, projection and prompt embeddings
    assert first.lens.readout_probability[-1, 0] == pytest.approx(float(first.probabilities[0]), abs=1e-5)
    curves = explain.faithfulness(zs, pixels, first.maps["relevance"], target=0)
    assert curves["most_first"][0] == pytest.approx(float(first.probabilities[0]), abs=1e-5)


def test_class_embeddings_are_cached_on_disk_and_reused(saved, tmp_path, monkeypatch):
    _, _, _, model = saved
    tower = model.text_tower
    calls = []
    encode = tower.encode
    monkeypatch.setattr(tower, "encode", lambda texts: calls.append(len(texts)) or encode(texts))
    first = class_embeddings(tower, ["dog", "cat"], ["a {}", "the {}"], cache_dir=tmp_path)
    assert sum(calls) == 4
    again = class_embeddings(tower, ["dog", "cat"], ["a {}", "the {}"], cache_dir=tmp_path)
    assert sum(calls) == 4 and torch.equal(first, again)  # read from disk, not recomputed
    class_embeddings(tower, ["dog", "cat"], ["a {}"], cache_dir=tmp_path)  # other templates: another entry
    assert sum(calls) == 6
    assert torch.allclose(first.norm(dim=-1), torch.ones(2))


def test_an_interrupted_embedding_resumes_at_the_first_missing_chunk(saved, tmp_path, monkeypatch):
    _, _, _, model = saved
    tower = model.text_tower
    monkeypatch.setattr(embeddings_module, "PROMPTS_PER_CHUNK", 4)  # 2 classes x 2 templates per chunk
    names = [f"thing {i}" for i in range(7)]
    templates = ["a {}", "the {}"]
    encode, calls = tower.encode, []

    def interrupted(texts):
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the third chunk is embedded
        calls.append(list(texts))
        return encode(texts)

    monkeypatch.setattr(tower, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        class_embeddings(tower, names, templates, cache_dir=tmp_path)
    assert len(list(tmp_path.rglob("chunk-*.pt"))) == 2
    done = []
    monkeypatch.setattr(tower, "encode", lambda texts: done.append(list(texts)) or encode(texts))
    progress = []
    resumed = class_embeddings(
        tower, names, templates, cache_dir=tmp_path, progress=lambda d, t: progress.append((d, t))
    )
    assert [t.split(" ", 1)[1] for texts in done for t in texts] == [n for n in names[4:] for _ in templates]
    assert progress[-1] == (14, 14) and [d for d, _ in progress] == sorted(d for d, _ in progress)
    fresh = class_embeddings(tower, names, templates, use_cache=False)
    assert torch.allclose(resumed, fresh, atol=1e-6)
    assert not list(tmp_path.rglob("chunk-*.pt"))  # the finished set replaces its chunks


def test_a_damaged_cache_file_is_recomputed(saved, tmp_path):
    _, _, _, model = saved
    first = class_embeddings(model.text_tower, ["dog"], cache_dir=tmp_path)
    (cached,) = tmp_path.rglob("embeddings.pt")
    cached.write_bytes(b"not a tensor")
    assert torch.allclose(class_embeddings(model.text_tower, ["dog"], cache_dir=tmp_path), first)


@pytest.mark.parametrize(
    "prompts, message",
    [
        ([], "no prompts"),
        (["a dog", ""], "prompt 2 is empty"),
        (["a dog", "   "], "prompt 2 is empty"),
        (["a dog", "a cat", "a dog"], "prompt 3 .'a dog'. repeats prompt 1"),
        (["x" * 1001], "1001 characters"),
        ("a dog", "not one string"),
        ([3], "prompt 1 is a int"),
        (["a dog", LONE], r"^prompt 2 is not valid text: character 14 is '\\udcff', a lone surrogate"),
        (["a", "x" * 900, "x" * 900], r"^prompt 3 \('x{60,70}\.\.\.' \(900 characters\)\) repeats prompt 2"),
    ],
)
def test_bad_prompts_get_a_message(prompts, message):
    with pytest.raises(PromptError, match=message) as error:
        check_prompts(prompts)
    assert "\n" not in str(error.value) and len(str(error.value)) < 200  # one line, long echoes cut


def test_a_lone_surrogate_is_refused_wherever_text_is_read(saved):
    _, _, _, model = saved
    with pytest.raises(PromptError, match="template 'a photo of a {} .udcff' is not valid text"):
        check_templates(["a photo of a {} \udcff"])
    with pytest.raises(PromptError, match="prompt 2 is not valid text"):
        class_embeddings(model.text_tower, ["dog", LONE], use_cache=False)


def test_a_ready_set_may_name_two_classes_alike_but_typed_prompts_may_not(saved, tmp_path):
    _, _, _, model = saved
    names = list(prompt_set("imagenet"))
    assert names.count("missile") == 2  # two ImageNet classes, one name in open_clip's list
    zs = zero_shot(model, names[:3] + ["missile", "missile"], cache_dir=tmp_path)
    assert torch.allclose(zs.head.text_embeddings[3], zs.head.text_embeddings[4], atol=1e-6)
    with pytest.raises(PromptError, match="repeats prompt 1"):
        check_prompts(["missile", "missile"])


def test_too_many_prompts_names_the_limit():
    with pytest.raises(PromptError, match="5 prompts, more than the limit of 4"):
        check_prompts(["a", "b", "c", "d", "e"], max_prompts=4)


def test_parse_prompts_keeps_inner_blank_lines_for_the_check():
    assert parse_prompts(" a dog \n\na cat\n\n") == ["a dog", "", "a cat"]
    with pytest.raises(PromptError, match="prompt 2 is empty"):
        check_prompts(parse_prompts("a dog\n\na cat"))


def test_bad_templates_and_models_without_a_text_tower_get_a_message(saved, tmp_path):
    _, _, _, model = saved
    with pytest.raises(PromptError, match="exactly one"):
        zero_shot(model, ["dog"], ["a photo"], cache_dir=tmp_path)
    with pytest.raises(PromptError, match="no text tower.*open_clip:ViT-B-16/openai"):
        zero_shot(vitviz.load_model("default"), ["a dog"])


def test_a_prompt_longer_than_the_context_is_counted(saved):
    _, _, tokenizer, model = saved
    long = " ".join(["dog"] * 40)
    assert model.text_tower.token_count(long) > model.text_tower.context_length
    assert model.text_tower.token_count("a dog") <= model.text_tower.context_length


def test_ready_sets_come_from_open_clip_and_the_data_sets():
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES, OPENAI_IMAGENET_TEMPLATES

    assert prompt_set("imagenet") == tuple(IMAGENET_CLASSNAMES) and len(prompt_set("imagenet")) == 1000
    assert len(prompt_set("cifar10")) == 10 and len(set(prompt_set("cifar100"))) == 100
    templates = template_set("openai-80")
    assert len(templates) == 80 and templates[0] == OPENAI_IMAGENET_TEMPLATES[0]("{}")
    assert template_set("photo") == ("a photo of a {}.",)
    with pytest.raises(PromptError, match="choose one of imagenet, cifar10, cifar100"):
        prompt_set("coco")


def test_a_folder_without_a_tokenizer_loads_the_image_tower_and_says_why(tmp_path):
    _, _, folder = clip_folder(tmp_path / "clip", save_tokenizer=False)
    model = vitviz.load_model(str(folder))
    assert model.text_tower is None and "no tokenizer files" in model.text_tower_note
    with pytest.raises(PromptError, match="no text tower"):
        zero_shot(model, ["a dog"])


def test_a_zero_shot_model_is_not_saved_as_a_checkpoint(saved, tmp_path):
    _, _, _, model = saved
    zs = zero_shot(model, ["a dog", "a cat"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="zero-shot model's prompts"):
        vitviz.save_checkpoint(tmp_path / "zs.pt", zs, zs.class_names, zs.transform)


def test_a_cached_hub_clip_loads_offline_with_its_tokenizer_and_text_tower(offline, tmp_path):
    from hub_cache import cached_snapshot

    reference, tokenizer, folder = clip_folder(tmp_path / "source")
    snapshot = cached_snapshot(offline, "someone/tiny-clip")
    for file in folder.iterdir():
        if file.is_file():
            (snapshot / file.name).write_bytes(file.read_bytes())
    model = vitviz.load_model("hf:someone/tiny-clip")
    assert model.text_tower is not None
    zs = zero_shot(model, PROMPTS, cache_dir=tmp_path / "cache")
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (zs(pixels).logits - reference_logits("clip", reference, tokenizer, PROMPTS, pixels)).abs().max() < ATOL
