"""The Features tab's views of all latents (vitviz_dashboard/dataset/latents.py) under AppTest, on a tiny model, its
index with block activations and an SAE trained a few steps on it: a click on the overview opens that latent; the
images where it fires (analysis.image_maxima, checked against each image's codes) become the grid's selection and a
slice of accuracy."""

import numpy as np
import pytest
import streamlit as st
import torch
from dataset_harness import INDEX, QUICK, checked, dataset_app, make_images, open_tab
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.commands.sae import main as sae_main
from vitviz.dataset.analysis import image_maxima
from vitviz.dataset.photos import photo_reader
from vitviz.preprocessing import load_image
from vitviz.sae import load_sae
from vitviz.sae.browse import attention_to_firing_patches, image_codes, latent_effects, latent_logit_effects
from vitviz_dashboard.cache import budget
from vitviz_dashboard.dataset.grid import GRID_TAB, SELECTION
from vitviz_dashboard.dataset.latents import OVERVIEW
from vitviz_dashboard.dataset.sae_features import SAE_FOLDER
from vitviz_dashboard.state import DATASET_TAB


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset-latents")
    model = tiny_checkpoint(root / "model.pt", num_layers=3)
    out = root / "index"
    assert index_main([str(make_images(root / "images")), "--model", str(model), "--out", str(out), *INDEX]) == 0
    assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "1", "--out", str(root / "sae")])
    return root


@pytest.fixture(autouse=True)
def settings(monkeypatch, built):
    st.cache_data.clear()
    budget.STORE.clear()
    monkeypatch.setenv("VITVIZ_SAMPLES", "")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(built))


def direct_maxima(index, sae, latent: int) -> np.ndarray:
    prefix = index.manifest["activations"]["prefix_tokens"]
    return np.array(
        [
            float(image_codes(sae, torch.from_numpy(index.activations(i, 0)[0]), prefix)[:, latent].max())
            for i in range(index.count)
        ]
    )


def test_image_maxima_equal_each_images_codes(built):
    index, sae = vitviz.open_index(built / "index"), load_sae(built / "sae")
    for latent in range(3):
        maxima = image_maxima(index, 0, lambda t, j=latent: sae.encode(torch.from_numpy(t))[..., j].detach().numpy(), 5)
        np.testing.assert_allclose(maxima, direct_maxima(index, sae, latent), rtol=1e-5, atol=1e-6)


def test_a_click_on_the_overview_opens_a_latent_whose_firing_images_go_to_the_grid(built):
    index, sae = vitviz.open_index(built / "index"), load_sae(built / "sae")
    at = open_tab(dataset_app(built / "index"), "Features (SAE)")
    at.text_input(key=SAE_FOLDER).set_value(str(built / "sae"))
    checked(at.run())
    assert not at.error, [e.value for e in at.error]
    listed = at.dataframe[0].value["latent"].tolist()
    latent = int(listed[-1])  # the table's last: not the one open by default
    at.session_state[OVERVIEW] = {"selection": {"points": [{"customdata": latent, "x": 0.1, "y": 1.0}]}}
    checked(at.run())
    assert int(at.selectbox(key="dataset|sae_latent").value) == latent
    maxima = direct_maxima(index, sae, latent)
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].to_numpy()
    fires = [int(i) for i in np.argsort(-maxima, kind="stable") if maxima[i] > 0 and i in set(readable)]
    assert any(m.value.startswith(f"**Images where latent {latent} fires**: {len(fires):,} of ") for m in at.markdown)
    slices = at.dataframe[-1].value
    assert slices["slice"].tolist()[0] == "all images"
    assert slices.set_index("slice")["images"].get("fires", 0) == len(fires)
    checked(at.button(key="dataset|sae_fires_grid").click().run())
    assert at.session_state[str(DATASET_TAB)] == GRID_TAB
    assert list(at.session_state[SELECTION].ids) == fires


def forward_by_hand(model, sae, index, block, latent, largest, photos):
    """What the Features tab computed in the page before browse.latent_effects: one pass over the photos, its logit
    effects and the later heads' attention to where the latent fires."""
    prefix = index.manifest["activations"]["prefix_tokens"]
    pixels = torch.stack([model.transform(load_image(data)) for _, data in photos])
    codes = torch.stack(
        [image_codes(sae, torch.from_numpy(index.activations(i, block)[0]), prefix)[:, latent] for i, _ in photos]
    )
    with torch.no_grad():
        output = model(pixels, output_hidden_states=True, output_attentions=True)
    effects = latent_logit_effects(model, sae, latent, output.hidden_states[-1], largest).numpy()
    return effects, attention_to_firing_patches(list(output.attentions), codes, block, prefix).numpy()


def test_latent_effects_equal_the_pass_the_page_ran_and_leave_out_an_undecodable_photo(built):
    index, sae = vitviz.open_index(built / "index"), load_sae(built / "sae")
    model = vitviz.load_model(str(built / "model.pt"))
    rows = index.query("SELECT image_id, path FROM images WHERE error IS NULL ORDER BY image_id", limit=4)
    read = photo_reader(index.manifest)
    photos = [(int(i), read(int(i), str(p))) for i, p in zip(rows["image_id"], rows["path"])]
    latent = 1
    effects, heads = latent_effects(
        model, sae, index, 0, latent, 2.5, [*photos[:2], (99, b"not an image"), *photos[2:]]
    )
    expected_effects, expected_heads = forward_by_hand(model, sae, index, 0, latent, 2.5, photos)
    assert heads.shape == (index.layout["layers"] - 1, index.layout["heads"])
    np.testing.assert_allclose(effects, expected_effects, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(heads, expected_heads, rtol=1e-5, atol=1e-6)
    assert latent_effects(model, sae, index, 0, latent, 2.5, [(0, b"not an image")]) is None
