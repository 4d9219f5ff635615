"""What the page keeps between runs, within one memory budget.

budget.py        the byte-bounded store shared by every session (VITVIZ_MEMORY_BUDGET) and its ``kept`` decorator
pictures.py      pictures of the photo, keyed by its digest: decoded and shown photo, overlays, grids, figures;
                 the sample photos offered before any upload
results.py       the model and what it computes, keyed by ModelKey: the analysis, maps, features, rankings
models.py        what is built from a loaded model: its zero-shot model of a prompt set, its measured precision
dataset.py       the Dataset page's open index and photo reader (shared resources), and what is computed from the
                 index, keyed by its folder and manifest stamp: head means, per-image samples, queries and keys, photos
sae.py           sparse autoencoders: Hub files fetched, SAEs loaded (shared resources), a photo's codes
video.py         the Video page's results, keyed by ModelKey and the video's digest: the clip's frames, its maps
                 with the prediction, a token's attention, the attention between frames; the sample clip
vlm.py           the Ask page's vision-language model and its answers, relevance and lens, keyed by VLMKey, AnswerKey
"""
