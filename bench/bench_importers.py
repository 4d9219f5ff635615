"""Importers: how exactly each family is reproduced, and what loading and running it costs.

1. Exactness: for every timm family of tests/test_import_timm.py (random weights perturbed so
   LayerScale, prefix tokens and heads matter), the largest output difference (relative to the
   largest output) and the largest attention difference against timm's own blocks; for every
   Hugging Face family of tests/test_import_huggingface.py the same against transformers (eager
   attention), at the training grid (4 x 4) and a non-square one (3 x 7, interpolated positions).
2. Cost, for the B-sized models at 224x224, batch 1, fp32, random weights (no downloads):
   - load: the weights saved as model.safetensors in a Hugging Face cache laid out on disk;
     timm's own pretrained load of that file (timm.create_model(..., pretrained=True)) against
     vitviz.load_model("timm:<name>") with the Hub unreachable, so both read the same cached file;
   - forward: timm's own forward (fused attention) against vitviz's forward without attentions
     (fused too) and with every attention returned.
   Contenders run interleaved; medians of --repeats.

    python bench/bench_importers.py --repeats 7 --out bench/results/importers.json
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import common  # bench/common.py
import timm
import torch
from huggingface_hub import constants
from safetensors.torch import save_file

import vitviz
import vitviz.loading.download

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_import_huggingface as hf_tests
from hub_cache import cached_snapshot
from test_import_timm import FAMILIES, compare
from tiny_models import perturbed  # the tests' references, not a copy

B_SIZED = [  # (pretrained name, creation arguments for the forward comparison at 224)
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k", {}),
    ("deit_base_distilled_patch16_224.fb_in1k", {}),
    ("vit_base_patch14_reg4_dinov2.lvd142m", {"img_size": 224}),
    ("vit_base_patch16_clip_224.openai", {}),
    ("vit_base_patch16_siglip_224.webli", {}),
    ("vit_base_patch16_224.mae", {}),
]


def median_ms(times: list[float]) -> float:
    return round(1000 * statistics.median(times), 1)


def exactness() -> list[dict]:
    rows = []
    for name, kwargs, _ in FAMILIES:
        model = perturbed(name, **kwargs)
        output_difference, attention_difference, _ = compare(model, torch.randn(2, 3, *model.patch_embed.img_size))
        rows.append({"source": "timm", "family": name, "output": output_difference, "attention": attention_difference})
        print(f"timm {name:45s} output {output_difference:.1e}  attention {attention_difference:.1e}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, (_, kind) in hf_tests.FAMILY_MODELS.items():
            reference = hf_tests.random_family_model(name)
            reference.save_pretrained(Path(folder) / name)
            model = vitviz.load_model(Path(folder) / name)
            torch.manual_seed(1)
            diffs = [
                hf_tests.compare(model, reference, kind, torch.randn(2, 3, *size)) for size in [(32, 32), (24, 56)]
            ]
            row = {"source": "Hugging Face", "family": name, "compared on": kind}
            row |= {key: max(d[key] for d in diffs) for key in diffs[0]}
            rows.append(row)
            print(
                f"hf   {name:45s} " + "  ".join(f"{k} {v:.1e}" for k, v in row.items() if isinstance(v, float)),
                flush=True,
            )
    return rows


def load_times(name: str, repeats: int, cache: Path) -> dict:
    torch.manual_seed(0)
    original = timm.create_model(name, pretrained=False)
    path = cached_snapshot(cache, timm.models.get_pretrained_cfg(name).hf_hub_id) / "model.safetensors"
    save_file(original.state_dict(), path)
    times: dict[str, list[float]] = {"timm": [], "vitviz": []}
    timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(path)})  # warm-up: first calls
    vitviz.load_model(f"timm:{name}")  # fault in memory and read timm's tables, in either order
    for _ in range(repeats):
        start = time.perf_counter()
        timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(path)})
        times["timm"].append(time.perf_counter() - start)
        start = time.perf_counter()
        vitviz.load_model(f"timm:{name}")
        times["vitviz"].append(time.perf_counter() - start)
    return {who: median_ms(t) for who, t in times.items()}


def forward_times(name: str, kwargs: dict, repeats: int) -> dict:
    torch.manual_seed(0)
    original = timm.create_model(name.split(".")[0], pretrained=False, **kwargs).eval()
    ours = vitviz.from_timm(original)
    images = torch.randn(1, 3, 224, 224)
    contenders = {
        "timm": lambda: original(images),
        "vitviz": lambda: ours(images),
        "vitviz, attentions": lambda: ours(images, output_attentions=True),
    }
    times: dict[str, list[float]] = {who: [] for who in contenders}
    with torch.inference_mode():
        for run in contenders.values():  # warm-up
            run()
        for _ in range(repeats):
            for who, run in contenders.items():
                start = time.perf_counter()
                run()
                times[who].append(time.perf_counter() - start)
    return {who: median_ms(t) for who, t in times.items()}


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-exactness", action="store_true", help="only the load and forward times")
    args = parser.parse_args()
    results = {
        "torch": torch.__version__,
        "timm": timm.__version__,
        "threads": torch.get_num_threads(),
        "exactness": [] if args.skip_exactness else exactness(),
        "cost": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        constants.HF_HUB_CACHE = folder  # a cache of our own, read as if offline
        vitviz.loading.download.hub_reachable = lambda timeout=0: False
        for name, kwargs in B_SIZED:
            row = {
                "model": name,
                "load_ms": load_times(name, max(3, args.repeats // 2), Path(folder)),
                "forward_ms": forward_times(name, kwargs, args.repeats),
            }
            results["cost"].append(row)
            print(f"{name:45s} load {row['load_ms']}  forward {row['forward_ms']}", flush=True)
    common.save(results, args.out)


if __name__ == "__main__":
    main()
