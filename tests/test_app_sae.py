"""The SAE views through Streamlit's AppTest, on a tiny model, its index and an SAE trained a few steps on it: the
Dataset page's Features tab (latents, top images, their tables written beside the SAE), the Photo page's SAE
features tab (the photo's latents, a slider that suppresses one, the banner and the changed numbers against
vitviz.sae.with_sae, one click to restore) and a message for each bad SAE path."""

import io
import os
import shutil

import pandas as pd
import pytest
import torch
from app_harness import APP, PHOTOS, assert_changes, open_tab, prediction
from dataset_harness import QUICK, checked, dataset_app, tiny_index
from dataset_harness import open_tab as open_dataset_tab
from PIL import Image
from streamlit.testing.v1 import AppTest

import vitviz
import vitviz.loading.specs
from vitviz.commands.sae import main as sae_main
from vitviz.sae import SAEConfig, TopKSAE, load_sae, save_sae, with_sae
from vitviz.sae.browse import (
    LATENTS_FILE,
    TOP_FILE,
    image_codes,
    latent_statistics,
    patch_latents,
    top_image_shares,
    write_latent_tables,
)
from vitviz.sae.indexed import readable_images
from vitviz_dashboard.dataset.sae_features import SAE_FOLDER

pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny 3-block model, its index storing blocks 0 and 2, an SAE trained on block 0 and a few bad SAEs."""
    root = tmp_path_factory.mktemp("app-sae")
    model, out = tiny_index(root)
    assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "1", "--out", str(root / "sae")])
    save_sae(TopKSAE(SAEConfig(d_in=32, latents=8, k=2, block=1)), root / "block1")
    save_sae(TopKSAE(SAEConfig(d_in=16, latents=8, k=2, block=0)), root / "narrow")
    (root / "unknown").mkdir()
    (root / "unknown" / "config.json").write_text('{"something": "else"}')
    return root


@pytest.fixture(autouse=True)
def allowed(monkeypatch, built):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(built))


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def copied_sae(built, tmp_path, monkeypatch):
    """The trained SAE copied into a folder of its own (no latent tables yet), which the page may open."""
    shutil.copytree(built / "sae", tmp_path / "sae")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}{os.pathsep}{tmp_path}")
    return tmp_path / "sae"


def test_features_tab_lists_latents_and_draws_their_top_images(built, tmp_path, monkeypatch):
    folder = copied_sae(built, tmp_path, monkeypatch)
    at = open_dataset_tab(dataset_app(built / "index"), "Features (SAE)")
    at.text_input(key=SAE_FOLDER).set_value(str(folder))
    checked(at.run())
    assert not errors(at), errors(at)
    assert (folder / LATENTS_FILE).is_file() and (folder / TOP_FILE).is_file()  # written once, beside the SAE
    listed = at.dataframe[0].value
    assert list(listed["frequency"]) == sorted(listed["frequency"], reverse=True) and (listed["frequency"] > 0).all()
    latent = int(at.selectbox(key="dataset|sae_latent").value)
    assert latent == int(listed["latent"].iloc[0])
    captions = [image.proto.imgs[0].caption for image in at.get("image")]
    assert captions and all("largest code" in c for c in captions)
    assert any(m.value.startswith("**Its top") and "Labels:" in m.value for m in at.markdown)
    assert any(m.value == "**Classes it raises most**" for m in at.markdown)
    heads = next(frame.value for frame in at.dataframe if "attention share" in frame.value.columns)
    assert set(heads["layer"]) <= {1, 2} and list(heads["attention share"]) == sorted(heads["attention share"])[::-1]
    assert any(c.value.startswith("No table yet: `vitviz sae ablate") for c in at.caption)
    table = sae_main(["ablate", str(built / "index"), str(folder), "--latent", str(latent), "--limit", "6"])
    at.run()
    shown = next(frame.value for frame in at.dataframe if "accuracy_change" in frame.value.columns)
    assert shown["images"].sum() == 6 and any(c.value.startswith(table.name) for c in at.caption)
    at.radio(key="dataset|sae_order").set_value("mean_activation")
    listed = checked(at.run()).dataframe[0].value
    assert list(listed["mean_activation"]) == sorted(listed["mean_activation"], reverse=True)
    at.selectbox(key="dataset|sae_find").set_value("cat")  # latents whose top images are cats first
    listed = checked(at.run()).dataframe[0].value
    assert list(listed["label_share"]) == sorted(listed["label_share"], reverse=True)
    index = vitviz.open_index(built / "index")
    tops = pd.read_parquet(folder / TOP_FILE)
    images = index.query("SELECT image_id, label, correct FROM images", limit=100)
    expected = top_image_shares(tops, images, "cat").set_index("latent")["label_share"]
    assert listed["label_share"].tolist() == expected.loc[listed["latent"]].tolist()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("block1", "reads block 1, but .* only those of blocks \\[0, 2\\]"),
        ("narrow", "reads 16-wide tokens, but block 0 .* 32 wide"),
        ("unknown", "is not an SAE vitviz reads"),
        ("missing", "There is no SAE at"),
        ("/etc", "only inside the folders that the server's owner allows"),
    ],
)
def test_bad_sae_paths_get_a_message(built, name, message):
    import re

    at = open_dataset_tab(dataset_app(built / "index"), "Features (SAE)")
    at.text_input(key=SAE_FOLDER).set_value(name if name.startswith("/") else str(built / name))
    checked(at.run())
    assert any(re.search(message, text) for text in errors(at)), errors(at)


def photo_app(built, monkeypatch) -> AppTest:
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", built / "model.pt")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.file_uploader[0].set_value([(name, data, "image/png") for name, data in PHOTOS.items()]).run()
    return open_tab(at, "SAE features")


def sae_banners(at) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith("**Edited model.**")]


def latent_sliders(at):
    return [s for s in at.slider if s.label.startswith("Latent ")]


def test_photo_tab_suppresses_a_latent_and_restores_the_model(built, tmp_path, monkeypatch):
    folder = copied_sae(built, tmp_path, monkeypatch)
    at = photo_app(built, monkeypatch)
    at.text_input[-1].set_value(str(folder))
    checked(at.run())
    assert not errors(at), errors(at)
    model = vitviz.load_model(str(built / "model.pt")).eval()
    sae = load_sae(built / "sae")
    pixels = model.transform(Image.open(io.BytesIO(PHOTOS["b.png"])).convert("RGB"))[None]
    with torch.no_grad():
        codes = image_codes(sae, model(pixels, output_hidden_states=True).hidden_states[0][0], 1)
    strongest = int(codes.max(dim=0).values.argmax())
    captions = [image.proto.imgs[0].caption for image in at.get("image")]
    assert any(c.startswith(f"latent {strongest}: largest") for c in captions), captions
    shown = next(frame.value for frame in at.dataframe if list(frame.value.columns) == ["latent", "code"])
    listed = patch_latents(codes, 2 * 4 + 2)  # the middle patch of the 4 x 4 grid, chosen first
    assert shown["latent"].tolist() == [j for j, _ in listed] and len(listed) > 0
    original = prediction(at)
    picker = at.multiselect[-1]
    assert picker.value == [strongest]  # the strongest latent is chosen first
    (slider,) = latent_sliders(at)
    assert slider.value == 0.0 and "multiply its code" in slider.label  # no latent tables beside the SAE yet
    at.button(key="sae_apply").click()
    checked(at.run())
    assert sae_banners(at) and f"latent {strongest} x 0" in sae_banners(at)[0]
    with torch.no_grad():
        before = model(pixels).logits.softmax(-1)[0]
        after = with_sae(model, sae, 0, scale={strongest: 0.0})(pixels).logits.softmax(-1)[0]
    assert (after - before).abs().max() > 1e-4  # suppressing it does change the prediction
    assert_changes(at, list(model.class_names), before, after)
    open_tab(at, "Heads & layers")  # the logit's parts on the edited model: the edit is a part of its own
    caption = next(c.value for c in at.caption if c.value.startswith("Logit "))
    assert " + the SAE edit " in caption and not errors(at), caption
    open_tab(at, "SAE features")
    at.button(key="restore_sae").click()
    checked(at.run())
    assert not sae_banners(at) and prediction(at) == original
    index = vitviz.open_index(built / "index")  # with its largest activations known, the slider sets multiples of it
    write_latent_tables(latent_statistics(sae, index, readable_images(index)), folder)
    (slider,) = latent_sliders(checked(at.run()))
    assert "multiple of its largest activation" in slider.label and (slider.min, slider.max) == (-2.0, 2.0)


def test_the_photo_tab_starts_from_the_sae_typed_on_the_dataset_page(built, tmp_path, monkeypatch):
    folder = copied_sae(built, tmp_path, monkeypatch)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", built / "model.pt")
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state[SAE_FOLDER] = str(folder)  # typed on the Dataset page earlier in the session
    at.run()
    at.file_uploader[0].set_value([(name, data, "image/png") for name, data in PHOTOS.items()]).run()
    at = open_tab(at, "SAE features")
    assert at.text_input[-1].value == str(folder)  # not typed twice
    assert not errors(at), errors(at)
    assert any(m.value.startswith("**The ") and "latents that fire most" in m.value for m in at.markdown)


def test_a_latent_on_the_photo_page_opens_its_top_images_in_the_dataset_grid(built, tmp_path, monkeypatch):
    from vitviz_dashboard.dataset.grid import SELECTION
    from vitviz_dashboard.state import DATASET_FOLDER, DATASET_TAB

    folder = copied_sae(built, tmp_path, monkeypatch)
    index = vitviz.open_index(built / "index")
    sae = load_sae(folder)
    write_latent_tables(latent_statistics(sae, index, readable_images(index)), folder)  # the Features tab's tables
    at = photo_app(built, monkeypatch)
    at.session_state[str(DATASET_FOLDER)] = str(built / "index")  # the index open on the Dataset page
    at.text_input[-1].set_value(str(folder))
    checked(at.run())
    latent = int(at.selectbox(key="sae_dataset_latent").value)
    at.button(key="sae_to_dataset").click()
    checked(at.run())
    tops = pd.read_parquet(folder / TOP_FILE)
    expected = tops[tops["latent"] == latent].sort_values("rank")["image_id"].tolist()
    assert list(at.session_state[SELECTION].ids) == expected and at.session_state[str(DATASET_TAB)] == "Grid"
    shown = f"**{len(expected)} images: latent {latent}'s top images**"
    assert any(m.value == shown for m in at.markdown), [m.value for m in at.markdown][:8]  # the grid is shown


def test_the_tables_written_beside_an_sae_leave_its_stamp_alone(tmp_path):
    """The Features tab writes latents.parquet and top_images.parquet into the SAE's folder: the SAE is unchanged, so
    every result keyed by its stamp stays; a file of the SAE itself written again does change it."""
    from vitviz_dashboard.sae_editing import stamp

    (tmp_path / "sae.pt").write_bytes(b"weights")
    os.utime(tmp_path / "sae.pt", ns=(1_000, 1_000))
    before = stamp(tmp_path)
    for name in ("latents.parquet", "top_images.parquet", "ablate-3.parquet"):
        (tmp_path / name).write_bytes(b"table")
    assert stamp(tmp_path) == before == 1_000
    os.utime(tmp_path / "sae.pt", ns=(2_000, 2_000))
    assert stamp(tmp_path) == 2_000
    assert stamp(tmp_path / "missing") == 0
