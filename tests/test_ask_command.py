"""`vitviz ask`: a tiny LLaVA folder asked about photos from the command line; what it writes equals what the library
computes, bad input gets one line, and a map is drawn where its tile's pixels came from."""

import json

import numpy as np
import pytest
from PIL import Image
from tiny_vlms import tiny_vlm_folder

from vitviz.commands.ask import main, token_file
from vitviz.commands.cli import COMMANDS
from vitviz.render.answers import map_over_photo, map_raster
from vitviz.vlm import VLM, image_relevance, load_vlm, token_attention


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


@pytest.fixture(scope="module")
def vlm(llava):
    return load_vlm(llava)


def photos(folder):
    folder.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (48, 80, 3), dtype=np.uint8)).save(folder / "wide.png")
    (folder / "broken.png").write_bytes(b"not an image")
    return folder


def test_ask_writes_the_answer_its_attention_and_one_map_per_token(llava, vlm, tmp_path, capsys):
    out = tmp_path / "out"
    question, given = "What is in the picture?", "a red cat"
    argv = [str(photos(tmp_path / "photos")), "--model", str(llava), "--question", question, "--answer", given]
    status = main([*argv, "--relevance", "--out", str(out)])
    assert status == 1  # broken.png was skipped, in one line
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("skipped")] == [
        line for line in err.splitlines() if "broken.png" in line
    ]
    assert not (out / "broken").exists()
    photo = Image.open(tmp_path / "photos" / "wide.png").convert("RGB")
    expected = vlm.answer(photo, question, answer=given)
    record = json.loads((out / "wide" / "answer.json").read_text())
    assert record["question"] == question and record["answer"] == expected.text and not record["generated"]
    assert [t["token"] for t in record["tokens"]] == expected.tokens == ["a", "red", "cat"]
    layers = expected.image_attention.shape[1]
    for index, token in enumerate(record["tokens"]):
        assert token["image_share"] == pytest.approx(expected.image_share[index].mean(axis=1), abs=1e-5)
        assert len(token["first_share"]) == len(token["text_share"]) == layers
    arrays = np.load(out / "wide" / "attention.npz")
    np.testing.assert_allclose(arrays["image_attention"], expected.image_attention, atol=1e-6)
    np.testing.assert_array_equal(arrays["image_token_grid"], expected.image_token_grid)
    np.testing.assert_allclose(arrays["tile_boxes"], [t.box for t in expected.tiles])
    assert arrays["relevance"].shape == (3, expected.image_attention.shape[-1])
    np.testing.assert_allclose(arrays["relevance"][1], image_relevance(expected, 1), rtol=1e-5, atol=1e-7)
    pictures = sorted(p.name for p in (out / "wide").glob("*.png"))
    assert pictures == sorted(
        ["all_tokens.png"]
        + [token_file(kind, i, t) for kind in ("token", "relevance") for i, t in enumerate(expected.tokens)]
    )
    written = np.asarray(Image.open(out / "wide" / "token_001_red.png"))  # the map, its colour scale below it
    assert written.shape[0] > photo.height and written.shape[1] >= photo.width  # the photo at its own resolution
    drawn = map_over_photo(photo, map_raster(expected, token_attention(expected, 1)))
    assert np.array_equal(written[: photo.height, : photo.width], np.asarray(drawn))


def test_ask_generates_greedily_when_no_answer_is_given(llava, vlm, tmp_path):
    photo = tmp_path / "photo.png"
    Image.new("RGB", (56, 56), (30, 140, 200)).save(photo)
    out = tmp_path / "out"
    assert (
        main(
            [str(photo), "--model", str(llava), "--question", "Describe it", "--max-new-tokens", "3", "--out", str(out)]
        )
        == 0
    )
    expected = vlm.answer(Image.open(photo), "Describe it", max_new_tokens=3)
    record = json.loads((out / "photo" / "answer.json").read_text())
    assert record["generated"] and record["answer"] == expected.text
    assert [t["id"] for t in record["tokens"]] == expected.token_ids
    assert len(list((out / "photo").glob("token_*.png"))) == len(expected.token_ids)


def one_line_error(capsys, argv, code=None) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    message = (
        stopped.value.code if isinstance(stopped.value.code, str) else capsys.readouterr().err.strip().splitlines()[-1]
    )
    if code is not None:
        assert stopped.value.code == code
    assert "\n" not in message and "Traceback" not in message
    return message


def test_bad_input_gets_one_line(llava, tmp_path, capsys):
    photo = tmp_path / "photo.png"
    Image.new("RGB", (40, 40)).save(photo)
    base = [str(photo), "--out", str(tmp_path / "out")]
    no_processor = tmp_path / "no_processor"
    no_processor.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_processor / name).write_bytes((llava / name).read_bytes())
    message = one_line_error(capsys, [*base, "--model", str(no_processor), "--question", "What?"])
    assert message.startswith("error: ") and "has no processor" in message
    message = one_line_error(capsys, [*base, "--model", str(llava), "--question", "x" * 2001], code=2)
    assert "more than the 2,000 allowed" in message
    message = one_line_error(capsys, [*base, "--model", str(llava), "--question", "What?", "--max-new-tokens", "0"], 2)
    assert "--max-new-tokens must be from 1" in message
    message = one_line_error(
        capsys, [str(tmp_path / "missing.png"), "--model", str(llava), "--question", "What?", "--out", "o"]
    )
    assert message == f"error: {tmp_path / 'missing.png'} does not exist"


def test_the_command_is_registered():
    assert COMMANDS["ask"][0] == "vitviz.commands.ask"


def test_a_map_is_drawn_where_its_tile_looked_and_unseen_pixels_are_dimmed():
    photo = Image.new("RGB", (40, 20), (200, 200, 200))
    raster = np.full((10, 20), np.nan, dtype=np.float32)
    raster[:, 10:] = 0.0  # the right half was seen, the left half not (a crop)
    raster[2:4, 14:16] = 1.0  # one hot cell
    drawn = np.asarray(map_over_photo(photo, raster, "greys", alpha=1.0)).astype(int)
    assert (drawn[:, :20] == int(0.35 * 200)).all()  # dimmed as overlay dims what the model never saw
    change = np.abs(drawn - drawn[0, 39]).sum(axis=2)  # against a cold seen pixel
    rows, cols = np.nonzero(change == change.max())
    assert (4 <= rows).all() and (rows < 8).all() and (28 <= cols).all() and (cols < 32).all()  # the cell, x 2
    with pytest.raises(ValueError, match="covers no pixel"):
        map_over_photo(photo, np.full((10, 20), np.nan))


def test_a_run_stopped_half_way_keeps_what_it_wrote_and_says_so_in_one_line(llava, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        Image.new("RGB", (40, 40), (10, 200, 90)).save(folder / name)
    asked = VLM.answer

    def stopped_at_the_second(self, image, question, **options):
        if stopped_at_the_second.calls == 1:
            raise KeyboardInterrupt  # Ctrl-C while the model generates
        stopped_at_the_second.calls += 1
        return asked(self, image, question, **options)

    stopped_at_the_second.calls = 0
    monkeypatch.setattr(VLM, "answer", stopped_at_the_second)
    out = tmp_path / "out"
    assert (
        main([str(folder), "--model", str(llava), "--question", "What?", "--answer", "a cat", "--out", str(out)]) == 130
    )
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"error: stopped after 1 of 3 images; their folders are in {out}"
    )
    assert sorted(p.name for p in out.iterdir()) == ["a"] and (out / "a" / "answer.json").is_file()
