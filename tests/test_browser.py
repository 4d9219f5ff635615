"""The real thing: `streamlit run app.py` driven by headless Chromium (Debian's package) via Playwright.

Uploads a photo, checks the overlays appear, clicks a patch on the picture and checks the
query-patch map follows the click, and saves a screenshot. Skipped only where Chromium or
Playwright is missing on a developer's machine; under CI (CI=true) a missing browser fails.
"""

import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("VITVIZ_SCREENSHOTS", ROOT / "tests" / "screenshots"))

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        pytest.fail("CI must run the browser test: install chromium and playwright (see .ci/run)", pytrace=False)
    pytest.skip("needs Debian's chromium and the playwright package", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64,
                          num_classes=3))  # fmt: skip
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    save_checkpoint(folder / "model.pt", model, ["cat", "dog", "bird"], Preprocessing(resize=32, crop=32))
    port = free_port()
    env = {**os.environ, "VITVIZ_DEFAULT_CHECKPOINT": str(folder / "model.pt"), "VITVIZ_SAMPLES": ""}
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("streamlit did not start within 60 s: " + process.stdout.read().decode(errors="replace"))
    yield f"http://127.0.0.1:{port}", folder
    process.terminate()
    process.wait(timeout=20)


def test_upload_overlay_and_click_a_patch(server):
    url, folder = server
    photo = folder / "photo.png"
    image = Image.new("RGB", (480, 320), (40, 120, 200))
    image.paste((230, 200, 40), (60, 60, 220, 260))
    image.save(photo)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])  # fmt: skip
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_text("Upload one or more photos").wait_for(timeout=60_000)
        page.locator("input[type=file]").first.set_input_files(str(photo))
        page.get_by_text("Attention rollout").first.wait_for(timeout=60_000)
        page.locator("img[src*='media']").first.wait_for(timeout=30_000)
        assert page.locator("img[src*='media']").count() >= 2
        page.screenshot(path=str(SCREENSHOTS / "overview.png"), full_page=True)

        page.get_by_role("tab", name="Click a patch").click()
        page.get_by_text("patch (2, 2), layer 1").first.wait_for(timeout=30_000)
        # the picker's scatter markers are the patch centres, in row-major order; click the top-left one
        markers = page.locator(".js-plotly-plot .scatterlayer .trace").first.locator("path.point")
        markers.first.wait_for(timeout=30_000)
        assert markers.count() == 16
        markers.nth(0).click(force=True)
        page.get_by_text("patch (0, 0), layer 1").first.wait_for(timeout=30_000)
        page.screenshot(path=str(SCREENSHOTS / "click_a_patch.png"), full_page=True)
        assert not page.get_by_text("Traceback").count()
        browser.close()
