"""Issue 44's defects of `vitviz ask` and the Ask page, each on a tiny VLM folder: a generated id with no string, a
bare Hub id, whitespace tokens, the offline message, inputs checked before the model loads, the model's own image
placeholder in a greedy answer, and the refusal of a path outside the allowed folders."""

import io
import json
import shutil

import numpy as np
import pytest
import torch
from app_harness import APP
from hub_cache import cached_snapshot, offline_cache
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_vlms import make_tiny_vlm, tiny_vlm_folder
from vlm_harness import QUESTION, photo

import vitviz.commands.ask
import vitviz_dashboard.cache.vlm
from vitviz.commands.ask import main
from vitviz.render.answers import readable_text
from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm.loading import hub_repository
from vitviz_dashboard.ask.inputs import GIVEN, LIMIT, MODEL, OUTSIDE, model_spec
from vitviz_dashboard.ask.inputs import QUESTION as QUESTION_KEY
from vitviz_dashboard.sidebar.model_dirs import ModelRefused

PADDING = 8  # embedding rows past the tokenizer, as Qwen pads its vocabulary


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """A tiny LLaVA whose language model has PADDING more token ids than its tokenizer has strings."""
    folder = tmp_path_factory.mktemp("padded") / "llava"
    vocabulary = len(load_vlm(tiny_vlm_folder("llava", tmp_path_factory)).tokenizer)
    return make_tiny_vlm("llava", folder, text_config=dict(vocab_size=vocabulary + PADDING))


def forcing(vlm, ids: list[int]):
    """``vlm`` whose greedy generation emits ``ids`` (one per step, then its own choice): the logits of each step's
    forced id raised far above the rest, in ``generate`` only (the recorded pass is left as it is)."""
    generate = vlm.model.generate

    def forced_generate(**options):
        steps = iter(ids)

        def raise_one(module, inputs, logits):
            token = next(steps, None)
            if token is None:
                return logits
            return logits + 1e4 * torch.nn.functional.one_hot(torch.tensor(token), logits.shape[-1])

        handle = vlm.model.lm_head.register_forward_hook(raise_one)
        try:
            return generate(**options)
        finally:
            handle.remove()

    vlm.model.generate = forced_generate
    return vlm


def stringless_ids(vlm) -> list[int]:
    return [len(vlm.tokenizer) + 3] * 3


def save_photo(path):
    photo().save(path)
    return path


# ------------------------------------------------------------------------------------ 2. an id with no string
def test_an_id_with_no_string_is_labelled(padded):
    vlm = load_vlm(padded)
    ids = stringless_ids(vlm)
    assert vlm.tokenizer.convert_ids_to_tokens(ids) == [None] * 3  # the case of the issue
    answer = forcing(vlm, ids).answer(photo(), QUESTION, max_new_tokens=3)
    assert answer.token_ids == ids and answer.tokens == [f"<id {ids[0]}>"] * 3


def test_the_command_writes_an_id_with_no_string_by_its_label(padded, tmp_path, monkeypatch, capsys):
    ids = stringless_ids(load_vlm(padded))
    monkeypatch.setattr(vitviz.commands.ask, "load_vlm", lambda spec, precision: forcing(load_vlm(spec), ids))
    out = tmp_path / "out"
    argv = [str(save_photo(tmp_path / "photo.png")), "--model", str(padded), "--question", "What?"]
    assert main([*argv, "--max-new-tokens", "3", "--out", str(out)]) == 0
    record = json.loads((out / "photo" / "answer.json").read_text())
    assert [t["token"] for t in record["tokens"]] == [f"<id {ids[0]}>"] * 3
    assert sorted(p.name for p in out.iterdir()) == ["photo"]
    assert len(list((out / "photo").glob("token_*.png"))) == 3


def test_a_folder_is_written_whole_or_not_at_all(llava, tmp_path, monkeypatch, capsys):
    drawn = vitviz.commands.ask.map_picture

    def disk_full_at_the_second_map(*args, **kwargs):
        disk_full_at_the_second_map.calls += 1
        if disk_full_at_the_second_map.calls == 2:
            raise OSError(28, "No space left on device")
        return drawn(*args, **kwargs)

    disk_full_at_the_second_map.calls = 0
    monkeypatch.setattr(vitviz.commands.ask, "map_picture", disk_full_at_the_second_map)
    out = tmp_path / "out"
    argv = [str(save_photo(tmp_path / "photo.png")), "--model", str(llava), "--question", "What?"]
    assert main([*argv, "--answer", "a red cat", "--out", str(out)]) == 1
    assert list(out.iterdir()) == []  # neither a half-written folder nor the hidden one it was written in
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("No space left on device")


