"""The Dataset page's Features tab with an SAE in another library's format: saev's legacy file reads layer -2,
counted from the end, so on a 3-block model its latents are those of block 1 (the block the index stores), and the
tab's tables, captions and later-block heads all use that resolved block."""

import numpy as np
import pytest
import torch
from dataset_harness import checked, dataset_app, open_tab, tiny_index
from sae_format_files import weights, write_saev

import vitviz
from vitviz.sae import load_sae
from vitviz.sae.browse import LATENTS_FILE, image_codes
from vitviz_dashboard.dataset.sae_features import SAE_FOLDER


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("features-formats")
    _, index = tiny_index(root, ["--shard-size", "8", "--batch-size", "5", "--activations", "1"])
    width = 32  # the tiny model's (tests/tiny_models.py)
    legacy = write_saev(root / "legacy" / "sae.pt", {"d_vit": width, "exp_factor": 2}, weights(1, width, 2 * width))
    return root, index, legacy


def test_a_saev_sae_counted_from_the_end_reads_the_resolved_block(built, monkeypatch):
    root, index, legacy = built
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(root))
    at = open_tab(dataset_app(index), "Features (SAE)")
    at.text_input(key=SAE_FOLDER).set_value(str(legacy))
    checked(at.run())
    assert not [e.value for e in at.error], [e.value for e in at.error]
    assert any(c.value.startswith("Block 1:") for c in at.caption)
    assert (legacy.parent / LATENTS_FILE).is_file()
    # the listed frequencies are those of the codes of block 1's stored tokens
    opened = vitviz.open_index(index)
    sae = load_sae(legacy)
    prefix = opened.manifest["activations"]["prefix_tokens"]
    ids = opened.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id", limit=1000)["image_id"]
    codes = torch.cat([image_codes(sae, torch.from_numpy(opened.activations(int(i), 1)[0]), prefix) for i in ids])
    expected = (codes > 0).float().mean(dim=0).numpy()
    listed = at.dataframe[0].value.set_index("latent")["frequency"]
    np.testing.assert_allclose(listed.to_numpy(), expected[listed.index.to_numpy()], rtol=1e-5)
    heads = next(frame.value for frame in at.dataframe if "attention share" in frame.value.columns)
    assert set(heads["layer"]) <= {2}  # the blocks after block 1
