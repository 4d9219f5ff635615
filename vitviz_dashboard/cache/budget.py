"""The server's memory budget: one store, bounded in bytes, for everything the page keeps between runs.

Streamlit's caches bound entries, not bytes: eight analyses of ViT-H/14 at 518 hold 31 GB. Here every
cached computation of the page (analyses, maps, figures, decoded photos, overlays) lives in one process-wide
least-recently-used store, and the oldest entries are evicted as soon as the bytes held pass the budget:

    VITVIZ_MEMORY_BUDGET=4GB streamlit run app.py     # default: a quarter of the machine's memory

Sizes are measured, not guessed from the kind of entry (``nbytes``: tensors, arrays, images, bytes and
figures, through containers and dataclasses). One entry may take at most a quarter of the budget (a bigger
one is returned but not kept), and an analysis whose attention tensors would take more than
``analysis_share()`` keeps only its small views (vitviz.analysis). The models themselves are not counted:
three are kept (cache.results.get_model), since evicting one would mean loading it again for the next click.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch
from PIL import Image

from vitviz.loading.memory import machine_memory
from vitviz.preprocessing import ImageFile

T = TypeVar("T")
UNITS = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "T": 2**40,
    "TB": 2**40,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
DEFAULT_FRACTION = 0.25  # of the machine's memory (or of the container's limit, when lower)
ANALYSIS_SHARE = 1 / 16  # of the budget: above it an analysis does not keep every block's attention
ENTRY_SHARE = 1 / 4  # of the budget: above it an entry is not kept at all
SESSION_SHARE = 1 / 16  # of the budget, for each session's images (at least SESSION_MIN bytes)
SESSION_MIN = 64 * 2**20


def parse_bytes(text: str) -> int:
    """ "4GB", "512 MB", "1.5G", "300000000" -> bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).upper() not in UNITS:
        raise ValueError(f"a memory size is a number with an optional unit (B, KB, MB, GB, TB), e.g. 4GB; got {text!r}")
    size = int(float(match.group(1)) * UNITS[match.group(2).upper()])
    if size <= 0:
        raise ValueError(f"a memory budget must be above 0 bytes; got {text!r}")
    return size


def budget_bytes() -> int:
    """VITVIZ_MEMORY_BUDGET if set, else DEFAULT_FRACTION of the machine's memory."""
    text = os.environ.get("VITVIZ_MEMORY_BUDGET", "").strip()
    if text:
        try:
            return parse_bytes(text)
        except ValueError as error:
            raise ValueError(f"VITVIZ_MEMORY_BUDGET: {error}") from None
    return int(machine_memory() * DEFAULT_FRACTION)


