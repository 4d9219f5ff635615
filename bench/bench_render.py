"""What drawing costs: the overlay, a plotly heatmap and the rollout's discard step, each against the
way vitviz did it before (kept here as the contender), interleaved in one process, medians.

- overlay: `overlays.overlay` (PIL's C loops) against the numpy formula with the torch `upsample`
  (tests/test_plots.py's `reference_overlay`), a 14 x 14 map on a 1024 x 768 photo.
- heatmap figure: `figures.heatmap_figure` (one plotly constructor call) against building the same
  figure and then calling update_layout / update_xaxes / update_yaxes.
- rollout with discard ratio 0.5 over ViT-B/16's 12 blocks of (12, 197, 197) attentions: `kthvalue`
  for all blocks at once against `topk` block by block.

    python bench/bench_render.py --repeats 15 --out bench/results/render.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import common  # bench/common.py
import numpy as np
import plotly.graph_objects as go
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' reference implementations
from test_plots import reference_overlay  # noqa: E402

from vitviz import explain  # noqa: E402
from vitviz.render import figures, overlays  # noqa: E402


def heatmap_with_updates(patch_map, title: str, colormap: str) -> go.Figure:
    """The same figure as figures.heatmap_figure, built the way plotly's examples do."""
    figure = go.Figure(
        layout_template=figures.TEMPLATE,
        data=go.Heatmap(
            z=patch_map,
            colorscale=overlays.plotly_colorscale(colormap),
            hovertemplate="row %{y}, col %{x}<br>%{z:.5f}<extra></extra>",
        ),
    )
    figure.update_layout(title=title, margin=dict(l=0, r=0, t=40 if title else 0, b=0))
    figure.update_yaxes(autorange="reversed", scaleanchor="x", showticklabels=False, showgrid=False, zeroline=False)
    figure.update_xaxes(showticklabels=False, constrain="domain", showgrid=False, zeroline=False)
    return figure


def discard_with_topk(fused: torch.Tensor, ratio: float, prefix: int) -> torch.Tensor:
    patches = fused[:, prefix:, prefix:]
    flat = patches.reshape(patches.shape[0], -1)
    weakest = flat.topk(int(flat.shape[1] * ratio), dim=1, largest=False).indices
    out = fused.clone()
    out[:, prefix:, prefix:] = flat.scatter(1, weakest, 0.0).reshape_as(patches)
    return out


def rollout_with_topk(attentions, ratio: float) -> torch.Tensor:
    fused = [discard_with_topk(a.mean(1), ratio, 1) for a in attentions]
    return explain.attention._rollout(fused, 0, "cls", 1)


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    photo = Image.effect_mandelbrot((1024, 768), (-2.2, -1.2, 1.0, 1.2), 80).convert("RGB")
    patch_map = np.random.default_rng(0).random((14, 14)).astype(np.float32)
    box = (128.0, 0.0, 896.0, 768.0)
    attentions = [torch.randn(1, 12, 197, 197).mul(3).softmax(-1) for _ in range(12)]
    shared = dict(num_prefix_tokens=1, grid_size=(14, 14))
    same = torch.allclose(
        explain.attention_rollout(attentions, **shared, discard_ratio=0.5).flatten(),
        rollout_with_topk(attentions, 0.5).flatten(),
    )
    contenders = {
        "overlay": {
            "vitviz (PIL)": lambda: overlays.overlay(photo, patch_map, "inferno", 0.55, box),
            "before (numpy)": lambda: reference_overlay(photo, patch_map, "inferno", 0.55, box),
        },
        "heatmap figure": {
            "vitviz (one constructor)": lambda: figures.heatmap_figure(patch_map, "grid", "viridis"),
            "before (update calls)": lambda: heatmap_with_updates(patch_map, "grid", "viridis"),
        },
        "rollout, discard 0.5": {
            "vitviz (kthvalue, all blocks)": lambda: explain.attention_rollout(attentions, **shared, discard_ratio=0.5),
            "before (topk per block)": lambda: rollout_with_topk(attentions, 0.5),
        },
    }
    times = {task: {name: [] for name in runs} for task, runs in contenders.items()}
    for _ in range(args.repeats):
        for task, runs in contenders.items():
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[task][name].append(1000 * (time.perf_counter() - start))
    results = {"torch_threads": torch.get_num_threads(), "rollouts_equal": same}
    for task, runs in times.items():
        medians = {name: statistics.median(values) for name, values in runs.items()}
        new, old = medians.values()
        results[task] = {name: round(ms, 2) for name, ms in medians.items()} | {"speed_up": round(old / new, 2)}
        print(
            f"{task:22s} "
            + "   ".join(f"{name}: {ms:6.2f} ms" for name, ms in medians.items())
            + f"   {old / new:.2f}x"
        )
    print(f"rollouts equal: {same}")
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
