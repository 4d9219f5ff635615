"""Indexing from the Dataset page with the command's options (issue 36, 3.10): block activations stored for the
Features tab and `vitviz sae`, and a CSV's path and label columns; bad blocks get one line."""

import pytest
from dataset_harness import checked, dataset_app, fresh_page, make_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz_dashboard.state import DATASET_FOLDER


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("page_indexing")
    tiny_checkpoint(root / "model.pt", num_layers=3)
    images = make_images(root / "images", count=6)
    rows = ["file,kind"] + [f"{p.relative_to(root)},{p.parent.name}-x" for p in sorted(images.glob("*/0*.png"))]
    (root / "list.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(autouse=True)
def page_settings(monkeypatch, built):
    fresh_page(monkeypatch, built)


def index_from_page(built, source, out, **fields):
    at = dataset_app("")
    at.text_input(key="dataset|source").set_value(str(source))
    at.text_input(key="dataset|out").set_value(str(out))
    at.text_input(key="dataset|model").set_value(str(built / "model.pt"))
    for key, value in fields.items():
        at.text_input(key=f"dataset|{key}").set_value(value)
    checked(at.run())
    return checked(at.button(key="dataset|index").click().run())


def test_activations_and_csv_columns_from_the_page(built):
    at = index_from_page(
        built, built / "list.csv", built / "made", activations="2, 0", path_column="file", label_column="kind"
    )
    assert not at.error, [e.value for e in at.error]
    assert at.sidebar.text_input(key=str(DATASET_FOLDER)).value == str(built / "made")
    made = vitviz.open_index(built / "made")
    assert made.activation_blocks == [0, 2]
    labels = made.query("SELECT DISTINCT label FROM images ORDER BY label")["label"].tolist()
    assert labels == ["cat-x", "dog-x"]
    assert made.activations([0], 2).shape[0] == 1


@pytest.mark.parametrize(("blocks", "message"), [("two", "blocks are whole numbers"), ("5", "blocks 0 to 2")])
def test_bad_blocks_get_one_line(built, blocks, message):
    at = index_from_page(built, built / "images", built / f"bad-{blocks}", activations=blocks)
    assert len(at.error) == 1 and message in at.error[0].value, [e.value for e in at.error]
    assert not (built / f"bad-{blocks}" / "manifest.json").exists()
