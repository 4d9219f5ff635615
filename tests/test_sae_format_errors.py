"""Bad SAE files get one line each, an SAEFormatError naming the file and what was found, with the bounds hostile model
files get: unknown headers and configs, shapes that disagree with the config, pickles asking for more than tensors,
a 2 GB header line, NaN weights, absurd sizes, oversized configs and weights files of too many tensors."""

from __future__ import annotations

import argparse
import json
import time

import pytest
import torch
from sae_format_files import CASES, D, N, saelens_case, saelens_cfg, weights, write_saev
from safetensors.torch import save_file

from vitviz.sae import SAEError, SAEFormatError, load_sae

pytestmark = pytest.mark.filterwarnings("ignore:.*sae.pt does not store:UserWarning")


def refused(path, match: str) -> str:
    with pytest.raises(SAEFormatError, match=match) as error:
        load_sae(path)
    message = str(error.value)
    assert "\n" not in message and len(message) < 1200
    return message


def test_unknown_saev_headers_name_what_was_found(tmp_path):
    write_saev(tmp_path / "a" / "sae.pt", {"schema": 9, "cfg": {"d_model": D}}, weights(0))
    refused(tmp_path / "a", r"schema 9 and keys \['cfg', 'schema'\]")
    header = {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "Softmax", "params": {}}}}
    write_saev(tmp_path / "b" / "sae.pt", header, weights(0))
    refused(tmp_path / "b", "saev activation 'Softmax' is not one vitviz reads")
    write_saev(tmp_path / "c" / "sae.pt", {"schema": 2, "cfg": {"d_model": "wide"}}, weights(0))
    refused(tmp_path / "c", "d_model \\(or d_vit\\) should be an integer; found 'wide'")


def test_unknown_saelens_configs_name_what_was_found(tmp_path):
    saelens_case(saelens_cfg("matryoshka_batchtopk"))(tmp_path / "a")
    refused(tmp_path / "a", "architecture 'matryoshka_batchtopk' is not one vitviz reads")
    saelens_case(saelens_cfg("standard", "batch_norm"))(tmp_path / "b")
    refused(tmp_path / "b", "normalize_activations 'batch_norm' is not one SAELens defines")
    saelens_case(saelens_cfg("standard", reshape_activations="hook_z"))(tmp_path / "c")
    refused(tmp_path / "c", "reads attention heads' outputs")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.json").write_text("{}")
    refused(tmp_path / "d", r"is not an SAE vitviz reads: found the files \['notes.json'\]")


def test_shapes_that_disagree_with_the_config(tmp_path):
    saelens_case(saelens_cfg("topk", k=4) | {"d_sae": N + 1})(tmp_path / "a")
    refused(tmp_path / "a", rf"is \(\d+, \d+\), but its config says \(({D}, {N + 1}|{N + 1}, {D})\)")
    write_saev(tmp_path / "b" / "sae.pt", {"d_vit": D, "exp_factor": 2}, weights(0))
    refused(tmp_path / "b", rf"is \({D}, {N}\), but its config says \({D}, {2 * D}\)")
    state = weights(0)
    del state["b_dec"]
    save_file(state, tmp_path / "a" / "sae_weights.safetensors")
    (tmp_path / "a" / "cfg.json").write_text(json.dumps(saelens_cfg("standard")))
    refused(tmp_path / "a", r"lacks the tensors \['b_dec'\]")
    state = weights(0) | {"W_extra": torch.zeros(3)}
    save_file(state, tmp_path / "a" / "sae_weights.safetensors")
    refused(tmp_path / "a", r"holds tensors a standard SAE does not have: \['W_extra'\]")


def test_pickles_that_ask_for_more_than_tensors_are_never_opened(tmp_path):
    write_saev(tmp_path / "a" / "sae.pt", {"d_vit": D, "exp_factor": 4}, {**weights(0), "cfg": argparse.Namespace()})
    refused(tmp_path / "a", "objects other than tensors.*It asks for argparse.Namespace")
    path, _ = CASES["prisma-relu-none"](tmp_path / "b")
    torch.save({"cfg": argparse.Namespace(d_in=D), "state_dict": weights(3)}, path / "n_images_2600058.pt")
    refused(path, "objects other than tensors")


