"""`vitviz index` on a few dozen generated 32 x 32 images and a tiny random model: stored values against the
per-image API, the sources, search against brute force, and the read-only SQL."""

import numpy as np
import pytest
import torch
from dataset_harness import make_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz import explain
from vitviz.analysis import analyse_image
from vitviz.commands.index import main
from vitviz.dataset import QueryError
from vitviz.dataset.indexing import IndexOptions, analyse_batch
from vitviz.dataset.search import build_vector_index, exact_neighbours, normalised, recall_at
from vitviz.loading.specs import load_model
from vitviz.preprocessing import load_image

FP16 = {"rtol": 2e-3, "atol": 2e-3}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    model_path = tiny_checkpoint(root / "model.pt")
    images = make_images(root / "images")
    out = root / "index"
    assert (
        main([str(images), "--model", str(model_path), "--out", str(out), "--shard-size", "8", "--batch-size", "5"])
        == 0
    )
    return model_path, images, out, vitviz.open_index(out)


def test_stored_values_equal_the_per_image_api(built):
    model_path, images, _, index = built
    model = load_model(model_path)
    table = index.query("SELECT * FROM images WHERE error IS NULL ORDER BY image_id")
    assert len(table) == 24
    for row in table.itertuples():
        image = load_image((images / row.path).read_bytes())
        single = analyse_image(model, image)
        assert (row.width, row.height) == image.size
        top = np.argsort(-single.probabilities, kind="stable")[:3]
        assert list(row.top5_classes) == [model.class_names[i] for i in top]
        np.testing.assert_allclose(row.top5_probabilities, single.probabilities[top], rtol=1e-5)
        assert row.prediction == model.class_names[top[0]] and row.correct == (row.label == row.prediction)
        np.testing.assert_allclose(index.maps(row.image_id, "rollout")[0], single.rollout, **FP16)
        for head in range(4):
            np.testing.assert_allclose(
                index.maps(row.image_id, f"readout:{head}")[0], single.readout_attention[-1, head], **FP16
            )
        heads = index.query(f"SELECT * FROM heads WHERE image_id = {row.image_id} ORDER BY layer, head")
        np.testing.assert_allclose(heads["entropy"], single.statistics["entropy"].flatten(), rtol=1e-5)
        np.testing.assert_allclose(heads["distance_px"], single.statistics["distance_px"].flatten(), rtol=1e-5)
        np.testing.assert_allclose(heads["distance_patches"], single.statistics["distance_px"].flatten() / 8, rtol=1e-5)
        np.testing.assert_allclose(
            heads["to_cls"], single.statistics["prefix_shares"][..., 0].flatten(), rtol=1e-5, atol=1e-7
        )
        np.testing.assert_allclose(heads["to_patches"], single.statistics["prefix_shares"][..., 1].flatten(), rtol=1e-5)
        features = explain.patch_features(model, single.pixel_values, -1)[0].reshape(4, 4, -1)
        np.testing.assert_allclose(index.features(row.image_id)[0], features, rtol=2e-3, atol=5e-3)
        np.testing.assert_allclose(
            index.embeddings(row.image_id)[0], model(single.pixel_values).pooled[0].detach(), rtol=1e-5, atol=1e-6
        )
        outliers = explain.high_norm_patches(single.token_norms[-1], 1).nonzero().flatten().tolist()
        assert list(row.high_norm_patches) == outliers


def test_unreadable_file_is_recorded_and_the_run_goes_on(built):
    index = built[3]
    broken = index.query("SELECT * FROM images WHERE error IS NOT NULL")
    assert broken["path"].tolist() == ["cat/broken.png"] and "not an image" in broken["error"][0]
    assert broken["prediction"].isna().all() and index.count == 25
    assert index.query("SELECT count(*) AS n FROM heads")["n"][0] == 24 * 2 * 4  # no head rows for it


