"""Token layouts: for every token of a model's input, what it is and which pixels and frames it covers.

    tokens.py    TokenLayout (kinds, boxes, frames, windows, grid), paint and grid_view; grid_layout for a plain ViT
    windows.py   window_layout: a Swin stage's grid of tokens with the windows its block attends in; is_hierarchical

Models return theirs as ``output.layout`` (the tokens maps are drawn on) and ``output.layouts`` (one per block).
"""

from vitviz.layout.tokens import PREFIX_KINDS, TokenLayout, grid_layout, prefix_kinds
from vitviz.layout.windows import is_hierarchical, same_tokens, window_layout

__all__ = [
    "PREFIX_KINDS",
    "TokenLayout",
    "grid_layout",
    "is_hierarchical",
    "prefix_kinds",
    "same_tokens",
    "window_layout",
]
