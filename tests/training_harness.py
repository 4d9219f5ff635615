"""A tiny generated image folder and the train command run on it, for the training tests."""

import torch
from PIL import Image

from vitviz.commands.train import main as train_main

CLASSES = {"blue": (20, 40, 230), "green": (30, 200, 40), "red": (230, 30, 30)}


SMALL_MODEL = [
    "--image-size",
    "16",
    "--patch-size",
    "4",
    "--hidden-size",
    "32",
    "--num-layers",
    "2",
    "--num-heads",
    "2",
    "--mlp-size",
    "64",
    "--workers",
    "0",
    "--precision",
    "fp32",
    "--batch-size",
    "8",
    "--augment",
    "none",
    "--lr",
    "3e-3",
    "--warmup-epochs",
    "0",
    "--drop-path",
    "0",
]


def make_folder(root, per_class=8, classes=CLASSES):
    generator = torch.Generator().manual_seed(len(str(root)))
    for name, color in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            noise = torch.randint(-40, 40, (16, 16, 3), generator=generator)
            pixels = (torch.tensor(color) + noise).clamp(0, 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def train(folders, out, *extra):
    train_dir, val_dir = folders
    argv = ["--dataset", "imagefolder", "--train-dir", str(train_dir), "--val-dir", str(val_dir), "--out", str(out)]
    return train_main(argv + SMALL_MODEL + list(extra))
