"""Server time per interaction: how long the page takes to re-run after a control changes.

ViT-B/16 (random weights, 224x224, 12 x 12 heads) as the default model, a 1600x1200 photo.
The first run after the upload pays for the forward pass and the class-specific maps; after
that every control change should only redraw (goal: at most 50 ms of server computation).
Timed with Streamlit's AppTest, which runs the page in this process: the figure is the script's
full re-run, page serialisation included, without the browser's own rendering.

    python bench/bench_app.py --repeats 7 --out bench/results/app.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def setup(folder: Path) -> bytes:
    from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

    torch.manual_seed(0)
    model = ViT(ViTConfig(num_classes=1000))
    with torch.no_grad():
        model.head.weight.normal_(std=0.02)
    names = [f"class {i}" for i in range(1000)]
    save_checkpoint(folder / "vit_b_16.pt", model, names, Preprocessing(resize=256, crop=224), half=True)
    import vitviz.load

    vitviz.load.DEFAULT_CHECKPOINT = folder / "vit_b_16.pt"  # AppTest runs the page in this process
    os.environ["VITVIZ_SAMPLES"] = ""
    buffer = io.BytesIO()
    Image.effect_mandelbrot((1600, 1200), (-2.2, -1.2, 1.0, 1.2), 80).convert("RGB").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def timed_run(at) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed changes per control")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="vitviz-bench-"))
    photo = setup(folder)
    sys.path.insert(0, str(ROOT))
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    results: dict = {"startup_s": timed_run(at)}
    at.file_uploader[0].set_value(("photo.jpg", photo, "image/jpeg"))
    results["first_run_after_upload_s"] = timed_run(at)

    def widget(kind: str, label: str):
        return next(w for w in getattr(at, kind) if w.label == label)

    controls = {
        "overlay opacity": lambda i: widget("slider", "Overlay opacity").set_value([0.3, 0.7][i % 2]),
        "colormap": lambda i: widget("selectbox", "Colormap").set_value(["viridis", "inferno"][i % 2]),
        "rollout discard ratio": lambda i: widget("slider", "Discard ratio").set_value([0.5, 0.0][i % 2]),
        "rollout head fusion": lambda i: widget("selectbox", "Head fusion").set_value(["max", "mean"][i % 2]),
        "heads tab layer": lambda i: next(w for w in at.slider if w.key == "heads_layer").set_value([3, 11][i % 2]),
        "compare head A": lambda i: next(w for w in at.selectbox if w.key == "head_A").set_value([5, "mean"][i % 2]),
        "query patch row": lambda i: widget("number_input", "Row").set_value([0, 7][i % 2]),
        "top-k": lambda i: widget("slider", "Top-k").set_value([3, 5][i % 2]),
    }
    results["controls"] = {}
    for name, change in controls.items():
        change(0)
        timed_run(at)  # a first change may fill a cache (e.g. a new rollout setting); not what is timed
        times = []
        for i in range(1, args.repeats + 1):
            change(i)
            times.append(timed_run(at))
        results["controls"][name] = {"median_ms": 1000 * statistics.median(times), "max_ms": 1000 * max(times)}
        print(f"{name:24s} median {1000 * statistics.median(times):7.1f} ms   max {1000 * max(times):7.1f} ms")
    print(f"startup {results['startup_s']:.2f} s; first run after upload (forward, class maps) "
          f"{results['first_run_after_upload_s']:.2f} s")  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
