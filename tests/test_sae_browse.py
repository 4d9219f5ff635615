"""The feature browser's computations (vitviz.sae.browse) against references: per-latent statistics and top images
against a brute-force pass over every activation of a tiny index, the tables written and read back, the direct logit
attribution of a decoder column against the logit change of adding it to the last block's output with the norm frozen,
and one photo's latents."""

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from dataset_harness import QUICK, tiny_index
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.sae import main as sae_main
from vitviz.loading.specs import load_model
from vitviz.sae import SAEConfig, SAEError, TopKSAE, load_sae
from vitviz.sae.browse import (
    HISTOGRAM_EDGES,
    attention_to_firing_patches,
    check_block,
    image_codes,
    latent_logit_effects,
    latent_statistics,
    patch_latents,
    read_latent_tables,
    top_image_shares,
    top_latents,
    write_latent_tables,
)
from vitviz.sae.indexed import readable_images


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-block model, its index storing blocks 0 and 2, and an SAE trained a few steps on block 0."""
    root = tmp_path_factory.mktemp("sae-browse")
    model, out = tiny_index(root)
    assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "1", "--out", str(root / "sae")])
    return model, vitviz.open_index(out), root / "sae"


def brute_force_codes(index, sae, ids):
    """Every image's patch-token codes at once: (images, P, N)."""
    with torch.no_grad():
        return sae.encode(torch.from_numpy(index.activations(ids, 0)[:, 1:]))


@pytest.mark.parametrize("images_per_chunk", [1, 3, 32])
def test_statistics_and_top_images_equal_a_brute_force_pass(tiny, images_per_chunk):
    _, index, folder = tiny
    sae = load_sae(folder)
    ids = readable_images(index)
    stats = latent_statistics(sae, index, ids, top=5, images_per_chunk=images_per_chunk)
    codes = brute_force_codes(index, sae, ids)  # (n, 16, 32)
    flat = codes.reshape(-1, 32).numpy()
    assert stats.tokens == flat.shape[0] == len(ids) * 16 and stats.images == len(ids)
    fired = flat > 0
    np.testing.assert_allclose(stats.frequency, fired.mean(axis=0), rtol=1e-12)
    mean = np.where(fired.any(0), (flat * fired).sum(0) / np.maximum(fired.sum(0), 1), 0)
    np.testing.assert_allclose(stats.mean_activation, mean, rtol=1e-5)
    np.testing.assert_allclose(stats.max_activation, flat.max(axis=0), rtol=1e-6)
    for j in range(32):
        values = flat[:, j][fired[:, j]]
        expected, _ = np.histogram(np.clip(values, HISTOGRAM_EDGES[0], HISTOGRAM_EDGES[-1] * 0.999), HISTOGRAM_EDGES)
        np.testing.assert_array_equal(stats.histogram[j], expected)
        per_image = codes[:, :, j].max(dim=1)  # the brute-force sort of every image's largest code
        order = np.argsort(-per_image.values.numpy(), kind="stable")[:5]
        shown = per_image.values.numpy()[order]
        np.testing.assert_allclose(stats.top_values[j], np.where(shown > 0, shown, 0), rtol=1e-6)
        firing = shown > 0
        np.testing.assert_array_equal(stats.top_images[j][firing], ids[order][firing])
        np.testing.assert_array_equal(stats.top_patches[j][firing], per_image.indices.numpy()[order][firing])
        assert (stats.top_images[j][~firing] == -1).all()
    assert (stats.frequency > 0).sum() > 5  # the SAE's latents do fire: the comparison is not of zeros


def test_tables_are_written_once_and_read_back_for_the_same_index_only(tiny, tmp_path):
    _, index, folder = tiny
    sae = load_sae(folder)
    stats = latent_statistics(sae, index, readable_images(index), top=4)
    write_latent_tables(stats, tmp_path)
    latents, tops, about = read_latent_tables(tmp_path, index, 0)
    assert about["block"] == 0 and about["images"] == stats.images
    np.testing.assert_allclose(latents["frequency"], stats.frequency)
    np.testing.assert_array_equal(np.stack(latents["histogram"]), stats.histogram)
    j = int(np.argmax(stats.frequency))
    mine = tops[tops["latent"] == j].sort_values("rank")
    assert mine["image_id"].tolist() == [i for i in stats.top_images[j] if i >= 0]
    assert read_latent_tables(tmp_path, index, 2) is None  # another block: computed again
    assert read_latent_tables(tmp_path / "nothing", index) is None


