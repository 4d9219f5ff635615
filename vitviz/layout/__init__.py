"""Token layouts: for every token of a model's input, what it is and which pixels and frames it covers.

    tokens.py    TokenLayout (kinds, boxes, frames, windows, grid), paint and grid_view; grid_layout for a plain ViT

Models return theirs as ``output.layout`` (the tokens maps are drawn on) and ``output.layouts`` (one per block).
"""

from vitviz.layout.tokens import PREFIX_KINDS, TokenLayout, grid_layout, prefix_kinds

__all__ = ["PREFIX_KINDS", "TokenLayout", "grid_layout", "prefix_kinds"]
