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

from vitviz.preprocessing import ImageFile
from vitviz.text import check_prompts, parse_prompts, prompt_set, template_set

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

# The sidebar's model picker (sidebar/model_picker.py): its two options that open a field, and its widgets, kept (like
# the display settings and the open tab) through a visit to another page. Other pages set them only through the
# accessors below (pick_photo_page_model), and read them through photo_page_model.
HUB_SPEC = "timm, Hugging Face or open_clip spec..."  # opens MODEL_HUB_SPEC
PATH_OR_UPLOAD = "path or upload..."  # opens MODEL_PATH and the checkpoint upload
MODEL_BOX: Key[str] = Key(kept("photo|model_box"))  # the picker: one of its options, or a spec typed into it
MODEL_HUB_SPEC: Key[str] = Key(kept("photo|model_hub_spec"))  # the field under HUB_SPEC
MODEL_PATH: Key[str] = Key(kept("photo|model_path"))  # the field under PATH_OR_UPLOAD: a checkpoint's path
PHOTO_PRECISION: Key[str] = Key(kept("photo|precision"))  # "auto", "fp32" or "bf16"
PHOTO_COLORMAP: Key[str] = Key(kept("photo|colormap"))
PHOTO_ALPHA: Key[float] = Key(kept("photo|alpha"))  # the overlays' opacity
PHOTO_TAB: Key[str] = Key(kept("photo|tab"))  # the open tab's name (app.TABS)

# The sidebar's prompts (sidebar/prompts.py), kept: typed prompts outlive a look at a ready set, or at a model
# without a text tower
MY_PROMPTS = "my prompts"  # PROMPT_SOURCE's option for typed prompts; the others are vitviz.text.PROMPT_SETS' names
DEFAULT_PROMPTS = "a photo of a cat\na photo of a dog\na photo of a bird"  # PROMPTS until the user types
MAX_PROMPTS = 100  # typed prompts; the ready sets go up to ImageNet's 1,000 classes
PROMPT_SOURCE: Key[str] = Key(kept("prompt_source"))  # MY_PROMPTS or a ready set's name
PROMPTS: Key[str] = Key(kept("prompts"))  # the typed prompts, one per line
PROMPT_ENSEMBLE: Key[bool] = Key(kept("prompt_ensemble"))  # a ready set through OpenAI's 80 templates, not one

# The session's images (images.py)
HISTORY: Key[dict[str, ImageFile]] = Key("history")  # name -> file, oldest first: uploads, shots, opened images
NEWEST: Key[str] = Key("newest")  # the image the Image picker shows: the newest arrival, or one another page opened
CAMERA_SHOTS: Key[dict[str, str]] = Key("camera_shots")  # a camera shot's file id -> its name among the images
INTAKE: Key[dict[str, tuple[str, str]]] = Key("intake")  # an upload's file id -> (its name, "") or ("", refusal)

# The tabs' chosen patches, (row, column): not per model, so a patch stays chosen when the model changes
PATCH: Key[tuple[int, int]] = Key("patch")  # Click a patch
FEATURES_PATCH: Key[tuple[int, int]] = Key("features_patch")  # Features: the patch whose similarity map is shown


def knocked_heads(spec: str) -> Key[list[str]]:
    """The heads knocked out of the image tower ``spec`` names (knockout.py), as labels "L3 H2". Kept per image
    tower, not per ModelKey: a zero-shot model's prompts only change the head that scores them."""
    return Key(kept(f"{spec}|knocked_heads"))


def knocked_tokens(spec: str) -> Key[list[str]]:
    """The prefix tokens taken out of this image tower's attention (knockout.py): names "[CLS]", "register 1"."""
    return Key(kept(f"{spec}|knocked_tokens"))


def sae_edit(spec: str) -> Key[dict]:
    """The SAE edit made to the image tower ``spec`` names (sae_editing.py): {"folder": str, "block": int, "set_to":
    {latent: code}, "scale": {latent: factor}}, or absent."""
    return Key(kept(f"{spec}|sae_edit"))


def tab_widget(scope: str, name: str) -> str:
    """The key of a Photo tab's widget ``name`` under ``scope`` (page.Page.widget_key: the model, and the image for
    per-image widgets): kept, so a control keeps its value while another tab is open."""
    return kept(f"{scope}|{name}")


# ---- the Dataset page -----------------------------------------------------------------------------------------

DATASET = "dataset|"  # the prefix of every key of the Dataset page (vitviz_dashboard/dataset/)


def dataset_key(name: str) -> str:
    """The key of a Dataset page widget or value that one module alone reads (those read by several are below)."""
    return f"{DATASET}{name}"


