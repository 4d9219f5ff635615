"""Where an SAE spec's files are: a local file or folder as it is, or ``hf:<owner>/<repo>[/<subfolder or file>]``
fetched through huggingface_hub's cache under vitviz's offline rules (vitviz.loading.download: the Hub is asked
once, briefly; without an answer, or with HF_HUB_OFFLINE set, only the cache is read).

Only the files an SAE needs are fetched: the subfolder's (or, at the root, the names the formats use), the run's
``config.json`` and saev's ``manifest.jsonl`` -- never a whole repository of dozens of checkpoints.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from vitviz.loading.download import PROGRESS_BAR, REPO_ID, cache_folder, hub_error, hub_reachable, offline_by_setting
from vitviz.loading.specs import HUB_PREFIX
from vitviz.messages import clip_text
from vitviz.sae.errors import SAEFormatError

PREFIX = HUB_PREFIX  # "hf:", as for models
ROOT_FILES = [  # the files an SAE at a repository's root is made of, in every format vitviz reads
    "sae.pt",
    "manifest.jsonl",
    "cfg.json",
    "config.json",
    "sae_weights.safetensors",
    "sae.safetensors",
    "sparsity.safetensors",
    "n_images_*.pt",
]


def split_spec(spec: str) -> tuple[str, str]:
    """``hf:owner/repo/sub/folder`` -> ("owner/repo", "sub/folder"); a one-line SAEFormatError when malformed."""
    parts = spec[len(PREFIX) :].strip("/").split("/")
    repo_id, sub = "/".join(parts[:2]), "/".join(parts[2:])
    if len(parts) < 2 or not REPO_ID.fullmatch(repo_id) or any(p in ("", ".", "..") for p in parts[2:]):
        raise SAEFormatError(
            f"{clip_text(spec)} is not an SAE on the Hub: write hf:<owner>/<repo>[/<subfolder>] "
            "(e.g. hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K)"
        )
    return repo_id, sub


def local_path(spec: str | Path) -> Path:
    """The local file or folder a spec names, fetching it from the Hub first for ``hf:`` specs."""
    if isinstance(spec, Path) or not str(spec).startswith(PREFIX):
        path = Path(spec)
        if not path.exists():
            raise SAEFormatError(f"{clip_text(str(path))} does not exist")
        return path
    repo_id, sub = split_spec(spec)
    if not sub:
        patterns = ROOT_FILES
    else:
        parent = str(PurePosixPath(sub).parent)
        patterns = [sub, f"{sub}/*", "manifest.jsonl", "config.json"]
        patterns += [f"{parent}/*.json", f"{parent}/config.json"] if parent != "." else []
    snapshot = _snapshot(repo_id, patterns, spec)
    path = snapshot / sub if sub else snapshot
    if not path.exists():
        raise SAEFormatError(f"{clip_text(spec)}: the repository {repo_id} has no {clip_text(sub)}")
    return path


def _snapshot(repo_id: str, patterns: list[str], spec: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    offline = not hub_reachable()
    try:
        return Path(
            snapshot_download(repo_id, allow_patterns=patterns, local_files_only=offline, tqdm_class=PROGRESS_BAR.get())
        )
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if offline_by_setting() else "the Hugging Face Hub cannot be reached"
        raise SAEFormatError(
            f"could not fetch {clip_text(spec)}: {why} and {repo_id} is not in the cache ({cache_folder()}). "
            "SAEs load offline once they are there."
        ) from None
    except Exception as error:  # network, authentication and cache errors come in many kinds
        raise SAEFormatError(str(hub_error(spec, error))) from None
