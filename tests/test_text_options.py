"""Prompts on the command line: `vitviz explain --prompts`, `vitviz benchmark --prompt-set`, and their errors.
A tiny random CLIP folder (tests/tiny_text.py) stands in for a pretrained model; nothing is downloaded."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_text import clip_folder

import vitviz
import vitviz.commands.benchmark as benchmark
import vitviz.commands.explain as explain_command
from vitviz.preprocessing import load_image
from vitviz.text import prompt_set


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return clip_folder(tmp_path_factory.mktemp("clip") / "model")[2]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_CACHE", str(tmp_path / "cache"))


def photo(path, colour):
    Image.new("RGB", (40, 32), colour).save(path)
    return path


def test_explain_with_prompts_writes_their_names_and_probabilities(clip, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    photo(photos / "red.png", (220, 30, 30))
    prompts = ["a red square", "a photo of a dog", "the moon"]
    assert (
        explain_command.main(
            [
                str(photos),
                "--model",
                str(clip),
                "--prompts",
                *prompts,
                "--methods",
                "rollout",
                "relevance",
                "--out",
                str(tmp_path / "maps"),
            ]
        )
        == 0
    )
    model = vitviz.zero_shot(vitviz.load_model(clip), prompts, use_cache=False)
    pixels = model.transform(load_image((photos / "red.png").read_bytes()))[None]
    with torch.no_grad():
        expected = model.probabilities(model(pixels).logits)[0].numpy()
    with open(tmp_path / "maps" / "predictions.csv") as f:
        row = list(csv.DictReader(f))[0]
    top = int(np.argmax(expected))
    assert row["class1"] == prompts[top] and float(row["probability1"]) == pytest.approx(expected[top], abs=1e-6)
    saved = np.load(tmp_path / "maps" / "red.npz")
    assert saved["probabilities"].shape == (3,) and saved["relevance"].shape == (
        pixels.shape[-2] // 8,
        pixels.shape[-1] // 8,
    )


def test_benchmark_with_a_prompt_set_matches_the_class_folders(clip, tmp_path):
    images = tmp_path / "cifar"
    for name, colour in [("cat", (200, 120, 40)), ("ship", (20, 40, 200))]:  # CIFAR-10 class names as folders
        (images / name).mkdir(parents=True)
        photo(images / name / "0.png", colour)
    assert (
        benchmark.main(
            [
                str(images),
                "--model",
                str(clip),
                "--prompt-set",
                "cifar10",
                "--methods",
                "rollout",
                "--target",
                "label",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (tmp_path / "out" / "images.jsonl").read_text().splitlines()]
    classes = list(prompt_set("cifar10"))
    assert sorted(r["label"] for r in records) == sorted([classes.index("cat"), classes.index("ship")])


def test_imagenet_folders_named_by_wordnet_id_are_labelled():
    from types import SimpleNamespace

    aliases = benchmark.class_aliases(SimpleNamespace(prompt_set="imagenet"))
    assert len(aliases) == 1000 and aliases[0] == "n01440764"  # tench, the first of open_clip's names
    assert prompt_set("imagenet")[0] == "tench"


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model", "default", "--prompts", "a dog"], "no text tower"),
        (["--prompts", "a dog", "a dog"], "prompt 2 .'a dog'. repeats prompt 1"),
        (["--prompts", "a dog", ""], "prompt 2 is empty"),
        (["--templates", "openai-80"], "--templates needs --prompts or --prompt-set"),
        ([], "no classification head.*give --prompts or --prompt-set"),
    ],
)
def test_bad_prompt_options_exit_with_a_message(clip, tmp_path, arguments, message):
    photo(tmp_path / "a.png", (0, 0, 0))
    if "--model" not in arguments:
        arguments = ["--model", str(clip), *arguments]
    with pytest.raises(SystemExit, match=message):
        explain_command.main([str(tmp_path / "a.png"), *arguments, "--out", str(tmp_path / "maps")])


def test_a_prompt_longer_than_the_context_is_noted(clip, tmp_path, capsys):
    photo(tmp_path / "a.png", (0, 0, 0))
    long = " ".join(["cat"] * 30)
    assert (
        explain_command.main(
            [
                str(tmp_path / "a.png"),
                "--model",
                str(clip),
                "--prompts",
                "a dog",
                long,
                "--methods",
                "rollout",
                "--out",
                str(tmp_path / "maps"),
            ]
        )
        == 0
    )
    assert "prompt 2 is" in capsys.readouterr().err


def test_a_prompt_of_invalid_utf8_exits_with_one_line_not_a_traceback(clip, tmp_path):
    """Bytes that are not UTF-8 in an argument become a lone surrogate ('\\udcff') in Python's argv."""
    photo(tmp_path / "a.png", (0, 0, 0))
    arguments = [str(tmp_path / "a.png"), "--model", str(clip), "--out", str(tmp_path / "maps")]
    with pytest.raises(SystemExit, match="^error: prompt 2 is not valid text: character 3 is '.udcff'"):
        explain_command.main([*arguments, "--prompts", "a dog", "a \udcff cat"])
    command = [sys.executable, "-m", "vitviz", "explain", *arguments, "--prompts", b"a \xff dog", "a cat"]
    done = subprocess.run(command, capture_output=True, env=dict(os.environ), timeout=300)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("error: prompt 1 is not valid text: character 3 is '\\udcff'")
