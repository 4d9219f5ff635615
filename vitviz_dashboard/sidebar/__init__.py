"""The sidebar's sections.

model_picker.py  which model (presets, specs, a path or an upload), what it is, and the display settings
model_dirs.py    which typed paths and specs the page may open (VITVIZ_MODEL_DIRS)
prompts.py       prompts as classes for a model with a text tower (CLIP, SigLIP), and its zero-shot model
"""
