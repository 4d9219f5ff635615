"""The real thing: `streamlit run app.py` driven by headless Chromium (Debian's package) via Playwright.

Uploads a photo, checks the overlays appear, clicks a patch on the picture and checks the
query-patch map follows the click, and saves a screenshot. Skipped only where Chromium or
Playwright is missing on a developer's machine; under CI (CI=true) a missing browser fails.
"""

import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from browser_harness import CHROMIUM, CHROMIUM_ARGS, ROOT, streamlit_server
from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

SCREENSHOTS = Path(os.environ.get("VITVIZ_SCREENSHOTS", ROOT / "tests" / "screenshots"))

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        pytest.fail("CI must run the browser test: install chromium and playwright (see .ci/run)", pytrace=False)
    pytest.skip("needs Debian's chromium and the playwright package", allow_module_level=True)


def tiny_classifier(path: Path) -> Path:
    """A small random classifier (3 classes, 2 blocks, a 4x4 grid) standing in for the shipped default."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64,
                          num_classes=3))  # fmt: skip
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    save_checkpoint(path, model, ["cat", "dog", "bird"], Preprocessing(resize=32, crop=32))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    env = {"VITVIZ_DEFAULT_CHECKPOINT": str(tiny_classifier(folder / "model.pt")), "VITVIZ_SAMPLES": ""}
    with streamlit_server(folder, env) as running:
        yield running.url, folder


def test_upload_overlay_and_click_a_patch(server):
    url, folder = server
    photo = folder / "photo.png"
    image = Image.new("RGB", (480, 320), (40, 120, 200))
    image.paste((230, 200, 40), (60, 60, 220, 260))
    image.save(photo)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        page.locator("input[type=file]").first.set_input_files(str(photo))
        page.get_by_text("Attention rollout").first.wait_for(timeout=120_000)
        page.locator("img[src*='media']").first.wait_for(timeout=90_000)
        assert page.locator("img[src*='media']").count() >= 2
        page.screenshot(path=str(SCREENSHOTS / "overview.png"), full_page=True)

        page.get_by_role("tab", name="Click a patch").click()
        page.get_by_text("patch (2, 2), layer 1").first.wait_for(timeout=90_000)
        # the picker's scatter markers are the patch centres, in row-major order; click the top-left one
        markers = page.locator(".js-plotly-plot .scatterlayer .trace").first.locator("path.point")
        markers.first.wait_for(timeout=90_000)
        assert markers.count() == 16
        markers.nth(0).click(force=True)
        page.get_by_text("patch (0, 0), layer 1").first.wait_for(timeout=90_000)
        page.screenshot(path=str(SCREENSHOTS / "click_a_patch.png"), full_page=True)
        assert not page.get_by_text("Traceback").count()
        browser.close()