def test_a_block_the_index_lacks_and_a_width_mismatch_are_named(tiny):
    _, index, _ = tiny
    with pytest.raises(SAEError, match="reads block 1, but .* only those of blocks \\[0, 2\\]"):
        check_block(index, TopKSAE(SAEConfig(d_in=32, latents=8, k=2, block=1)))
    with pytest.raises(SAEError, match="reads 16-wide tokens, but block 0 .* is 32 wide"):
        check_block(index, TopKSAE(SAEConfig(d_in=16, latents=8, k=2, block=0)))
    with pytest.raises(SAEError, match="names no block"):
        check_block(index, TopKSAE(SAEConfig(d_in=32, latents=8, k=2)))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_decoder_column_attribution_is_the_logit_change_with_the_norm_frozen(tmp_path, pooling):
    model = load_model(tiny_checkpoint(tmp_path / "model.pt", num_layers=3, pooling=pooling)).eval()
    torch.manual_seed(2)
    sae = TopKSAE(SAEConfig(d_in=32, latents=16, k=4, block=1))
    with torch.no_grad():
        sae.scale.fill_(1.7)
        pixels = torch.randn(2, 3, 32, 32)
        output = model(pixels, output_hidden_states=True)
    last = output.hidden_states[-1]  # (2, T, D)
    norm = model.norm
    frozen = (last.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # the norm's divisor, held fixed

    def logits_with_frozen_norm(tokens):
        centred = tokens - tokens.mean(dim=-1, keepdim=True)
        return model.head(model._pool(centred / frozen * norm.weight + norm.bias)[0])

    with torch.no_grad():
        torch.testing.assert_close(logits_with_frozen_norm(last), output.logits, rtol=1e-5, atol=1e-5)
        for latent, value in [(3, 1.0), (11, -2.5)]:
            column = value * sae.W_dec[latent] * sae.scale
            change = logits_with_frozen_norm(last + column) - output.logits  # (2, classes)
            effects = latent_logit_effects(model, sae, latent, last, value)
            torch.testing.assert_close(effects, change.mean(dim=0), rtol=1e-4, atol=1e-5)
            assert effects.abs().max() > 1e-3
    with pytest.raises(SAEError, match="latent 16 is out of range"):
        latent_logit_effects(model, sae, 16, last)


def test_one_photos_latents(tiny):
    model_path, index, folder = tiny
    sae = load_sae(folder)
    model = load_model(model_path)
    image_id = int(readable_images(index)[0])
    with torch.no_grad():
        pixels = torch.from_numpy(np.zeros((1, 3, 32, 32), np.float32))
        hidden = model(pixels, output_hidden_states=True).hidden_states[0][0]  # (T, D)
    codes = image_codes(sae, hidden, 1)
    torch.testing.assert_close(codes, sae.encode(hidden[1:]))
    stored = image_codes(sae, torch.from_numpy(index.activations(image_id, 0)[0]), 1)  # (16, 32)
    ranked = top_latents(stored, count=4)
    largest = stored.max(dim=0).values
    assert [j for j, _, _ in ranked] == torch.argsort(largest, descending=True, stable=True)[:4].tolist()
    assert all(
        value == pytest.approx(float(largest[j])) and n == int((stored[:, j] > 0).sum()) for j, value, n in ranked
    )
    patch = int(stored.sum(dim=1).argmax())
    listed = patch_latents(stored, patch)
    assert {j for j, _ in listed} == set(stored[patch].nonzero().flatten().tolist()) and len(listed) <= sae.config.k
    assert [v for _, v in listed] == sorted((v for _, v in listed), reverse=True)


def test_latents_found_by_the_labels_of_their_top_images_and_the_models_errors():
    tops = pd.DataFrame({"latent": [0, 0, 0, 1, 1, 2], "image_id": [10, 11, 12, 10, 13, 14]})
    images = pd.DataFrame(
        {
            "image_id": [10, 11, 12, 13, 14],
            "label": ["cat", "dog", "cat", "cat", None],
            "correct": [True, False, False, True, None],
        }
    )
    shares = top_image_shares(tops, images, "cat").set_index("latent")
    assert shares["top_images"].tolist() == [3, 2, 1]
    np.testing.assert_allclose(shares["label_share"], [2 / 3, 1.0, 0.0])
    np.testing.assert_allclose(shares["wrong_share"], [2 / 3, 0.0, 0.0])  # an image without a label counts as neither
    assert (top_image_shares(tops, images)["label_share"] == 0).all()


def test_the_latents_command_writes_the_tables_the_page_reads(tiny, tmp_path, capsys):
    _, index, folder = tiny
    copy = tmp_path / "sae"
    shutil.copytree(folder, copy)
    assert sae_main(["latents", str(index.folder), str(copy), "--top", "3", "--device", "cpu"]) == copy
    latents, tops, about = read_latent_tables(copy, index, 0)
    expected = latent_statistics(load_sae(folder), index, readable_images(index), top=3)
    np.testing.assert_allclose(latents["frequency"], expected.frequency)
    assert tops.groupby("latent")["rank"].max().max() == 2 and about["images"] == expected.images
    with pytest.raises(SystemExit):
        sae_main(["latents", str(index.folder), str(copy), "--block", "1"])
    assert "stores only those of blocks [0, 2]" in capsys.readouterr().err


def test_attention_to_the_patches_where_a_latent_fires_equals_a_loop():
    torch.manual_seed(0)
    attentions = [torch.rand(2, 3, 5, 5).softmax(dim=-1) for _ in range(4)]  # 4 blocks, 3 heads, 1 prefix + 4 patches
    codes = torch.tensor([[0.0, 1.5, 0.0, 2.0], [0.3, 0.0, 0.0, 0.0]])
    shares = attention_to_firing_patches(attentions, codes, 1, 1)
    assert shares.shape == (2, 3)
    for later, block in enumerate((2, 3)):
        for head in range(3):
            per_image = []
            for b in range(2):
                keys = [1 + p for p in range(4) if codes[b, p] > 0]
                per_image += [float(attentions[block][b, head, q, keys].sum()) for q in range(5)]
            assert float(shares[later, head]) == pytest.approx(np.mean(per_image), rel=1e-6)
    assert attention_to_firing_patches(attentions, codes, 3, 1).shape == (0, 3)  # the last block: none after it
