"""What the page keeps between runs, within one memory budget.

budget.py        the byte-bounded store shared by every session (VITVIZ_MEMORY_BUDGET) and its ``kept`` decorator
pictures.py      pictures of the photo, keyed by its digest: decoded and shown photo, overlays, grids, figures
results.py       the model and what it computes, keyed by ModelKey: the analysis, maps, features, rankings
vlm.py           the Ask page's vision-language model and its answers, relevance and lens, keyed by VLMKey, AnswerKey
"""
