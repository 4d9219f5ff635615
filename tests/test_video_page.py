"""The Video page through Streamlit's AppTest, on a tiny random VideoMAE folder (transformers' classes) and clips made
with PyAV: the prediction and the maps are vitviz's own for the frames the model reads, each frame's thumbnail is
that frame with its map, the clicked patch's map is its attention row, and bad input gets one line."""

import re

import numpy as np
import pytest
import torch
from app_harness import APP
from streamlit.testing.v1 import AppTest
from test_import_video import hf_model
from tiny_models import tiny_checkpoint
from tiny_videos import CLASSES, moving_clip, tiny_video_folder

from vitviz import explain
from vitviz.loading import load_model
from vitviz.render.overlays import colormap_table
from vitviz.video_clips import clip_tensor, model_frames
from vitviz_dashboard.cache.video import digest
from vitviz_dashboard.video import page as video_page
from vitviz_dashboard.video.controls import HEAD, LAYER, MAP, TOKEN
from vitviz_dashboard.video.downloads import draw_downloads
from vitviz_dashboard.video.inputs import MODEL, NO_MODEL
from vitviz_dashboard.video.strip import draw_strip

pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_video_folder(tmp_path_factory.mktemp("models") / "videomae")


def checked(at: AppTest) -> AppTest:
    assert not at.exception, at.exception
    return at


def video_app(monkeypatch, folder, model=None, typed=True) -> AppTest:
    """The app on its Video page (the sample clip shown until a video is uploaded), the model typed in: ``model``,
    or the folder."""
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(folder.parent))
    at = AppTest.from_file(APP, default_timeout=180)
    checked(at.run())
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "video")
    checked(at.run())
    if typed:
        at.sidebar.text_input(key=MODEL).set_value(str(model or folder))
        checked(at.run())
    return at


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader[0].set_value((name, data, "video/mp4"))
    return checked(at.run())


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error] + [e.value for e in at.sidebar.error]


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """What the page's last run drew: the strip's pictures and the npz's arrays (the page's own functions, wrapped
    to record their arguments: AppTest keeps no media files once a run ends)."""
    seen = {}

    def strip(pictures, chosen):
        seen["pictures"] = pictures
        return draw_strip(pictures, chosen)

    def downloads(stem, pictures, arrays, fps):
        seen["arrays"] = arrays()
        return draw_downloads(stem, pictures, arrays, fps)

    monkeypatch.setattr(video_page, "draw_strip", strip)
    monkeypatch.setattr(video_page, "draw_downloads", downloads)
    return seen


def expected(folder, data: bytes):
    model = load_model(str(folder))
    frames = model_frames(model, data)
    return model, frames, clip_tensor(model, frames)


