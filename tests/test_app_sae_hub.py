"""The Photo page's SAE tab with SAEs from the Hub (a pre-filled cache, no network) and in other libraries' formats:
the field takes ``hf:<org>/<name>[/<subfolder>]``, the photo's latents equal load_sae's codes at the block the file
names (saev's layer -2 resolved), the edit applies there, and a bad spec, another width or a block the model lacks is
one st.error line; another model named in the file is a warning naming both."""

import io
import re

import pytest
import torch
from app_harness import APP, PHOTOS, open_tab
from hub_cache import cached_snapshot
from huggingface_hub import constants
from PIL import Image
from sae_format_files import saelens_case, saelens_cfg, weights, write_saev
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.download
import vitviz.loading.specs
from vitviz.sae import load_sae
from vitviz.sae.browse import image_codes
from vitviz_dashboard.sae_editing import SAE_LABEL

pytestmark = pytest.mark.usefixtures("fresh_caches")
D, N = 32, 64


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("app-sae-hub") / "model.pt", num_layers=3)


@pytest.fixture
def hub(tmp_path, monkeypatch, model_path):
    """An offline Hub cache holding a SAELens repository (blocks 0 and 9, widths 32 and 16) and saev's legacy file;
    the page's default model is the 3-block tiny one; the allowed folders are the test's own."""
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(vitviz.loading.download, "hub_reachable", lambda timeout=None: False)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", model_path)
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path / "allowed"))
    lens = cached_snapshot(cache, "someone/vit-saes")
    for name, d, block in (("good", D, 0), ("narrow", 16, 0), ("deep", D, 9)):
        cfg = saelens_cfg("topk", k=4) | {"d_in": d, "d_sae": N}
        cfg["metadata"] = cfg["metadata"] | {"hook_name": f"blocks.{block}.hook_resid_post", "model_name": "vit-b"}
        saelens_case(cfg, d=d, n=N)(lens / name)
    clip = cached_snapshot(cache, "osunlp/SAE_CLIP_tiny")
    write_saev(clip / "sae.pt", {"d_vit": D, "exp_factor": 2}, weights(1, D, N))
    return cache


def photo_tab() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.file_uploader[0].set_value([(name, data, "image/png") for name, data in PHOTOS.items()]).run()
    return open_tab(at, "SAE features")


def typed(at: AppTest, text: str) -> AppTest:
    (field,) = [t for t in at.text_input if t.label == SAE_LABEL]
    field.set_value(text)
    return at.run()


def strongest_latent(model_path, spec: str, block: int) -> int:
    model = vitviz.load_model(str(model_path)).eval()
    sae = load_sae(spec)
    pixels = model.transform(Image.open(io.BytesIO(PHOTOS["b.png"])).convert("RGB"))[None]
    with torch.no_grad():
        codes = image_codes(sae, model(pixels, output_hidden_states=True).hidden_states[block][0], 1)
    return int(codes.max(dim=0).values.argmax())


def captions(at) -> list[str]:
    return [image.proto.imgs[0].caption for image in at.get("image")]


def test_a_hub_saelens_sae_lists_the_photos_latents_and_edits_the_model(hub, model_path):
    at = typed(photo_tab(), "hf:someone/vit-saes/good")
    assert not at.error, [e.value for e in at.error]
    (other,) = [w.value for w in at.warning if "trained on" in w.value]
    assert other == "the SAE was trained on vit-b; this model is default", other  # both named
    strongest = strongest_latent(model_path, "hf:someone/vit-saes/good", 0)
    assert any(c.startswith(f"latent {strongest}: largest") for c in captions(at)), captions(at)
    assert at.multiselect[-1].value == [strongest]
    at.button(key="sae_apply").click()
    at.run()
    (banner,) = [w.value for w in at.warning if w.value.startswith("**Edited model.**")]
    assert "on block 0" in banner and f"latent {strongest} x 0" in banner


def test_saevs_layer_minus_two_is_resolved_and_its_missing_scaling_said(hub, model_path):
    at = typed(photo_tab(), "hf:osunlp/SAE_CLIP_tiny")
    assert not at.error, [e.value for e in at.error]
    assert any("vitviz sae calibrate" in w.value for w in at.warning)
    strongest = strongest_latent(model_path, "hf:osunlp/SAE_CLIP_tiny", 1)  # layer -2 of 3 blocks: block 1
    assert any(c.startswith(f"latent {strongest}: largest") for c in captions(at)), captions(at)
    assert any("(block 1," in m.value for m in at.markdown)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hf:someone/vit-saes/narrow", r"does not fit this model: the SAE reads 16-wide tokens, but .* is 32 wide"),
        ("hf:someone/vit-saes/deep", r"does not fit this model: the SAE reads block 9, which a model of 3 blocks"),
        ("hf:someone/vit-saes/../../../etc", r"is not an SAE on the Hub: write hf:<org>/<name>"),
        ("hf:~/x", r"is not an SAE on the Hub"),
        ("hf:nobody/absent", r"Could not open the SAE: could not fetch hf:nobody/absent: HF_HUB_OFFLINE is set"),
        ("hf:someone/vit-saes/nothing", r"the repository someone/vit-saes has no nothing"),
        ("/etc", r"only inside the folders that the server's owner allows"),
    ],
)
def test_bad_specs_and_misfits_are_one_error_line(hub, text, message):
    at = typed(photo_tab(), text)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0] and re.search(message, errors[0]), errors
