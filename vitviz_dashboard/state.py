"""The dashboard's session state in one place: every key that more than one module reads or sets, typed, and the
accessors by which one page reads another's values.

A ``Key[T]`` names one ``st.session_state`` entry and the type of its value: ``key.get()``, ``key.set(value)``,
``key.setdefault(value)``, ``key.pop()``, ``str(key)`` for a widget's ``key=``. Keys whose value must outlive a
visit to another page (the Photo page's sidebar, the Dataset page's sidebar and filters) are ``kept``: their name
starts with ``KEPT`` and ``keep_widgets()`` writes them back in every run, since Streamlit forgets the value of a
widget that a run does not draw.

Sections: the Photo page, the Dataset page, the Ask page, and between pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import streamlit as st

T = TypeVar("T")

KEPT = "kept|"  # prefix of the keys whose values outlive runs that do not draw their widgets


@dataclass(frozen=True)
class Key(Generic[T]):
    """One session-state entry holding a ``T``."""

    name: str

    def __str__(self) -> str:
        return self.name

    def get(self, default: T | None = None) -> T | None:
        return cast("T | None", st.session_state.get(self.name, default))

    def set(self, value: T) -> None:
        st.session_state[self.name] = value

    def setdefault(self, value: T) -> T:
        return cast("T", st.session_state.setdefault(self.name, value))

    def pop(self, default: T | None = None) -> T | None:
        return cast("T | None", st.session_state.pop(self.name, default))

    @property
    def present(self) -> bool:
        return self.name in st.session_state


def kept(name: str) -> str:
    """The name of a key whose value ``keep_widgets()`` writes back in every run."""
    return f"{KEPT}{name}"


def keep_widgets() -> None:
    """Write back every kept value (``KEPT`` keys), whatever page, model and image it belongs to, so that it survives
    runs that do not draw its widget: another tab or page, another model tried and abandoned. Called first in every
    run."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(KEPT)]:
        st.session_state[key] = st.session_state[key]


# ---- the Photo page -------------------------------------------------------------------------------------------


# ---- the Dataset page -----------------------------------------------------------------------------------------


# ---- the Ask page ---------------------------------------------------------------------------------------------


# ---- between pages --------------------------------------------------------------------------------------------
