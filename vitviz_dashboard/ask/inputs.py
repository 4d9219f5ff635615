"""The Ask page's inputs: the model (a Hub repository or a folder inside the allowed folders), its precision, the
question, an answer to teacher-force and the token limit, each bounded; and the model's spec checked before anything
opens it."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from vitviz.loading.download import REPO_ID
from vitviz.loading.specs import HUB
from vitviz.vlm.loading import hub_repository
from vitviz_dashboard.cache.vlm import VLMKey
from vitviz_dashboard.sidebar.model_dirs import MODEL_DIRS, ModelRefused, allowed_model_dirs, check_model_path
from vitviz_dashboard.sidebar.model_picker import looks_like_path
from vitviz_dashboard.state import kept

MAX_QUESTION = 500  # characters of a question on the page (the library allows more)
MAX_NEW_TOKENS = 64  # the longest answer the page generates
SMALL_MODELS = (  # vision-language models small enough to answer on a CPU in seconds
    "HuggingFaceTB/SmolVLM-256M-Instruct",
    "HuggingFaceTB/SmolVLM-500M-Instruct",
)
PRECISIONS = {"as stored": None, "fp32": "fp32", "bf16": "bf16", "auto": "auto"}
MODEL, PRECISION, QUESTION, GIVEN, LIMIT = (
    kept(f"ask|{name}") for name in ("model", "precision", "question", "given", "limit")
)
MODEL_HELP = (
    "A Hugging Face repository id (org/name; downloaded once when online, then read from the cache), or the full "
    "path of a folder saved with save_pretrained (model and processor) inside the folders that the server's owner "
    "allows (VITVIZ_MODEL_DIRS). Small models that run on a CPU: " + ", ".join(SMALL_MODELS) + "."
)
# the Photo page's refusal says "Upload the checkpoint instead"; this page takes no uploads
OUTSIDE = (
    "This page opens model folders only inside the folders that the server's owner allows "
    f"({MODEL_DIRS}). Give a Hugging Face repository id instead, or ask the server's owner to allow the folder."
)


@dataclass(frozen=True)
class Question:
    """What is asked: the question, the answer to teacher-force (None: generate one) and the token limit."""

    text: str
    answer: str | None
    max_new_tokens: int


def model_spec(text: str) -> str:
    """The spec load_vlm gets for the typed ``text``: "hf:<org>/<name>" for a repository id (with or without "hf:";
    read by ``hub_repository``, as `vitviz ask` reads it: a local folder of that name wins), the real path of a folder
    inside the allowed folders, "" for nothing typed; ModelRefused otherwise."""
    text = text.strip()
    if not text:
        return ""
    repository = hub_repository(text)
    if repository is not None and REPO_ID.fullmatch(repository):
        return HUB.spec(repository)
    if repository is None and looks_like_path(text):
        try:
            return str(check_model_path(text, allowed_model_dirs()))
        except ModelRefused:
            raise ModelRefused(OUTSIDE) from None
    raise ModelRefused(
        f"`{text[:100]}` is neither a Hugging Face repository id (org/name) nor a folder's path (give it in full: "
        "/..., ~/... or ./...)"
    )


def model_inputs() -> VLMKey | None:
    """The sidebar's model field and precision: the model's key, or None (nothing typed, or refused: said why)."""
    st.sidebar.header("Vision-language model")
    st.session_state.setdefault(MODEL, "")
    text = st.sidebar.text_input("Model", key=MODEL, help=MODEL_HELP, placeholder=SMALL_MODELS[0])
    precision = st.sidebar.selectbox(
        "Precision", list(PRECISIONS), key=PRECISION, help="auto: bf16 where stored so and this CPU runs it fast"
    )
    try:
        spec = model_spec(text)
    except ModelRefused as refusal:
        st.sidebar.error(str(refusal))
        return None
    if not spec:
        st.info(
            "Name a vision-language model in the sidebar: a Hugging Face repository such as "
            f"`{SMALL_MODELS[0]}` (small enough for a CPU), or a folder saved with save_pretrained."
        )
        return None
    return VLMKey(spec, PRECISIONS[precision])


def question_inputs() -> tuple[Question, bool]:
    """The question, an optional answer and the token limit, in a form: (what is asked, whether Ask was pressed).
    The question's box has no character limit of its own (a browser's limit drops a longer paste without a word):
    a question over MAX_QUESTION is refused in one line by ``question_problem``."""
    st.session_state.setdefault(QUESTION, "What is in the picture?")
    st.session_state.setdefault(LIMIT, 16)
    with st.form("ask"):
        question = st.text_area("Question", key=QUESTION, height=80)
        left, right = st.columns([3, 1])
        given = left.text_input(
            "Answer to explain (optional)",
            key=GIVEN,
            help="Leave empty to let the model answer (greedy). Given, its tokens follow the question "
            "(teacher-forced), and the page shows where each of them looks.",
        )
        limit = right.number_input("Most new tokens", 1, MAX_NEW_TOKENS, key=LIMIT, help="The longest answer generated")
        pressed = st.form_submit_button("Ask", type="primary")
    return Question(question, given.strip() or None, int(limit)), pressed


def question_problem(question: Question) -> str:
    """Why ``question`` cannot be asked ("" when it can): one line for the page."""
    if not question.text.strip():
        return "Type a question."
    if len(question.text) > MAX_QUESTION:
        return f"The question has {len(question.text):,} characters; this page takes at most {MAX_QUESTION}."
    if question.answer is not None and len(question.answer) > MAX_QUESTION:
        return f"The answer has {len(question.answer):,} characters; this page takes at most {MAX_QUESTION}."
    if not 1 <= question.max_new_tokens <= MAX_NEW_TOKENS:
        return f"The answer may have 1 to {MAX_NEW_TOKENS} new tokens on this page."
    return ""
