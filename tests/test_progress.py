"""Download progress: every download reports to the progress bar class in vitviz.loading.download.PROGRESS_BAR
(tqdm's interface): torchvision weights through vitviz.loading.download.download, Hub files through huggingface_hub's
tqdm_class, and in the page a bar drawn with st.progress that survives Streamlit's cache replay."""

import hashlib
import http.server
import threading
import uuid

import huggingface_hub
import pytest
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.specs
from vitviz import ModelLoadError
from vitviz.loading import download
from vitviz_dashboard.widgets.progress import describe, fraction, remaining

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
PREFIX = hashlib.sha256(PAYLOAD).hexdigest()[:8]


class Recorder:
    """A progress bar class with tqdm's interface that keeps what it was told."""

    bars: list["Recorder"] = []

    def __init__(self, total=None, unit=None, unit_scale=None, desc=None, initial=0):
        self.total, self.desc, self.updates = total, desc, []
        Recorder.bars.append(self)

    def update(self, n):
        self.updates.append(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def server():
    """A loopback HTTP server answering every GET with PAYLOAD and its Content-Length."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            for start in range(0, len(PAYLOAD), 300_000):
                self.wfile.write(PAYLOAD[start : start + 300_000])

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_torchvision_download_reports_every_byte_to_the_bar(server, tmp_path):
    Recorder.bars = []
    target = tmp_path / f"vit_x-{PREFIX}.pth"  # torchvision's naming: the sha256 prefix is checked
    with download.progress_bar(Recorder):
        vitviz.loading.download.download(f"{server}/w.pth", target)
    (bar,) = Recorder.bars
    assert target.read_bytes() == PAYLOAD
    assert bar.total == len(PAYLOAD) and sum(bar.updates) == len(PAYLOAD) and bar.desc == target.name
    assert len(bar.updates) >= 1
    # outside the block, the default (tqdm, shown on a terminal) is back, and the hash is still checked
    assert download.PROGRESS_BAR.get() is None
    with pytest.raises(ModelLoadError, match="corrupt"):
        vitviz.loading.download.download(f"{server}/w.pth", tmp_path / "vit_x-00000000.pth")
    assert not list(tmp_path.glob("*.partial"))


def test_hub_downloads_get_the_bar_class(monkeypatch, tmp_path):
    seen = []

    def fake_download(repo_id, filename, **kwargs):
        seen.append(kwargs["tqdm_class"])
        (tmp_path / filename).write_text("{}")
        return str(tmp_path / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    download.hub_file("org/name", ["config.json"], "hf:org/name", offline=False)
    with download.progress_bar(Recorder):
        download.hub_file("org/name", ["config.json"], "hf:org/name", offline=False)
    assert seen == [None, Recorder]  # None: huggingface_hub's own bar


def test_page_bar_text():
    assert fraction(5, 10) == 0.5 and fraction(12, 10) == 1.0 and fraction(3, None) == 0.0
    assert describe("model.safetensors", 12e6, 346e6) == "Downloading model.safetensors: 12.0 of 346.0 MB"
    assert describe("", 1.5e6, None) == "Downloading weights: 1.5 MB"
    assert describe("Embedding prompts", 1024, 80000, "prompt") == "Embedding prompts: 1,024 of 80,000 prompts"
    assert [remaining(s) for s in (12.4, 90, 3600 + 5 * 60)] == ["12 s", "2 min", "1 h 05 min"]


def page(spec: str) -> None:
    """The page's model loading alone (AppTest runs this function as a script)."""
    import streamlit as st

    from vitviz_dashboard.cache.results import get_model_with_progress

    model = get_model_with_progress(spec)
    st.write(f"loaded a model with {len(model.class_names)} classes")


def test_page_draws_the_download_bar_and_replays_the_cached_model(tmp_path, monkeypatch):
    """The bar is drawn while the (fake) download runs, is gone afterwards, and a later run that takes the
    model from st.cache_resource replays without error (a bar recorded by the cache would not replay)."""
    from vitviz_dashboard.widgets import progress

    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    drawn = []
    original_draw = progress.PageProgress._draw
    monkeypatch.setattr(
        progress.PageProgress, "_draw", lambda self: drawn.append((self.n, self.total)) or original_draw(self)
    )

    def load_with_a_download(spec):
        with download.PROGRESS_BAR.get()(total=4_000_000, unit="B", unit_scale=True, desc="model.safetensors") as bar:
            for _ in range(4):
                bar.update(1_000_000)
                bar.refresh()
        return vitviz.loading.specs.load_model(checkpoint)  # the real one: vitviz.load_model is this function now

    monkeypatch.setattr(vitviz, "load_model", load_with_a_download)
    spec = f"fake:{uuid.uuid4()}"  # a spec no other test has put into the shared model cache
    at = AppTest.from_function(page, args=(spec,), default_timeout=60).run()
    assert not at.exception and "3 classes" in at.markdown[0].value
    assert drawn[-1] == (4_000_000, 4_000_000) and len(drawn) >= 4
    assert not at.get("progress")  # the bar is removed once the model is loaded
    count = len(drawn)
    at.run()  # a cache hit: replayed, no download, no bar
    assert not at.exception and "3 classes" in at.markdown[0].value and len(drawn) == count
