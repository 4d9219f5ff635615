"""The notebook view in a real browser. JupyterLab (``jupyter lab --no-browser``, a token, a free loopback port, a
temporary folder) opens examples/photo.ipynb in headless Chromium and runs it; a click on a patch of the view and a
head change redraw the map to the library's values for that patch and head; in examples/vlm_answer.ipynb a click on
an answer token draws that token's map; no console error, no request leaves localhost. And ``to_html`` files (a photo
view's, a VLM answer's) opened with the network off draw the map and answer a click on a patch or an answer token.
Set VITVIZ_NOTEBOOK_SCREENSHOT to a path to save the JupyterLab page there (docs/notebook.png)."""

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch
from browser_harness import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, require_browser
from PIL import Image
from tiny_models import build_tiny_vit

import vitviz
from vitviz.notebook.packing import pack_maps

require_browser()
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

TOKEN = "vitviz-test-token"


@contextlib.contextmanager
def jupyter_lab(folder: Path):
    """JupyterLab serving ``folder`` on a free loopback port, its settings and runtime files inside ``folder``."""
    port = free_port()
    env = os.environ | {
        "JUPYTER_CONFIG_DIR": str(folder / ".config"),
        "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(folder / ".settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".workspaces"),
        "IPYTHONDIR": str(folder / ".ipython"),
        "XDG_CACHE_HOME": str(folder / ".cache"),
    }
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
    command += [f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={folder}", "--allow-root"]
    command += ["--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly", "--LabApp.news_url="]
    command += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    tracker = folder / ".settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')  # every cell drawn, not only those in view
    news = folder / ".settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')  # no question about Jupyter's news
    log = (folder / "lab.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # JupyterLab starts in seconds, slower on loaded cores
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError((folder / "lab.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


# where notebook ``name`` stands in JupyterLab: open in the main area, in front, its cells loaded, its session
# connected to a kernel. Found among the main area's widgets by its path, not as the widget in front: a workspace
# restored after the open command can put another in front, and the wait for "the one in front is ready" then never
# ended (lab.log: a kernel started and never asked anything; one CI run in several).
STATE = """(name) => {
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets("main")).find((w) => w.context && w.context.path.endsWith(name));
  const session = panel && panel.sessionContext;
  return {
    open: Boolean(panel),
    id: panel ? panel.id : null,
    front: Boolean(panel) && app.shell.currentWidget === panel,
    cells: panel && panel.content && panel.content.widgets ? panel.content.widgets.length : 0,
    loaded: Boolean(panel && panel.context.isReady),
    connected: Boolean(session && session.isReady && session.session && session.session.kernel),
  };
}"""
READY_SECONDS = 300  # a kernel imports torch and builds its model meanwhile: over 90 s on two loaded cores


def bring_to_front(page, name: str) -> None:
    """Open ``examples/name`` through JupyterLab's own command and wait until it is in front, loaded, with its
    session connected; open it again, or bring it to the front, while it is not (each step at most every 20 s)."""
    opening = f"window.jupyterapp.commands.execute('docmanager:open', {{path: 'examples/{name}'}})"
    page.evaluate(opening)
    deadline, last_step = time.monotonic() + READY_SECONDS, time.monotonic()
    while True:
        state = page.evaluate(STATE, name)
        if state["front"] and state["cells"] > 1 and state["loaded"] and state["connected"]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} was never in front and ready in JupyterLab: {state}")
        if time.monotonic() - last_step > 20:
            if not state["open"]:
                page.evaluate(opening)
            elif not state["front"]:
                print(f"{name} open but not in front: {state}; bringing it to the front")
                page.evaluate("(id) => window.jupyterapp.shell.activateById(id)", state["id"])
            last_step = time.monotonic()
        time.sleep(0.5)


# the first code cell of the notebook in front has been run or is running: run-all was taken
STARTED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter((cell) => cell.model.type === "code");
  const prompt = cells.length > 0 ? cells[0].node.querySelector(".jp-InputPrompt") : null;
  const running = Boolean(prompt && prompt.textContent.includes("*"));
  return cells.length > 0 && (cells[0].model.executionCount !== null || running);
}"""
RUN_TRIES = 3  # run-all again if a try starts no cell within a minute: a command sent too early was lost


def run_all(page, name: str) -> None:
    """Open notebook ``name`` (under examples/) in front through JupyterLab's own command, wait until it is the
    current widget, loaded, with its session connected to its kernel, then run every cell, again if no cell started.
    Opening it by its URL instead lets a restored workspace leave another notebook in front, and run-all would run
    that one."""
    page.wait_for_function(
        "() => Boolean(window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open'))"
        " && Boolean(window.jupyterapp.commands.hasCommand('notebook:run-all-cells'))"
    )
    bring_to_front(page, name)
    for attempt in range(RUN_TRIES):
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        try:
            page.wait_for_function(STARTED, timeout=60_000)
            return
        except PlaywrightTimeout:
            if attempt == RUN_TRIES - 1:
                raise
            print(f"run-all started no cell of {name} within a minute (try {attempt + 1}); running it again")


def levels(page, nth: int = 0) -> np.ndarray:
    text = page.locator(".vitviz-map").nth(nth).get_attribute("data-levels")
    return np.array([int(v) for v in text.split(",")])


def expected_levels(maps: list[np.ndarray]) -> np.ndarray:
    from vitviz.notebook.packing import decode_bytes

    frame = pack_maps(maps)
    return decode_bytes(frame["maps"][0], (frame["rows"] * frame["cols"],)).astype(int)


def patch_row(model, photo, layer: int, head: int, patch: tuple[int, int]) -> np.ndarray:
    """The library's own attention of ``patch`` over the patches in block ``layer``, head ``head``: (rows, cols)."""
    with torch.no_grad():
        out = model(model.transform(photo)[None], output_attentions=True)
    p, (rows, cols) = out.num_prefix_tokens, out.grid_size
    return out.attentions[layer][0, head, p + patch[0] * cols + patch[1], p:].reshape(rows, cols).numpy()


def click_patch(page, nth: int, patch: tuple[int, int], grid: tuple[int, int]) -> None:
    """Click the middle of ``patch`` on the nth photo (its box is the whole photo: the model's input is resized)."""
    canvas = page.locator(".vitviz-map").nth(nth)
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    x, y = (patch[1] + 0.5) / grid[1] * box["width"], (patch[0] + 0.5) / grid[0] * box["height"]
    canvas.click(position={"x": x, "y": y})


def watched(page, origin: str) -> tuple[list[str], list[str]]:
    """The page's console errors and every request that leaves ``origin`` (data: and blob: stay in the page)."""
    errors, away = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "request",
        lambda r: away.append(r.url) if not r.url.startswith((origin, "data:", "blob:", "file:")) else None,
    )
    return errors, away


def notebook_photo() -> Image.Image:
    """examples/vlm_answer.ipynb's photo: a red square on black."""
    pixels = np.zeros((96, 128, 3), dtype=np.uint8)
    pixels[20:70, 30:80] = (200, 30, 30)
    return Image.fromarray(pixels)


NOTEBOOK_PHOTO = notebook_photo()


def notebook_answer(folder: Path):
    """examples/vlm_answer.ipynb's answer, made here the same way (the tiny LLaVA's weights are seeded)."""
    from tiny_vlms import make_tiny_vlm

    from vitviz.vlm import load_vlm

    vlm = load_vlm(make_tiny_vlm("llava", folder / "reference-llava"))
    return vlm.answer(NOTEBOOK_PHOTO, "what is in the picture ?", answer="a red cat")


def test_jupyterlab_runs_the_example_and_a_click_redraws_the_librarys_values(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "vitviz_dashboard").symlink_to(ROOT / "vitviz_dashboard")
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the VLM example builds its tiny folder with tests/tiny_vlms.py
    model = vitviz.load_model("default")
    photo = vitviz.load_image(ROOT / "vitviz_dashboard" / "examples" / "Chelsea the cat.jpg")
    with jupyter_lab(tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # a notebook's kernel imports torch and builds its model (the VLM example: a tiny LLaVA and its answer) while
        # the page waits: seconds on an idle machine, over 90 s on two loaded cores, so the wait is generous
        page.set_default_timeout(300_000)
        errors, away = watched(page, url)
        page.goto(f"{url}/lab?token={TOKEN}")
        run_all(page, "photo.ipynb")
        # the notebook's code sets block 3, head 2 and patch (4, 4) on the first view
        page.wait_for_selector(".vitviz-view[data-key='patch|3|2|4,4']", state="attached")
        np.testing.assert_allclose(levels(page), expected_levels([patch_row(model, photo, 3, 2, (4, 4))]), atol=1)
        click_patch(page, 0, (2, 5), (8, 8))
        page.wait_for_selector(".vitviz-view[data-key='patch|3|2|2,5']", state="attached")
        np.testing.assert_allclose(levels(page), expected_levels([patch_row(model, photo, 3, 2, (2, 5))]), atol=1)
        page.locator(".vitviz-view").first.locator(".vitviz-picker", has_text="head").locator("select").select_option(
            "0"
        )
        page.wait_for_selector(".vitviz-view[data-key='patch|3|0|2,5']", state="attached")
        np.testing.assert_allclose(levels(page), expected_levels([patch_row(model, photo, 3, 0, (2, 5))]), atol=1)
        if os.environ.get("VITVIZ_NOTEBOOK_SCREENSHOT"):
            page.locator(".vitviz-view").first.scroll_into_view_if_needed()
            page.screenshot(path=os.environ["VITVIZ_NOTEBOOK_SCREENSHOT"])
        # the VLM example: a click on an answer token draws that token's map
        run_all(page, "vlm_answer.ipynb")
        answer_view = page.locator(".vitviz-view:has(.vitviz-token)")
        page.wait_for_selector(".vitviz-view[data-key='answer|1|1|mean']", state="attached")  # the notebook's token
        answer_view.locator(".vitviz-token[data-token='2']").click()
        page.wait_for_selector(".vitviz-view[data-key='answer|2|1|mean']", state="attached")
        drawn = answer_view.locator(".vitviz-map").get_attribute("data-levels")
        browser.close()
    reference = vitviz.show(notebook_answer(tmp_path), NOTEBOOK_PHOTO, layer=1, token=2)
    np.testing.assert_allclose([int(v) for v in drawn.split(",")], levels_of(reference.frame, 0), atol=1)
    assert not errors, errors
    assert not away, away


def test_a_to_html_file_draws_offline_and_answers_a_click(tmp_path):
    model = build_tiny_vit("cls")
    model.transform = vitviz.Preprocessing(resize=(32, 32), crop=None)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8))
    view = vitviz.show(model, [image, image.transpose(0)], layer=1, head=2)
    path = view.to_html(tmp_path / "view.html")
    drawn = levels_of(view.frame, 0)
    view.set_state_checked(patch=(1, 3))
    clicked = levels_of(view.frame, 0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(offline=True)
        page = context.new_page()
        errors, away = watched(page, "file://")
        page.goto(path.as_uri())
        page.wait_for_selector(".vitviz-view[data-key='attention|1|2']")
        np.testing.assert_array_equal(levels(page), drawn)
        painted = page.evaluate(
            "() => { const c = document.querySelector('.vitviz-map'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; let s = 0; for (const v of d) s += v; return s; }"
        )
        assert painted > 0 and page.locator(".vitviz-legend-bar").count() == 1
        click_patch(page, 0, (1, 3), (4, 4))
        page.wait_for_selector(".vitviz-view[data-key='patch|1|2|1,3']")
        np.testing.assert_array_equal(levels(page), clicked)
        browser.close()
    assert not errors, errors
    assert not away, away


def test_an_answers_html_file_answers_a_token_click_offline(tmp_path):
    from tiny_vlms import make_tiny_vlm
    from vlm_harness import photo, red_cat

    from vitviz.vlm import load_vlm

    answer = red_cat(load_vlm(make_tiny_vlm("llava", tmp_path / "llava")))
    view = vitviz.show(answer, photo(), layer=1)
    path = view.to_html(tmp_path / "answer.html")
    view.token = 2
    clicked = levels_of(view.frame, 0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(offline=True).new_page()
        errors, away = watched(page, "file://")
        page.goto(path.as_uri())
        page.wait_for_selector(".vitviz-view[data-key='answer|0|1|mean']")
        page.click(".vitviz-token[data-token='2']")
        page.wait_for_selector(".vitviz-view[data-key='answer|2|1|mean']")
        np.testing.assert_array_equal(levels(page), clicked)
        assert page.locator(".vitviz-token.vitviz-chosen").inner_text() == answer.tokens[2]
        browser.close()
    assert not errors, errors
    assert not away, away


def levels_of(frame: dict, i: int) -> np.ndarray:
    from vitviz.notebook.packing import decode_bytes

    return decode_bytes(frame["maps"][i], (frame["rows"] * frame["cols"],)).astype(int)


def test_a_hostile_class_name_still_draws_and_another_class_is_not_drawn_stale(tmp_path):
    """A class named ``<!--<script>`` does not blank the exported file; choosing a class whose map the file lacks says
    so and draws no map, rather than the first class's map under the new class's name."""
    model = build_tiny_vit("cls")
    model.transform = vitviz.Preprocessing(resize=(32, 32), crop=None)
    model.class_names = ["<!--<script>", *(f"c{i}" for i in range(1, len(model.class_names)))]
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8))
    view = vitviz.show(model, image, method="relevance", target=0)
    view.frame = view.frame | {"low": 0.0, "high": 100.0}  # the legend's ends as the file draws them: 0 and 100
    path = view.to_html(tmp_path / "view.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(offline=True).new_page()
        errors, away = watched(page, "file://")
        page.goto(path.as_uri())
        page.wait_for_selector(".vitviz-view[data-key='relevance|0']")
        np.testing.assert_array_equal(levels(page), levels_of(view.frame, 0))
        assert page.locator(".vitviz-high").inner_text() == "100"  # not "1": the zeros before the point kept
        options = page.locator(".vitviz-picker", has_text="class").locator("option").all_inner_texts()
        assert "<!--<script>" in options
        page.locator(".vitviz-picker", has_text="class").locator("select").select_option("3")
        page.wait_for_selector(".vitviz-view[data-key='']")
        assert "not in this file: relevance|3" in page.locator(".vitviz-error").inner_text()
        assert page.locator(".vitviz-map").first.get_attribute("data-levels") is None
        browser.close()
    assert not errors, errors
    assert not away, away
