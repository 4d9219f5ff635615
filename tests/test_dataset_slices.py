"""vitviz.dataset.analysis.slice_accuracy against a direct pandas computation: slices by a text column, a boolean
column, a numeric column cut into quantile bins, missing values, images without a prediction."""

import numpy as np
import pandas as pd
import pytest

from vitviz.dataset.analysis import OVERALL, slice_accuracy


def images(n=200, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    correct = pd.Series(rng.random(n) < 0.7, dtype="boolean")
    correct[rng.random(n) < 0.1] = pd.NA  # unlabelled
    return pd.DataFrame(
        {
            "label": rng.choice(["cat", "dog", "o'clock"], n),
            "correct": correct,
            "probability": rng.random(n),
            "width": rng.integers(10, 500, n),
            "fires": rng.random(n) < 0.3,
        }
    )


def expected(frame: pd.DataFrame, keys: pd.Series) -> pd.DataFrame:
    correct = frame["correct"].astype("float64")
    grouped = pd.DataFrame({"slice": keys, "c": correct, "p": frame["probability"]}).groupby("slice")
    parts = pd.DataFrame(
        {
            "images": grouped.size(),
            "labelled": grouped["c"].count(),
            "accuracy": grouped["c"].mean(),
            "mean_probability": grouped["p"].mean(),
        }
    ).reset_index()
    first = {
        "slice": OVERALL,
        "images": len(frame),
        "labelled": int(correct.notna().sum()),
        "accuracy": correct.mean(),
        "mean_probability": frame["probability"].mean(),
    }
    return pd.concat([pd.DataFrame([first]), parts], ignore_index=True)


@pytest.mark.parametrize("by", ["label", "fires"])
def test_slices_by_a_column_equal_pandas(by):
    frame = images()
    table = slice_accuracy(frame, by)
    pd.testing.assert_frame_equal(table, expected(frame, frame[by].astype(str)), check_dtype=False)
    assert table["images"].iloc[1:].sum() == len(frame) == table["images"].iloc[0]


def test_a_numeric_column_is_cut_into_quantile_bins_and_a_missing_value_is_its_own_slice():
    frame = images()
    frame["width"] = frame["width"].astype("float64")
    frame.loc[:4, "width"] = np.nan
    table = slice_accuracy(frame, "width", bins=4)
    keys = pd.qcut(frame["width"], 4).astype(str).where(frame["width"].notna(), "missing")
    pd.testing.assert_frame_equal(table, expected(frame, keys), check_dtype=False)
    assert len(table) == 1 + 4 + 1 and (table["slice"] == "missing").sum() == 1
    assert table.loc[table["slice"] == "missing", "images"].item() == 5


def test_an_unknown_column_is_refused_with_one_line():
    with pytest.raises(ValueError, match="no column 'nope' to slice by"):
        slice_accuracy(images(), "nope")


def test_the_chart_keeps_counts_at_the_bars_feet_clear_of_the_overall_line():
    from vitviz_dashboard.dataset.slices import chart

    table = slice_accuracy(images(), "label")
    figure = chart(table, "label")
    [bars] = figure.data
    assert bars.textposition == "inside" and bars.insidetextanchor == "start"
    assert list(bars.text) == [f"n={n}" for n in table["images"].iloc[1:]]
    [line] = figure.layout.shapes
    assert line.y0 == pytest.approx(table["accuracy"].iloc[0])
    assert figure.layout.annotations[0].text.startswith("all images")


CIFAR = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def test_the_crossed_chart_draws_every_label_and_prediction_in_order():
    """label x prediction over ten classes, every pair present: a bar for each (bird x bird included), one group
    of bars per prediction, the label axis in its values' order (not the order the groups' bars came in)."""
    from vitviz.dataset.analysis import slice_summary
    from vitviz_dashboard.dataset.slices import chart, chart_note

    rng = np.random.default_rng(3)
    label = np.repeat(CIFAR, 30)
    prediction = np.where(rng.random(300) < 0.5, label, rng.choice(CIFAR, 300))
    frame = pd.DataFrame(
        {
            "label": label,
            "prediction": prediction,
            "correct": pd.Series(label == prediction, dtype="boolean"),
            "probability": rng.random(300),
        }
    )
    table = slice_summary(frame, ["label", "prediction"])
    figure = chart(table, ["label", "prediction"])
    assert sorted(trace.name for trace in figure.data) == CIFAR  # every prediction, bird and deer too
    drawn = {(str(x), trace.name) for trace in figure.data for x in trace.x}
    assert drawn == set(zip(table["label"].iloc[1:].astype(str), table["prediction"].iloc[1:].astype(str)))
    assert ("bird", "bird") in drawn
    assert list(figure.layout.xaxis.categoryarray) == CIFAR and figure.layout.xaxis.categoryorder == "array"
    assert chart_note(table, ["label", "prediction"]) == ""
