"""``load_vlm(spec, precision=None)``: a vision-language model folder (or Hub repository) into a ready ``VLM``.

The folder is one that transformers' ``save_pretrained`` wrote for both the model and its processor: config.json,
safetensors weights (one file or shards with their index; pickled .bin files are refused), the processor's and the
tokenizer's files. Before anything is built, the checks vitviz makes of every model file apply: JSON read safely,
the weights' headers read and their tensor count and size checked against the model and the memory free, and the
model's parameter count (built on the meta device, no memory) checked against the memory free. The model is then
built by transformers (``AutoModelForImageTextToText``, ``AutoProcessor``), offline, and refused when its weights do
not match its config. A Hub repository ("hf:<org>/<name>", or a bare "<org>/<name>" that names no local folder: see
``hub_repository``, the one reading of a spec that `vitviz ask` and the Ask page share) has its files fetched into the
Hub cache first (offline, the cache only, failing fast).

Greedy generation ends before the model's own image or video placeholder token, as at an end-of-sequence token
(``stop_at_placeholders``): transformers' ``generate`` carries on past one, but the recorded pass of the whole
sequence would then count one image token more than it has features for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitviz.loading.download import (
    REPO_ID,
    cache_folder,
    cache_only,
    hub_error,
    hub_reachable,
    offline_by_setting,
)
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.memory import available_memory, gigabytes
from vitviz.loading.sources.common import read_json
from vitviz.loading.sources.huggingface_folder import weight_limit
from vitviz.loading.sources.weights_files import SHARD_INDEX, read_safetensors, shard_files
from vitviz.loading.specs import HUB
from vitviz.vlm.errors import VLMError
from vitviz.vlm.layouts import family_for
from vitviz.vlm.model import VLM, end_tokens

PRECISIONS = ("fp32", "bf16", "auto")  # besides None: the dtype the weights are stored in
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
LOADING_PROBLEMS = {"missing_keys": "missing", "unexpected_keys": "unexpected", "mismatched_keys": "of another shape"}
HUB_FILES = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model")  # never pickles or code
# the config's names for the ids that mark where the processor put an image's (or a video's) features
PLACEHOLDERS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")


def load_vlm(spec: str | Path, precision: str | None = None) -> VLM:
    """A folder saved with ``save_pretrained`` (model and processor), or a Hub repository: "hf:<org>/<name>", or
    "<org>/<name>" where no local folder has that name (``hub_repository``); ``precision`` is None
    (the stored dtype), "fp32", "bf16" or "auto" (see ``model_dtype``). Errors are VLMError."""
    spec = str(spec).strip()
    if precision is not None and precision not in PRECISIONS:
        raise VLMError(f"precision must be one of {', '.join(PRECISIONS)} (or None: as stored); got {precision!r}")
    repository = hub_repository(spec)
    if repository is not None:
        folder = hub_folder(repository)
    else:
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise VLMError(
                f"{spec[:200]} is not a folder: give a folder saved with save_pretrained, or a Hugging Face "
                "repository id (<org>/<name>, or hf:<org>/<name>)"
            )
    try:
        return load_vlm_folder(folder, precision, spec)
    except ModelLoadError as error:  # vitviz's file checks
        raise VLMError(str(error)) from None


def load_vlm_folder(folder: Path, precision: str | None, spec: str) -> VLM:
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.utils import logging as hf_logging

    if not (folder / "config.json").is_file():
        raise VLMError(f"{folder} has no config.json, so it is not a Hugging Face model folder")
    config = read_json(folder / "config.json")
    family = family_for(config.get("model_type"))
    if not any((folder / name).is_file() for name in PROCESSOR_FILES):
        raise VLMError(f"{folder} has no processor ({' or '.join(PROCESSOR_FILES)}): save the processor there too")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise VLMError(f"{folder} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): save the processor there too")
    check_weights(folder, config)
    dtype = model_dtype(precision, config)
    built = meta_model(folder, family.model_type)
    expected = getattr(built.config, "image_token_id", None)
    size = sum(p.numel() for p in built.parameters()) * torch.finfo(dtype).bits // 8
    if size > available_memory():
        raise VLMError(
            f"{folder}'s config asks for {gigabytes(size)} of weights, more than the "
            f"{gigabytes(available_memory())} of memory free on this machine"
        )
    try:
        with cache_only():
            processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
    except Exception as error:
        raise VLMError(f"{folder}'s processor cannot be loaded: {describe(error)}") from None
    check_processor(processor, folder, expected)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the loading report goes into our message instead
    try:
        with cache_only():
            model, info = AutoModelForImageTextToText.from_pretrained(
                folder,
                dtype=dtype,
                local_files_only=True,
                use_safetensors=True,
                output_loading_info=True,
            )
    except Exception as error:
        raise VLMError(f"{folder}'s weights do not fit its config: {describe(error)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    problems = [
        f"{len(info.get(key) or ())} {what} (e.g. {sorted(map(str, info[key]))[0][:120]})"
        for key, what in (
            ("missing_keys", "missing"),
            ("unexpected_keys", "unexpected"),
            ("mismatched_keys", "of another shape"),
        )
        if info.get(key)
    ]
    if problems:
        raise VLMError(f"{folder}'s weights do not match its config: weights {'; '.join(problems)}")
    stop_at_placeholders(model, processor.tokenizer)
    return VLM(model, processor, family, spec)


def hub_repository(spec: str) -> str | None:
    """The Hugging Face repository that a model spec names, None when it names a local path: what follows "hf:", or
    a bare "<org>/<name>" when nothing of that name exists here (a local folder wins, as in ``vitviz.load_model``).
    `vitviz ask` (through ``load_vlm``) and the Ask page read a spec through this one function."""
    spec = spec.strip()
    if HUB.owns(spec):
        return HUB.name(spec)
    if not REPO_ID.fullmatch(spec):
        return None
    try:
        return None if Path(spec).exists() else spec
    except OSError:  # a name the system refuses
        return spec


def stop_at_placeholders(model: torch.nn.Module, tokenizer: Any) -> None:
    """Make greedy generation end before the model's image and video placeholder tokens, as at its end-of-sequence
    tokens: they join the generation config's ``eos_token_id``. A model may emit its own placeholder (seen on Gemma
    3, LLaVA-NeXT and OneVision); ``generate`` goes on, but a pass of the whole sequence would then hold one image
    token more than the image has features ("Image features and image tokens do not match"), so the answer is cut
    there and can be recorded. ``end_tokens`` (model.py) reads the same list, so the answer ends where it stopped."""
    placeholders = {getattr(model.config, name, None) for name in PLACEHOLDERS}
    placeholders = sorted(token for token in placeholders if isinstance(token, int) and token >= 0)
    ends = end_tokens(model, tokenizer)
    added = [token for token in placeholders if token not in ends]
    if added:
        model.generation_config.eos_token_id = ends + added


def check_weights(folder: Path, config: dict) -> None:
    """Safetensors only, each header read and checked (tensor count, size against the memory free) before building."""
    limit = weight_limit(config)
    if (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    elif (folder / SHARD_INDEX).is_file():
        files = shard_files(folder / SHARD_INDEX, limit)
    elif any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
        raise VLMError(f"{folder} holds pickled weights only: vitviz reads VLM weights from safetensors files")
    else:
        raise VLMError(f"{folder} has neither model.safetensors nor {SHARD_INDEX}")
    total = 0
    for name in files:
        read_safetensors(folder / name, limit, tensors=False)
        total += (folder / name).stat().st_size
    if total > available_memory():
        raise VLMError(
            f"{folder} holds {gigabytes(total)} of weights, more than the {gigabytes(available_memory())} of "
            "memory free on this machine"
        )


def model_dtype(precision: str | None, config: dict) -> torch.dtype:
    """None: the dtype the weights are stored in (config's dtype, or torch_dtype; float32 when neither says);
    "fp32", "bf16"; "auto": the stored dtype where it is float32 or where this CPU runs bf16, else float32."""
    from vitviz.model.precision import bf16_unavailable

    if precision == "fp32":
        return torch.float32
    if precision == "bf16":
        return torch.bfloat16
    stored = config.get("dtype") or config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
    dtype = getattr(torch, stored, None) if isinstance(stored, str) else None
    dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    if precision == "auto" and dtype != torch.float32 and bf16_unavailable(torch.device("cpu")):
        return torch.float32
    return torch.bfloat16 if precision == "auto" and dtype != torch.float32 else dtype


def meta_model(folder: Path, model_type: str) -> torch.nn.Module:
    """The model its config describes, built on the meta device (shapes only, no memory): a config that cannot
    build a model is refused here, and its parameter count checked before any weight is read."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    try:
        with cache_only():
            config = AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            return AutoModelForImageTextToText.from_config(config)
    except Exception as error:
        raise VLMError(f"{folder}'s config does not describe a {model_type} model: {describe(error)}") from None


def check_processor(processor: Any, folder: Path, image_token_id: int | None) -> None:
    """The processor must have a tokenizer and an image processor, and the image token (the tokenizer's own, else the
    processor's placeholder) must be one token of the tokenizer (not split, not unknown): the one the model's config
    marks images with."""
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None or getattr(processor, "image_processor", None) is None:
        raise VLMError(f"{folder}'s processor has no tokenizer or no image processor")
    tokens = [getattr(processor, "image_token", None)]
    own = getattr(tokenizer, "image_token", None)  # Gemma 3's processor places <start_of_image>, then image tokens
    tokens += [own] if own is not None and own != tokens[0] else []
    for token in tokens:
        ids = tokenizer.encode(token, add_special_tokens=False) if isinstance(token, str) else []
        if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
            raise VLMError(
                f"{folder}'s processor marks images with {str(token)[:80]!r}, which is not a token of its tokenizer"
            )
    token = tokens[-1]
    found = tokenizer.encode(token, add_special_tokens=False)[0]
    if image_token_id is not None and found != image_token_id:
        raise VLMError(
            f"{folder}'s tokenizer reads the image token {token[:80]!r} as token {found}, but the model's config "
            f"expects token {image_token_id}: the tokenizer is not the model's"
        )


def hub_folder(repo_id: str) -> Path:
    """A Hub repository's JSON, safetensors and tokenizer files in the Hub cache (downloaded once; offline, the
    cache only), as a folder."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if not REPO_ID.fullmatch(repo_id):
        raise VLMError(f"{repo_id[:200]!r} is not a Hugging Face repository id (org/name)")
    offline = not hub_reachable()
    try:
        with cache_only(offline):
            return Path(snapshot_download(repo_id, allow_patterns=list(HUB_FILES), local_files_only=offline))
    except LocalEntryNotFoundError:  # offline, and not in the cache: its own message runs to four lines
        why = "HF_HUB_OFFLINE is set" if offline_by_setting() else "the Hugging Face Hub cannot be reached"
        raise VLMError(
            f"{HUB.spec(repo_id)} is not in the Hugging Face cache ({cache_folder()}) and {why}: "
            "download it once online, then it loads offline"
        ) from None
    except Exception as error:
        raise VLMError(str(hub_error(HUB.spec(repo_id), error))) from None
