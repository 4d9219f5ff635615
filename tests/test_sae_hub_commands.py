"""`vitviz sae latents`, `ablate` and `calibrate` with SAEs in other libraries' formats (SAELens, ViT-Prisma, saev) and
from a pre-filled Hub cache, over a tiny index: the tables against a direct encoding of the stored tokens, the
width, block and model checks, and the input scaling saev's files lack, estimated, stored beside the SAE, applied."""

import json
import math
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from dataset_harness import tiny_index
from hub_cache import cached_snapshot, offline_cache
from sae_format_files import prisma_case, prisma_cfg, saelens_case, saelens_cfg, weights, write_saev
from tiny_models import one_torch_thread

import vitviz
import vitviz.loading.download
from vitviz.commands.sae import main as sae_main
from vitviz.sae import load_sae, save_sae, scaling
from vitviz.sae.browse import LATENTS_FILE
from vitviz.sae.indexed import readable_images

D, N = 32, 64  # the tiny model's width; latents
SCHEMA5 = {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "TopK", "params": {"top_k": 4}}}}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A 3-block tiny model's index storing blocks 2 and 0 (width 32), its images labelled by folder."""
    root = tmp_path_factory.mktemp("sae-hub-commands")
    model, out = tiny_index(root)
    return out


def stored_patches(index_folder, block) -> torch.Tensor:
    """(images, patches, D) every readable image's stored patch tokens of ``block``, in float32."""
    opened = vitviz.open_index(index_folder)
    skip = opened.manifest["activations"]["prefix_tokens"]
    rows = [opened.activations(int(i), block)[0][skip:] for i in readable_images(opened)]
    return torch.from_numpy(np.stack(rows).astype(np.float32))


def saelens(folder, d=D, block=0, model="vit-b"):
    cfg = saelens_cfg("topk", k=4) | {"d_in": d, "d_sae": N}
    cfg["metadata"] = cfg["metadata"] | {"hook_name": f"blocks.{block}.hook_resid_post", "model_name": model}
    return saelens_case(cfg, d=d, n=N)(folder)


def frequencies(reference_codes: torch.Tensor) -> np.ndarray:
    return (reference_codes > 0).float().mean(dim=(0, 1)).numpy()


def test_latents_reads_saelens_prisma_and_saev_files_and_warns_of_another_model(index, tmp_path, capsys):
    cases = {
        "saelens": saelens(tmp_path / "lens", model="vit-b")[0],
        "prisma": prisma_case(prisma_cfg(d_in=D, expansion_factor=N // D, hook_point_layer=2), d=D)(tmp_path / "p")[0],
        "saev": write_saev(tmp_path / "dino" / "layer_2" / "run1" / "sae.pt", SCHEMA5, weights(1, D, N)),
    }
    for name, spec in cases.items():
        sae = load_sae(spec)
        block = {"saelens": 0, "prisma": 2, "saev": 2}[name]
        assert sae.block_for(3) == block
        written = sae_main(["latents", str(index), str(spec), "--top", "3"])
        assert written == (spec if spec.is_dir() else spec.parent)
        table = pq.read_table(written / LATENTS_FILE).to_pandas()
        expected = frequencies(sae.encode(stored_patches(index, block)))
        np.testing.assert_allclose(table["frequency"].to_numpy(), expected, atol=1e-6, err_msg=name)
        assert expected.any(), name  # the check means something: latents fire
        err = capsys.readouterr().err
        if name == "saelens":  # the file names vit-b; the index's model is a checkpoint: both named
            assert re.search(r"warning: the SAE was trained on vit-b; this model is .*model\.pt", err), err
        if name == "saev":
            assert "vitviz sae calibrate" in err  # its missing scaling said, with the way out


def test_width_block_and_format_refusals_are_one_line(index, tmp_path, capsys):
    def refused(argv, pattern):
        with pytest.raises(SystemExit) as exit_:
            sae_main(argv)
        assert exit_.value.code == 2
        err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("warning: ")]
        assert len(err) == 1 and re.search(pattern, err[0]), err

    narrow = saelens(tmp_path / "narrow", d=16)[0]
    refused(["latents", str(index), str(narrow)], r"reads 16-wide tokens, but block 0 of this model is 32 wide")
    refused(["ablate", str(index), str(narrow), "--latent", "0"], r"reads 16-wide tokens.*32 wide")
    legacy = write_saev(tmp_path / "legacy" / "sae.pt", {"d_vit": D, "exp_factor": 2}, weights(1, D, N))
    # saev's legacy files read layer -2: block 1 of this 3-block model, which the index does not store
    refused(["latents", str(index), str(legacy)], r"reads block 1, but .* stores only those of blocks \[0, 2\]")
    far = saelens(tmp_path / "far", block=7)[0]
    refused(["ablate", str(index), str(far), "--latent", "0"], r"reads block 7, which a model of 3 blocks does not")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "config.json").write_text('{"x": 1}')
    refused(["latents", str(index), str(tmp_path / "junk")], r"is not an SAE vitviz reads")
    refused(["latents", str(index), "hf:no-such-thing"], r"is not an SAE on the Hub")


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    return offline_cache(tmp_path / "hub", monkeypatch)


