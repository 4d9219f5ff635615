"""SAE files: vitviz's safetensors + config.json, saev's sae.pt and ViT-Prisma's config.json + .pt, each written here
in that format and loaded back to the same encode/decode; unknown formats and widths refused."""

import io
import json

import pytest
import torch

from vitviz.sae import SAEConfig, SAEError, SAEFormatError, TopKSAE, load_sae, save_sae

D, N = 12, 48


def random_tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "W_enc": torch.randn(D, N, generator=g),
        "b_enc": torch.randn(N, generator=g),
        "W_dec": torch.randn(N, D, generator=g),
        "b_dec": torch.randn(D, generator=g),
    }


def topk(pre, k):
    values, indices = pre.relu().topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, values)


def test_vitviz_round_trip(tmp_path):
    torch.manual_seed(0)
    sae = TopKSAE(SAEConfig(d_in=D, latents=N, k=4, block=3))
    with torch.no_grad():
        for tensor in sae.state_dict().values():
            tensor.normal_()
        sae.scale.fill_(1.7)
    save_sae(sae, tmp_path / "run", model="default", training={"seconds": 1.0})
    header = json.loads((tmp_path / "run" / "config.json").read_text())
    assert header["format"] == "vitviz-sae" and header["version"] == 1 and header["model"] == "default"
    assert set(header["config"]) == {"d_in", "latents", "k", "aux_k", "activation", "pre_encoder_bias", "block"}
    x = torch.randn(5, D)
    for path in (tmp_path / "run", tmp_path / "run" / "sae.safetensors", tmp_path / "run" / "config.json"):
        loaded = load_sae(path)
        assert loaded.config == sae.config
        with torch.no_grad():
            torch.testing.assert_close(loaded.encode(x), sae.encode(x))
            torch.testing.assert_close(loaded.decode(loaded.encode(x)), sae(x))


def write_saev(path, header, state):
    with open(path, "wb") as f:
        f.write((json.dumps(header) + "\n").encode())
        buffer = io.BytesIO()
        torch.save(state, buffer)
        f.write(buffer.getvalue())


@pytest.mark.parametrize("schema", ["legacy", 1, 2])
def test_saev_sae_pt(tmp_path, schema):
    state = random_tensors()
    if schema == "legacy":  # the first files (the published CLIP and DINOv2 SAEs): the config itself, ReLU
        header = {"d_vit": D, "exp_factor": N // D, "n_reinit_samples": 10, "seed": 0}
    elif schema == 1:
        header = {"schema": 1, "cls": "TopK", "cfg": {"d_vit": D, "exp_factor": N // D, "top_k": 5}}
    else:
        header = {
            "schema": 2,
            "cfg": {"d_vit": D, "exp_factor": N // D, "activation": {"cls": "TopK", "params": {"top_k": 5}}},
            "commit": "abc",
            "lib": "1.0",
        }
    (tmp_path / "clip").mkdir()
    write_saev(tmp_path / "clip" / "sae.pt", header, state)
    x = torch.randn(6, D)
    if schema == "legacy":  # saev's old forward: ReLU((x - b_dec) W_enc + b_enc)
        expected = ((x - state["b_dec"]) @ state["W_enc"] + state["b_enc"]).relu()
    elif schema == 1:  # schema-1 files were trained with the b_dec subtraction too (saev dropped it with schema 2)
        expected = topk((x - state["b_dec"]) @ state["W_enc"] + state["b_enc"], 5)
    else:  # saev's encode: TopK(x W_enc + b_enc)
        expected = topk(x @ state["W_enc"] + state["b_enc"], 5)
    for path in (tmp_path / "clip", tmp_path / "clip" / "sae.pt"):
        with pytest.warns(UserWarning, match="sae.pt does not store"):  # saev's input scaling is not in the file
            sae = load_sae(path)
        with torch.no_grad():
            torch.testing.assert_close(sae.encode(x), expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(
                sae.decode(expected), expected @ state["W_dec"] + state["b_dec"], atol=1e-5, rtol=1e-5
            )


@pytest.mark.parametrize("activation", ["relu", "topk"])
def test_vit_prisma_folder(tmp_path, activation):
    state = random_tensors(1)
    config = {
        "d_in": D,
        "d_sae": N,
        "expansion_factor": N // D,
        "activation_fn_str": activation,
        "hook_point_layer": 9,
        "activation_fn_kwargs": {"k": 3} if activation == "topk" else {},
        "normalize_activations": "none",
        "layer_subtype": "hook_resid_post",
        "model_name": "open-clip:laion/CLIP-ViT-B-32-DataComp.XL-s13B-b90K",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch.save(state, tmp_path / "n_images_2600058.pt")
    sae = load_sae(tmp_path)
    assert sae.config.block == 9
    x = torch.randn(4, D)
    pre = (x - state["b_dec"]) @ state["W_enc"] + state["b_enc"]
    expected = pre.relu() if activation == "relu" else topk(pre, 3)
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(x), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            sae.decode(expected), expected @ state["W_dec"] + state["b_dec"], atol=1e-5, rtol=1e-5
        )
    config["normalize_activations"] = "layer_norm"  # each token standardised by its own statistics, undone after
    (tmp_path / "config.json").write_text(json.dumps(config))
    sae = load_sae(tmp_path)
    mean, std = x.mean(-1, keepdim=True), (x - x.mean(-1, keepdim=True)).std(-1, keepdim=True)
    pre = ((x - mean) / (std + 1e-5) - state["b_dec"]) @ state["W_enc"] + state["b_enc"]
    expected = pre.relu() if activation == "relu" else topk(pre, 3)
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(x), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            sae.reconstruct(x), (expected @ state["W_dec"] + state["b_dec"]) * std + mean, atol=1e-5, rtol=1e-5
        )
        with pytest.raises(SAEError, match="decoder needs the input tokens"):
            sae.decode(expected)


def test_unknown_formats_and_widths(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SAEFormatError, match="is not an SAE vitviz reads"):
        load_sae(tmp_path / "notes.txt")
    with pytest.raises(SAEFormatError, match="does not exist"):
        load_sae(tmp_path / "missing")
    torch.save(random_tensors(), tmp_path / "weights.pt")  # a bare state dict says nothing of its config
    with pytest.raises(SAEFormatError, match="is not an SAE vitviz reads"):
        load_sae(tmp_path / "weights.pt")
    sae = TopKSAE(SAEConfig(d_in=D, latents=N, k=4))
    save_sae(sae, tmp_path / "run")
    with pytest.raises(SAEError, match="reads 12-wide activations, not 192"):
        load_sae(tmp_path / "run", d_in=192)
    header = json.loads((tmp_path / "run" / "config.json").read_text())
    header["config"]["latents"] = 50
    (tmp_path / "run" / "config.json").write_text(json.dumps(header))
    with pytest.raises(SAEFormatError, match=r"is \(\d+, \d+\), but its config says \((12, 50|50, 12)\)"):
        load_sae(tmp_path / "run")