def nbytes(value: object) -> int:
    """The bytes ``value`` holds in arrays, images and strings, through containers, dataclasses and figures.
    Shared storage is counted once per call (a tensor and its view, the same photo in two fields)."""
    seen: set[int] = set()

    def size(v: object) -> int:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            if storage.data_ptr() in seen:
                return 0
            seen.add(storage.data_ptr())
            return storage.nbytes()
        if isinstance(v, np.ndarray):
            base = v if v.base is None else v.base
            if id(base) in seen:
                return 0
            seen.add(id(base))
            return int(base.nbytes) if isinstance(base, np.ndarray) else int(v.nbytes)
        if isinstance(v, Image.Image):
            if id(v) in seen:
                return 0
            seen.add(id(v))
            return v.width * v.height * len(v.getbands())
        if isinstance(v, (bytes, bytearray, str)):
            return len(v)
        if isinstance(v, pd.DataFrame):  # the Dataset page's query results and point tables
            return int(v.memory_usage(deep=True).sum())
        if isinstance(v, go.Figure):
            return sum(size(trace.to_plotly_json()) for trace in v.data) + 4096  # the layout: small
        if isinstance(v, dict):
            return sum(size(k) + size(x) for k, x in v.items())
        if isinstance(v, (list, tuple, set, frozenset)):
            return sum(size(x) for x in v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return sum(size(getattr(v, f.name)) for f in dataclasses.fields(v))
        return 0  # numbers, None, small objects

    return size(value)


class MemoryStore:
    """A least-recently-used store bounded in bytes, shared by every session of the server.

    ``get(key, compute)`` returns the kept value or computes it. Sessions asking for the same key at once
    compute it once (the others wait for it); different keys compute in parallel. Thread-safe.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}
        self.peak = 0  # the most bytes ever held at once
        self.evictions = 0
        self.too_big = 0  # values returned but not kept: above ENTRY_SHARE of the budget

    @property
    def held(self) -> int:
        return self._held

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:  # one computation per key; later callers find it done
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key][0]
            try:
                value = compute()
                self.put(key, value)
                return value
            finally:
                with self._lock:
                    if self._computing.get(key) is computing:  # not a later caller's lock
                        del self._computing[key]

    def put(self, key: Hashable, value: object) -> None:
        size = nbytes(value)
        with self._lock:
            if key in self._entries:
                self._held -= self._entries.pop(key)[1]
            if size > self.limit * ENTRY_SHARE:
                self.too_big += 1
                return
            self._entries[key] = (value, size)
            self._held += size
            while self._held > self.limit:  # the oldest first; the new entry fits, so it stays
                _, (_, old) = self._entries.popitem(last=False)
                self._held -= old
                self.evictions += 1
            self.peak = max(self.peak, self._held)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held = 0

    def stats(self) -> dict[str, int]:
        """What the store holds, for tests and benchmarks."""
        with self._lock:
            return {
                "limit": self.limit,
                "held": self._held,
                "peak": self.peak,
                "entries": len(self._entries),
                "evictions": self.evictions,
                "too_big": self.too_big,
            }


try:
    STORE, BUDGET_ERROR = MemoryStore(budget_bytes()), ""
except ValueError as error:  # a bad setting: say so on the page, and run on the default
    STORE = MemoryStore(int(machine_memory() * DEFAULT_FRACTION))
    BUDGET_ERROR = f"{error}. Using the default budget, {STORE.limit / 2**30:.1f} GB."


def kept(spinner: str | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: keep the function's results in STORE, keyed by its name and arguments (like Streamlit's
    caches, arguments named with a leading underscore are not part of the key). A function given the model
    (``_model``, never hashed) takes the model's ``key`` (page.ModelKey) as its first argument. ``spinner`` is shown
    while a result is computed."""

    def decorate(function: Callable[..., T]) -> Callable[..., T]:
        signature = inspect.signature(function)
        parameters = list(signature.parameters)
        # the model is not hashed: a function that runs one is keyed by its ModelKey (page.py), which comes first
        if "_model" in parameters and parameters[0] != "key":
            raise TypeError(f"{function.__qualname__} takes _model, so its first argument must be key: ModelKey")

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            # every argument by its parameter's name (*args as a tuple, **kwargs as a dict), defaults filled in
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            key = (
                function.__qualname__,
                *((n, _key_part(v)) for n, v in bound.arguments.items() if not n.startswith("_")),
            )
            if spinner is None or key in STORE:
                return STORE.get(key, lambda: function(*args, **kwargs))
            with st.spinner(spinner):
                return STORE.get(key, lambda: function(*args, **kwargs))

        return wrapper

    return decorate


def _key_part(value: object) -> Hashable:
    """A hashable stand-in for an argument: files by their digest, arrays by their bytes."""
    if isinstance(value, ImageFile):
        return ("file", value.key)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("array", data.shape, str(data.dtype), hashlib.sha1(data.view(np.uint8).reshape(-1)).hexdigest())
    if isinstance(value, (list, tuple)):
        return tuple(_key_part(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _key_part(v)) for k, v in value.items()))
    return value


def analysis_share() -> int:
    """The most bytes of attention tensors an analysis keeps whole."""
    return int(STORE.limit * ANALYSIS_SHARE)


def session_share() -> int:
    """The most bytes of images one session keeps."""
    return max(SESSION_MIN, int(STORE.limit * SESSION_SHARE))
