"""vitviz.Target: one record for whatever a map explains. A class index and ``Target.of_class`` give the same maps
for every class-specific method; a prompt names one of a zero-shot model's classes, or is read by the text tower."""

from types import SimpleNamespace

import pytest
import torch
from tiny_models import build_tiny_vit
from tiny_text import clip_folder

import vitviz
from vitviz import Target, explain
from vitviz.explain.gradcam import norm1_gradients
from vitviz.explain.registry import CLASS_SPECIFIC, method_maps
from vitviz.explain.target import as_target, class_index, explained_model
from vitviz.text import zero_shot
from vitviz.vlm.errors import VLMError
from vitviz.vlm.maps import answer_token


def images(model, count: int, seed: int) -> torch.Tensor:
    size = model.config.image_size
    rows, cols = size if isinstance(size, tuple) else (size, size)
    return torch.randn(count, 3, rows, cols, generator=torch.Generator().manual_seed(seed))


def test_the_constructors_say_what_they_hold():
    assert Target.of_class(3) == Target("class", index=3)
    assert Target.prompt("a dog").text == "a dog"
    assert Target.answer_token(2).kind == "answer_token"
    assert vitviz.Target is explain.Target is Target
    assert Target.of_class(1).describe(["cat", "dog"]) == "class 1 (dog)"
    assert Target.prompt("a dog").describe() == "the prompt 'a dog'"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Target.of_class(-1), "class index"),
        (lambda: Target.of_class(True), "class index"),
        (lambda: Target.of_class(2.0), "class index"),
        (lambda: Target.prompt("  "), "prompt's text"),
        (lambda: Target.answer_token(-3), "answer token"),
        (lambda: Target("box", index=0), "kind is one of"),
    ],
)
def test_a_bad_target_is_one_line(make, message):
    with pytest.raises(ValueError, match=message) as raised:
        make()
    assert "\n" not in str(raised.value)


def test_what_callers_pass_becomes_a_target():
    assert as_target(None) is None
    assert as_target(4) == Target.of_class(4)
    assert as_target(torch.tensor(4)) == Target.of_class(4)
    assert as_target("a cat") == Target.prompt("a cat")
    with pytest.raises(ValueError, match="class index, a prompt"):
        as_target(1.5)
    assert class_index(Target.prompt("b"), ["a", "b"]) == 1
    with pytest.raises(ValueError, match="none of this model's 2 classes"):
        class_index("c", ["a", "b"])
    with pytest.raises(ValueError, match="vitviz.vlm"):
        class_index(Target.answer_token(0), ["a", "b"])


@pytest.mark.parametrize("method", CLASS_SPECIFIC)
def test_an_int_and_of_class_give_the_same_maps(method):
    model = build_tiny_vit("cls", num_classes=4).eval()
    pixels = images(model, 1, seed=0)
    by_int = method_maps(model, pixels, [method], target=2)
    by_record = method_maps(model, pixels, [method], target=Target.of_class(2))
    other = method_maps(model, pixels, [method], target=Target.of_class(0))
    assert by_int.target == by_record.target == 2 and by_record.explained == Target.of_class(2)
    torch.testing.assert_close(by_record.maps[method], by_int.maps[method], rtol=0, atol=0)
    if method != "lens":  # the lens's map is the probability of the target read from each patch
        assert not torch.allclose(other.maps[method], by_int.maps[method])


def test_the_class_specific_functions_take_a_target():
    model = build_tiny_vit("registers", num_classes=3).eval()
    pixels = images(model, 2, seed=1)
    for by_int, by_record in [
        (explain.attention_gradients(model, pixels, 1), explain.attention_gradients(model, pixels, Target.of_class(1))),
        (norm1_gradients(model, pixels, 1), norm1_gradients(model, pixels, Target.of_class(1))),
    ]:
        for a, b in zip(by_int, by_record, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="none of this model's 3 classes"):
        explain.attention_gradients(model, pixels, "a dog")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    folder = clip_folder(tmp_path_factory.mktemp("clip") / "model")[2]
    return vitviz.load_model(str(folder)).eval()


def test_a_prompt_names_its_class_or_is_read_by_the_text_tower(clip, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_CACHE", str(tmp_path))  # the text embeddings' disk cache, private to the test
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    prompts = ["a photo of a dog", "a photo of a cat"]
    classes = zero_shot(clip, prompts, use_cache=False)
    named = method_maps(classes, pixels, ["relevance"], target=Target.prompt("a photo of a cat"))
    by_index = method_maps(classes, pixels, ["relevance"], target=1)
    assert named.target == 1
    torch.testing.assert_close(named.maps["relevance"], by_index.maps["relevance"], rtol=0, atol=0)

    # a prompt that is none of the classes: the model's prompts with this one added, read by the tower
    read = method_maps(classes, pixels, ["relevance"], target="a photo of a bird")
    three = zero_shot(clip, [*prompts, "a photo of a bird"], use_cache=False)
    reference = method_maps(three, pixels, ["relevance"], target=2)
    assert read.target == 2 and read.class_names == (*prompts, "a photo of a bird")
    torch.testing.assert_close(read.maps["relevance"], reference.maps["relevance"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(read.probabilities, reference.probabilities, rtol=1e-5, atol=1e-6)
    assert classes.class_names == prompts  # the model passed in is left alone

    # the bare image tower (no prompt head): the prompt alone
    alone, index = explained_model(clip, Target.prompt("a photo of a bird"))
    assert index == 0 and alone.class_names == ["a photo of a bird"]


def test_a_prompt_without_a_text_tower_is_one_line():
    model = build_tiny_vit("cls", num_classes=3)
    pixels = images(model, 1, seed=3)
    with pytest.raises(ValueError, match="no text tower"):
        method_maps(model, pixels, ["relevance"], target="a dog")


def test_a_vlm_reads_an_answer_token_target():
    answer = SimpleNamespace(token_ids=[5, 6, 7])
    assert answer_token(answer, Target.answer_token(2)) == answer_token(answer, 2) == 2
    with pytest.raises(VLMError, match="answer token"):
        answer_token(answer, Target.of_class(1))
    with pytest.raises(VLMError, match="0 to 2"):
        answer_token(answer, Target.answer_token(3))


@pytest.mark.parametrize("method", CLASS_SPECIFIC)
def test_a_frozen_model_gets_every_class_specific_map(method):
    """A model frozen with requires_grad_(False), as users freeze a backbone: the gradients are taken through the
    pixels, and the maps equal the trainable model's."""
    model = build_tiny_vit("cls", num_classes=4).eval()
    pixels = images(model, 1, seed=4)
    expected = method_maps(model, pixels, [method], target=1, samples=8).maps[method]
    model.requires_grad_(False)
    found = method_maps(model, pixels, [method], target=1, samples=8).maps[method]
    torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-7)
