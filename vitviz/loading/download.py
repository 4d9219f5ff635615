"""Files from the network: the Hugging Face Hub through huggingface_hub and its cache, failing fast when offline,
and plain URLs (torchvision's weights) with a timeout and a progress bar (``download``).

huggingface_hub retries a failed connection for up to a minute before it looks in its cache. vitviz
first asks the Hub for an answer, any answer, within HUB_TIMEOUT_S; without one it reads the cache only.
So an offline machine (or a server that accepts connections and never answers) loads a cached model
at once and gets a message for any other within seconds. With HF_HUB_OFFLINE set, the Hub is not asked at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path

from tqdm import tqdm

from vitviz.loading.errors import ModelLoadError, describe
from vitviz.messages import clip_text

HUB_TIMEOUT_S = 3.0  # to open a connection to the Hub
DOWNLOAD_TIMEOUT_S = 10.0  # per network operation of a plain download: connecting, or waiting for the next bytes
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


def download(url: str, path: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> None:
    """Download ``url`` to ``path`` atomically, with a progress bar (PROGRESS_BAR), checking
    torchvision's hash prefix in the name.

    ``timeout`` bounds each connect and each read, so a dead network fails fast. This is why vitviz does not
    call torch.hub.download_url_to_file, which has no timeout: against a server that accepts the connection
    and never answers, it was still waiting after 60 s, and this function failed after 10 s
    (bench/bench_download_stall.py).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    bar_class = PROGRESS_BAR.get() or partial(tqdm, disable=None)  # tqdm on a terminal only, like the Hub's
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
            size = int(response.headers.get("Content-Length") or 0) or None
            with bar_class(total=size, unit="B", unit_scale=True, desc=path.name) as bar:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        tmp.unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise ModelLoadError(
            f"could not download {url} ({reason}). Is this machine offline? Weights are cached in "
            f"{path.parent} after the first download; copy the file there to use it offline."
        ) from None
    expected = re.search(r"-([a-f0-9]{6,})\.", path.name)  # torchvision names files <arch>-<sha256 prefix>.pth
    if expected and not digest.hexdigest().startswith(expected[1]):
        tmp.unlink(missing_ok=True)
        raise ModelLoadError(f"download of {url} is corrupt (sha256 does not match {expected[1]}); try again")
    tmp.replace(path)
