"""saev's ``sae.pt`` (OSU-NLP-Group/saev, ``saev.nn.modeling.load``): one JSON header line, then ``torch.save``'s
bytes of a state dict: ``W_enc`` (d, N), ``b_enc`` (N), ``W_dec`` (N, d), ``b_dec`` (d), and for BatchTopK
``activation.threshold`` ().

The header, by schema:
- legacy (no "schema"): the config itself, ``d_vit`` and ``exp_factor`` (N = d_vit x exp_factor); ReLU.
- 1: ``{"schema": 1, "cls": "Relu" | "TopK" | "BatchTopK", "cfg": {"d_vit", "exp_factor", "top_k"}}``, or
  ``"cls": "SparseAutoencoderConfig"`` with ``cfg.activation = {"cls", "params": {"top_k"}}``.
- 2, 3, 4, 5: ``{"schema": n, "cfg": {"d_model" or "d_vit", "d_sae" or "exp_factor", "activation": {"cls",
  "params"}}}``.

The forward pass: legacy and schema-1 files were trained with ``(x - b_dec) W_enc + b_enc`` (saev dropped the
subtraction on 2025-07-31, the day schema 2 began); later ones with ``x W_enc + b_enc``. ReLU; TopK keeps the k
largest pre-activations as they are (no ReLU); BatchTopK at inference keeps those above its threshold (all positive
ones when the threshold is 0 or less). Decoding is ``codes W_dec + b_dec``.

Where it reads: the file does not say. The DINOv3 repositories put each file at ``layer_N/<run>/sae.pt`` with a
``manifest.jsonl`` at the root whose lines name ``layer`` and ``path``: saev's layer N is the output of
``blocks[N]``, vitviz's block N. The single-file repositories (legacy and schema 1) recorded saev's default, layer
-2: the second-to-last block (block 10 of a 12-block model). saev trains on the patch tokens, and scales them in its
data loader (mean subtracted, norm scaled) by numbers that sae.pt does not store: the loaded SAE says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from vitviz.messages import clip_text
from vitviz.sae.errors import SAEFormatError
from vitviz.sae.formats.base import SAEFileFormat, check_size, fill, first_line, integer, load_torch_tail
from vitviz.sae.formats.module import ExternalConfig, ExternalSAE

FILE, MANIFEST = "sae.pt", "manifest.jsonl"
SCHEMAS = (1, 2, 3, 4, 5)
KNOWN = {"W_enc", "b_enc", "W_dec", "b_dec", "activation.threshold"}
SCALING = (
    "saev scaled its training activations in its data loader (mean subtracted, norm rescaled) by numbers sae.pt "
    "does not store; codes of unscaled activations differ from the ones it was trained on"
)
_LAYER_FOLDER = re.compile(r"layer_(-?\d+)")


def detect(path: Path) -> bool:
    """A file that starts with a JSON object, a folder holding sae.pt, or a repository root with manifest.jsonl."""
    if path.is_dir():
        return (path / FILE).is_file() or (path / MANIFEST).is_file()
    if path.suffix in (".json", ".jsonl", ".safetensors"):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"{"
    except OSError:
        return False


def load(path: Path) -> ExternalSAE:
    if path.is_dir() and not (path / FILE).is_file():
        raise SAEFormatError(f"{path} is a repository of several saev SAEs: {choices(path)}")
    file = path / FILE if path.is_dir() else path
    line = first_line(file)
    try:
        header = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        raise SAEFormatError(f"{file}: its first line is not the JSON header saev writes") from None
    if not isinstance(header, dict):
        raise SAEFormatError(f"{file}: its header is {type(header).__name__}, not saev's JSON object")
    config = _config(header, file)
    check_size(config.d_in, config.latents, str(file))
    state = _state(load_torch_tail(file, len(line)), file)
    unknown = sorted(set(state) - KNOWN)
    if unknown:
        raise SAEFormatError(f"{file} holds tensors saev's SAE does not have: {clip_text(str(unknown), 150)}")
    if config.activation == "jumprelu":  # BatchTopK: one threshold for every latent; none saved means 0
        threshold = state.pop("activation.threshold", None)
        if threshold is not None and threshold.numel() != 1:
            raise SAEFormatError(f"{file}: activation.threshold is {tuple(threshold.shape)}, not one number")
        state["threshold"] = (threshold.reshape(()) if threshold is not None else torch.zeros(())).expand(
            config.latents
        )
    sae = ExternalSAE(config)
    fill(sae, state, file)
    return sae


def _state(value, file: Path) -> dict:
    if not isinstance(value, dict) or not all(hasattr(t, "shape") for t in value.values()):
        raise SAEFormatError(f"{file}: after its header there is no state dict of tensors")
    return dict(value)


def _config(header: dict, file: Path) -> ExternalConfig:
    schema = header.get("schema")
    if schema is None:  # legacy: the config itself
        cfg, activation, legacy = header, {"cls": "Relu", "params": {}}, True
    elif schema in SCHEMAS and isinstance(header.get("cfg"), dict):
        cfg, legacy = header["cfg"], schema == 1
        if schema == 1 and header.get("cls") in ("Relu", "TopK", "BatchTopK"):  # schema 1's first form
            activation = {"cls": header["cls"], "params": {"top_k": cfg.get("top_k", 32)}}
        else:
            activation = cfg.get("activation", {"cls": "Relu", "params": {}})
    else:
        found = f"schema {clip_text(repr(schema), 40)}" if "schema" in header else "no schema"
        raise SAEFormatError(
            f"{file}: a saev header with {found} and keys {clip_text(str(sorted(header)), 150)}; vitviz reads "
            "legacy headers (d_vit, exp_factor) and schemas 1 to 5 with a cfg object"
        )
    d_in = integer(cfg.get("d_model", cfg.get("d_vit")), "d_model (or d_vit)", file)
    if "d_sae" in cfg:
        latents = integer(cfg["d_sae"], "d_sae", file)
    else:
        latents = d_in * integer(cfg.get("exp_factor"), "exp_factor (or d_sae)", file)
    if not isinstance(activation, dict) or activation.get("cls") not in ("Relu", "TopK", "BatchTopK"):
        kind = activation.get("cls") if isinstance(activation, dict) else activation
        raise SAEFormatError(
            f"{file}: saev activation {clip_text(repr(kind), 60)} is not one vitviz reads (Relu, TopK, BatchTopK)"
        )
    params = activation.get("params") if isinstance(activation.get("params"), dict) else {}
    kind = {"Relu": "relu", "TopK": "topk_signed", "BatchTopK": "jumprelu"}[activation["cls"]]
    k = min(integer(params.get("top_k", 32), "top_k", file), latents) if kind == "topk_signed" else 0
    block, from_end, hook = _where(file)
    if block is None and from_end is None and legacy:
        from_end, hook = -2, "layer -2 (saev's default for these files; not recorded in them)"
    return ExternalConfig(
        d_in=d_in,
        latents=latents,
        activation=kind,
        k=k,
        pre_encoder_bias=legacy,
        block=block,
        block_from_end=from_end,
        hook=hook,
        tokens="patches",
        format="saev",
        scaling_missing=SCALING,
    )


def _where(file: Path) -> tuple[int | None, int | None, str | None]:
    """The layer from a DINOv3 repository's ``layer_N/<run>/sae.pt`` and its manifest.jsonl."""
    run, layer_folder = file.parent, file.parent.parent
    found = _LAYER_FOLDER.fullmatch(layer_folder.name)
    if found is None:
        return None, None, None
    layer = int(found[1])
    manifest = layer_folder.parent / MANIFEST
    if manifest.is_file() and manifest.stat().st_size < (1 << 22):
        relative = f"{layer_folder.name}/{run.name}/{file.name}"
        for line in manifest.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("path") == relative and isinstance(entry.get("layer"), int):
                layer = entry["layer"]
    hook = f"saev layer {layer}"
    return (layer, None, hook) if layer >= 0 else (None, layer, hook)


def choices(root: Path) -> str:
    """The checkpoints a repository's manifest.jsonl lists (or its layer_N/<run> folders), for a message."""
    paths = []
    manifest = root / MANIFEST
    if manifest.is_file() and manifest.stat().st_size < (1 << 22):
        for line in manifest.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                paths.append(entry["path"].removesuffix("/" + FILE))
    if not paths:
        paths = sorted(str(p.parent.relative_to(root)) for p in root.glob(f"layer_*/*/{FILE}"))
    listed = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
    return f"name one of its folders ({listed or 'none found'}), e.g. {root.name}/{paths[0] if paths else '...'}"


FORMAT = SAEFileFormat(
    name="saev",
    description="saev's sae.pt (a JSON header line, then a torch state dict)",
    detect=detect,
    load=load,
)
