"""Forward-pass speed with attentions: vitviz against Hugging Face, timm and torchvision.

ViT-B/16 at 224x224 on the CPU, random weights (no downloads). Every contender gets the
same weights: speed depends on them (tiny activations become denormal floats, which are
slow on x86), so different random inits would not be a fair race. All contenders run
interleaved in one process, so machine noise hits each alike; we report medians and
ratios to vitviz. Also measures vitviz's bf16 autocast mode: speed-up and its largest
attention and probability error against fp32.

    python bench/bench_forward.py --repeats 7 --batches 1 8 --out bench/results/forward.json
"""

from __future__ import annotations

import json
import resource
import statistics
import time

import common  # bench/common.py
import timm
import torch
import torchvision
from transformers import ViTConfig as HFViTConfig
from transformers import ViTForImageClassification

import vitviz


def build_contenders() -> dict:
    torch.manual_seed(0)
    reference = torchvision.models.vit_b_16().eval()
    torch.nn.init.normal_(reference.heads.head.weight, std=0.05)  # a non-zero head, so probabilities differ
    ours = vitviz.from_torchvision(reference)

    hf = ViTForImageClassification(
        HFViTConfig(num_labels=1000, layer_norm_eps=1e-6, attn_implementation="eager")
    ).eval()
    hf.load_state_dict(to_huggingface(ours.state_dict()))

    tm = timm.create_model("vit_base_patch16_224", pretrained=False).eval()
    tm.load_state_dict(ours.state_dict())  # vitviz uses timm's parameter names
    captured: list[torch.Tensor] = []
    for block in tm.blocks:
        block.attn.fused_attn = False  # the explicit path, so the weights exist to be captured
        block.attn.attn_drop.register_forward_hook(lambda module, args, out: captured.append(out))

    def timm_with_hooks(x):
        logits = tm(x)
        attentions = list(captured)
        captured.clear()  # like every contender, keep nothing once the caller lets go of the result
        return logits, attentions

    def ours_bf16(x):
        with vitviz.autocast("bf16"):
            return ours(x, output_attentions=True)

    return {
        "vitviz (attentions)": lambda x: ours(x, output_attentions=True),
        "vitviz bf16 (attentions)": ours_bf16,
        "huggingface eager (attentions)": lambda x: hf(x, output_attentions=True),
        "timm + hooks (attentions)": timm_with_hooks,
        "torchvision (no attentions)": reference,
        "vitviz (no attentions)": lambda x: ours(x),
        "_ours": ours,
    }


def to_huggingface(state_dict: dict) -> dict:
    """vitviz names -> transformers 5 in-memory names, splitting the fused qkv projection."""
    out = {}
    for name, tensor in state_dict.items():
        parts = name.split(".")
        if parts[0] == "blocks":
            prefix = f"vit.layers.{parts[1]}."
            rest = ".".join(parts[2:])
            if rest.startswith("attn.qkv."):
                for letter, chunk in zip("qkv", tensor.chunk(3)):
                    out[f"{prefix}attention.{letter}_proj.{parts[-1]}"] = chunk
                continue
            rest = (
                rest.replace("norm1.", "layernorm_before.")
                .replace("norm2.", "layernorm_after.")
                .replace("attn.proj.", "attention.o_proj.")
            )
            out[prefix + rest] = tensor
        else:
            renames = {
                "cls_token": "vit.embeddings.cls_token",
                "pos_embed": "vit.embeddings.position_embeddings",
                "patch_embed.proj.weight": "vit.embeddings.patch_embeddings.projection.weight",
                "patch_embed.proj.bias": "vit.embeddings.patch_embeddings.projection.bias",
                "norm.weight": "vit.layernorm.weight",
                "norm.bias": "vit.layernorm.bias",
                "head.weight": "classifier.weight",
                "head.bias": "classifier.bias",
            }
            out[renames[name]] = tensor
    return out


def check_same_outputs(contenders: dict) -> float:
    """Largest logit difference between contenders: proves they compute the same function."""
    x = torch.randn(1, 3, 224, 224)
    with torch.inference_mode():
        reference = contenders["torchvision (no attentions)"](x)
        others = [
            contenders["vitviz (attentions)"](x).logits,
            contenders["huggingface eager (attentions)"](x).logits,
            contenders["timm + hooks (attentions)"](x)[0],
        ]
    return max((o - reference).abs().max().item() for o in others)


def time_interleaved(contenders: dict, batch: int, repeats: int) -> tuple[dict, dict]:
    """Seconds per call, and minor page faults per call (memory the allocator had to fault in anew)."""
    x = torch.randn(batch, 3, 224, 224)
    names = [name for name in contenders if not name.startswith("_")]
    times: dict[str, list[float]] = {name: [] for name in names}
    faults: dict[str, list[int]] = {name: [] for name in names}
    with torch.inference_mode():
        for name in names:  # warm-up: first calls allocate and pick kernels
            contenders[name](x)
        for _ in range(repeats):
            for name in names:
                faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                contenders[name](x)
                times[name].append(time.perf_counter() - start)
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
    return times, faults


def bf16_error(model: vitviz.ViT, batch: int = 8) -> dict[str, float]:
    torch.manual_seed(1)
    x = torch.randn(batch, 3, 224, 224)
    with torch.inference_mode():
        exact = model(x, output_attentions=True)
        with vitviz.autocast("bf16"):
            fast = model(x, output_attentions=True)
    attention_error = max((a - b).abs().max().item() for a, b in zip(exact.attentions, fast.attentions))
    probs_exact, probs_fast = exact.logits.softmax(-1), fast.logits.float().softmax(-1)
    return {
        "max_abs_attention_error": attention_error,
        "max_abs_probability_error": (probs_exact - probs_fast).abs().max().item(),
        "top1_agreement": (probs_exact.argmax(-1) == probs_fast.argmax(-1)).float().mean().item(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per contender and batch size")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8], help="batch sizes to time")
    args = parser.parse_args(argv)

    contenders = build_contenders()
    results: dict = {"threads": torch.get_num_threads(), "torch": torch.__version__, "batches": {}}
    results["max_logit_difference_between_contenders"] = check_same_outputs(contenders)
    print(f"same weights everywhere: max logit difference {results['max_logit_difference_between_contenders']:.2e}")
    for batch in args.batches:
        times, faults = time_interleaved(contenders, batch, args.repeats)
        medians = {name: statistics.median(t) for name, t in times.items()}
        ours = medians["vitviz (attentions)"]
        print(f"\nViT-B/16, 224x224, batch {batch}, {args.repeats} interleaved repeats, {results['threads']} threads")
        print(f"{'contender':34s} {'median ms':>10s} {'vitviz/this':>12s} {'page faults':>12s}")
        for name, median in medians.items():
            print(f"{name:34s} {1000 * median:10.1f} {ours / median:12.2f} {statistics.median(faults[name]):12.0f}")
        results["batches"][batch] = {"median_s": medians, "all_s": times, "minor_page_faults": faults}
    results["bf16_error"] = bf16_error(contenders["_ours"])
    print("\nbf16 autocast against fp32:", json.dumps(results["bf16_error"], indent=1))
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