def test_a_two_gigabyte_header_is_refused_after_reading_one_megabyte(tmp_path):
    path = tmp_path / "sae.pt"
    with open(path, "wb") as f:
        f.write(b'{"d_vit": 16, "padding": "')
        f.truncate(2 << 30)  # a sparse file: 2 GB long, nothing stored
    start = time.perf_counter()
    refused(path, "first line .* runs past 1,048,576 bytes")
    assert time.perf_counter() - start < 2.0


def test_nan_weights_are_refused(tmp_path):
    path, _ = CASES["saelens-jumprelu"](tmp_path / "a")
    state = weights(2) | {"threshold": torch.full((N,), float("nan"))}
    save_file(state, path / "sae_weights.safetensors")
    refused(path, r"NaN or infinite values in 1 weights \(threshold\)")
    state = weights(1)
    state["W_dec"][3, 4] = float("inf")
    write_saev(tmp_path / "b" / "sae.pt", {"d_vit": D, "exp_factor": 4}, state)
    refused(tmp_path / "b", r"NaN or infinite values in 1 weights \(W_dec\)")


def test_hostile_sizes_are_refused_before_anything_is_allocated(tmp_path):
    saelens_case(saelens_cfg("standard") | {"d_in": 10**9})(tmp_path / "a")
    refused(tmp_path / "a", "are not an SAE's")
    saelens_case(saelens_cfg("standard") | {"d_in": 60_000, "d_sae": 16_000_000})(tmp_path / "b")
    refused(tmp_path / "b", "more than the .* of memory free")
    header = {"schema": 5, "cfg": {"d_model": 2**40, "d_sae": 4, "activation": {"cls": "Relu", "params": {}}}}
    write_saev(tmp_path / "c" / "sae.pt", header, weights(0))
    refused(tmp_path / "c", "are not an SAE's")
    path, _ = CASES["saelens-standard"](tmp_path / "d")
    (path / "cfg.json").write_text(json.dumps(saelens_cfg("standard") | {"padding": "x" * (2 << 20)}))
    refused(path, "more than the 1,048,576 an SAE's config may be")
    save_file({f"t{i}": torch.zeros(1) for i in range(65)}, path / "sae_weights.safetensors")
    (path / "cfg.json").write_text(json.dumps(saelens_cfg("standard")))
    refused(path, "holds 65 tensors, more than the 64")


def test_damaged_files_and_other_refusals(tmp_path):
    path, _ = CASES["saelens-standard"](tmp_path / "a")
    (path / "sae_weights.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    refused(path, "is not a readable safetensors file")
    path, _ = CASES["prisma-relu-none"](tmp_path / "b")
    torch.save(weights(3), path / "n_images_1.pt")
    refused(path, r"expected one .pt weights file beside config.json, found 2 \(n_images_1.pt, n_images_2600058.pt\)")
    path, _ = CASES["sparsify-bf16"](tmp_path / "c")
    (path / "cfg.json").write_text(json.dumps({"d_in": D, "num_latents": N, "k": 4, "transcode": True}))
    refused(path, "is a transcoder")
    write_saev(tmp_path / "d" / "sae.pt", {"d_vit": D, "exp_factor": 4}, [1, 2, 3])
    refused(tmp_path / "d", "no state dict of tensors")


@pytest.mark.parametrize("case", ["saelens-5-topk", "saelens-layer-norm", "prisma-patches-tanh", "sparsify-bf16"])
def test_every_config_field_with_a_wrong_type_gets_one_line(tmp_path, case):
    """Each field of the config replaced by a list, an object, a negative number or a string: the SAE loads (the
    field did not matter) or is refused with an SAEError of one line -- never another exception."""
    path, _ = CASES[case](tmp_path)
    config = next(p for p in (path / "cfg.json", path / "config.json") if p.is_file())
    original = json.loads(config.read_text())
    for key in original:
        for value in ([1], {"a": 1}, -1, "x"):
            config.write_text(json.dumps(original | {key: value}))
            try:
                sae = load_sae(path)
                sae.reconstruct(torch.randn(2, sae.config.d_in))
            except SAEError as error:
                assert "\n" not in str(error), (key, value)
