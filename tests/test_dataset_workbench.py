"""The Dataset page's defects of issue 44, each with a test that failed before its fix: the CSV export's list columns
as JSON arrays, a latent's raised classes only those it raises, no Streamlit warning from a widget with both a
default and a session-state value, a query's error in one line without the page's wrapper, and no query folder left
behind by a caller killed with SIGKILL (the child removes it; the next query process sweeps those left anyway)."""

import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pytest
from dataset_harness import QUICK, ROOT, checked, dataset_app, open_tab, page_fixtures, tiny_index
from streamlit.delta_generator import DeltaGenerator

import vitviz
from vitviz.dataset import QueryError, sandbox
from vitviz_dashboard.dataset.grid import GRID_TAB, SELECTION, Selection

# a folder holding a tiny model, 24 generated images (and a broken one) and their index; fresh caches per test
built, page_settings = page_fixtures("dataset_workbench")


def streamlit_warnings(monkeypatch) -> list[str]:
    """The messages of Streamlit's warning that a widget has both a default and a session-state value, as logged."""
    from streamlit.elements.lib import policies

    warned: list[str] = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "warning", lambda message, *args, **kwargs: warned.append(message % args))
    return warned


# 13. the CSV export


def test_the_csv_export_writes_list_columns_as_json_arrays(built, monkeypatch):
    index = vitviz.open_index(built / "index")
    downloads = {}
    download_button = DeltaGenerator.download_button

    def recorded(self, label, data, *args, **kwargs):
        downloads[label] = data
        return download_button(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", recorded)
    at = dataset_app(built / "index")
    at.session_state[SELECTION] = Selection((0, 1, 2), "three images", "sql", str(index.folder))
    open_tab(at, GRID_TAB)
    written = pd.read_csv(io.BytesIO(downloads["Rows as CSV"]))
    expected = index.query("SELECT * FROM images WHERE image_id < 3 ORDER BY image_id")
    for column in ["top5_classes", "top5_indices", "top5_probabilities", "high_norm_patches"]:
        assert [json.loads(cell) for cell in written[column]] == [list(value) for value in expected[column]], column
    assert written["label"].tolist() == expected["label"].tolist()  # other columns as they were


# 14. a latent's raised classes


def test_raised_classes_leave_out_every_class_a_latent_lowers():
    from vitviz.sae.browse import raised_classes

    effects = np.array([-0.016, 0.3, 0.0, 0.1, 0.3])
    assert raised_classes(effects, ["airplane", "ship", "cat"], 5) == [
        ("ship", 0.3),
        ("class 4", 0.3),
        ("class 3", 0.1),
    ]
    assert raised_classes(effects, [], 1) == [("class 1", 0.3)]
    assert raised_classes(-np.abs(effects), ["airplane"], 5) == []


@pytest.fixture(scope="module")
def with_sae(tmp_path_factory):
    """A tiny model, an index storing block 0's activations and an SAE trained a few steps on it, in one folder."""
    from vitviz.commands.sae import main as sae_main

    root = tmp_path_factory.mktemp("dataset_workbench_sae")
    _, out = tiny_index(root, stored=["--shard-size", "8", "--activations", "0"], num_layers=2)
    assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "1", "--out", str(root / "sae")])
    return root


def test_a_latents_classes_it_raises_most_are_only_classes_it_raises(with_sae, monkeypatch):
    from vitviz_dashboard.dataset import sae_features

    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(with_sae))
    effects = {"now": np.array([-0.016, 0.2, 0.05])}  # cat lowered, dog and bird raised (tiny_checkpoint's names)
    monkeypatch.setattr(sae_features, "latent_effects", lambda *args, **kwargs: (effects["now"], np.zeros((0, 4))))
    at = open_tab(dataset_app(with_sae / "index"), "Features (SAE)")
    at.text_input(key=sae_features.SAE_FOLDER).set_value(str(with_sae / "sae"))
    checked(at.run())
    assert not at.error, [e.value for e in at.error]
    [table] = [d.value for d in at.dataframe if "logit change" in d.value.columns]
    assert table["class"].tolist() == ["dog", "bird"]
    effects["now"] = np.array([-0.016, -0.2, 0.0])
    checked(at.run())
    assert not [d for d in at.dataframe if "logit change" in d.value.columns]
    assert any(c.value.startswith("None: it raises no class's logit") for c in at.caption)


# 21. no widget with both a default and a session-state value


def test_moving_the_confidence_slider_logs_no_streamlit_warning(built, monkeypatch):
    warned = streamlit_warnings(monkeypatch)
    at = open_tab(dataset_app(built / "index"), "Table")
    at.slider(key="kept|dataset|confidence").set_value((0.2, 0.9))
    checked(at.run())
    checked(at.run())  # a run after the move, as the page's own reruns make
    assert at.slider(key="kept|dataset|confidence").value == (0.2, 0.9)
    assert any("images match" in c.value for c in at.caption)
    assert not warned, warned


