"""Hostile model files and specs (issue 29), part two: counts and sizes read from a file's header before its tensors
or pickle (safetensors, shard indexes, torch zips, 10 MB pickles, a zip whose pickle inflates to 1 GiB), paths and
specs (~user, names too long, echoes cut), HF_HUB_OFFLINE, truncated or foreign files in caches, hostile open_clip
configs. Each is refused with one line, a ModelLoadError; each test shows why it is fast (torch.load, safe_open,
open_clip.create_model... never called) instead of timing it. Nothing is downloaded: files are written here and the
network is simulated away (test_load_hub's ``offline``). Part one: tests/test_hostile_models.py."""

import json
import os
import pickle
import socket
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch
from hostile_models import CreatesAFile, forbid, hf_vit_folder, refusal
from hub_cache import TIMM_NAME, cached_snapshot
from huggingface_hub import constants
from safetensors.torch import save_file
from tiny_models import TINY_CFG

import vitviz
import vitviz.loading.checkpoint
import vitviz.loading.sources.weights_files

# --- files: counts and sizes from their headers before their tensors or pickles are read ---------------------------


def safetensors_header_only(path: Path, count: int) -> None:
    """A safetensors file of ``count`` empty tensors, written as its header (save_file takes seconds for 300,000)."""
    entry = '"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    data = ("{" + ",".join(entry % i for i in range(count)) + "}").encode()
    path.write_bytes(len(data).to_bytes(8, "little") + data)


def test_a_safetensors_file_of_300000_tensors_is_refused_from_its_header(tmp_path, monkeypatch):
    folder = hf_vit_folder(tmp_path / "model")
    safetensors_header_only(folder / "model.safetensors", 300_000)
    opened = forbid(monkeypatch, vitviz.loading.sources.weights_files, "safe_open")
    refusal(
        folder,
        r"model\.safetensors's header takes [\d.]+ MB, room for far more than the 128 tensors its model "
        "may have: it was not read",
    )
    assert not opened


def test_a_safetensors_file_of_more_tensors_than_its_model_has_is_not_read(tmp_path):
    folder = hf_vit_folder(tmp_path / "model")
    safetensors_header_only(folder / "model.safetensors", 129)
    refusal(folder, r"holds 129 tensors, more than the 128 its model may have: they were not read")


