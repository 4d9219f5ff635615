"""The Photo page under Streamlit's AppTest, for the tests of its tabs, images and models: the app started and
given a photo, a tab opened, and what the page shows read back (plotly figures, captions, legends, chart values).

The tests using it mark themselves ``pytest.mark.usefixtures("fresh_caches")`` (tests/conftest.py).
"""

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

import vitviz.loading.specs
from vitviz_dashboard.app import TABS
from vitviz_dashboard.state import PHOTO_TAB

APP = str(Path(__file__).resolve().parent.parent / "app.py")


NAMES = ["cat", "dog", "bird"]


def png_bytes(size=(64, 48)) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, (200, 30, 30))
    image.paste((20, 20, 220), (0, 0, size[0] // 2, size[1] // 2))
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes(size=(64, 48), colour=(30, 160, 90)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG")
    return buffer.getvalue()


def started_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    return at


def uploaded_app(name="photo.png", content=None) -> AppTest:
    at = started_app()
    at.file_uploader[0].set_value((name, content if content is not None else png_bytes(), "image/png")).run()
    assert not at.exception, at.exception
    return at


def open_tab(at, name: str) -> AppTest:
    """Click a tab: the tabs are bound to session state under state.PHOTO_TAB, and only the open one runs."""
    at.session_state[str(PHOTO_TAB)] = name
    at.run()
    assert not at.exception, at.exception
    return at


def chart_specs(at) -> str:
    return " ".join(chart.proto.spec for chart in at.get("plotly_chart"))


def download_labels(at) -> list[str]:
    return [b.proto.label for b in at.get("download_button")]


def image_urls(at) -> list:
    """The tabs' pictures (the model's input, above every tab, left out)."""
    return [
        img.proto.imgs[0].url
        for img in at.get("image")
        if not (img.proto.imgs[0].caption or "").startswith("What the model saw")
    ]


def figures(at) -> list[dict]:
    """Every plotly figure on the page, as plotly's JSON."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def values(field) -> np.ndarray:
    """A trace's data array from plotly's JSON: a list, or a typed array ({"dtype", "bdata"} in base64)."""
    if isinstance(field, dict) and "bdata" in field:
        shape = field.get("shape", -1)  # a 2-D array's shape comes as a string, "4, 4"
        shape = tuple(int(n) for n in shape.split(",")) if isinstance(shape, str) else shape
        return np.frombuffer(base64.b64decode(field["bdata"]), dtype=field["dtype"]).reshape(shape)
    return np.asarray(field)


def captions(at) -> list[str]:
    """The captions of the tabs' pictures: the colour-scale strips (legends) and the model's input, shown above every
    tab, left out."""
    return [
        c
        for c in (img.proto.imgs[0].caption or "" for img in at.get("image"))
        if not c.startswith(("Colours: ", "What the model saw"))
    ]


def legends(at) -> list[str]:
    """The captions of the colour-scale strips under the overlays."""
    return [c for c in (img.proto.imgs[0].caption or "" for img in at.get("image")) if c.startswith("Colours: ")]


EVERY_TAB = list(TABS)  # the Photo page's tabs, in the order the app draws them


def render_every_tab(at) -> dict[str, dict]:
    """Open every tab in turn; none may show an exception or an error. Returns what each tab showed:
    its info notes, subheaders, image captions and chart specs."""
    seen = {}
    for tab in EVERY_TAB:
        open_tab(at, tab)
        assert not at.error, (tab, [e.value for e in at.error])
        seen[tab] = {
            "info": [i.value for i in at.info],
            "subheaders": [s.value for s in at.subheader],
            "captions": captions(at),
            "specs": chart_specs(at),
        }
    return seen


def model_app(path, monkeypatch) -> AppTest:
    """The page with the checkpoint at ``path`` as its default model, and a photo uploaded."""
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    return uploaded_app()


def run_faithfulness(at) -> None:
    next(t for t in at.toggle if t.label.startswith("Run the perturbation test")).set_value(True).run()


def one_bright_patch_png() -> bytes:
    """A grey 32 x 32 photo with one white patch, (1, 2) of the tiny models' 4 x 4 grid: its token's norm
    stands about ten times above the others' (the grey patches embed to almost nothing)."""
    image = Image.new("RGB", (32, 32), (128, 128, 128))
    image.paste((255, 255, 255), (16, 8, 24, 16))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


REGISTERS = dict(class_token=True, num_register_tokens=2, layer_scale=True, pos_embed_prefix=False)


DINOV3_STYLE = dict(
    num_register_tokens=4,
    layer_scale=True,
    absolute_positions=False,
    rotary="dinov3",
    layer_norm_eps=1e-5,
    pooling="mean",
)


def photo_bytes(seed: int, size=(64, 48)) -> bytes:
    """A photo of random coloured blocks: patches that differ, so features and their PCA are not degenerate."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(blocks).resize(size, Image.NEAREST).save(buffer, format="PNG")
    return buffer.getvalue()


PHOTOS = {"a.png": photo_bytes(0), "b.png": photo_bytes(1, (48, 64))}


def prediction(at) -> str:
    return next(m.value for m in at.markdown if "Prediction" in m.value)


def change_table(at) -> list[tuple[str, float, float, float, int]]:
    """The rows of "What the intervention changes": (class, intact %, intervened %, change in pp, decimals shown)."""
    table = next(m.value for m in at.markdown if m.value.startswith("**What the intervention changes**"))
    rows = []
    for line in table.splitlines()[4:]:
        name, before, after, change = [cell.strip() for cell in line.strip("|").split("|")]
        decimals = len(before.removesuffix(" %").partition(".")[2])
        rows.append((name, float(before[:-2]), float(after[:-2]), float(change[:-3].replace("−", "-")), decimals))
    return rows


def assert_changes(at, names: list[str], before: torch.Tensor, after: torch.Tensor) -> None:
    """The table shows the intact model's top classes, before and after, each probability within half a unit of its
    last shown digit (and a little for float sums), each change to its two significant digits."""
    rows = change_table(at)
    top = torch.argsort(-before, stable=True)[: len(rows)].tolist()
    assert [row[0] for row in rows] == [names[k] for k in top]
    for (_, shown_before, shown_after, shown_change, decimals), k in zip(rows, top):
        unit = 10.0**-decimals
        assert shown_before == pytest.approx(100 * float(before[k]), abs=0.51 * unit)
        assert shown_after == pytest.approx(100 * float(after[k]), abs=0.51 * unit)
        assert shown_change == pytest.approx(100 * float(after[k] - before[k]), rel=0.05, abs=1e-6)
    largest = max(abs(row[3]) for row in rows)
    assert 10.0 ** -rows[0][4] <= largest  # a change is shown, with enough decimals to see the largest one