def test_the_page_shows_an_id_with_no_string_by_its_label(padded, monkeypatch, fresh_caches, default_model):
    ids = stringless_ids(load_vlm(padded))
    monkeypatch.setattr(vitviz_dashboard.cache.vlm, "load_vlm", lambda spec, precision: forcing(load_vlm(spec), ids))
    at = press_ask(ask_app(padded, monkeypatch, limit=3))
    assert not at.error
    label = f"\\<id {ids[0]}\\>"  # markdown-escaped
    assert at.get("button_group")[0].options == ["all tokens", label, label + "\u200b", label + "\u200b\u200b"]


# ------------------------------------------------------------------------------------ 3. a bare Hub id
def test_a_spec_is_read_alike_by_the_command_and_the_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_repository("hf:org/model") == hub_repository("org/model") == "org/model"
    assert model_spec("org/model") == model_spec("hf:org/model") == "hf:org/model"
    for path in ("./org/model", "/org/model", "~/model", "model"):
        assert hub_repository(path) is None
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert hub_repository("org/model") is None  # a local folder of that name wins
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))
    assert model_spec("org/model") == str(tmp_path / "org" / "model")


def test_the_command_takes_a_bare_hub_id(llava, tmp_path, monkeypatch, capsys):
    snapshot = cached_snapshot(offline_cache(tmp_path / "hub", monkeypatch), "HuggingFaceTB/tiny-llava")
    for file in llava.iterdir():
        shutil.copy(file, snapshot / file.name)
    image = save_photo(tmp_path / "photo.png")
    argv = [str(image), "--model", "HuggingFaceTB/tiny-llava", "--question", "What?", "--answer", "a cat"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "photo" / "answer.json").read_text())
    assert record["model"] == "HuggingFaceTB/tiny-llava" and record["answer"] == "a cat"


def test_a_local_folder_wins_over_a_hub_id(llava, tmp_path, monkeypatch):
    offline_cache(tmp_path / "empty_hub", monkeypatch)  # the Hub would fail: nothing cached, offline
    monkeypatch.chdir(tmp_path)
    shutil.copytree(llava, tmp_path / "HuggingFaceTB" / "tiny-llava")
    image = save_photo(tmp_path / "photo.png")
    argv = [str(image), "--model", "HuggingFaceTB/tiny-llava", "--question", "What?", "--answer", "a cat"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0


# ------------------------------------------------------------------------------------ 5. whitespace tokens
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\n", "↵"),
        (" ", "·"),
        ("\n" * 4, "↵↵↵↵"),
        ("\n \n", "↵·↵"),
        ("\t", "⇥"),
        ("\u200b", "\\u200b"),
        ("a red cat", "a red cat"),
        ("a\ncat", "a↵cat"),
        ("x\x1by", "x\\x1by"),
        ("", ""),
    ],
)
def test_whitespace_is_shown(text, shown):
    assert readable_text(text) == shown


def test_the_page_shows_line_breaks(llava, monkeypatch, fresh_caches, default_model):
    at = press_ask(ask_app(llava, monkeypatch, given="a\ncat"))
    assert at.get("button_group")[0].options == ["all tokens", "a", "↵", "cat"]


def test_the_page_shows_an_answer_of_line_breaks(llava, monkeypatch, fresh_caches, default_model):
    line_break = load_vlm(llava).tokenizer.convert_tokens_to_ids("\n")
    monkeypatch.setattr(
        vitviz_dashboard.cache.vlm, "load_vlm", lambda spec, precision: forcing(load_vlm(spec), [line_break] * 3)
    )
    at = press_ask(ask_app(llava, monkeypatch, limit=3))  # Gemma 3 answered with 32 line breaks
    assert "A: ↵·↵·↵" in at.text[0].value  # not an empty "A:"
    assert at.get("button_group")[0].options == ["all tokens", "↵", "↵\u200b", "↵\u200b\u200b"]


def test_the_command_prints_line_breaks(llava, tmp_path, monkeypatch, capsys):
    line_break = load_vlm(llava).tokenizer.convert_tokens_to_ids("\n")
    monkeypatch.setattr(
        vitviz.commands.ask, "load_vlm", lambda spec, precision: forcing(load_vlm(spec), [line_break] * 3)
    )
    argv = [str(save_photo(tmp_path / "photo.png")), "--model", str(llava), "--question", "What?"]
    assert main([*argv, "--max-new-tokens", "3", "--out", str(tmp_path / "out")]) == 0
    assert "photo.png: ↵·↵·↵" in capsys.readouterr().err.splitlines()


