"""Batched augmentation on the training device (vitviz/training/augment.py), checked image by image."""

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from vitviz.training.augment import BatchAugment, DeviceBatches, normalise, random_crop, random_erase, random_flip

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def images(count=64, size=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, 256, (count, 3, size, size), dtype=torch.uint8, generator=generator)


def test_random_crop_cuts_each_image_from_its_reflect_padded_self_at_its_own_offset():
    batch = images()
    torch.manual_seed(0)
    cropped = random_crop(batch, padding=2)
    padded = F.pad(batch.float(), (2, 2, 2, 2), mode="reflect").to(torch.uint8)
    offsets = set()
    for image, out in zip(padded, cropped):
        found = [(y, x) for y in range(5) for x in range(5) if torch.equal(image[:, y : y + 16, x : x + 16], out)]
        assert len(found) == 1  # random pixels: exactly one offset matches
        offsets.add(found[0])
    assert len(offsets) > 15  # 25 possible offsets, drawn per image, not one for the batch
    rows, cols = {y for y, _ in offsets}, {x for _, x in offsets}
    assert rows == cols == {0, 1, 2, 3, 4}  # every shift, the two extremes included


def test_random_flip_mirrors_about_half_the_images_and_leaves_the_others():
    batch = images(400)
    torch.manual_seed(0)
    out = random_flip(batch)
    mirrored = [torch.equal(o, b.flip(-1)) for o, b in zip(out, batch)]
    kept = [torch.equal(o, b) for o, b in zip(out, batch)]
    assert all(m != k for m, k in zip(mirrored, kept))  # each image one or the other
    assert 0.4 < sum(mirrored) / len(batch) < 0.6


def test_random_erase_zeroes_one_rectangle_of_the_drawn_size_in_the_chosen_images():
    batch = normalise(images(300, size=32), torch.tensor(MEAN), torch.tensor(STD)).abs() + 0.01  # nothing is 0
    torch.manual_seed(0)
    out = random_erase(batch, p=0.5)
    erased = 0
    for before, after in zip(batch, out):
        zero = (after == 0).all(0)  # (H, W)
        assert torch.equal(after[:, ~zero], before[:, ~zero])  # the rest is untouched
        if not zero.any():
            continue
        erased += 1
        rows, cols = zero.any(1).nonzero().flatten(), zero.any(0).nonzero().flatten()
        box = zero[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.all()  # one solid rectangle, nothing outside it
        assert int(zero.sum()) == box.numel()
        assert 0.01 <= box.numel() / zero.numel() <= 0.34  # scale (0.02, 0.33), up to rounding of the sides
    assert 0.4 < erased / len(batch) < 0.6
    assert torch.equal(random_erase(batch, p=0.0), batch)


def test_normalise_matches_torchvision():
    batch = images()
    reference = v2.Normalize(MEAN, STD)(v2.ToDtype(torch.float32, scale=True)(batch))
    torch.testing.assert_close(normalise(batch, torch.tensor(MEAN), torch.tensor(STD)), reference)


def test_policy_none_only_normalises_and_basic_keeps_the_batch_shape():
    batch = images()
    plain = BatchAugment(MEAN, STD, policy="none")(batch)
    torch.testing.assert_close(plain, normalise(batch, torch.tensor(MEAN), torch.tensor(STD)))
    torch.manual_seed(0)
    basic = BatchAugment(MEAN, STD, policy="basic")(batch)
    assert basic.shape == batch.shape and basic.dtype == torch.float32
    assert not torch.equal(basic, plain)


def test_policy_draws_a_new_operation_for_every_group_of_images():
    one = images(1)
    batch = one.expand(64, -1, -1, -1).contiguous()  # 64 copies of one image
    augment = BatchAugment(MEAN, STD, policy="trivialaugment", flip=False, policy_group=8)
    augment.crop = False  # only the policy changes the copies
    torch.manual_seed(0)
    out = augment(batch)
    groups = out.split(8)
    for group in groups:  # one draw per group: its copies are alike
        assert all(torch.equal(image, group[0]) for image in group)
    distinct = {tuple(group[0].flatten()[:64].tolist()) for group in groups}
    assert len(distinct) > 3  # 8 groups, most of them transformed differently


def test_the_same_seed_gives_the_same_batch():
    augment = BatchAugment(MEAN, STD, policy="trivialaugment", erasing=0.5)
    torch.manual_seed(3)
    first = augment(images())
    torch.manual_seed(3)
    assert torch.equal(first, augment(images()))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown augmentation policy"):
        BatchAugment(MEAN, STD, policy="autoaugment")
    with pytest.raises(ValueError, match="erasing probability"):
        BatchAugment(MEAN, STD, erasing=1.5)
    with pytest.raises(ValueError, match="uint8 batch"):
        BatchAugment(MEAN, STD)(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="uint8 images and N targets"):
        DeviceBatches(images(4), torch.arange(3), 2, "cpu", BatchAugment(MEAN, STD, "none"), shuffle=False)


def test_device_batches_cover_every_image_once_per_epoch_with_its_own_label():
    batch = images(10, size=8)
    targets = torch.arange(10)
    loader = DeviceBatches(batch, targets, 4, "cpu", BatchAugment(MEAN, STD, "none"), shuffle=True)
    assert len(loader) == 3 and len(loader.dataset) == 10
    torch.manual_seed(0)
    seen = []
    for float_images, labels in loader:
        assert float_images.dtype == torch.float32 and labels.dtype == torch.int64
        expected = normalise(batch[labels], torch.tensor(MEAN), torch.tensor(STD))  # label i is image i
        torch.testing.assert_close(float_images, expected)
        seen += labels.tolist()
    assert sorted(seen) == list(range(10)) and seen != list(range(10))  # all of them, shuffled
    dropping = DeviceBatches(batch, targets, 4, "cpu", BatchAugment(MEAN, STD, "none"), shuffle=False, drop_last=True)
    assert len(dropping) == 2 and [labels.tolist() for _, labels in dropping] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_draws_the_same_crops_flips_and_erasures_as_the_cpu():
    augment = BatchAugment(MEAN, STD, policy="basic", erasing=0.5)  # no policy: its arithmetic may round differently
    torch.manual_seed(5)
    on_cpu = augment(images())
    torch.manual_seed(5)
    on_gpu = augment(images().cuda())
    torch.testing.assert_close(on_gpu.cpu(), on_cpu)