def test_nearest_patches_equal_brute_force_cosine(built):
    index = built[3]
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].to_numpy()
    flat = normalised(index.features(readable).reshape(-1, index.features(0).shape[-1]))  # (n * 16, D)
    for image_id, patch in ((0, (0, 0)), (7, (2, 3)), (readable[-1], (3, 1))):
        found = index.nearest_patches(int(image_id), patch, k=6)
        query = normalised(index.features(int(image_id))[0][patch])
        scores = flat @ query
        best = np.argsort(-scores, kind="stable")[:6]
        assert found["image_id"].tolist() == readable[best // 16].tolist()
        assert (found["row"] * 4 + found["col"]).tolist() == (best % 16).tolist()
        np.testing.assert_allclose(found["similarity"], scores[best], rtol=1e-5, atol=1e-5)
    near = index.nearest_images(3, k=4)
    embeddings = normalised(index.embeddings(readable))
    expected = readable[np.argsort(-(embeddings @ normalised(index.embeddings(3)[0])), kind="stable")[:4]]
    assert near["image_id"].tolist() == expected.tolist()


def test_approximate_search_reaches_its_recall():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((6000, 16)).astype(np.float32)

    def chunks():
        for start in range(0, len(vectors), 1000):
            yield np.arange(start, start + 1000), vectors[start : start + 1000]

    index, info = build_vector_index(chunks, len(vectors), 16, exact_limit=1000)
    assert info["kind"] == "ivf" and info["recall_at_10"] >= 0.95
    queries = normalised(vectors[:50])
    _, found = index.search(queries, 10)
    assert recall_at(found, exact_neighbours(queries, chunks, 10)) >= 0.9


@pytest.mark.parametrize(
    "sql",
    [
        "COPY images TO '/tmp/stolen.csv'",
        "ATTACH '/tmp/other.db' AS other",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM '/etc/hostname'",
        "SELECT * FROM read_parquet('/tmp/*.parquet')",
        "INSTALL httpfs",
        "CREATE TABLE t AS SELECT 1",
        "SET enable_external_access = true",
        "SELECT 1; SELECT 2",
    ],
)
def test_sql_is_read_only(built, sql):
    with pytest.raises(QueryError, match="only SELECT|outside the index|exactly one|could not run"):
        built[3].query(sql)


def test_a_huge_result_comes_a_page_at_a_time(built):
    index = built[3]
    first = index.query("SELECT range AS n FROM range(1000000)", limit=1000)
    assert len(first) == 1000 and first.attrs["more"]
    last = index.query("SELECT range AS n FROM range(1000000)", limit=1000, offset=999_500)
    assert len(last) == 500 and not last.attrs["more"] and last["n"].iloc[-1] == 999_999


def test_batched_pass_equals_images_one_by_one(tmp_path):
    model = load_model(tiny_checkpoint(tmp_path / "m.pt", num_register_tokens=2))
    pixels = torch.randn(3, 3, 32, 32)
    batch = analyse_batch(model, pixels, IndexOptions())
    for i in range(3):
        one = analyse_batch(model, pixels[i : i + 1], IndexOptions())
        for name, value in one.items():
            torch.testing.assert_close(batch[name][i], value[0], rtol=1e-4, atol=1e-5)
    assert batch["prefix_shares"].shape == (3, 2, 4, 4)  # cls, reg0, reg1, patches


def test_pca_key_facet_relevance_and_faithfulness(built, tmp_path):
    model_path, images, _, _ = built
    out = tmp_path / "pca"
    assert (
        main(
            [
                str(images),
                "--model",
                str(model_path),
                "--out",
                str(out),
                "--pca",
                "3",
                "--facet",
                "key",
                "--limit",
                "10",
                "--relevance",
                "--faithfulness",
            ]
        )
        == 0
    )
    index = vitviz.open_index(out)
    assert index.features([0, 1]).shape == (2, 4, 4, 3) and index.manifest["pca"]["components"] == 3
    assert index.maps([0, 2], "relevance").shape == (2, 4, 4)
    model = load_model(model_path)
    first = index.query("SELECT path FROM images WHERE image_id = 0")["path"][0]
    pixels = model.transform(load_image((images / first).read_bytes()))[None]
    expected = explain.method_maps(model, pixels, ["relevance"]).maps["relevance"]
    np.testing.assert_allclose(index.maps(0, "relevance")[0], expected, **FP16)
    pca = np.load(out / "pca.npz")
    keys = explain.patch_features(model, pixels, -1, "key")[0].numpy()  # (16, heads * head_dim)
    np.testing.assert_allclose(
        index.features(0)[0].reshape(16, 3), (keys - pca["mean"]) @ pca["components"].T, rtol=2e-3, atol=2e-3
    )
    stored = index.query(
        "SELECT prediction_index, faithfulness_most_first AS m, faithfulness_least_first AS l "
        "FROM images WHERE image_id = 0"
    )
    curves = explain.faithfulness(model, pixels, expected, int(stored["prediction_index"][0]))
    np.testing.assert_allclose(
        [stored["m"][0], stored["l"][0]], [curves["auc_most_first"], curves["auc_least_first"]], rtol=1e-3, atol=1e-3
    )


def test_values_beyond_float16_are_refused_not_stored_as_infinity(built, tmp_path):
    """Features and activations are stored in fp16: a model whose tokens reach past 65,504 gets a message, never a
    shard of silent infinities."""
    from vitviz.dataset.build import build_index
    from vitviz.dataset.sources import open_source
    from vitviz.dataset.storage import IndexFormatError

    model_path, images, _, _ = built
    model = load_model(model_path)
    with torch.no_grad():
        model.patch_embed.proj.weight.mul_(1e6)  # the residual stream now holds values far beyond fp16's range
    with pytest.raises(IndexFormatError, match="features reaches .* beyond float16's largest value"):
        build_index(model, open_source(images), tmp_path / "huge", IndexOptions(), str(model_path))
    stored = build_index(model, open_source(images), tmp_path / "plain", IndexOptions(features=False), "x")
    assert stored["count"] > 0  # without the fp16 arrays (maps are fp16 too, but they are shares of 1)
