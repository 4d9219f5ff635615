"""What one training step costs on this machine, by attention kernel and precision.

The shipped default (patch 4, hidden 192, 6 layers, 6 heads; 65 tokens) trained on batches
of 128 at 32 x 32: forward, loss, backward and an AdamW step. The contenders run
interleaved, so a busy machine slows them alike; we report medians and ratios.

    python bench/bench_train_step.py --repeats 9 --out bench/results/train_step.json
"""

from __future__ import annotations

import common  # bench/common.py
import torch
import torch.nn.functional as F

from vitviz import ViT, ViTConfig
from vitviz.training.train import PRESETS


def make_step(attention: str, precision: str, batch: int):
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, num_classes=10, **PRESETS["tiny"]))
    model.attn_implementation = attention
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images, labels = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))

    def step() -> float:
        with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(images).logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=9, help="timed steps per contender")
    parser.add_argument("--batch", type=int, default=128, help="images per step")
    args = parser.parse_args(argv)
    contenders = {f"{a} {p}": make_step(a, p, args.batch) for a in ("sdpa", "eager") for p in ("fp32", "bf16")}
    medians = common.interleaved_medians(contenders, args.repeats)
    baseline = medians["sdpa bf16"]
    for name, median in medians.items():
        print(f"{name:>11}: {1000 * median:7.1f} ms per step of {args.batch}  ({baseline / median:.2f}x sdpa bf16)")
    results = common.batch_timings(args.batch, args.repeats, medians)
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
