"""Checkpoints and load_model: round trips, safety, clear errors, offline behaviour."""

import os
import pickle
import random
import socket
import threading
import time
import urllib.error
from pathlib import Path

import pytest
import torch
import torchvision
from hostile_models import CreatesAFile
from PIL import Image

import vitviz.loading.specs
from vitviz import ModelLoadError, Preprocessing, ViT, ViTConfig, load_model, save_checkpoint
from vitviz.loading.checkpoint import read_checkpoint

CONFIG = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64, num_classes=3)
NAMES = ["cat", "dog", "bird"]
PREP = Preprocessing(resize=32, crop=32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


def saved_checkpoint(path: Path, half: bool = False) -> ViT:
    torch.manual_seed(0)
    model = ViT(ViTConfig(**CONFIG)).eval()
    with torch.no_grad():
        model.head.weight.normal_()
    save_checkpoint(path, model, NAMES, PREP, training={"epochs": 1}, half=half)
    return model


def test_checkpoint_round_trip_predicts_identically(tmp_path):
    original = saved_checkpoint(tmp_path / "model.pt")
    loaded = load_model(tmp_path / "model.pt")
    assert not loaded.training
    assert loaded.class_names == NAMES and loaded.transform == PREP
    assert loaded.training_info == {"epochs": 1}
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images).logits, original(images).logits, atol=0, rtol=0)
    image = Image.new("RGB", (50, 40), (200, 10, 30))
    assert loaded.transform(image).shape == (3, 32, 32)


def test_half_precision_checkpoint_is_smaller_and_close(tmp_path):
    original = saved_checkpoint(tmp_path / "full.pt")
    saved_checkpoint(tmp_path / "half.pt", half=True)
    assert (tmp_path / "half.pt").stat().st_size < 0.7 * (tmp_path / "full.pt").stat().st_size
    loaded = load_model(str(tmp_path / "half.pt"))
    assert next(loaded.parameters()).dtype == torch.float32
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images).logits, original(images).logits, atol=2e-2, rtol=0)


def test_default_model_missing_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", tmp_path / "default.pt")
    with pytest.raises(ModelLoadError, match="no default checkpoint.*`vitviz train`"):
        load_model("default")
    saved_checkpoint(tmp_path / "default.pt")
    assert load_model("default").class_names == NAMES


def test_unknown_spec_lists_the_accepted_forms():
    with pytest.raises(ModelLoadError, match="torchvision:<arch>.*checkpoint file.*Hugging Face"):
        load_model("no/such/model.pt")


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "not a readable PyTorch file"),
        (b"this is text, not a checkpoint", "not a readable PyTorch file"),
        (random.Random(0).randbytes(2000), "not a readable PyTorch file"),
        # random bytes that happen to start with pickle's PROTO opcode (1 in 256 draws above once failed CI)
        (b"\x80\xbb" + bytes(range(256)) * 4, "not a readable PyTorch file"),
        (b"\x80\x04" + bytes(reversed(range(256))) * 4, "not a readable PyTorch file"),
    ],
)
def test_corrupt_files_are_named(tmp_path, content, message):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        load_model(path)


def test_truncated_checkpoint_is_refused(tmp_path):
    saved_checkpoint(tmp_path / "model.pt")
    data = (tmp_path / "model.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="corrupt or truncated"):
        load_model(tmp_path / "cut.pt")


def test_plain_state_dict_is_not_mistaken_for_a_checkpoint(tmp_path):
    torch.save(ViT(ViTConfig(**CONFIG)).state_dict(), tmp_path / "weights.pt")
    with pytest.raises(ModelLoadError, match="not a vitviz checkpoint"):
        load_model(tmp_path / "weights.pt")


def test_mismatched_config_and_weights_are_named(tmp_path):
    saved_checkpoint(tmp_path / "model.pt")
    checkpoint = read_checkpoint(tmp_path / "model.pt")
    checkpoint["config"]["mlp_size"] = 128
    del checkpoint["state_dict"]["norm.bias"]
    torch.save(checkpoint, tmp_path / "mismatch.pt")
    with pytest.raises(
        ModelLoadError,
        match=r"missing weights norm.bias.*shape mismatches blocks.0.mlp.fc1.bias: "
        r"\(64,\) in file, \(128,\) expected",
    ):
        load_model(tmp_path / "mismatch.pt")
    checkpoint["config"]["depth"] = 3
    torch.save(checkpoint, tmp_path / "unknown.pt")
    with pytest.raises(ModelLoadError, match="unknown ViTConfig fields"):
        load_model(tmp_path / "unknown.pt")


def test_malicious_pickle_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"format": "vitviz-checkpoint", "payload": CreatesAFile(marker)}, f)
    torch.save({"format": "vitviz-checkpoint", "payload": CreatesAFile(marker)}, tmp_path / "evil_zip.pt")
    for name in ("evil.pt", "evil_zip.pt"):
        with pytest.raises(ModelLoadError, match="could run code"):
            load_model(tmp_path / name)
    assert not marker.exists()