def test_hub_specs_for_latents_and_ablate(index, offline_hub, capsys):
    snapshot = cached_snapshot(offline_hub, "someone/vit-saes")
    saelens(snapshot / "blocks.0.hook_resid_post", model=None)
    spec = "hf:someone/vit-saes/blocks.0.hook_resid_post"
    written = sae_main(["latents", str(index), spec])
    assert written == snapshot / "blocks.0.hook_resid_post" and (written / LATENTS_FILE).is_file()
    path = sae_main(["ablate", str(index), spec, "--latent", "3", "--set-to-max", "-2", "--limit", "6"])
    table = pq.read_table(path).to_pylist()
    assert sum(row["images"] for row in table) == 6 and {row["block"] for row in table} == {0}
    assert json.loads(pq.read_schema(path).metadata[b"vitviz"])["sae"] == spec
    assert "warning" not in capsys.readouterr().err  # no model named in the file: nothing to warn of


# --- the input scaling saev's files lack ---------------------------------------------------------------------------


def test_a_planted_scaling_is_recovered():
    """Tokens made as mean + s * z, z centred with mean norm sqrt(d) exactly: estimate gives mean and s back."""
    g = np.random.default_rng(0)
    d, mu, s = 24, g.normal(size=24) * 3, 7.5
    z = g.normal(size=(5000, d))
    z -= z.mean(axis=0)
    z *= math.sqrt(d) / np.linalg.norm(z, axis=1).mean()
    tokens = mu + s * z
    mean, scale, count = scaling.estimate(lambda: iter(np.array_split(tokens.astype(np.float32), 7)))
    assert count == 5000
    np.testing.assert_allclose(mean, mu, atol=1e-4)
    assert scale == pytest.approx(s, rel=1e-5)


def test_calibrate_recovers_a_scaling_planted_in_an_index(index, tmp_path):
    """An index whose stored block-2 patch tokens are rewritten as mean + s * z (z centred, mean norm sqrt(d));
    its prefix tokens and the unreadable image's rows set far off: they must not count."""
    planted = tmp_path / "planted"
    shutil.copytree(index, planted)
    opened = vitviz.open_index(planted)
    readable = np.zeros(opened.count, dtype=bool)
    readable[readable_images(opened)] = True
    skip, tokens = opened.manifest["activations"]["prefix_tokens"], opened.manifest["activations"]["tokens"]
    g = np.random.default_rng(1)
    mu, s = g.normal(size=D) * 2, 3.25
    z = g.normal(size=(int(readable.sum()) * (tokens - skip), D))
    z -= z.mean(axis=0)
    z *= math.sqrt(D) / np.linalg.norm(z, axis=1).mean()
    values = iter((mu + s * z).reshape(-1, tokens - skip, D))
    for shard, _ in opened.activation_shards(2):
        stored = np.load(planted / "shards" / shard["name"] / shard["activations"]["2"], mmap_mode="r+")
        for row in range(shard["count"]):
            stored[row] = 500.0  # prefix tokens, and every token of an unreadable image
            if readable[shard["start"] + row]:
                stored[row, skip:] = next(values)
        stored.flush()
    spec = write_saev(tmp_path / "d" / "layer_2" / "r" / "sae.pt", SCHEMA5, weights(1, D, N))
    stored = json.loads(sae_main(["calibrate", str(planted), str(spec)]).read_text())
    np.testing.assert_allclose(stored["mean"], mu, atol=2e-3)
    assert stored["scale"] == pytest.approx(s, rel=1e-3)


