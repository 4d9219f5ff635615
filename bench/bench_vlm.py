"""What asking a VLM costs: vitviz's memory-light answer() against eager output_attentions, SDPA and generate().

    .venv/bin/python bench/bench_vlm.py --model qwen2-vl-mid --repeats 5 --out bench/results/vlm_qwen2_vl_mid.json

Random-weight models at real sizes, built in code from configs (nothing is downloaded), with the processor and the
word-level tokenizer of ``tests/tiny_vlms.py`` (the vocabulary sizes are the real ones; the tokenizer only fills the
first ids). One photo (../shared/data/photos, resized; a generated one where that folder is missing), the question
"What is in this picture?" and a given answer of 16 tokens. Contenders, each from the photo and the text (the
processor included, the same sequence and ``logits_to_keep`` = the answer's rows + 1 for every forward):

    answer      vitviz's VLM.answer(photo, question, answer=...): SDPA forward, the answer rows' attention recorded
    eager       the language model in eager attention, forward with output_attentions=True (every layer's T x T)
    sdpa        the language model in SDPA, a plain forward
    generate    transformers' generate(do_sample=False) of 16 new tokens (min_new_tokens=16), SDPA
    record      vitviz's recorded pass alone, on inputs already processed (timing only)
    forward     the plain SDPA forward alone, on the same processed inputs (timing only)

Peak memory: each case runs once in a fresh child process; after the model is built and the inputs made, the
child returns freed memory to the OS (malloc_trim), resets its peak resident set (/proc/self/clear_refs) and reads
its resident set; the figure is ``ru_maxrss`` after the case minus that. Time: the median of ``--repeats``
interleaved rounds (bench/common.py) in one process after a warm-up. The load average is recorded beside each.

Models (configs written here from the published config.json files on the Hugging Face Hub):
    qwen2-vl-mid   Qwen2-VL classes, the issue's mid-size model: an 8-layer decoder of width 512 (8 heads of 64,
                   2 key/value heads, MLP 2048, vocabulary 151,936), a 1-block vision tower of width 64 (kept small
                   so that the decoder's attention dominates), a 1344 x 1344 photo: 48 x 48 = 2,304 image tokens
    qwen2-vl-2b    Qwen/Qwen2-VL-2B-Instruct: decoder 28 layers x 1536 (12 heads, 2 key/value heads, MLP 8960,
                   vocabulary 151,936, tied embeddings, M-RoPE sections 16/24/24, rope theta 1e6), vision 32 blocks x
                   1280 (16 heads, MLP ratio 4, patch 14, merge 2); an 896 x 896 photo: 32 x 32 = 1,024 image tokens
    smolvlm-256m   HuggingFaceTB/SmolVLM-256M-Instruct (Idefics3 classes): decoder SmolLM2-135M, 30 layers x 576
                   (9 heads, 3 key/value heads, MLP 1536, vocabulary 49,280, rope theta 1e5), vision SigLIP
                   base-patch16-512 (12 blocks x 768), pixel shuffle 4 (64 tokens a tile), images up to 2048 pixels
                   on the long side; a 2048 x 2048 photo: 16 tiles + the global image = 1,088 image tokens
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved_medians, parser, save  # noqa: E402
from tiny_vlms import BUILDERS  # noqa: E402  the tests' processors and tokenizers, at real sizes

QUESTION = "What is in this picture?"
ANSWER = "a small white cat is on the left of the picture and a big dog is"  # 16 tokens
CASES = ("answer", "eager", "sdpa", "generate")
TIMED = ("answer", "eager", "sdpa", "generate", "record", "forward")
PHOTOS = ROOT.parent / "shared" / "data" / "photos"


@dataclass(frozen=True)
class Setup:
    family: str  # a key of tiny_vlms.BUILDERS
    config: dict  # written over the tiny family's config
    photo: tuple[int, int]  # (width, height)
    image_processor: dict = field(default_factory=dict)


SETUPS = {
    "qwen2-vl-mid": Setup(
        "qwen2_vl",
        dict(
            text_config=dict(
                hidden_size=512,
                num_hidden_layers=8,
                num_attention_heads=8,
                num_key_value_heads=2,
                intermediate_size=2048,
                vocab_size=151936,
                max_position_embeddings=32768,
                rms_norm_eps=1e-6,
                rope_parameters=dict(rope_type="default", mrope_section=[8, 12, 12], rope_theta=1e6),
            ),
            vision_config=dict(depth=1, embed_dim=64, num_heads=1, mlp_ratio=4, hidden_size=512, patch_size=14),
        ),
        (1344, 1344),
        dict(size={"shortest_edge": 3136, "longest_edge": 12845056}),  # Qwen2-VL's min_pixels and max_pixels
    ),
    "qwen2-vl-2b": Setup(
        "qwen2_vl",
        dict(
            text_config=dict(
                hidden_size=1536,
                num_hidden_layers=28,
                num_attention_heads=12,
                num_key_value_heads=2,
                intermediate_size=8960,
                vocab_size=151936,
                max_position_embeddings=32768,
                rms_norm_eps=1e-6,
                rope_parameters=dict(rope_type="default", mrope_section=[16, 24, 24], rope_theta=1e6),
            ),
            vision_config=dict(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, hidden_size=1536, patch_size=14),
            tie_word_embeddings=True,
        ),
        (896, 896),
        dict(size={"shortest_edge": 3136, "longest_edge": 12845056}),
    ),
    "smolvlm-256m": Setup(
        "smolvlm",
        dict(
            text_config=dict(
                hidden_size=576,
                num_hidden_layers=30,
                num_attention_heads=9,
                num_key_value_heads=3,
                intermediate_size=1536,
                vocab_size=49280,
                max_position_embeddings=8192,
                rms_norm_eps=1e-5,
                rope_theta=100000.0,
            ),
            vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
            | dict(image_size=512, patch_size=16),
            scale_factor=4,
        ),
        (2048, 2048),
        dict(size={"longest_edge": 2048}),
    ),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def photo(size: tuple[int, int]) -> Image.Image:
    """A real photo resized to ``size``, else a generated one (the content does not change the cost)."""
    found = sorted(PHOTOS.glob("*.jpg")) if PHOTOS.is_dir() else []
    if found:
        return Image.open(found[0]).convert("RGB").resize(size, Image.BICUBIC)
    rows, cols = np.mgrid[0 : size[1], 0 : size[0]]
    pixels = np.stack([rows % 256, cols % 256, (rows + cols) % 256], axis=-1)
    return Image.fromarray(pixels.astype(np.uint8))


def build(name: str, dtype: torch.dtype):
    """The VLM (vitviz's wrapper of the random-weight transformers model) of setup ``name``."""
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from vitviz.vlm import VLM
    from vitviz.vlm.layouts import family_for

    setup = SETUPS[name]
    config, processor = BUILDERS[setup.family](setup.config, setup.image_processor)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    tokenizer = processor.tokenizer
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return VLM(model, processor, family_for(config.model_type), name)


class Contenders:
    """Each contender as a call from the photo and the text; ``prepared`` holds the processed inputs."""

    def __init__(self, vlm, image: Image.Image):
        self.vlm, self.image = vlm, image
        self.answer_ids = vlm.answer_tokens(ANSWER)
        assert len(self.answer_ids) == 16, len(self.answer_ids)
        self.prepared = self.inputs()

    def inputs(self) -> dict[str, torch.Tensor]:
        prompt = self.vlm.prompt_inputs(self.image, QUESTION)
        return self.vlm.with_answer(prompt, torch.tensor(self.answer_ids))

    def forward(self, inputs: dict[str, torch.Tensor], implementation: str, attentions: bool = False):
        from vitviz.vlm.recording import ROWS_ATTENTION

        text = self.vlm.text_config
        text._attn_implementation_internal = implementation
        try:
            with torch.inference_mode():
                return self.vlm.model(
                    **inputs, use_cache=False, logits_to_keep=len(self.answer_ids) + 1, output_attentions=attentions
                )
        finally:
            text._attn_implementation_internal = ROWS_ATTENTION

    def answer(self):
        return self.vlm.answer(self.image, QUESTION, answer=ANSWER)

    def eager(self):
        return self.forward(self.inputs(), "eager", attentions=True)

    def sdpa(self):
        return self.forward(self.inputs(), "sdpa")

    def generate(self):
        from vitviz.vlm.recording import ROWS_ATTENTION

        prompt = self.vlm.prompt_inputs(self.image, QUESTION)
        self.vlm.text_config._attn_implementation_internal = "sdpa"
        try:
            with torch.inference_mode():
                return self.vlm.model.generate(
                    **prompt, do_sample=False, num_beams=1, max_new_tokens=16, min_new_tokens=16
                )
        finally:
            self.vlm.text_config._attn_implementation_internal = ROWS_ATTENTION

    def record(self):
        inputs = self.prepared
        start = inputs["input_ids"].shape[1] - len(self.answer_ids)
        slots = (inputs["input_ids"][0] == self.vlm.image_token_id).nonzero().flatten().numpy()
        return self.vlm.record(inputs, torch.arange(len(self.answer_ids)) + start - 1, slots)

    def plain_forward(self):
        return self.forward(self.prepared, "sdpa")

    def calls(self) -> dict:
        return {
            "answer": self.answer,
            "eager": self.eager,
            "sdpa": self.sdpa,
            "generate": self.generate,
            "record": self.record,
            "forward": self.plain_forward,
        }


def resident_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def child(name: str, dtype: str, case: str) -> dict:
    """One case, once, in this fresh process: the memory it adds (MB) over the resident set before it."""
    contenders = Contenders(build(name, DTYPES[dtype]), photo(SETUPS[name].photo))
    work = contenders.calls()[case]
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident set starts again from here
    before = resident_kb()
    started, load_before = time.perf_counter(), load()
    work()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tokens = int(contenders.prepared["input_ids"].shape[1])
    images = int((contenders.prepared["input_ids"][0] == contenders.vlm.image_token_id).sum())
    return {
        "case": case,
        "added_mb": (peak - before) / 1024,
        "resident_before_mb": before / 1024,
        "seconds_once": seconds,
        "tokens": tokens,
        "image_tokens": images,
        "load": load_before,
    }


def memory(name: str, dtype: str, cases: list[str]) -> dict[str, dict]:
    results = {}
    for case in cases:
        command = [sys.executable, __file__, "--child", case, "--model", name, "--dtype", dtype]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        if done.returncode:
            raise SystemExit(f"the {case} child failed:\n{done.stderr[-3000:]}")
        results[case] = json.loads(done.stdout.strip().splitlines()[-1])
        row = results[case]
        print(
            f"  memory {case:9s} +{row['added_mb']:8.0f} MB  (once {row['seconds_once']:.2f} s, "
            f"{row['tokens']} tokens, {row['image_tokens']} image tokens, load {row['load']})",
            flush=True,
        )
    return results


def timing(name: str, dtype: str, repeats: int, cases: list[str]) -> dict:
    contenders = Contenders(build(name, DTYPES[dtype]), photo(SETUPS[name].photo))
    calls = contenders.calls()
    before = load()
    medians = interleaved_medians({case: calls[case] for case in cases}, repeats)
    return {
        "median_s": medians,
        "repeats": repeats,
        "load_before": before,
        "load_after": load(),
        "threads": torch.get_num_threads(),
    }


def targets(memory_rows: dict, medians: dict) -> dict:
    """The issue's targets: answer()'s added memory within SDPA's + 10 % of what eager adds on top of SDPA; its time
    at most 1.5 x an SDPA forward (from the photo, and the recorded pass against the plain forward)."""
    result = {}
    if {"answer", "sdpa", "eager"} <= memory_rows.keys():
        sdpa, eager, answer = (memory_rows[c]["added_mb"] for c in ("sdpa", "eager", "answer"))
        bound = sdpa + 0.1 * (eager - sdpa)
        result["memory"] = {"answer_mb": answer, "bound_mb": bound, "holds": answer <= bound}
    if {"answer", "sdpa"} <= medians.keys():
        result["time"] = {
            "answer_over_sdpa": medians["answer"] / medians["sdpa"],
            "holds": medians["answer"] <= 1.5 * medians["sdpa"],
        }
    if {"record", "forward"} <= medians.keys():
        result["time_pass_alone"] = {
            "record_over_forward": medians["record"] / medians["forward"],
            "holds": medians["record"] <= 1.5 * medians["forward"],
        }
    return result


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--model", choices=SETUPS, default="qwen2-vl-mid")
    arguments.add_argument("--dtype", choices=DTYPES, nargs="+", default=["fp32"])
    arguments.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (0: memory only)")
    arguments.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="memory cases")
    arguments.add_argument("--timed", nargs="+", choices=TIMED, default=list(TIMED), help="timed contenders")
    arguments.add_argument("--child", choices=TIMED, help=argparse.SUPPRESS)  # one case, in a child
    args = arguments.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.dtype[0], args.child)))
        return
    results = {"model": args.model, "torch": torch.__version__, "cpus": os.cpu_count(), "runs": {}}
    for dtype in args.dtype:
        print(f"{args.model} {dtype}", flush=True)
        run = {"memory": memory(args.model, dtype, args.cases)}
        if args.repeats:
            run["timing"] = timing(args.model, dtype, args.repeats, args.timed)
            for case, seconds in run["timing"]["median_s"].items():
                print(f"  time   {case:9s} {seconds:8.2f} s", flush=True)
            print(f"  load {run['timing']['load_before']} -> {run['timing']['load_after']}", flush=True)
        run["targets"] = targets(run["memory"], run.get("timing", {}).get("median_s", {}))
        print(f"  targets {json.dumps(run['targets'])}", flush=True)
        results["runs"][dtype] = run
    save(results, args.out)


if __name__ == "__main__":
    main()
