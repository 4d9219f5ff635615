"""vitviz: see what a Vision Transformer looks at.

    messages.py       one-line message helpers (clip_text, echo, counted): the bottom layer, importing no vitviz
    layout/           TokenLayout: every token's kind, pixels and frames, and painting any per-token vector
    model/            ViTConfig and the ViT that returns its attentions; Swin and Swin v2; interventions, precision
    loading/          load_model(spec): checkpoints, downloads, and one module per source library
    preprocessing.py  bytes in, safe RGB image out (load_image); image in, model tensor out (Preprocessing)
    video.py          a video file in, its sampled RGB frames out (load_video), with PyAV
    video_clips.py    a video file in, a video model's clip and its maps out (vitviz explain and the Video page)
    explain/          explanation maps and statistics: pure functions of attentions, gradients and the model
    analysis.py       images through a model once, with every map and statistic the page and the index show
    text/             text towers, prompts and zero-shot heads (CLIP, SigLIP)
    render/           arrays in, pictures and plotly figures out (no streamlit)
    training/         training a ViT: data, loop, augmentation on the device, metrics
    dataset/          the dataset index: one pass over a whole dataset, stored and queried
    sae/              sparse autoencoders on a block's activations
    vlm/              vision-language models (transformers): where an answer's tokens look in the photo
    notebook/         vitviz.show(...): anywidget views for Jupyter, VS Code, Colab and marimo, and their offline HTML
    commands/         the `vitviz` command: one module per subcommand (`python -m vitviz` runs it too)

Imports flow one way: commands, notebook -> everything below; dataset -> analysis -> explain; dataset, sae -> explain,
loading, model; vlm -> explain (Target), loading, model; explain, text, render, loading -> model -> layout; nothing
here imports streamlit or the dashboard (tests/test_layout.py checks).
"""

from vitviz.explain.target import Target
from vitviz.loading import (
    ModelLoadError,
    from_huggingface,
    from_open_clip,
    from_timm,
    from_torchvision,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from vitviz.model import Swin, SwinConfig, SwinOutput, ViT, ViTConfig, ViTOutput, autocast
from vitviz.preprocessing import Preprocessing, load_image
from vitviz.text import zero_shot
from vitviz.video import VideoError, load_video


def __getattr__(name: str):
    """``vitviz.open_index`` (vitviz.dataset.open_index) is imported when first asked for, so that ``import vitviz``
    never loads the dataset index's libraries."""
    if name == "open_index":
        from vitviz.dataset import open_index

        return open_index
    raise AttributeError(f"module 'vitviz' has no attribute {name!r}")


def show(*args, **kwargs):
    """An interactive notebook view (vitviz.notebook.show); imported when first called, so that ``import vitviz``
    never loads the widget libraries."""
    from vitviz.notebook import show as notebook_show

    return notebook_show(*args, **kwargs)


__all__ = [
    "ModelLoadError",
    "Preprocessing",
    "Swin",
    "SwinConfig",
    "SwinOutput",
    "Target",
    "ViT",
    "ViTConfig",
    "VideoError",
    "ViTOutput",
    "autocast",
    "from_huggingface",
    "from_open_clip",
    "from_timm",
    "from_torchvision",
    "load_checkpoint",
    "load_image",
    "load_model",
    "load_video",
    "open_index",
    "save_checkpoint",
    "show",
    "zero_shot",
]
