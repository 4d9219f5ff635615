"""Download progress on the page: a tqdm class that draws st.progress, for vitviz.loading.download.progress_bar.

Models download inside st.cache_resource (vitviz_dashboard.cache.results.get_model). Streamlit records the
elements a cached function draws and replays them on every later cache hit; an element drawn on a
placeholder made outside the function cannot be replayed (CacheReplayClosureError). The bar is transient,
so it is drawn in the context of the run that made the placeholder (copied before the cached call), where
Streamlit records nothing.
"""

from __future__ import annotations

import contextvars
import io
import threading

from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx
from tqdm import tqdm


class PageProgress(tqdm):
    """tqdm's interface, drawn as st.progress in ``slot``; make one with ``progress_class(slot)``."""

    slot: DeltaGenerator
    run_context: contextvars.Context  # the page run's context, outside any cached function
    script: object  # the run's ScriptRunContext, for bars updated from the Hub's download threads

    def __init__(self, *args, **kwargs):
        kwargs.pop("name", None)  # huggingface_hub's own bar takes a name; tqdm does not
        super().__init__(*args, file=io.StringIO(), mininterval=0.25, **kwargs)  # nothing on the server's stderr

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        self.run_context.copy().run(self._draw)  # a copy: a Context can be entered by one thread at a time
        return True

    def _draw(self) -> None:
        if get_script_run_ctx() is None:  # a download thread of huggingface_hub (Xet): attach the run
            add_script_run_ctx(threading.current_thread(), self.script)
        text = describe(self.desc, self.n, self.total, self.unit)
        rate = self.format_dict.get("rate")
        if self.unit != "B" and rate and self.total:  # a long count (prompts to embed): how long it still takes
            text += f", about {remaining((self.total - self.n) / rate)} to go"
        self.slot.progress(fraction(self.n, self.total), text=text)


def progress_class(slot: DeltaGenerator) -> type[PageProgress]:
    """A PageProgress class that draws in ``slot``, for the downloads of this run."""
    attributes = {"slot": slot, "run_context": contextvars.copy_context(), "script": get_script_run_ctx()}
    return type("PageProgress", (PageProgress,), attributes)


def fraction(done: float, total: float | None) -> float:
    """How much is done, in [0, 1]; 0 while the size is unknown."""
    return min(max(done / total, 0.0), 1.0) if total else 0.0


def describe(name: str, done: float, total: float | None, unit: str = "B") -> str:
    """ "Downloading model.safetensors: 12.0 of 346.0 MB" (of an unknown size: just what has arrived); for a count
    of something else (``unit``), "Embedding prompts: 1,024 of 80,000 prompts"."""
    if unit != "B":
        return f"{name}: {done:,.0f} of {total or 0:,.0f} {unit}s"
    name = name.rstrip(": ") or "weights"
    if not total:
        return f"Downloading {name}: {done / 1e6:.1f} MB"
    return f"Downloading {name}: {done / 1e6:.1f} of {total / 1e6:.1f} MB"


def remaining(seconds: float) -> str:
    """ "40 s", "12 min", "1 h 05 min"."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
