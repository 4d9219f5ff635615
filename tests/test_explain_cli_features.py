"""`vitviz explain --features pca`: PCA pictures of the patch features, their options, limits and refusals."""

import csv

import numpy as np
import pytest
from explain_cli_inputs import explain, photo_folder
from PIL import Image
from tiny_models import tiny_checkpoint

from vitviz.commands import explain as explain_command
from vitviz.commands.explain import main
from vitviz.explain import patch_features, pca_rgb
from vitviz.loading import load_model
from vitviz.preprocessing import load_image
from vitviz.render.feature_pictures import paint_patches, side_by_side


@pytest.fixture()
def images(tmp_path):
    return photo_folder(tmp_path / "photos")


# --features pca: one PCA over every image's patch features, checked against explain.pca_rgb run here


@pytest.fixture()
def backbone(tmp_path):
    return tiny_checkpoint(tmp_path / "backbone.pt", names=())  # no classes: a backbone


@pytest.fixture()
def feature_photos(tmp_path):
    """Three photos of different sizes and content (so their patch features differ), in sorted order."""
    folder = tmp_path / "feature_photos"
    folder.mkdir()
    Image.effect_mandelbrot((40, 40), (-2, -1.5, 1, 1.5), 40).convert("RGB").save(folder / "a.png")
    noise = np.random.default_rng(1).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(folder / "b.png")  # 64 wide, 48 high
    y, x = np.mgrid[0:64, 0:48]
    stripes = np.stack([x * 5, y * 4, ((x // 8 + y // 8) % 2) * 255], axis=-1).astype(np.uint8)
    Image.fromarray(stripes).save(folder / "c.png")  # 48 wide, 64 high
    return folder


def reference_pca(model_path, paths, block=-1, facet="token", **options):
    """explain.pca_rgb over the photos' patch features, as the command should compute it; the colours reshaped to
    the tiny models' 4 x 4 grid."""
    model = load_model(str(model_path))
    features = [
        patch_features(model, model.transform(load_image(p.read_bytes()))[None], block, facet)[0] for p in paths
    ]
    result = pca_rgb(features, **options)
    return result, [c.numpy().reshape(4, 4, 3) for c in result.colours]


def test_cli_features_pca_on_a_backbone_matches_pca_rgb(backbone, feature_photos, tmp_path, capsys):
    out = tmp_path / "out"
    assert explain(feature_photos, backbone, out, "--features", "pca") == 0
    assert "PCA over 3 images (block -1, token)" in capsys.readouterr().out
    # a backbone gives the PCA outputs only: no predictions, no method overlays
    assert {p.name for p in out.iterdir()} == {"pca.png", "pca.npz", "a_pca.png", "b_pca.png", "c_pca.png"}
    paths = sorted(feature_photos.iterdir())
    reference, colours = reference_pca(backbone, paths)
    saved = np.load(out / "pca.npz")
    assert set(saved.files) == {"explained_variance", "a_colours", "b_colours", "c_colours"}
    np.testing.assert_allclose(saved["explained_variance"], reference.explained_variance.numpy(), atol=1e-5)
    assert saved["explained_variance"].shape == (3,)
    model = load_model(str(backbone))
    pictures = []
    for path, expected in zip(paths, colours):
        assert saved[f"{path.stem}_colours"].shape == (4, 4, 3)
        np.testing.assert_allclose(saved[f"{path.stem}_colours"], expected, atol=1e-5)
        photo = load_image(path.read_bytes())
        picture = Image.open(out / f"{path.stem}_pca.png")
        assert picture.size == photo.size  # drawn on the photo at its own resolution
        painted = paint_patches(photo, expected, model.transform.crop_box(*photo.size))
        assert np.abs(np.asarray(picture, dtype=int) - np.asarray(painted, dtype=int)).max() <= 1
        pictures.append(picture)
    # the photos differ, so do their colours; one joint PCA: every channel spans [0, 1] over all images together
    assert not np.allclose(colours[0], colours[1]) and not np.allclose(colours[1], colours[2])
    joint = np.stack(colours).reshape(-1, 3)
    np.testing.assert_allclose(joint.min(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(joint.max(axis=0), 1, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(Image.open(out / "pca.png")), np.asarray(side_by_side(pictures)))


def test_cli_features_pca_with_a_classifier_writes_both_and_takes_block_and_facet(feature_photos, tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "classifier.pt")
    out = tmp_path / "out"
    pca_key = ["--methods", "rollout", "--features", "pca", "--facet", "key"]
    assert explain(feature_photos, checkpoint, out, *pca_key, "--feature-block", "0") == 0
    rows = list(csv.reader((out / "predictions.csv").read_text().splitlines()))
    assert [row[0] for row in rows[1:]] == [str(p) for p in sorted(feature_photos.iterdir())]
    for stem, size in (("a", (40, 40)), ("b", (64, 48)), ("c", (48, 64))):
        assert Image.open(out / f"{stem}_rollout.png").size == size
        assert np.load(out / f"{stem}.npz")["rollout"].shape == (4, 4)
        assert Image.open(out / f"{stem}_pca.png").size == size
    paths = sorted(feature_photos.iterdir())
    reference, colours = reference_pca(checkpoint, paths, block=0, facet="key")
    saved = np.load(out / "pca.npz")
    np.testing.assert_allclose(saved["explained_variance"], reference.explained_variance.numpy(), atol=1e-5)
    for path, expected in zip(paths, colours):
        np.testing.assert_allclose(saved[f"{path.stem}_colours"], expected, atol=1e-5)
    # the options reached the features: the default block and facet colour the patches otherwise
    _, default = reference_pca(checkpoint, paths)
    assert not np.allclose(default[0], colours[0], atol=1e-3)
    # a block counted from the end: -2 of 2 blocks is block 0
    other = tmp_path / "other"
    assert explain(feature_photos, checkpoint, other, *pca_key, "--feature-block", "-2") == 0
    np.testing.assert_allclose(np.load(other / "pca.npz")["a_colours"], colours[0], atol=1e-5)


def test_cli_features_pca_foreground_and_flip_first(backbone, feature_photos, tmp_path):
    paths = sorted(feature_photos.iterdir())
    transform = load_model(str(backbone)).transform
    foreground = {}
    for flip in (False, True):
        out = tmp_path / f"flip{flip}"
        argv = [
            str(feature_photos),
            "--model",
            str(backbone),
            "--features",
            "pca",
            "--foreground",
            "0.5",
            "--out",
            str(out),
        ] + (["--flip-first"] if flip else [])
        assert main(argv) == 0
        reference, colours = reference_pca(backbone, paths, foreground=0.5, flip_first=flip)
        saved = np.load(out / "pca.npz")
        np.testing.assert_allclose(saved["explained_variance"], reference.explained_variance.numpy(), atol=1e-5)
        masks = [m.numpy().reshape(4, 4) for m in reference.foreground]
        assert 0 < sum(m.sum() for m in masks) < 48  # the threshold splits the patches
        for path, expected, mask in zip(paths, colours, masks):
            got = saved[f"{path.stem}_colours"]
            np.testing.assert_allclose(got, expected, atol=1e-5)
            assert (got[~mask] == 0).all()  # the background is black, exactly
            np.testing.assert_array_equal(saved[f"{path.stem}_foreground"], mask)  # and the masks are saved
            photo = load_image(path.read_bytes())
            painted = paint_patches(photo, expected, transform.crop_box(*photo.size))
            saved_picture = np.asarray(Image.open(out / f"{path.stem}_pca.png"), dtype=int)
            assert np.abs(saved_picture - np.asarray(painted, dtype=int)).max() <= 1
        foreground[flip] = np.stack(masks)
    # the first component negated: the other side is the foreground
    assert not np.array_equal(foreground[True], foreground[False])
    # with --flip-first alone the first channel is mirrored: 1 - the unflipped one
    assert explain(feature_photos, backbone, tmp_path / "p", "--features", "pca", "--flip-first") == 0
    _, plain = reference_pca(backbone, paths)
    flipped = np.load(tmp_path / "p" / "pca.npz")["a_colours"]
    np.testing.assert_allclose(flipped[..., 0], 1 - plain[0][..., 0], atol=1e-5)
    np.testing.assert_allclose(flipped[..., 1:], plain[0][..., 1:], atol=1e-5)


def test_cli_features_pca_refuses_bad_foreground_thresholds(backbone, feature_photos, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        explain(feature_photos, backbone, out, "--features", "pca", "--foreground", "1.5")
    assert exit_info.value.code == 2
    assert "--foreground must be in [0, 1]" in capsys.readouterr().err
    assert not out.exists()  # refused before anything ran
    # 1 is a valid threshold, but no min-maxed score lies above it: a message, not a traceback
    with pytest.raises(SystemExit, match="error: no PCA colours: no patch scores above the foreground threshold 1.0"):
        explain(feature_photos, backbone, out, "--features", "pca", "--foreground", "1")
    assert not (out / "pca.npz").exists() and not (out / "pca.png").exists()


def test_cli_features_pca_limits(backbone, feature_photos, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(explain_command, "MAX_FEATURE_IMAGES", 2)
    with pytest.raises(SystemExit) as exit_info:
        explain(feature_photos, backbone, out, "--features", "pca")
    assert exit_info.value.code == 2
    assert "--features pca fits one PCA over every image, at most 2; got 3" in capsys.readouterr().err
    # at the limit it runs
    two = sorted(feature_photos.iterdir())[:2]
    assert main([*map(str, two), "--model", str(backbone), "--features", "pca", "--out", str(out)]) == 0
    _, colours = reference_pca(backbone, two)
    np.testing.assert_allclose(np.load(out / "pca.npz")["b_colours"], colours[1], atol=1e-5)
    for block in ("99", "2", "-3"):
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    *map(str, two),
                    "--model",
                    str(backbone),
                    "--features",
                    "pca",
                    "--feature-block",
                    block,
                    "--out",
                    str(tmp_path / "x"),
                ]
            )
        assert exit_info.value.code == 2
        assert "--feature-block must be in [0, 1] (or -1 for the last)" in capsys.readouterr().err


def test_cli_features_pca_skips_unreadable_images_and_numbers_shared_stems(backbone, images, tmp_path):
    """The old fixture: broken.png is skipped (status 1) and left out of the PCA; nested/wide.bmp and wide.png
    become "wide" and "wide-2"."""
    out = tmp_path / "out"
    assert explain(images, backbone, out, "--features", "pca") == 1
    readable = [images / "nested" / "tall.jpg", images / "nested" / "wide.bmp", images / "wide.png"]
    _, colours = reference_pca(backbone, readable)
    saved = np.load(out / "pca.npz")
    assert set(saved.files) == {"explained_variance", "tall_colours", "wide_colours", "wide-2_colours"}
    for name, expected in zip(("tall", "wide", "wide-2"), colours):
        np.testing.assert_allclose(saved[f"{name}_colours"], expected, atol=1e-5)
    assert Image.open(out / "wide_pca.png").size == (20, 20) and Image.open(out / "wide-2_pca.png").size == (64, 48)


def test_cli_on_a_backbone_without_features_says_what_it_can_do(backbone, feature_photos, tmp_path):
    with pytest.raises(
        SystemExit,
        match=r"has no classification head; vitviz.explain needs a classifier, "
        r"or --features pca",
    ):
        explain(feature_photos, backbone, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_feature_options_without_features_are_refused(backbone, feature_photos, tmp_path, capsys):
    for option in (["--facet", "key"], ["--foreground", "0.5"], ["--flip-first"], ["--feature-block", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main([str(feature_photos), "--model", str(backbone), "--out", str(tmp_path / "out"), *option])
        assert exit_info.value.code == 2
        assert "need --features pca" in capsys.readouterr().err