# ------------------------------------------------------------------------------------ 9. the offline message
@pytest.mark.parametrize("setting", [True, False])
def test_an_uncached_hub_model_offline_is_one_clear_line(offline, monkeypatch, setting):
    if setting:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(VLMError) as refused:
        load_vlm("hf:HuggingFaceTB/not-cached")
    why = "HF_HUB_OFFLINE is set" if setting else "the Hugging Face Hub cannot be reached"
    assert str(refused.value) == (
        f"hf:HuggingFaceTB/not-cached is not in the Hugging Face cache ({offline}) and {why}: download it once "
        "online, then it loads offline"
    )


# ------------------------------------------------------------------------------------ 10. inputs before the model
def test_the_command_checks_the_images_and_the_question_before_the_model(llava, tmp_path, monkeypatch, capsys):
    def never(*args):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vitviz.commands.ask, "load_vlm", never)
    text = tmp_path / "notes.png"
    text.write_text("a text file, not a photo")
    base = ["--model", str(llava), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stopped:
        main([str(text), *base, "--question", "What?"])
    assert str(stopped.value.code).startswith(f"error: {text}: ") and "not an image" in stopped.value.code
    with pytest.raises(SystemExit) as stopped:
        main([str(save_photo(tmp_path / "photo.png")), *base, "--question", "  "])
    assert stopped.value.code == 2 and "--question is empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_page_checks_the_image_and_the_question_before_the_model(llava, monkeypatch, fresh_caches, default_model):
    def never(*args):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vitviz_dashboard.cache.vlm, "load_vlm", never)
    at = ask_app(llava, monkeypatch, upload=("notes.png", b"a text file, not a photo"))
    assert "not an image" in at.error[0].value
    at = ask_app(llava, monkeypatch)
    at.session_state[QUESTION_KEY] = " "
    assert [e.value for e in press_ask(at).error] == ["Type a question."]


# ------------------------------------------------------------------------------------ 27. the image placeholder
@pytest.mark.parametrize("family", ["llava", "llava_onevision", "gemma3"])
def test_a_greedy_answer_stops_before_the_models_image_placeholder(family, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(family, tmp_path_factory))
    words = vlm.tokenizer.convert_tokens_to_ids(["a", "cat"])
    answer = forcing(vlm, [*words, vlm.image_token_id, *words]).answer(photo(), QUESTION, max_new_tokens=6)
    assert answer.generated and answer.token_ids == words and answer.tokens == ["a", "cat"]
    answer = forcing(vlm, [vlm.image_token_id]).answer(photo(), QUESTION, max_new_tokens=3)
    assert answer.token_ids == []  # the first token was the placeholder: an empty answer, as after eos


# ------------------------------------------------------------------------------------ 6. no upload on the Ask page
def test_the_refusal_of_a_folder_outside_mentions_no_upload(llava, monkeypatch, tmp_path, fresh_caches, default_model):
    at = ask_app(llava, monkeypatch, model=tmp_path / "elsewhere")
    assert [e.value for e in at.sidebar.error] == [OUTSIDE] and "upload" not in OUTSIDE.lower()
    with pytest.raises(ModelRefused, match="Hugging Face repository id instead"):
        model_spec("/etc")


# ------------------------------------------------------------------------------------ the page
def ask_app(folder, monkeypatch, model=None, given="", limit=4, upload=None) -> AppTest:
    """The app on its Ask page with the model, a photo (or ``upload``: (name, bytes)) and the question entered,
    before Ask is pressed."""
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(folder.parent))
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "ask")
    at.run()
    at.sidebar.text_input(key=MODEL).set_value(str(model or folder))
    if upload is None:
        buffer = io.BytesIO()
        Image.fromarray(np.random.default_rng(1).integers(0, 256, (200, 300, 3), dtype=np.uint8)).save(buffer, "PNG")
        upload = ("photo.png", buffer.getvalue())
    at.file_uploader[0].set_value((*upload, "image/png"))
    at.run()
    assert not at.exception, at.exception
    at.session_state[QUESTION_KEY], at.session_state[GIVEN], at.session_state[LIMIT] = "What?", given, limit
    return at


def press_ask(at: AppTest) -> AppTest:
    next(button for button in at.button if button.label == "Ask").click()
    at.run()
    assert not at.exception, at.exception
    return at
