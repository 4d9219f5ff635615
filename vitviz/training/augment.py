"""Training data kept on the training device and augmented there, a batch at a time.

`DeviceBatches` holds a whole small-image data set as one uint8 tensor on the device (CIFAR-10's 50,000
training images are 150 MB) and yields normalised float batches from it, so a GPU does not wait for CPU
workers to decode and augment images one by one. `BatchAugment` does the augmentation on a whole batch
at once:

- random crop after reflect padding, and horizontal flip, drawn for every image;
- TrivialAugment or RandAugment (torchvision's own policies), drawn for every group of ``policy_group``
  images: torchvision applies one draw to all of a tensor's images, so a batch is split into small groups;
- random erasing of one rectangle, drawn for every image, after normalisation (erased pixels become 0,
  the data set's mean colour).

Every random number is drawn from torch's global CPU generator, whatever the device, so the same seed
gives the same random draws on a CPU and a GPU, and `--resume` (which restores that generator) continues
the exact sequence. The draws of a batch are a few small tensors, copied to a GPU without waiting for it
(from pinned memory); torchvision's own policies still make small copies of their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torchvision.transforms import v2

POLICIES = {"trivialaugment": v2.TrivialAugmentWide, "randaugment": v2.RandAugment}


class BatchAugment:
    """Augment a (B, 3, H, W) uint8 batch on its own device; return it normalised as float32.

    ``policy`` is "none", "basic" (crop and flip only), "trivialaugment" or "randaugment";
    ``erasing`` is the probability that an image gets one erased rectangle (0: never).
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        policy: str = "basic",
        flip: bool = True,
        erasing: float = 0.0,
        policy_group: int = 8,
    ) -> None:
        if policy not in ("none", "basic", *POLICIES):
            raise ValueError(f"unknown augmentation policy {policy!r}")
        if not 0 <= erasing <= 1:
            raise ValueError(f"erasing probability must be in [0, 1], got {erasing}")
        if policy_group < 1:
            raise ValueError(f"policy_group must be at least 1, got {policy_group}")
        self.mean, self.std = torch.tensor(mean), torch.tensor(std)
        self._stats: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # mean, std on each device
        self.crop = policy != "none"
        self.flip = flip and policy != "none"
        self.policy = POLICIES[policy]() if policy in POLICIES else None
        self.erasing = erasing
        self.policy_group = policy_group

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected a (B, C, H, W) uint8 batch, got {tuple(images.shape)} {images.dtype}")
        if self.crop:
            images = random_crop(images, padding=images.shape[-1] // 8)
        if self.flip:
            images = random_flip(images)
        if self.policy is not None:
            images = torch.cat([self.policy(group) for group in images.split(self.policy_group)])
        if images.device not in self._stats:  # copied once per device, not once per batch
            self._stats[images.device] = (self.mean.to(images.device), self.std.to(images.device))
        batch = normalise(images, *self._stats[images.device])
        if self.erasing > 0:
            batch = random_erase(batch, self.erasing)
        return batch


def normalise(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (B, C, H, W) -> float32 (x / 255 - mean) / std, per channel."""
    mean = mean.to(images.device).view(1, -1, 1, 1)
    std = std.to(images.device).view(1, -1, 1, 1)
    return (images.float() / 255 - mean) / std


def to_device(draws: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Random draws made on the CPU, on ``device``; to a GPU through pinned memory, without waiting for it."""
    if device.type != "cuda":
        return draws.to(device)
    return draws.pin_memory().to(device, non_blocking=True)


def random_crop(images: torch.Tensor, padding: int) -> torch.Tensor:
    """Each image padded by reflection on every side, then cropped back to its size at its own random offset."""
    if padding == 0:
        return images
    batch, _, height, width = images.shape
    # reflect padding is not implemented for uint8 on every device: pad a float copy (exact for 0..255)
    padded = F.pad(images.float(), (padding,) * 4, mode="reflect").to(images.dtype)
    top, left = to_device(torch.randint(0, 2 * padding + 1, (2, batch)), images.device)
    rows = (top[:, None] + torch.arange(height, device=images.device))[:, None, :, None]  # (B, 1, H, 1)
    cols = (left[:, None] + torch.arange(width, device=images.device))[:, None, None, :]  # (B, 1, 1, W)
    index = torch.arange(batch, device=images.device)[:, None, None, None]
    channel = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return padded[index, channel, rows, cols]


def random_flip(images: torch.Tensor, p: float = 0.5) -> torch.Tensor:
    """Each image mirrored left to right with probability p."""
    flip = to_device(torch.rand(images.shape[0]) < p, images.device).view(-1, 1, 1, 1)
    return torch.where(flip, images.flip(-1), images)


def random_erase(
    batch: torch.Tensor, p: float, scale: tuple[float, float] = (0.02, 0.33), ratio: tuple[float, float] = (0.3, 3.3)
) -> torch.Tensor:
    """Zero one rectangle in each image with probability p (Zhong et al.'s random erasing).

    The rectangle covers a uniform ``scale`` fraction of the image, with a log-uniform aspect ``ratio``
    (height / width); a side longer than the image is cut to the image. torchvision's RandomErasing
    instead redraws such a rectangle up to ten times, which cannot be done for a whole batch at once.
    """
    size, _, height, width = batch.shape
    area = torch.empty(size).uniform_(*scale) * height * width
    aspect = torch.exp(torch.empty(size).uniform_(math.log(ratio[0]), math.log(ratio[1])))
    h = (area * aspect).sqrt().round().clamp(1, height).long()
    w = (area / aspect).sqrt().round().clamp(1, width).long()
    top = (torch.rand(size) * (height - h + 1)).long()
    left = (torch.rand(size) * (width - w + 1)).long()
    erase = (torch.rand(size) < p).long()
    # one small copy of the draws; the (B, H, W) mask is built on the batch's device
    top, left, h, w, erase = to_device(torch.stack([top, left, h, w, erase]), batch.device)
    ys = torch.arange(height, device=batch.device)
    xs = torch.arange(width, device=batch.device)
    inside_rows = (ys >= top[:, None]) & (ys < (top + h)[:, None])  # (B, H)
    inside_cols = (xs >= left[:, None]) & (xs < (left + w)[:, None])  # (B, W)
    mask = inside_rows[:, :, None] & inside_cols[:, None, :] & erase.bool()[:, None, None]
    return batch.masked_fill(mask[:, None], 0.0)


class DeviceBatches:
    """Batches of a uint8 image tensor kept on ``device``, shuffled and augmented there.

    Iterating gives one epoch of ``(images, labels)``: float32 images, normalised (and augmented when
    ``augment`` is given), and int64 labels, both on ``device``. ``len()`` is the number of batches.
    """

    def __init__(
        self,
        images: torch.Tensor,
        targets: torch.Tensor,
        batch_size: int,
        device: str | torch.device,
        transform: BatchAugment,
        shuffle: bool,
        drop_last: bool = False,
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4 or len(images) != len(targets):
            raise ValueError(
                f"expected (N, C, H, W) uint8 images and N targets, got {tuple(images.shape)} "
                f"{images.dtype} and {len(targets)} targets"
            )
        self.images = images.to(device)
        self.targets = targets.to(device)
        self.batch_size, self.transform = batch_size, transform
        self.shuffle, self.drop_last = shuffle, drop_last
        self.dataset = self.targets  # len(loader.dataset) is the number of images, as for a DataLoader

    def __len__(self) -> int:
        count = len(self.targets)
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(len(self.targets)) if self.shuffle else torch.arange(len(self.targets))
        order = to_device(order, self.images.device)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            chosen = order[start : start + self.batch_size]
            yield self.transform(self.images[chosen]), self.targets[chosen]
