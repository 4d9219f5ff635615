"""vitviz in the notebook: ``vitviz.show(...)`` returns an anywidget view that runs in JupyterLab, Notebook 7, VS Code,
Colab and marimo (``mo.ui.anywidget``). Python computes; the browser draws; every setting is a synced traitlet.

    show.py        show(subject, ...): the way in, picking the view by what it is given
    base.py        MapView: what every view shares (the frame, values, to_html, the PNG of its mimebundle)
    view.py        PhotoView: a ViT's maps over photos, predictions beside them (show(model, images))
    photos.py      PhotoAnalyses: the analysis a photo view holds and every map read from it, cached
    answers.py     AnswerView: a VLM answer's tokens and the chosen token's map over the photo (show(answer, photo))
    index_view.py  IndexView: a grid of a dataset index's selection with its stored maps (show(index, where=...))
    packing.py     what goes to the browser, packed small: uint8 maps on one scale, JPEG photos, the colour table
    export.py      a view out of the kernel: one offline HTML file and one PNG
    view.js        the views' script: one plain ES module with a mode per view, shipped in the package (no build
                   step, no CDN)
    view.css       its style

Imports flow one way: show -> view, answers, index_view -> base -> export, packing; photos -> analysis, explain;
answers -> vlm; index_view -> dataset; everything -> render.
"""

from vitviz.notebook.base import MapView
from vitviz.notebook.show import show
from vitviz.notebook.view import PhotoView

__all__ = ["MapView", "PhotoView", "show"]