# The sidebar's values and the open tab (dataset/page.py draws them), kept: they outlive a visit to the Photo page
DATASET_FOLDER: Key[str] = Key(kept(dataset_key("folder")))  # the index folder typed in; read by the Photo SAE tab
DATASET_COLORMAP: Key[str] = Key(kept(dataset_key("colormap")))
DATASET_ALPHA: Key[float] = Key(kept(dataset_key("alpha")))  # the opacity of a map drawn over a photo
DATASET_TAB: Key[str] = Key(kept(dataset_key("tab")))  # the open tab's name (dataset/page.TABS)

# The Table tab's filters and order (dataset/table.py), kept; the Grid tab selects the images they filter
TABLE_CLASSES: Key[list[str]] = Key(kept(dataset_key("classes")))
TABLE_CORRECTNESS: Key[str] = Key(kept(dataset_key("correctness")))  # all, correct, wrong or unlabelled
TABLE_CONFIDENCE: Key[tuple[float, float]] = Key(kept(dataset_key("confidence")))  # the top class's probability
TABLE_SORT: Key[str] = Key(kept(dataset_key("sort")))  # a column of the images table
TABLE_DESCENDING: Key[bool] = Key(kept(dataset_key("descending")))

# Set by one module, read by another
INDEXED: Key[str] = Key(dataset_key("opened"))  # a folder just indexed (indexing.py): typed into the sidebar next run
SESSION_FOLDER: Key[str] = Key(dataset_key("session_folder"))  # the session's own folder (opening.py, indexing.py)
SQL_JOB: Key[object] = Key(dataset_key("sql_job"))  # the SQL box's running or finished query (sql_box.Job)


# ---- the Ask page ---------------------------------------------------------------------------------------------

# No key of the Ask page is read by another module: its widgets' keys live beside them (ask/inputs.py, ask/maps.py:
# kept("ask|..."); ask/tokens.py, ask/lens.py, ask/knockout.py: "ask|..."). What it hands the Photo page goes through
# the accessors below (hand_checkpoint_to_photo_page, show_on_photo_page).


# ---- between pages --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HandedCheckpoint:
    """A checkpoint another page wrote into the uploads folder (sidebar/model_picker.store_checkpoint) for the Photo
    page's picker to use under PATH_OR_UPLOAD, with a caption that says what it is."""

    path: str
    caption: str


HANDED: Key[HandedCheckpoint] = Key("model_picker|handed")  # until another model is chosen on the Photo page
# the Dataset page's SAE field: the Photo page's SAE tab starts from it
DATASET_SAE: Key[str] = Key(kept(dataset_key("sae")))


def photo_page_model() -> str:
    """The model the Photo page shows (its sidebar's picker, kept through visits to other pages): a spec, a typed
    spec or a checkpoint's path; "default" when it names none another page can reload (an uploaded checkpoint, an
    empty field)."""
    choice = MODEL_BOX.get() or "default"
    if choice == PATH_OR_UPLOAD:
        return (MODEL_PATH.get() or "").strip() or "default"
    return "default" if choice == HUB_SPEC else choice


def photo_page_prompts() -> tuple[list[str], list[str] | None, dict]:
    """The Photo page's prompts (its defaults when it never showed them): the classes, the templates (None: read as
    typed) and the manifest's record of them, as `vitviz index` writes it.
    vitviz.text.PromptError when the typed prompts cannot be the classes."""
    source = PROMPT_SOURCE.get(MY_PROMPTS)
    if source == MY_PROMPTS:
        prompts = check_prompts(parse_prompts(PROMPTS.get(DEFAULT_PROMPTS) or ""), MAX_PROMPTS)
        return prompts, None, {"prompts": prompts, "prompt_set": None, "templates": None}
    templates = "openai-80" if PROMPT_ENSEMBLE.get() else "photo"
    record = {"prompts": None, "prompt_set": source, "templates": templates}
    return list(prompt_set(str(source))), list(template_set(templates)), record


def session_photos() -> dict[str, ImageFile]:
    """The session's images by name, oldest first (the Photo page's uploads, shots and opened images)."""
    return HISTORY.get() or {}


def show_on_photo_page(name: str) -> None:
    """Make ``name`` (one of session_photos()) the image the Photo page shows next."""
    NEWEST.set(name)


def pick_photo_page_model(choice: str, path: str = "") -> None:
    """Set the Photo page's model picker to ``choice``: one of its options or a typed spec; under PATH_OR_UPLOAD,
    ``path`` goes into its path field ("" for a HANDED checkpoint, since a typed path comes before it)."""
    MODEL_BOX.set(choice)
    if choice == PATH_OR_UPLOAD:
        MODEL_PATH.set(path)


def hand_checkpoint_to_photo_page(handed: HandedCheckpoint) -> None:
    """Make a checkpoint this page stored the Photo page's model (the picker on PATH_OR_UPLOAD, no path typed)."""
    HANDED.set(handed)
    pick_photo_page_model(PATH_OR_UPLOAD)