def test_a_shard_index_mapping_300000_weights_is_refused_before_any_shard_is_read(tmp_path, monkeypatch):
    folder = hf_vit_folder(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    index = {"weight_map": {f"w{i}": f"shard-{i}.safetensors" for i in range(300_000)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    opened = forbid(monkeypatch, vitviz.loading.sources.weights_files, "safe_open")
    refusal(folder, r"index\.json maps 300,000 weights, more than the 128 its model may have: no shard was read")
    assert not opened


def test_shards_count_together(tmp_path):
    folder = hf_vit_folder(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    index = {"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    safetensors_header_only(folder / "one.safetensors", 100)
    safetensors_header_only(folder / "two.safetensors", 100)
    refusal(folder, "two.safetensors holds 100 tensors, more than the 28 its model may have")


def test_a_pytorch_model_bin_of_more_tensors_than_its_model_has_is_refused_from_its_zip(tmp_path, monkeypatch):
    folder = hf_vit_folder(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    torch.save({f"t{i}": torch.zeros(1) for i in range(1000)}, folder / "pytorch_model.bin")
    loads = forbid(monkeypatch, torch, "load")
    refusal(
        folder,
        r"pytorch_model\.bin is a zip of 1,00\d members, more than the 128 tensors a model's weights may "
        "have here: it was not read",
    )
    assert not loads


def test_a_malicious_pytorch_model_bin_gets_one_line_of_vitviz(tmp_path):
    marker = tmp_path / "pwned"
    folder = hf_vit_folder(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    torch.save({"weight": CreatesAFile(marker)}, folder / "pytorch_model.bin")
    message = refusal(
        folder,
        r"pytorch_model\.bin holds objects other than tensors and plain data, so it was not "
        r"opened \(loading it could run code\)\. It asks for posix\.system\.$",
    )
    assert "WeightsUnpickler" not in message and "add_safe_globals" not in message
    assert not marker.exists()


@pytest.mark.parametrize("form", ["bare", "zip"])
def test_a_10_mb_pickle_is_refused_after_a_bounded_scan(tmp_path, monkeypatch, form):
    """Disassembled whole, it took 8 s; torch's safe unpickler takes 4 s on it. The scan stops at 200,000 opcodes."""
    content = {"format": "vitviz-checkpoint", "junk": list(range(2_200_000)), "payload": CreatesAFile(tmp_path / "x")}
    path = tmp_path / "big.pt"
    if form == "bare":
        path.write_bytes(pickle.dumps(content, protocol=2))
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("big/data.pkl", pickle.dumps(content, protocol=2))
    assert path.stat().st_size > 10**7
    loads, disassembled = (
        forbid(monkeypatch, torch, "load"),
        forbid(monkeypatch, vitviz.loading.checkpoint.pickletools, "dis"),
    )
    refusal(path, "holds a pickle of more than 200,000 opcodes, far more than a model's weights need")
    assert not loads and not disassembled


def test_a_zip_whose_pickle_inflates_beyond_the_limit_is_refused_before_decompressing(tmp_path, monkeypatch):
    """The corpus's data.pkl inflated to 1 GiB and was decompressed twice (5 s); here, the limit scaled down."""
    monkeypatch.setattr(vitviz.loading.checkpoint, "MAX_PICKLE_BYTES", 2**20)
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb/data.pkl", b"\x80\x02" + b"N" * (4 * 2**20) + b".")
    assert path.stat().st_size < 2**16
    loads = forbid(monkeypatch, torch, "load")
    inflated = forbid(monkeypatch, zipfile, "_get_decompressor")
    refusal(path, r"bomb\.pt's pickle \(bomb/data\.pkl\) takes 4 MB unpacked, more than the 1 MB a model's may")
    assert not loads and not inflated


def test_a_zip_of_too_many_members_is_refused_from_its_end_record(tmp_path, monkeypatch):
    """zipfile reads every member's entry when it opens a zip (6 s for 300,000): the count comes from the end record,
    here the zip64 one, as in a zip of more than 65,535 members."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 100)  # zip64 records from 100 members on
    path = tmp_path / "many.pt"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(6000):
            archive.writestr(f"many/data/{i}", b"")
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = b"\xff" * 4  # the counts a zip of more than 65,535 members has: see the zip64 record
    path.write_bytes(bytes(data))
    opened = forbid(monkeypatch, zipfile, "ZipFile")
    refusal(path, "many.pt is a zip of 6,000 members, more than the 5,000 tensors")
    assert not opened


def test_random_bytes_and_a_real_pickle_are_still_told_apart_by_a_bounded_disassembly(tmp_path):
    long_pickle = {
        "format": "vitviz-checkpoint",
        "names": [f"class {i}" for i in range(20_000)],
        "payload": CreatesAFile(tmp_path / "x"),
    }
    (tmp_path / "evil.pt").write_bytes(pickle.dumps(long_pickle, protocol=2))  # longer than the 64 kB disassembled
    refusal(tmp_path / "evil.pt", r"could run code\)\. It asks for posix\.system")
    (tmp_path / "noise.pt").write_bytes(b"\x80\x02" + bytes(range(256)) * 400)
    refusal(tmp_path / "noise.pt", "not a readable PyTorch file")


# --- paths and specs ------------------------------------------------------------------------------------------------


def test_a_path_of_an_unknown_user_is_a_message():
    refusal(
        "~no_such_user_of_vitviz/model.pt",
        "not found: '~no_such_user_of_vitviz' names the home folder of a user this machine does not have",
    )


def test_a_file_name_too_long_is_a_message_and_a_long_spec_is_cut():
    message = refusal("x" * 10_000, r"model 'xxx.*\.\.\. \(10,002 characters\) cannot be opened: File name too long")
    assert len(message) < 400
    for prefix in ("hf:", "a/", "timm:", "torchvision:", "open_clip:", "open_clip:hf-hub:o/", "torchvision:vit_b_16:"):
        spec = prefix + "n" * 10_000
        assert len(refusal(spec, r"\(1\d,\d\d\d characters\)")) < 700, spec


def test_hf_hub_offline_is_honoured_before_any_network_probe(tmp_path, monkeypatch):
    """An endpoint that accepts connections and never answers cost 3-6 s a spec; with HF_HUB_OFFLINE set, nothing
    is asked of it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for spec in ("hf:org/model", "open_clip:hf-hub:org/model", f"timm:{TIMM_NAME}"):
        refusal(spec, "HF_HUB_OFFLINE is set and .* is not in the cache")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after huggingface_hub was imported: read at the call
    refusal("hf:org/model", "HF_HUB_OFFLINE is set")
    time.sleep(0.1)
    assert not accepted
    server.close()


# --- caches: a truncated or foreign file is a message ---------------------------------------------------------------


def test_a_truncated_or_foreign_file_in_the_timm_cache_is_a_message(offline):
    snapshot = cached_snapshot(offline, f"timm/{TIMM_NAME}")
    save_file({"w": torch.zeros(1000)}, snapshot / "model.safetensors")
    data = (snapshot / "model.safetensors").read_bytes()
    (snapshot / "model.safetensors").write_bytes(data[: len(data) // 2])
    refusal(
        f"timm:{TIMM_NAME}",
        r"model\.safetensors is not a safetensors file \(SafetensorError: .*\); delete the "
        "file to download it again",
    )
    save_file({"blocks.0.norm1.weight": torch.zeros(7)}, snapshot / "model.safetensors")
    refusal(
        f"timm:{TIMM_NAME}",
        r"could not be loaded \(RuntimeError: Error\(s\) in loading state_dict .*"
        r"delete the file",
    )


def test_a_file_of_300000_tensors_in_the_timm_or_open_clip_cache_is_refused_before_the_library_reads_it(
    offline, monkeypatch
):
    import open_clip

    safetensors_header_only(cached_snapshot(offline, f"timm/{TIMM_NAME}") / "model.safetensors", 300_000)
    opened = forbid(monkeypatch, vitviz.loading.sources.weights_files, "safe_open")
    refusal(f"timm:{TIMM_NAME}", r"model\.safetensors's header takes [\d.]+ MB, room for far more than the 5,000")
    spec = open_clip_snapshot(offline, TINY_CFG)
    safetensors_header_only(next(offline.rglob("open_clip_model.safetensors")), 300_000)
    built = forbid(monkeypatch, open_clip, "create_model")
    refusal(spec, r"open_clip_model\.safetensors's header takes [\d.]+ MB, room for far more than the 5,000")
    assert not opened and not built


def test_foreign_weights_in_torchs_cache_are_a_message(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    url = torchvision.models.ViT_B_32_Weights.IMAGENET1K_V1.url
    (tmp_path / "checkpoints").mkdir()
    torch.save({"w": torch.zeros(3)}, tmp_path / "checkpoints" / os.path.basename(url))
    refusal("torchvision:vit_b_32", r"are not vit_b_32's \(RuntimeError: Error\(s\) in loading .*delete the file")


# --- open_clip configs ------------------------------------------------------------------------------------------------


def open_clip_snapshot(cache: Path, model_cfg, weights: dict | None = None) -> str:
    """The spec of a cached open_clip Hub repository with this model_cfg and these weights (else 1,000 zeros)."""
    snapshot = cached_snapshot(cache, "someone/hostile-clip")
    (snapshot / "open_clip_config.json").write_text(json.dumps({"model_cfg": model_cfg}))
    save_file(weights or {"w": torch.zeros(1000)}, snapshot / "open_clip_model.safetensors")
    return "open_clip:hf-hub:someone/hostile-clip"


@pytest.mark.parametrize(
    "model_cfg,match",
    [
        ([1, 2, 3], r"model_cfg must be an object; got \[1, 2, 3\]"),
        (None, "model_cfg must be an object; got None"),
        (TINY_CFG | {"text_cfg": "big"}, "text_cfg must be an object; got 'big'"),
        (
            TINY_CFG | {"text_cfg": TINY_CFG["text_cfg"] | {"layers": 20_000}},
            r"describes at least [\d,]+ parameters, more "
            r"than its [\d,]+-byte weights file",
        ),
        (TINY_CFG | {"vision_cfg": TINY_CFG["vision_cfg"] | {"width": "wide"}}, "vision_cfg sizes must be positive"),
        (TINY_CFG | {"vision_cfg": TINY_CFG["vision_cfg"] | {"layers": [20_000] * 4}}, "describes at least"),
    ],
)
def test_a_hostile_open_clip_config_is_refused_before_open_clip_builds_it(offline, monkeypatch, model_cfg, match):
    import open_clip

    spec = open_clip_snapshot(offline, model_cfg)
    built = forbid(monkeypatch, open_clip, "create_model")
    refusal(spec, match)
    assert not built


def test_an_open_clip_model_whose_logit_scale_overflows_is_refused(offline):
    import open_clip

    reference = open_clip.CLIP(**TINY_CFG)
    with torch.no_grad():
        reference.logit_scale.fill_(1000.0)
    weights = {k: v.contiguous() for k, v in reference.state_dict().items()}
    refusal(open_clip_snapshot(offline, TINY_CFG, weights), r"exp\(logit_scale\), the scale of the logits, is inf")


def test_a_too_long_open_clip_repository_id_is_refused_before_the_hub_is_asked(monkeypatch):
    asked = forbid(monkeypatch, vitviz.loading.download, "hub_reachable")
    refusal("open_clip:hf-hub:someone/" + "n" * 500, "is not a Hugging Face repository id")
    assert not asked
