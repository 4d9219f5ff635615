"""The page with a text tower (AppTest): prompts typed and ready sets, zero-shot predictions as softmax or sigmoid,
two prompts compared, every bad input answered with a message, and the class picker when probabilities tie."""

from pathlib import Path

import numpy as np
import pytest
import torch
from app_harness import APP, captions, open_tab, png_bytes
from page_reading import assert_percent
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint
from tiny_text import clip_folder, siglip_folder

import vitviz
import vitviz.analysis
from vitviz.preprocessing import load_image
from vitviz_dashboard.state import PROMPT_SOURCE, PROMPTS

MAKERS = {"clip": clip_folder, "siglip": siglip_folder}


@pytest.fixture(autouse=True)
def fresh(fresh_caches, monkeypatch, tmp_path):
    """Fresh caches and "auto" fixed at fp32, as library_probabilities computes (tests/conftest.py), and a text
    embedding cache of this test only."""
    monkeypatch.setenv("VITVIZ_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("towers")
    made = {kind: make(root / kind)[2] for kind, make in MAKERS.items()}
    made["clip-no-tokenizer"] = clip_folder(root / "bare", save_tokenizer=False)[2]
    return made


def page_with(folder: Path, monkeypatch) -> AppTest:
    """The page whose "default" model is the folder's, with a photo uploaded."""
    original = vitviz.load_model
    monkeypatch.setattr(vitviz, "load_model", lambda spec: original(folder) if spec == "default" else original(spec))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    assert not at.exception, at.exception
    return at


def prediction(at) -> str:
    return next(m.value for m in at.markdown if "prediction" in m.value.lower())


def library_probabilities(folder: Path, prompts: list[str], templates=None) -> np.ndarray:
    model = vitviz.zero_shot(vitviz.load_model(folder), prompts, templates, use_cache=False)
    pixels = model.transform(load_image(png_bytes()))[None]
    with torch.no_grad():
        return model.probabilities(model(pixels).logits)[0].numpy()


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_typed_prompts_become_the_classes_with_their_kind_of_probability(folders, monkeypatch, kind):
    at = page_with(folders[kind], monkeypatch)
    assert not at.error
    prompts = ["a photo of a cat", "a photo of a dog", "a photo of a bird"]  # the box's default
    expected = library_probabilities(folders[kind], prompts)
    top = int(np.argmax(expected))
    line = prediction(at)
    assert_percent(line, f"Zero-shot prediction: '{prompts[top]}' (", float(expected[top]))
    assert ("sigmoid" if kind == "siglip" else "softmax over the prompts") in line
    sidebar = " ".join(c.value for c in at.sidebar.caption)
    assert ("a sigmoid per prompt" if kind == "siglip" else "a softmax over the prompts") in sidebar
    assert f"a {'SigLIP' if kind == 'siglip' else 'CLIP'} text tower" in sidebar
    overview = " ".join(c.value for c in at.caption)
    assert "Zero-shot: the image's similarity to each prompt" in overview

    at.text_area(key=str(PROMPTS)).set_value("an astronaut\nthe moon").run()
    expected = library_probabilities(folders[kind], ["an astronaut", "the moon"])
    top = int(np.argmax(expected))
    prompt = ["an astronaut", "the moon"][top]
    assert_percent(prediction(at), f"Zero-shot prediction: '{prompt}' (", float(expected[top]))


def test_two_prompts_side_by_side_in_the_class_specific_tab(folders, monkeypatch):
    at = open_tab(page_with(folders["clip"], monkeypatch), "Class-specific")
    picker = at.selectbox(key=next(k for k in at.session_state if str(k).endswith("|class")))
    compare = next(s for s in at.selectbox if s.label == "Compare with another prompt")
    first = picker.value
    second = next(o for o in compare.options if o != "none")
    compare.select_index(compare.options.index(second)).run()
    assert not at.exception and not at.error
    names = ["a photo of a cat", "a photo of a dog", "a photo of a bird"]
    shown = [c for c in captions(at) if " for '" in c]
    assert shown[:4] == [
        f"relevance for '{names[first]}'",
        f"relevance for {second.split(' (')[0]!r}".replace('"', "'"),
        f"legrad for '{names[first]}'",
        f"legrad for {second.split(' (')[0]!r}".replace('"', "'"),
    ]
    assert "Text lens" in [h.value for h in at.subheader]  # the logit lens reads patches against the prompts
    legend = next(h.proto.body for h in at.get("html") if "Patches voting for each" in h.proto.body)
    assert all(f"{name} (" in legend for name in names)  # every prompt, voted for or not
    open_tab(at, "Faithfulness")  # the chosen prompt is the one tested
    assert not at.exception and not at.error


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no prompts"),
        ("a dog\n\na cat", "prompt 2 is empty"),
        ("a dog\na cat\na dog", "prompt 3 ('a dog') repeats prompt 1"),
        ("\n".join(f"thing {i}" for i in range(101)), "101 prompts, more than the limit of 100"),
    ],
)
def test_bad_prompts_are_answered_with_their_cause_in_the_main_area_too(folders, monkeypatch, text, message):
    at = page_with(folders["clip"], monkeypatch)
    at.text_area(key=str(PROMPTS)).set_value(text).run()
    assert not at.exception
    assert any(message in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    # the sidebar may be collapsed: the line above the tabs, and the tab, say what is wrong and where to fix it
    assert prediction(at).startswith(f"**No predictions: the prompts cannot be used** ({message}")
    assert "fix them under Prompts in the sidebar" in prediction(at) and "backbone" not in prediction(at)
    (overview,) = [i.value for i in at.info]
    assert overview.startswith(f"The prompts cannot be used ({message}") and "backbone" not in overview
    for tab in ("Heads & layers", "Class-specific", "Faithfulness"):
        open_tab(at, tab)
        assert any(i.value.startswith("The prompts cannot be used") for i in at.info), tab


def test_a_prompt_longer_than_the_context_is_truncated_with_a_note(folders, monkeypatch):
    at = page_with(folders["clip"], monkeypatch)
    at.text_area(key=str(PROMPTS)).set_value("a dog\n" + " ".join(["cat"] * 30)).run()
    assert not at.exception and not at.error
    assert any("Prompt 2 is" in w.value and "longer than the text tower's 16" in w.value for w in at.sidebar.warning)
    assert "Zero-shot prediction" in prediction(at)


def test_a_ready_set_with_its_template(folders, monkeypatch):
    at = page_with(folders["siglip"], monkeypatch)
    at.selectbox(key=str(PROMPT_SOURCE)).set_value("cifar10").run()
    assert not at.exception and not at.error
    # CLIP's template word for word ("a photo of a airplane." for the first class): the example reads correctly
    assert any("10 classes x 1 template = 10 prompts, e.g. 'a photo of a bird.'" in c.value for c in at.sidebar.caption)
    expected = library_probabilities(folders["siglip"], list(vitviz.text.prompt_set("cifar10")), ["a photo of a {}."])
    top = int(np.argmax(expected))
    assert_percent(
        prediction(at), f"Zero-shot prediction: '{vitviz.text.prompt_set('cifar10')[top]}' (", float(expected[top])
    )


def test_a_clip_tower_without_its_text_half_says_how_to_get_it(folders, monkeypatch):
    at = page_with(folders["clip-no-tokenizer"], monkeypatch)
    assert not at.exception
    notes = " ".join(c.value for c in at.sidebar.caption)
    assert "No text tower" in notes and "no tokenizer files" in notes and "open_clip:ViT-B-16/openai" in notes
    assert "No predictions (the model is a backbone)" in prediction(at)


def test_when_probabilities_tie_the_picker_starts_on_the_top_class_and_maps_are_made_once(tmp_path, monkeypatch):
    path = tiny_checkpoint(tmp_path / "tie.pt", names=("cat", "dog", "bird", "fish"))
    checkpoint = torch.load(path, weights_only=True)
    for name in ("head.weight", "head.bias"):  # a zero head: every class 25 %, a four-way tie
        checkpoint["state_dict"][name].zero_()
    torch.save(checkpoint, path)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    calls = []
    original = vitviz.explain.method_maps

    def counted(model, pixels, methods, target, *args, **kwargs):
        if methods != ["lens"]:  # the logit lens, drawn in the same tab, runs through method_maps too
            calls.append((target, methods))
        return original(model, pixels, methods, target, *args, **kwargs)

    monkeypatch.setattr(vitviz.explain, "method_maps", counted)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    assert_percent(prediction(at), "Prediction: cat (", 0.25)
    open_tab(at, "Class-specific")
    assert calls == [(0, ["relevance"]), (0, ["legrad"])]  # the top class's maps, once each: not twice
    assert captions(at)[0] == "relevance for 'cat'"


def test_typed_prompts_survive_a_look_at_a_ready_set(folders, monkeypatch):
    at = page_with(folders["clip"], monkeypatch)
    at.text_area(key=str(PROMPTS)).set_value("an astronaut\nthe moon").run()
    at.selectbox(key=str(PROMPT_SOURCE)).set_value("cifar10").run()
    assert not at.exception and not at.text_area  # the ready set: no box for typed prompts
    at.selectbox(key=str(PROMPT_SOURCE)).set_value("my prompts").run()
    assert at.text_area(key=str(PROMPTS)).value == "an astronaut\nthe moon"
    expected = library_probabilities(folders["clip"], ["an astronaut", "the moon"])
    top = int(np.argmax(expected))
    prompt = ["an astronaut", "the moon"][top]
    assert_percent(prediction(at), f"Zero-shot prediction: '{prompt}' (", float(expected[top]))


def test_the_input_size_in_the_sidebar_is_the_one_the_model_is_fed(folders, monkeypatch):
    # the tiny CLIP folder has no preprocessor_config.json: the loader feeds it its config's own 32x32
    at = page_with(folders["clip"], monkeypatch)
    model = vitviz.load_model(folders["clip"])
    assert tuple(model.transform(load_image(png_bytes())).shape[-2:]) == (32, 32)
    sidebar = at.sidebar.caption[0].value
    assert "input 32x32 (4x4 patches" in sidebar and "built for" not in sidebar
    assert "as a 32x32 input (4x4 patches of 8 px)" in prediction(at)


def banner(at) -> str | None:
    return next((w.value for w in at.warning if w.value.startswith("**Intervened model.**")), None)


def test_a_knocked_out_head_stays_out_when_the_prompts_change(folders, monkeypatch):
    at = open_tab(page_with(folders["clip"], monkeypatch), "Heads & layers")
    next(m for m in at.multiselect if m.label == "Knock out heads").set_value(["L1 H2"]).run()
    assert "Heads removed: L1 H2" in banner(at)
    model = vitviz.load_model(folders["clip"])
    pixels = model.transform(load_image(png_bytes()))[None]
    for prompts in (["an astronaut", "the moon"], ["a photo of a cat", "a photo of a dog", "a photo of a bird"]):
        at.text_area(key=str(PROMPTS)).set_value("\n".join(prompts)).run()
        assert not at.exception and "Heads removed: L1 H2" in banner(at)  # the same heads, the new prompts
        knocked = vitviz.zero_shot(model, prompts, use_cache=False).knock_out(heads=[(1, 2)])
        with torch.no_grad():
            expected = knocked.probabilities(knocked(pixels).logits)[0].numpy()
        top = int(np.argmax(expected))
        assert_percent(prediction(at), f"Zero-shot prediction: '{prompts[top]}' (", float(expected[top]))
    at.button(key="restore_model").click().run()
    assert banner(at) is None
