"""The Ask page's charts (vitviz.render.answers): whole layers on the share chart's axis, and the legends at the top
of the charts, never over the plots nor the x-axis titles (wrong at 800 px, on a 2-layer model, and at 1920 px)."""

import numpy as np
import pytest
from PIL import Image
from tiny_vlms import tiny_vlm_folder

from vitviz.render.answers import curve_figure, image_share_figure
from vitviz.vlm import load_vlm


@pytest.fixture(scope="module")
def answer(tmp_path_factory):
    model = load_vlm(tiny_vlm_folder("llava", tmp_path_factory))
    photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8))
    return model.answer(photo, "what is this", answer="a cat")


def test_the_share_chart_marks_whole_layers_and_keeps_its_legend_off_the_plot(answer):
    figure = image_share_figure(answer)
    layers = answer.image_attention.shape[1]
    assert figure.layout.xaxis.tickmode == "linear" and figure.layout.xaxis.dtick == max(1, round(layers / 10))
    assert float(figure.layout.xaxis.dtick).is_integer()
    assert figure.layout.legend.yref == "container" and figure.layout.legend.yanchor == "top"
    assert [list(trace.x) for trace in figure.data] == [list(range(layers))] * 3


def test_the_knockout_chart_keeps_its_legend_off_the_plot():
    figure = curve_figure({"most relevant first": ([0.0, 0.5], [-1.0, -2.0])}, "log-probability")
    assert figure.layout.legend.yref == "container" and figure.layout.legend.yanchor == "top"
