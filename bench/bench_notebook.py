"""How fast the notebook view (vitviz.show) answers once its analysis is done, and what it sends the browser.

Two random ViTs on a random photo: ViT-B/16 at 224 (14 x 14 patches) and a narrow 4-block ViT on ViT-L/14's
518-pixel grid (37 x 37 = 1,369 patches; the width does not change what a click reads, only the analysis). For each:
building the view (the one analysis pass, every block's attention kept), then the updates a user makes: clicks on two
new patches and the first again (seen before), a head change, a block change, back to "attention", each timed
as Python's side of the round trip (the trait set, the maps read from the analysis and packed into the frame); and
the bytes of one frame and of the whole synced state.

    .venv/bin/python bench/bench_notebook.py --repeats 7 --out bench/results/notebook.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import common  # bench/common.py
import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import vitviz  # noqa: E402
from vitviz.notebook.export import synced_state  # noqa: E402
from vitviz.notebook.packing import payload_bytes  # noqa: E402

MODELS = {
    "ViT-B/16 at 224 (14x14)": dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12),
    "narrow ViT on ViT-L/14 at 518 (37x37)": dict(
        image_size=518, patch_size=14, hidden_size=64, num_layers=4, num_heads=16
    ),
}


def build(config: dict) -> vitviz.ViT:
    torch.manual_seed(0)
    model = vitviz.ViT(vitviz.ViTConfig(**config, mlp_size=4 * config["hidden_size"], num_classes=1000)).eval()
    size = config["image_size"]
    model.transform = vitviz.Preprocessing(resize=(size, size), crop=None)
    return model


def main() -> None:
    args = common.parser(__doc__)
    args.add_argument("--repeats", type=int, default=7)
    options = args.parse_args()
    photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8))
    results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "models": {}}
    for name, config in MODELS.items():
        model = build(config)
        start = time.perf_counter()
        view = vitviz.show(model, photo)
        built = time.perf_counter() - start
        rows, cols = view.analyses.grid
        rng = np.random.default_rng(1)
        times: dict[str, list[float]] = {}

        def timed(what: str, view=view, times=times, **change) -> None:
            start = time.perf_counter()
            view.set_state(change)  # what the comm does with a message from the browser
            times.setdefault(what, []).append(time.perf_counter() - start)

        for round_ in range(options.repeats):
            first, second = rng.choice(rows * cols, size=2, replace=False)
            timed("click a new patch", patch=[int(first) // cols, int(first) % cols], image=0)
            timed("click another new patch", patch=[int(second) // cols, int(second) % cols])
            timed("click a patch seen before", patch=[int(first) // cols, int(first) % cols])
            timed("change the head", head=(round_ + 1) % config["num_heads"])
            timed("change the block", layer=round_ % config["num_layers"])
            timed("back to attention (no patch)", patch=None)
        state = synced_state(view)
        record = {
            "view_built_s": built,
            "median_ms": {what: 1000 * statistics.median(t) for what, t in times.items()},
            "max_ms": {what: 1000 * max(t) for what, t in times.items()},
            "frame_bytes": payload_bytes(view.frame),
            "state_bytes": payload_bytes(state),
        }
        results["models"][name] = record
        print(f"{name}: view built in {built:.2f} s; frame {record['frame_bytes']} B, state {record['state_bytes']} B")
        for what in times:
            print(f"  {what:32s} median {record['median_ms'][what]:7.2f} ms  max {record['max_ms'][what]:7.2f} ms")
    common.save(results, options.out)


if __name__ == "__main__":
    main()
