"""The server's memory budget (vitviz_dashboard/cache/budget.py): sizes, the byte-bounded store, and the page kept
within it across many images and two sessions, with analyses too big to keep whole computed as they stream."""

import io
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import streamlit as st
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.specs
from vitviz import analysis as analysis_module
from vitviz import explain
from vitviz.preprocessing import ImageFile
from vitviz_dashboard.cache import budget
from vitviz_dashboard.cache.budget import MemoryStore, kept, nbytes, parse_bytes
from vitviz_dashboard.state import PHOTO_TAB

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.mark.parametrize(
    "text, size",
    [
        ("4GB", 4 * 2**30),
        ("512 MB", 512 * 2**20),
        ("1.5g", 3 * 2**29),
        ("300000", 300000),
        ("2GiB", 2 * 2**30),
        ("64k", 64 * 1024),
    ],
)
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "lots", "4 parsecs", "-1GB", "0", "1e9"])
def test_parse_bytes_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="memory"):
        parse_bytes(text)


def test_a_bad_budget_setting_is_named_and_the_default_used(monkeypatch):
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="VITVIZ_MEMORY_BUDGET: a memory size is a number"):
        budget.budget_bytes()
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "3MB")
    assert budget.budget_bytes() == 3 * 2**20
    monkeypatch.delenv("VITVIZ_MEMORY_BUDGET")
    assert budget.budget_bytes() == int(budget.machine_memory() * budget.DEFAULT_FRACTION)


def test_nbytes_counts_storage_once_and_sees_inside_containers():
    tensor = torch.zeros(1000)  # 4000 bytes
    array = np.zeros((10, 10), dtype=np.float64)  # 800 bytes
    photo = Image.new("RGB", (20, 10))  # 600 bytes
    assert nbytes(tensor) == 4000 and nbytes(tensor[:10]) == 4000  # a view keeps its whole storage alive
    assert nbytes((tensor, tensor[5:], tensor.view(10, 100))) == 4000  # shared storage counted once
    assert nbytes({"a": array, "b": array[2:]}) == 800 + 2
    assert nbytes([photo, photo, b"12345"]) == 600 + 5
    assert nbytes(ImageFile.of(b"x" * 100)) == 100 + 64  # a dataclass: its fields (the bytes and the hex digest)
    figure = go.Figure([go.Heatmap(z=np.zeros((100, 100), dtype=np.float32))])
    assert 40_000 <= nbytes(figure) <= 40_000 + 8192  # the data, plus a small allowance for the layout
    frame = pd.DataFrame({"x": np.zeros(1000), "name": ["a" * 50] * 1000})  # 8,000 bytes of floats, 1,000 strings
    assert 8_000 + 50_000 <= nbytes(frame) <= 8_000 + 100_000  # the strings counted deep


def test_the_store_evicts_the_least_recently_used_by_bytes():
    store = MemoryStore(limit=10_000)  # an entry may take up to a quarter: 2,500 bytes
    for name in "abcd":
        store.get(name, lambda: np.zeros(2400, dtype=np.uint8))
    assert store.held == 9600 and len(store) == 4
    store.get("a", lambda: pytest.fail("kept: not computed again"))  # "a" is now the most recent
    store.get("e", lambda: np.zeros(2400, dtype=np.uint8))  # 12,000 > 10,000: "b", the oldest, goes
    assert list(store._entries) == ["c", "d", "a", "e"]
    assert store.held == 9600 and store.evictions == 1
    store.get("f", lambda: np.zeros(2500, dtype=np.uint8))  # evicts as many as it needs: "c"
    assert list(store._entries) == ["d", "a", "e", "f"] and store.held == 9700
    huge = store.get("huge", lambda: np.zeros(2501, dtype=np.uint8))  # above a quarter of the budget
    assert huge.nbytes == 2501 and "huge" not in store and store.too_big == 1 and store.held == 9700
    assert store.peak <= store.limit