def overlaid(frames: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The strip's pictures by hand: token (t, r, c) painted on frames 2t, 2t + 1 over pixels 80 r.. x 80 c.. of
    the frame drawn 10 x larger, one inferno scale for the clip, opacity 0.5. PIL's and torch's bilinear filters
    round differently: compare with a tolerance of 2 levels."""
    painted = np.kron(values.reshape(2, 1, 4, 4), np.ones((2, 80, 80))).reshape(4, 320, 320)
    scaled = (painted - painted.min()) / (painted.max() - painted.min())
    colours = colormap_table("inferno")[np.rint(scaled * 255).astype(int)]
    # the frames scaled up bilinearly (half-pixel centres, edges clamped: PIL's filter when enlarging)
    larger = torch.nn.functional.interpolate(
        torch.tensor(frames, dtype=torch.float64).permute(0, 3, 1, 2), size=(320, 320), mode="bilinear"
    )
    return 0.5 * larger.permute(0, 2, 3, 1).numpy() + 0.5 * colours


def test_without_a_model_the_page_says_how_to_name_one(monkeypatch, folder):
    at = video_app(monkeypatch, folder, typed=False)
    assert NO_MODEL in [i.value for i in at.info]
    assert not errors(at)


def test_the_sample_clip_with_its_prediction_strip_and_downloads(monkeypatch, folder, drawn):
    at = video_app(monkeypatch, folder)
    assert not errors(at)
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Prediction: "))
    assert re.search(r"\*\*Prediction: action \d\*\* \(\d+\.\d%\)", prediction)
    assert prediction.count("action") == 5  # the top five, of five classes
    captions = [p.caption for image in at.get("image") for p in image.proto.imgs]
    assert [c for c in captions if re.fullmatch(r"(▶ )?\d+", c)] == ["▶ 0", "1", "2", "3"]  # the strip
    assert drawn["pictures"].shape == (4, 320, 320, 3)  # the model's four 32-pixel frames, drawn 10 x larger
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Overlay (GIF)", "Overlay (MP4)", "Arrays (npz)"]
    assert len(at.get("plotly_chart")) == 2  # frames x frames, readout per frame


def test_an_uploaded_clip_shows_vitviz_maps_of_the_frames_the_model_reads(monkeypatch, folder, drawn):
    data = moving_clip(12)
    at = upload(video_app(monkeypatch, folder), "walk.mp4", data)
    model, frames, clip = expected(folder, data)
    rollout = explain.video_rollout(model, clip)
    probabilities = rollout.logits.softmax(-1)[0]
    top = int(probabilities.argmax())
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Prediction: "))
    assert prediction.startswith(f"**Prediction: {CLASSES[top]}** ({probabilities[top].item():.1%})")
    values = rollout.values[0].numpy()
    np.testing.assert_array_equal(drawn["arrays"]["frames"], frames)
    np.testing.assert_allclose(drawn["arrays"]["map"], values, atol=1e-6)
    assert np.abs(drawn["pictures"] - overlaid(frames, values)).max() <= 2


def test_a_clicked_patch_shows_its_attention_row(monkeypatch, folder, drawn):
    data = moving_clip(12)
    at = upload(video_app(monkeypatch, folder), "walk.mp4", data)
    model, frames, clip = expected(folder, data)
    token = 16 + 2 * 4 + 3  # frames 2-3, row 2, column 3 (VideoMAE has no prefix token)
    at.session_state[TOKEN] = (str(folder), digest(data), token)
    at.session_state[MAP], at.session_state[LAYER], at.session_state[HEAD] = "Clicked patch", 0, 2
    checked(at.run())
    caption = next(c.value for c in at.caption if c.value.startswith("Frame "))
    assert "patch at row 2, column 3, frames 2-3, layer 0, head 2" in caption
    row = explain.video_patch_attention(model, clip, layer=0, token=token)[0, 2].numpy()
    np.testing.assert_allclose(drawn["arrays"]["map"], row, atol=1e-6)
    assert str(drawn["arrays"]["map_name"]).startswith("attention of the patch at row 2, column 3")
    assert np.abs(drawn["pictures"] - overlaid(frames, row)).max() <= 2
    frames_x_frames = explain.frame_attention(model, clip, layer=0)[0].numpy()
    np.testing.assert_allclose(drawn["arrays"]["frame_attention"], frames_x_frames, atol=1e-6)


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("photo.mp4", b"\x89PNG\r\n\x1a\n" + bytes(100), "Could not read photo.mp4: this is a PNG image, not a video"),
        ("half.mp4", moving_clip(12)[:1000], "Could not read half.mp4: the MP4/MOV file is"),
        ("noise.webm", bytes(range(256)) * 8, "Could not read noise.webm: not a video file FFmpeg can read"),
    ],
)
def test_a_bad_upload_is_refused_in_one_line(monkeypatch, folder, name, data, message):
    at = upload(video_app(monkeypatch, folder), name, data)
    found = errors(at)
    assert len(found) == 1 and found[0].startswith(message) and "\n" not in found[0]


def test_an_image_model_is_refused_in_one_line(monkeypatch, folder, tmp_path):
    model = tiny_checkpoint(folder.parent / "image_model.pt")
    at = video_app(monkeypatch, folder, model=model)
    found = errors(at)
    assert len(found) == 1 and "is an image model: it reads photos, not videos" in found[0]


def test_a_backbone_shows_its_maps_without_a_prediction(monkeypatch, folder, drawn):
    backbone = folder.parent / "videomae_backbone"
    if not (backbone / "config.json").is_file():
        hf_model("videomae", backbone=True).save_pretrained(backbone)
    at = video_app(monkeypatch, folder, model=backbone)
    assert not errors(at)
    assert any(m.value.startswith("**No prediction**: this model is a backbone") for m in at.markdown)
    assert drawn["pictures"].shape == (4, 320, 320, 3)
    assert at.selectbox(key=MAP).options == ["Rollout", "Clicked patch"]  # no class to take the relevance of


def test_a_model_not_found_says_what_this_page_reads(monkeypatch, folder):
    at = video_app(monkeypatch, folder, model=str(folder.parent / "missing"))
    found = errors(at)
    assert len(found) == 1 and "This page reads video models" in found[0] and "\n" not in found[0]
    assert "'default'" not in found[0] and "torchvision:" not in found[0]  # image specs the page refuses


@pytest.fixture(scope="module")
def timesformer(tmp_path_factory):
    import transformers as hf

    torch.manual_seed(0)
    sizes = dict(image_size=32, patch_size=8, num_frames=4, hidden_size=32, num_hidden_layers=2)
    config = hf.TimesformerConfig(**sizes, num_attention_heads=4, intermediate_size=64, num_labels=5)
    model = hf.TimesformerForVideoClassification(config).eval()
    folder = tmp_path_factory.mktemp("models") / "timesformer"
    model.save_pretrained(folder)
    return folder


def test_a_divided_models_clicked_patch_has_its_temporal_half_too(monkeypatch, timesformer, drawn):
    """TimeSformer's spatial half attends within the patch's own frame (every other frame is 0, and the caption says
    so); "Clicked patch over time" is the temporal half: the patch's position in every frame."""
    data = moving_clip(12)
    at = upload(video_app(monkeypatch, timesformer), "walk.mp4", data)
    model, frames, clip = expected(timesformer, data)
    layout = model.token_layout(model.config.grid_size, model.config.num_frames)
    token = int(layout.patch_indices[5])
    at.session_state[TOKEN] = (str(timesformer), digest(data), token)
    at.session_state[MAP], at.session_state[LAYER] = "Clicked patch", 1
    checked(at.run())
    assert "its own frame" in str(drawn["arrays"]["map_name"])
    spatial = explain.video_patch_attention(model, clip, layer=1, token=token)[0].mean(0).numpy()
    np.testing.assert_allclose(drawn["arrays"]["map"], spatial, atol=1e-6)
    at.session_state[MAP] = "Clicked patch over time"
    checked(at.run())
    temporal = explain.video_patch_attention(model, clip, layer=1, token=token, part="temporal")[0].mean(0).numpy()
    np.testing.assert_allclose(drawn["arrays"]["map"], temporal, atol=1e-6)
    assert str(drawn["arrays"]["map_name"]).startswith("temporal attention of the patch")
    assert (temporal > 0).sum() == model.config.num_frames  # its own position in every frame


def test_a_joint_model_offers_no_temporal_half(monkeypatch, folder):
    at = video_app(monkeypatch, folder)
    assert "Clicked patch over time" not in at.selectbox(key=str(MAP)).options


def test_the_timeline_speaks_of_cls_only_for_a_model_that_has_one(monkeypatch, folder, timesformer):
    data = moving_clip(12)
    for model, has_cls in ((folder, False), (timesformer, True)):  # VideoMAE has no [CLS]; TimeSformer has one
        at = upload(video_app(monkeypatch, model), "walk.mp4", data)
        caption = next(c.value for c in at.caption if c.value.startswith("Each row: how the tokens of one frame"))
        assert ("[CLS]" in caption) == has_cls, caption