def test_a_patch_search_click_logs_no_streamlit_warning(built, monkeypatch):
    from vitviz_dashboard.dataset.search import CLICKED

    warned = streamlit_warnings(monkeypatch)
    at = open_tab(dataset_app(built / "index"), "Patch search")
    assert (at.number_input(key="dataset|search_row").value, at.number_input(key="dataset|search_col").value) == (2, 2)
    at.session_state[CLICKED] = (1, 3)  # what a click on the photo leaves for the next run
    checked(at.run())
    assert (at.number_input(key="dataset|search_row").value, at.number_input(key="dataset|search_col").value) == (1, 3)
    assert not warned, warned


# 22. a query's error in one line


@pytest.mark.parametrize(
    "sql, words",
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "reads something outside the index"),
        ("SELECT * FROM read_parquet('/tmp/elsewhere.parquet')", "reads something outside the index"),
        ("SELECT nope FROM images", 'Binder Error: Referenced column "nope" not found'),
        ("SELEC 1", 'the query does not parse: Parser Error: syntax error at or near "SELEC"'),
    ],
)
def test_a_query_error_is_one_line_without_the_pages_wrapper(built, sql, words):
    index = vitviz.open_index(built / "index")
    with pytest.raises(QueryError) as raised:
        index.query(sql)
    message = str(raised.value)
    assert words in message and "\n" not in message, message
    assert "LIMIT 10001" not in message and "OFFSET" not in message and "^" not in message, message


# 24. no query folder outlives its caller

CALLER = """
import sys
import vitviz

vitviz.open_index(sys.argv[1]).query("SELECT count(*) AS n FROM images")
print("queried", flush=True)
sys.stdin.read()  # until killed
"""


def wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_query_folder_goes_when_its_caller_is_killed(built, tmp_path):
    env = os.environ | {"TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(built / "index")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert caller.stdout.readline().strip() == "queried"
        [folder] = tmp_path.glob("vitviz-query-*")
        caller.send_signal(signal.SIGKILL)
        caller.wait(30)
        assert wait_until(lambda: not folder.exists()), f"{folder} outlived its caller"
    finally:
        caller.kill()
        caller.wait(30)


def test_a_new_query_process_sweeps_the_folders_of_callers_that_are_gone(built, tmp_path, monkeypatch):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(ended.stdout)  # a pid that no longer runs (taken again by now only by a rare chance)
    left = tmp_path / f"vitviz-query-{gone}-left"  # its caller and child both killed
    (left / "spill").mkdir(parents=True)
    (left / ".owner").touch()
    held = tmp_path / f"vitviz-query-{gone}-held"  # its lock held: a caller of another PID namespace, say
    held.mkdir()
    lock = os.open(held / ".owner", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    running = tmp_path / f"vitviz-query-{os.getppid()}-running"  # a caller that runs
    running.mkdir()
    other = tmp_path / "vitviz-query-unowned"  # a name without a pid: not ours to judge
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sandbox.close_all()  # no idle query process: the query starts a new one
    try:
        assert vitviz.open_index(built / "index").query("SELECT 1 AS one")["one"].tolist() == [1]
    finally:
        sandbox.close_all()
        os.close(lock)
    assert not left.exists()
    assert held.exists() and running.exists() and other.exists()


# 15. readable names, not raw keys


def test_maps_and_a_latents_slices_are_named_in_words(built, with_sae, monkeypatch):
    at = open_tab(dataset_app(built / "index"), "Errors")
    options = at.selectbox(key="dataset|class_map").options
    assert "last block's readout attention, head 2" in options and not [o for o in options if ":" in o], options
    index = vitviz.open_index(built / "index")
    at.session_state[SELECTION] = Selection((0, 1, 2), "three images", "sql", str(index.folder))
    at = open_tab(at, GRID_TAB)
    at.selectbox(key="dataset|grid_map").set_value("readout:3")
    checked(at.run())
    legends = [i.proto.imgs[0].caption for i in at.get("image") if "one scale" in i.proto.imgs[0].caption]
    assert legends == ["last block's readout attention, head 3: one scale for the page"]
    # the Features tab's "Where it fires" slices: fires and does not fire, not True and False
    from vitviz_dashboard.dataset import sae_features

    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(with_sae))
    at = open_tab(dataset_app(with_sae / "index"), "Features (SAE)")
    at.text_input(key=sae_features.SAE_FOLDER).set_value(str(with_sae / "sae"))
    checked(at.run())
    slices = at.dataframe[-1].value
    assert set(slices["slice"]) <= {"all images", "fires", "does not fire"} and "fires" in set(slices["slice"])


# 16. the per-class mean maps' colour scale


def test_the_per_class_mean_maps_share_one_colour_scale_with_its_legend(built):
    from vitviz.dataset.views import class_mean_map

    index = vitviz.open_index(built / "index")
    at = open_tab(dataset_app(built / "index"), "Errors")
    means = np.stack(
        [
            class_mean_map(index, label, "rollout")[0]
            for label in ("bird", "cat", "dog")
            if index.query(f"SELECT count(*) AS n FROM images WHERE label = '{label}'")["n"][0]
        ]
    )
    captions = [i.proto.imgs[0].caption for i in at.get("image")]
    assert "attention rollout: one scale for every class" in captions
    ends = [c.value for c in at.caption]
    assert f"{means.min():.3g}" in ends and f"{means.max():.3g}" in ends
