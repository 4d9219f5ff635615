"""A Hugging Face Hub cache laid out by hand, so the loaders find a "downloaded" repository with no network."""

from pathlib import Path

from huggingface_hub import constants

import vitviz.loading.download

TIMM_NAME = "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cached_snapshot(cache: Path, repo_id: str) -> Path:
    """The folder huggingface_hub keeps a repository's files in, as its cache lays it out."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    return snapshot


def offline_cache(cache: Path, monkeypatch) -> Path:
    """Patches huggingface_hub to read only ``cache``, offline, and vitviz to find the Hub unreachable; returns it."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(vitviz.loading.download, "hub_reachable", lambda timeout=None: False)
    return cache