def test_calibrate_writes_an_estimated_scaling_that_load_sae_and_the_commands_apply(index, tmp_path, capsys):
    spec = write_saev(tmp_path / "dino" / "layer_2" / "run1" / "sae.pt", SCHEMA5, weights(1, D, N))
    with pytest.warns(UserWarning, match="sae.pt does not store"):
        plain = load_sae(spec)
    out = sae_main(["calibrate", str(index), str(spec)])
    assert out == spec.parent / scaling.SCALING_FILE
    stored = json.loads(out.read_text())
    patches = stored_patches(index, 2).reshape(-1, D).double()
    mu = patches.mean(dim=0)
    s = float((patches - mu).norm(dim=1).mean()) / math.sqrt(D)
    assert stored["estimated"] is True and stored["index"] == str(vitviz.open_index(index).folder)
    assert (stored["block"], stored["tokens"], stored["token_count"]) == (2, "patches", len(patches))
    np.testing.assert_allclose(stored["mean"], mu.numpy(), atol=1e-5)
    assert stored["scale"] == pytest.approx(s, rel=1e-6)
    assert "estimated" in capsys.readouterr().out

    with pytest.warns(UserWarning, match=r"input scaling estimated from .*index.*not the one the SAE was trained"):
        scaled = load_sae(spec)
    assert scaled.scaling_missing is None
    x = torch.randn(2, 5, D) * 3
    mean, factor = torch.tensor(stored["mean"], dtype=torch.float32), stored["scale"]
    torch.testing.assert_close(scaled.encode(x), plain.encode((x - mean) / factor))
    torch.testing.assert_close(scaled.reconstruct(x), plain.reconstruct((x - mean) / factor) * factor + mean)
    codes, latents = scaled.encode(x), torch.tensor([3, 7])
    delta = torch.randn(2, 5, 2)
    edited = codes.clone()
    edited[..., latents] += delta
    torch.testing.assert_close(  # what with_sae adds: the edit's change in the model's units
        scaled.decoded_change(delta, latents, x), scaled.decode(edited) - scaled.decode(codes), atol=1e-4, rtol=1e-4
    )

    with pytest.raises(vitviz.sae.SAEError, match="an input scaling set beside its file"):
        save_sae(scaled, tmp_path / "export", format="saelens")  # SAELens's layout has no place for it
    sae_main(["latents", str(index), str(spec)])  # the commands apply it and say so
    assert re.search(r"warning: .*input scaling estimated from", capsys.readouterr().err)
    table = pq.read_table(spec.parent / LATENTS_FILE).to_pandas()
    np.testing.assert_allclose(table["frequency"], frequencies(scaled.encode(stored_patches(index, 2))), atol=1e-6)

    elsewhere = sae_main(["calibrate", str(index), str(spec), "--out", str(tmp_path / "mine.json")])
    out.unlink()
    with pytest.warns(UserWarning, match="estimated"):
        again = load_sae(spec, scaling=elsewhere)
    torch.testing.assert_close(again.encode(x), scaled.encode(x))


def test_calibrate_refuses_an_sae_that_has_its_scaling_and_a_bad_file(index, tmp_path, capsys):
    lens = saelens(tmp_path / "lens")[0]
    with pytest.raises(SystemExit):
        sae_main(["calibrate", str(index), str(lens)])
    assert "nothing to calibrate" in capsys.readouterr().err
    spec = write_saev(tmp_path / "s" / "layer_2" / "r" / "sae.pt", SCHEMA5, weights(1, D, N))
    (spec.parent / scaling.SCALING_FILE).write_text(json.dumps({"format": scaling.FORMAT, "mean": [0] * 3, "scale": 1}))
    with pytest.raises(vitviz.sae.SAEError, match="its mean must be 32 finite numbers"):
        load_sae(spec)
