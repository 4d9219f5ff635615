"""The photo view inside marimo (``mo.ui.anywidget``): a marimo app builds it, a later cell reads its synced state,
a frontend update (what a click sends) reaches the view and redraws it to the library's values, and
``marimo export html`` runs the app to a file that holds the widget."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

TESTS = Path(__file__).resolve().parent

APP = textwrap.dedent(
    f"""
    import marimo

    app = marimo.App()


    @app.cell
    def _():
        import sys

        import marimo as mo
        import numpy as np
        from PIL import Image

        sys.path.insert(0, {str(TESTS)!r})
        from tiny_models import build_tiny_vit

        import vitviz

        model = build_tiny_vit("cls")
        model.transform = vitviz.Preprocessing(resize=(32, 32), crop=None)
        photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8))
        view = mo.ui.anywidget(vitviz.show(model, photo, layer=1))
        view
        return model, photo, view


    @app.cell
    def _(view):
        before = dict(view.value)
        view._convert_value({{"patch": [2, 3], "head": 1}})  # what the frontend sends when a patch is clicked
        after = dict(view.value)
        return after, before


    if __name__ == "__main__":
        app.run()
    """
)


def test_the_view_runs_in_a_marimo_app_with_its_state_synced(tmp_path):
    path = tmp_path / "view_app.py"
    path.write_text(APP)
    sys.path.insert(0, str(tmp_path))
    try:
        import view_app
    finally:
        sys.path.remove(str(tmp_path))
    _, defs = view_app.app.run()
    view, before, after = defs["view"], defs["before"], defs["after"]
    assert before["layer"] == 1 and before["patch"] is None and before["frame"]["key"] == "attention|1|mean"
    assert list(after["patch"]) == [2, 3] and after["frame"]["key"] == "patch|1|1|2,3"  # the new frame went out
    with torch.no_grad():
        out = defs["model"](defs["model"].transform(defs["photo"])[None], output_attentions=True)
    expected = out.attentions[1][0, 1, 1 + 2 * 4 + 3, 1:]
    np.testing.assert_allclose(view.widget.values, expected.numpy(), rtol=1e-4, atol=1e-6)


def test_marimo_export_runs_the_app_to_html(tmp_path):
    path = tmp_path / "view_app.py"
    path.write_text(APP)
    out = tmp_path / "view.html"
    result = subprocess.run(
        [sys.executable, "-m", "marimo", "export", "html", str(path), "-o", str(out), "--no-sandbox"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    html = out.read_text()
    assert "marimo-anywidget" in html and "Traceback" not in html
