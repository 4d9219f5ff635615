"""Files from the Hugging Face Hub, through huggingface_hub and its cache, failing fast when offline.

huggingface_hub retries a failed connection for up to a minute before it looks in its cache. vitviz
first asks the Hub for an answer, any answer, within HUB_TIMEOUT_S; without one it reads the cache only.
So an offline machine (or a server that accepts connections and never answers) loads a cached model
at once and gets a message for any other within seconds. With HF_HUB_OFFLINE set, the Hub is not asked at all.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from vitviz.checkpoint import ModelLoadError, describe
from vitviz.model.config import clip_text

HUB_TIMEOUT_S = 3.0  # to open a connection to the Hub
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")  # a Hub repository id: org/name

# The progress bar of downloads: a class with tqdm's interface (total=, unit=, desc=..., update(n), used as a
# context manager), or None for tqdm's own bar on stderr, shown when it is a terminal (the CLIs). A context
# variable, so the page can draw its bar for the downloads of one session's run without touching the others.
PROGRESS_BAR: ContextVar[type | None] = ContextVar("vitviz_progress_bar", default=None)


@contextmanager
def progress_bar(tqdm_class: type) -> Iterator[None]:
    """Downloads inside this block report to ``tqdm_class`` (see PROGRESS_BAR)."""
    token = PROGRESS_BAR.set(tqdm_class)
    try:
        yield
    finally:
        PROGRESS_BAR.reset(token)


def offline_by_setting() -> bool:
    """Whether HF_HUB_OFFLINE is set: huggingface_hub's switch (read from the environment when it was imported), or
    the environment variable now."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def hub_reachable(timeout: float | None = None) -> bool:
    """Whether the Hub's endpoint (HF_ENDPOINT) answers an HTTP request within ``timeout`` seconds
    (HUB_TIMEOUT_S when None); False at once, without a request, when HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants

    if offline_by_setting():
        return False
    timeout = HUB_TIMEOUT_S if timeout is None else timeout

    try:
        with urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError:  # an error status is still an answer
        return True
    except (OSError, ValueError):  # no network, no answer in time (TimeoutError is an OSError), a bad URL
        return False


def hub_file(
    repo_id: str,
    candidates: list[str],
    spec: str,
    revision: str | None = None,
    required: bool = True,
    offline: bool | None = None,
) -> Path | None:
    """The first of ``candidates`` that the repository has, from the cache or downloaded into it.

    Returns None when it has none of them and ``required`` is False; otherwise raises a ModelLoadError
    that says why (offline and not cached, no such repository, gated, none of the files...). ``offline``
    is the answer of ``hub_reachable()`` negated: pass it when fetching several files of one model, so
    the Hub is asked once; None asks here.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

    if offline is None:
        offline = not hub_reachable()
    for filename in candidates:
        try:
            return Path(
                hf_hub_download(
                    repo_id, filename, revision=revision, local_files_only=offline, tqdm_class=PROGRESS_BAR.get()
                )
            )
        except (RemoteEntryNotFoundError, LocalEntryNotFoundError):
            continue
        except Exception as error:  # network, authentication and cache errors come in many kinds
            raise hub_error(spec, error) from None
    if not required:
        return None
    files = clip_text(" or ".join(candidates), 200)
    if offline:
        why = (
            "HF_HUB_OFFLINE is set"
            if offline_by_setting()
            else "the Hugging Face Hub cannot be reached (is this machine offline?)"
        )
        raise ModelLoadError(
            f"could not download {clip_text(spec)}: {why} and {files} of {clip_text(repo_id)} is not in the cache "
            f"({cache_folder()}). Models load offline once they are there."
        )
    raise ModelLoadError(f"{clip_text(spec)}: the repository {clip_text(repo_id)} has no {files}")


def hub_error(spec: str, error: Exception) -> ModelLoadError:
    """A ModelLoadError for a failed Hub download: what went wrong, and where the cache is."""
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

    spec = clip_text(spec)
    if isinstance(error, HFValidationError):
        return ModelLoadError(f"{spec}: not a valid Hugging Face repository id or file name ({describe(error)})")
    if isinstance(error, GatedRepoError):
        return ModelLoadError(f"{spec} is gated: accept its terms on the Hub, then log in (`hf auth login`)")
    if isinstance(error, RepositoryNotFoundError):
        return ModelLoadError(
            f"{spec}: no such repository on the Hugging Face Hub (or a private one: log in with `hf auth login`)"
        )
    if isinstance(error, RevisionNotFoundError):
        return ModelLoadError(f"{spec}: no such revision")
    return ModelLoadError(
        f"could not download {spec} ({describe(error)}). Is this machine offline? Models are "
        f"cached in {cache_folder()} after the first download and then load offline."
    )


def cache_folder() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


@contextmanager
def cache_only(offline: bool = True) -> Iterator[None]:
    """Inside this block, when ``offline``, huggingface_hub and the libraries built on it (transformers, open_clip,
    timm) read their cache only and never wait on the network: its HF_HUB_OFFLINE switch, read at every call.
    vitviz fetches a model's files first (``hub_file``, which fails fast with a message), then lets the library
    build the model from the cache inside this block."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = before or offline
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before