def test_torchvision_specs_are_validated():
    with pytest.raises(ModelLoadError, match="unknown torchvision ViT 'vit_x_99'.*vit_b_16"):
        load_model("torchvision:vit_x_99")
    with pytest.raises(ModelLoadError, match="no weights 'NOPE'.*IMAGENET1K_V1"):
        load_model("torchvision:vit_b_16:NOPE")


def test_torchvision_offline_fails_fast_with_a_message(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(vitviz.loading.download.urllib.request, "urlopen", no_network)
    with pytest.raises(ModelLoadError, match="could not download .*offline"):
        load_model("torchvision:vit_b_32")
    assert not list(tmp_path.rglob("*.pth*"))  # nothing half-written left in the cache


def test_download_from_a_silent_server_times_out(tmp_path):
    # a server that accepts the connection and never answers: the worst case for a hang
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match="could not download"):
        vitviz.loading.download.download(
            f"http://127.0.0.1:{server.getsockname()[1]}/w.pth", tmp_path / "w.pth", timeout=1
        )
    assert time.monotonic() - start < 10
    server.close()


def test_torchvision_weights_from_the_cache_need_no_network(tmp_path, monkeypatch):
    weights = torchvision.models.ViT_B_32_Weights.IMAGENET1K_V1
    torch.manual_seed(0)
    reference = torchvision.models.vit_b_32().eval()
    torch.nn.init.normal_(reference.heads.head.weight, std=0.05)
    (tmp_path / "checkpoints").mkdir()
    torch.save(reference.state_dict(), tmp_path / "checkpoints" / os.path.basename(weights.url))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(vitviz.loading.download.urllib.request, "urlopen", lambda *a, **k: pytest.fail("network used"))

    model = load_model("torchvision:vit_b_32:IMAGENET1K_V1")
    assert model.class_names == weights.meta["categories"] and len(model.class_names) == 1000
    image = Image.effect_mandelbrot((300, 260), (-2, -1.2, 1, 1.2), 50).convert("RGB")
    pixels = model.transform(image)
    torch.testing.assert_close(pixels, weights.transforms()(image))
    with torch.no_grad():
        expected = reference(pixels[None])
        assert (model(pixels[None]).logits - expected).abs().max() <= 1e-4


def test_a_tiny_file_asking_for_a_gigantic_model_is_refused_without_allocating(tmp_path):
    saved_checkpoint(tmp_path / "model.pt")
    checkpoint = read_checkpoint(tmp_path / "model.pt")
    checkpoint["config"]["mlp_size"] = 10**9  # would be 130 billion parameters: 520 GB in fp32
    torch.save(checkpoint, tmp_path / "huge.pt")
    with pytest.raises(ModelLoadError, match=r"130,000,015,683 parameters: 520.0 GB in fp32, more than the .* GB"):
        load_model(tmp_path / "huge.pt")
    checkpoint["config"]["mlp_size"] = 128  # fits, but not these weights
    torch.save(checkpoint, tmp_path / "other.pt")
    with pytest.raises(ModelLoadError, match="shape mismatches"):
        load_model(tmp_path / "other.pt")
    checkpoint["state_dict"]["norm.bias"] = "not a tensor"
    checkpoint["config"]["mlp_size"] = 64
    torch.save(checkpoint, tmp_path / "odd.pt")
    with pytest.raises(ModelLoadError, match="not tensors: norm.bias"):
        load_model(tmp_path / "odd.pt")


def test_the_shipped_default_checkpoint_loads_offline_and_predicts():
    model = load_model("default")  # checkpoints/default.pt is part of the repository
    assert model.class_names == [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ]
    assert model.config.grid_size == (8, 8) and model.training_info["epoch"] == 6  # of the eighth stage
    assert model.training_info["metrics"]["val_top1"] > 0.815  # what the model card reports (81.5 %)
    size = (vitviz.loading.specs.DEFAULT_CHECKPOINT.stat().st_size) / 2**20
    assert size <= 25
    # a trained model is confident and consistent on a simple picture; a random one gives about 10 % to each class
    sky = Image.new("RGB", (32, 32), (120, 170, 230))
    sky.paste((200, 200, 205), (8, 14, 24, 18))  # a grey "plane" on blue sky
    with torch.no_grad():
        probabilities = model(model.transform(sky)[None]).logits.softmax(-1)[0]
    assert model.class_names[int(probabilities.argmax())] == "airplane" and probabilities.max() > 0.5