def test_sessions_asking_for_the_same_entry_compute_it_once():
    store, calls = MemoryStore(limit=10**6), []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return np.ones(10)

    results = []
    threads = [threading.Thread(target=lambda: results.append(store.get("k", slow))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 4 and all(r is results[0] for r in results)


def test_kept_keys_by_arguments_files_by_digest_arrays_by_content(monkeypatch):
    monkeypatch.setattr(budget, "STORE", MemoryStore(limit=10**6))
    calls = []

    @kept()
    def double(file: ImageFile, values: np.ndarray, *, _ignored: object) -> np.ndarray:
        calls.append(1)
        return values * 2

    first = double(ImageFile.of(b"abc"), np.arange(3), _ignored=object())
    again = double(ImageFile.of(b"abc"), np.arange(3), _ignored=object())  # an equal file and array: kept
    assert again is first and len(calls) == 1
    double(ImageFile.of(b"abd"), np.arange(3), _ignored=None)
    double(ImageFile.of(b"abc"), np.arange(1, 4), _ignored=None)
    assert len(calls) == 3


def test_kept_keys_every_positional_and_keyword_argument_of_a_variadic_function(monkeypatch):
    monkeypatch.setattr(budget, "STORE", MemoryStore(limit=10**6))

    @kept()
    def build(name: str, *args, **kwargs) -> tuple:
        return (name, args, kwargs)

    assert build("grid", 1, 2, "viridis") == ("grid", (1, 2, "viridis"), {})
    assert build("grid", 1, 2, "magma") == ("grid", (1, 2, "magma"), {})  # the third argument is in the key
    assert build("grid", 1, 2, "magma", marks=[(0, 1)]) == ("grid", (1, 2, "magma"), {"marks": [(0, 1)]})
    assert build("grid", 1, 2, "magma", marks=[(1, 1)])[2] == {"marks": [(1, 1)]}


def test_kept_refuses_a_function_given_the_model_without_the_models_key_first():
    """The model is never hashed, so a kept function that runs one must be keyed by its ModelKey: without it, two
    models (an intact one and one with heads knocked out) would share results."""
    with pytest.raises(TypeError, match="first argument must be key: ModelKey"):

        @kept()
        def prediction(image_key: str, *, _model: object) -> int:
            return 0

    @kept()
    def keyed_prediction(key: object, image_key: str, *, _model: object) -> int:
        return 0


def test_cached_figures_follow_every_argument(monkeypatch):
    from vitviz_dashboard.cache.pictures import cached_figure

    monkeypatch.setattr(budget, "STORE", MemoryStore(limit=10**8))
    maps = np.random.default_rng(0).random((4, 3, 3))
    viridis = cached_figure("grid_figure", maps, [f"head {h}" for h in range(4)], 2, "viridis")
    magma = cached_figure("grid_figure", maps, [f"head {h}" for h in range(4)], 2, "magma")
    assert viridis is not magma and viridis.data[0].colorscale != magma.data[0].colorscale
    first = cached_figure("grid_figure", maps, ["a", "b", "c", "d"], 2, "viridis", True, [(0, 0)] * 4)
    second = cached_figure("grid_figure", maps, ["a", "b", "c", "d"], 2, "viridis", True, [(1, 1)] * 4)
    assert list(first.data[1].x) == [0, 4, 0, 4] and list(second.data[1].x) == [1, 5, 1, 5]  # the marks follow


# --- the page within its budget ------------------------------------------------------------------------------


def photo_png(seed: int, size=(48, 40)) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


MID_SIZE = dict(image_size=64, patch_size=8, hidden_size=64, num_layers=4, num_heads=4, mlp_size=128)  # T = 65


@pytest.fixture()
def mid_size_model(tmp_path, monkeypatch):
    path = tiny_checkpoint(tmp_path / "mid.pt", **MID_SIZE)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    monkeypatch.setenv("VITVIZ_SAMPLES", "")
    st.cache_resource.clear()
    st.cache_data.clear()
    return path


def test_the_page_never_holds_more_than_its_budget_across_many_images_and_two_sessions(mid_size_model, monkeypatch):
    # 4.5 MB: an analysis may keep 288 kB of attention (1/16), so the mid-size model's 270 kB are kept whole,
    # and 16 images at about 345 kB each are more than the budget
    store = MemoryStore(limit=9 * 2**19)
    monkeypatch.setattr(budget, "STORE", store)
    sessions = [AppTest.from_file(APP, default_timeout=120) for _ in range(2)]
    for at in sessions:
        at.run()
    held = []
    for index in range(16):
        at = sessions[index % 2]
        at.file_uploader[0].set_value((f"photo{index}.png", photo_png(index), "image/png")).run()
        assert not at.exception and not at.error
        at.session_state[str(PHOTO_TAB)] = ["Overview", "Heads & layers", "Click a patch", "Class-specific"][index % 4]
        at.run()
        assert not at.exception and not at.error
        held.append(store.held)
    assert max(held) <= store.limit and store.peak <= store.limit
    assert store.evictions > 0  # the budget, not an entry count, decided what stayed
    analyses = [value for value, _ in store._entries.values() if isinstance(value, analysis_module.ImageAnalysis)]
    assert analyses and all(a.attentions is not None for a in analyses)  # 66 kB of attention each: kept whole


def test_an_analysis_above_its_share_keeps_only_its_views_and_the_page_streams_the_rest(mid_size_model, monkeypatch):
    store = MemoryStore(limit=2**20)  # a share of 64 kB: the mid-size model's 270 kB of attention is not kept
    monkeypatch.setattr(budget, "STORE", store)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.file_uploader[0].set_value(("photo.png", photo_png(0), "image/png")).run()
    next(s for s in at.slider if s.label == "Discard ratio").set_value(0.5).run()  # a rollout the pass did not make
    at.session_state[str(PHOTO_TAB)] = "Click a patch"
    at.run()
    next(n for n in at.number_input if n.label == "Row").set_value(1).run()
    assert not at.exception and not at.error
    analyses = [value for value, _ in store._entries.values() if isinstance(value, analysis_module.ImageAnalysis)]
    assert len(analyses) == 1 and analyses[0].attentions is None

    # what the page drew equals what the keep-everything path gives
    model = vitviz.load_model(str(mid_size_model))
    image = Image.open(io.BytesIO(photo_png(0))).convert("RGB")
    whole = analysis_module.analyse_image(model, image)
    rollouts = {dict(k[1:])["discard"]: v for k, (v, _) in store._entries.items() if k[0] == "rollout_map"}
    assert sorted(rollouts) == [0.0, 0.5]  # the analysis's own, then one by a streaming pass
    for discard, drawn in rollouts.items():
        expected = explain.attention_rollout(whole.attentions, **whole.readout_args, discard_ratio=discard)[0].numpy()
        np.testing.assert_allclose(drawn, expected, rtol=1e-5, atol=1e-7)
    patches = [v for k, (v, _) in store._entries.items() if k[0] == "patch_maps"]
    assert len(patches) == 2  # patch (4, 4) then (1, 4), in the last block
    index = whole.num_prefix_tokens + 1 * 8 + 4
    np.testing.assert_allclose(
        patches[-1][1], whole.attentions[-1][0, :, index, 1:].reshape(4, 8, 8).numpy(), rtol=1e-5
    )
