"""The causal text tower cut after each group's longest prompt (vitviz.text.cut) against the full 77 positions,
side by side in one run: open_clip ViT-B-16's text tower on 2,000 ImageNet-template prompts.

    python bench/bench_text_cut.py --repeats 3 --out bench/results/text_cut.json

Random weights (``open_clip.create_model('ViT-B-16', pretrained=None)``: the time does not depend on them) with
open_clip's shipped BPE tokenizer; nothing is downloaded. The prompts: OpenAI's 80 templates x 25 classes spread
over ImageNet's 1,000 (every 40th), so their lengths are those of the whole set. They are embedded through
``class_embeddings`` (batches of 256, no disk cache, fp32), "before" with the cut switched off, "after" with it
on, side by side: 5 classes (400 prompts) before, then after, then the next 5 in the other order, so a change in
the machine's load falls on both. ``--repeats`` passes; the medians of the passes' totals and their ratio, each
pass's ratio, the CPU seconds of this process (less sensitive to other processes' load than the wall time), the
largest difference between the two results' class embeddings, and the whole ImageNet x 80 set (80,000 prompts)
extrapolated from each median per prompt.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import torch
from common import parser, save

from vitviz.text import class_embeddings, prompt_set, template_set
from vitviz.text.cut import GROUP_SIZE
from vitviz.text.towers import OpenClipTextTower


def tower() -> OpenClipTextTower:
    import open_clip

    from vitviz import from_open_clip

    model = open_clip.create_model("ViT-B-16", pretrained=None)
    return from_open_clip(model, open_clip.get_tokenizer("ViT-B-16")).text_tower


def timed(
    text_tower: OpenClipTextTower, classes: list[str], templates: list[str], cut: bool
) -> tuple[float, float, torch.Tensor]:
    """Wall seconds and this process's CPU seconds to embed every class with every template, and the (C, E)
    embeddings."""
    text_tower.cut = cut
    start, cpu = time.perf_counter(), time.process_time()
    embeddings = class_embeddings(text_tower, classes, templates, use_cache=False)
    return time.perf_counter() - start, time.process_time() - cpu, embeddings


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--repeats", type=int, default=3, help="passes over the prompts (default 3)")
    args.add_argument("--every", type=int, default=40, help="every Nth ImageNet class (default 40: 25 classes)")
    args.add_argument("--unit", type=int, default=5, help="classes timed before, then after, in turn (default 5)")
    args = args.parse_args()
    classes, templates = list(prompt_set("imagenet"))[:: args.every], list(template_set("openai-80"))
    prompts = len(classes) * len(templates)
    units = [classes[i : i + args.unit] for i in range(0, len(classes), args.unit)]
    text_tower = tower()
    tokens = text_tower.tokenizer([t.replace("{}", name) for name in classes for t in templates])
    lengths = (tokens.argmax(dim=-1) + 1).float()  # up to the end-of-text token, inclusive
    timed(text_tower, classes[:1], templates[:8], cut=True)  # warm-up
    times: dict[str, list[float]] = {"before": [], "after": []}
    cpu_times: dict[str, list[float]] = {"before": [], "after": []}
    results: dict[str, list[torch.Tensor]] = {"before": [], "after": []}
    for repeat in range(args.repeats):
        total, cpu_total = {"before": 0.0, "after": 0.0}, {"before": 0.0, "after": 0.0}
        for index, unit in enumerate(units):  # side by side: each unit before and after, in alternating order
            order = ("before", "after") if (repeat + index) % 2 == 0 else ("after", "before")
            for name in order:
                seconds, cpu, embeddings = timed(text_tower, unit, templates, cut=name == "after")
                total[name] += seconds
                cpu_total[name] += cpu
                if repeat == 0:
                    results[name].append(embeddings)
        for name in total:
            times[name].append(total[name])
            cpu_times[name].append(cpu_total[name])
        print(
            f"pass {repeat + 1}: before {total['before']:.1f} s, after {total['after']:.1f} s, "
            f"{total['before'] / total['after']:.2f}x (CPU {cpu_total['before']:.0f} s and "
            f"{cpu_total['after']:.0f} s, load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    before, after = statistics.median(times["before"]), statistics.median(times["after"])
    ratios = [b / a for b, a in zip(times["before"], times["after"])]
    difference = (torch.cat(results["before"]) - torch.cat(results["after"])).abs().max()
    report = {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "load_average_1min_at_end": round(os.getloadavg()[0], 1),
        "torch": torch.__version__,
        "tower": "open_clip ViT-B-16 (random weights)",
        "prompts": prompts,
        "classes": len(classes),
        "templates": len(templates),
        "context_length": int(tokens.shape[1]),
        "group_size": GROUP_SIZE,
        "prompt_tokens": {"mean": round(float(lengths.mean()), 1), "max": int(lengths.max())},
        "repeats": args.repeats,
        "seconds": {k: [round(s, 2) for s in v] for k, v in times.items()},
        "median_seconds": {"before": round(before, 2), "after": round(after, 2)},
        "ms_per_prompt": {"before": round(1000 * before / prompts, 2), "after": round(1000 * after / prompts, 2)},
        "speedup": round(before / after, 2),
        "speedup_per_pass": [round(r, 2) for r in ratios],
        "speedup_median_of_passes": round(statistics.median(ratios), 2),
        "cpu_seconds": {k: [round(s, 1) for s in v] for k, v in cpu_times.items()},
        "cpu_speedup": round(statistics.median(cpu_times["before"]) / statistics.median(cpu_times["after"]), 2),
        "max_abs_difference_of_class_embeddings": float(difference),
        "imagenet_80_minutes_extrapolated": {
            "before": round(80_000 * before / prompts / 60, 1),
            "after": round(80_000 * after / prompts / 60, 1),
        },
    }
    print(
        f"medians: before {before:.1f} s, after {after:.1f} s, {before / after:.2f}x; ImageNet x 80 after: about "
        f"{report['imagenet_80_minutes_extrapolated']['after']} min; largest difference {float(difference):.1e}"
    )
    save(report, args.out)


if __name__ == "__main__":
    main()
