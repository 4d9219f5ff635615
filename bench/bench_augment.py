"""What augmenting one training batch costs: image by image (the DataLoader path) or the whole batch at once.

The cifar10-gpu recipe's augmentation (reflect-padded random crop, flip, TrivialAugment, random erasing
0.25) on uint8 32 x 32 images already decoded into memory:

- "per image": torchvision's v2 transforms on each image, as `vitviz train`'s DataLoader does in a worker;
- "batched": `vitviz.training.augment.BatchAugment` on the whole batch (TrivialAugment drawn per group of 8),
  on the CPU and, where there is one, on the GPU (what `--data-on-device` does).

On the CPU both run on one thread (`--threads`), as in each DataLoader worker: tiny per-image operations
spread over several threads mostly wait for each other. The contenders run interleaved, so a busy machine
slows them alike; we report medians.

    python bench/bench_augment.py --repeats 7 --out bench/results/augment.json
"""

from __future__ import annotations

import common  # bench/common.py
import torch
from torchvision.transforms import v2

from vitviz.training.augment import BatchAugment
from vitviz.training.train import DATASET_STATS


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=7, help="timed batches per contender")
    parser.add_argument("--batch", type=int, default=256, help="images per batch")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a DataLoader worker has one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    mean, std = DATASET_STATS["cifar10"]
    torch.manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, 32, 32), dtype=torch.uint8)
    per_image = v2.Compose(
        [
            v2.RandomCrop(32, padding=4, padding_mode="reflect"),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
            v2.RandomErasing(0.25),
        ]
    )
    batched = BatchAugment(mean, std, policy="trivialaugment", erasing=0.25)
    contenders = {
        "per image, cpu": lambda: torch.stack([per_image(image) for image in images]),
        "batched, cpu": lambda: batched(images),
    }
    if torch.cuda.is_available():
        on_gpu = images.cuda()

        def batched_gpu():
            out = batched(on_gpu)
            torch.cuda.synchronize()
            return out

        contenders["batched, cuda"] = batched_gpu
    medians = common.interleaved_medians(contenders, args.repeats)
    for name, median in medians.items():
        print(f"{name:>15}: {1000 * median:7.1f} ms per batch of {args.batch}  ({args.batch / median:8.0f} images/s)")
    results = common.batch_timings(args.batch, args.repeats, medians)
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
