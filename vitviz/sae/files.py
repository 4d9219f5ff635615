"""SAEs on disk: vitviz's own format, and saev's and ViT-Prisma's files.

vitviz's format is a folder with two files:
- ``sae.safetensors``: the tensors ``W_enc`` (d_in, latents), ``b_enc`` (latents), ``W_dec`` (latents, d_in, unit-norm
  rows), ``b_dec`` (d_in), ``mean`` (d_in) and ``scale`` () (the input normalisation: z = (x - mean) / scale) and
  ``threshold`` () (BatchTopK's inference threshold), all float32;
- ``config.json``:
  - ``format``: "vitviz-sae"; ``version``: 1;
  - ``config``: the ``SAEConfig``: ``d_in``, ``latents``, ``k``, ``aux_k``, ``activation`` ("topk", "batchtopk" or
    "relu"), ``pre_encoder_bias`` (b_dec subtracted before the encoder), ``block`` (the block whose output it reads);
  - ``model``: the model spec it was trained on, when known;
  - ``training``: the ``TrainConfig`` and the run's record (tokens, epochs, seconds), when trained by vitviz.
  ``metrics.json`` beside them holds the held-out metrics of ``vitviz.sae.metrics``.

``load_sae`` also reads:
- saev's ``sae.pt``: one JSON header line, then a torch state dict (``W_enc`` (d_vit, d_sae), ``b_enc``, ``W_dec``
  (d_sae, d_vit), ``b_dec``). The header is the config itself (old files: ReLU, b_dec subtracted before the
  encoder) or ``{"schema": 1 or 2, "cfg": {"d_vit", "exp_factor", "activation": {"cls", "params": {"top_k"}}}}``
  (newer files: no pre-encoder bias). saev normalises activations in its data loader; that factor is not in the
  file, so the SAE reads its inputs as they come (mean 0, scale 1).
- ViT-Prisma's folder: ``config.json`` (``d_in``, ``d_sae`` or ``expansion_factor``, ``activation_fn_str`` "relu" or
  "topk", ``activation_fn_kwargs`` {"k"}, ``normalize_activations``, ``hook_point_layer``) and a ``.pt`` state dict
  with the same four tensors as saev's; b_dec is subtracted before the encoder. Per-token normalisation
  ("layer_norm") is refused: decode(codes) alone could not undo it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from vitviz.sae.errors import SAEError, SAEFormatError
from vitviz.sae.model import SAEConfig, TopKSAE

FORMAT = "vitviz-sae"
WEIGHTS, CONFIG, METRICS = "sae.safetensors", "config.json", "metrics.json"


def save_sae(sae: TopKSAE, folder: str | Path, model: str | None = None, training: dict | None = None) -> Path:
    """Write ``sae.safetensors`` and ``config.json`` into ``folder`` (created); returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().float().cpu().contiguous() for name, tensor in sae.state_dict().items()}
    save_file(tensors, folder / WEIGHTS)
    header = {
        "format": FORMAT,
        "version": 1,
        "config": sae.config.to_dict(),
        "model": model,
        "training": training or {},
    }
    (folder / CONFIG).write_text(json.dumps(header, indent=1))
    return folder


def load_sae(path: str | Path, d_in: int | None = None) -> TopKSAE:
    """An SAE (eval mode, CPU) from vitviz's folder, saev's ``sae.pt`` or ViT-Prisma's folder (see the module
    docstring). ``d_in``, if given, is the width the caller will feed it: another width is refused."""
    path = Path(path)
    if not path.exists():
        raise SAEFormatError(f"{path} does not exist")
    folder = path if path.is_dir() else path.parent
    header = _json(folder / CONFIG) if (folder / CONFIG).is_file() else None
    if header is not None and header.get("format") == FORMAT:
        sae = _vitviz(folder, header)
    elif path.is_file() and _saev_header(path) is not None:
        sae = _saev(path)
    elif path.is_dir() and (path / "sae.pt").is_file() and _saev_header(path / "sae.pt") is not None:
        sae = _saev(path / "sae.pt")
    elif header is not None and "d_in" in header and ("d_sae" in header or "expansion_factor" in header):
        sae = _prisma(path, folder, header)
    else:
        raise SAEFormatError(
            f"{path} is not an SAE vitviz reads: expected a folder with {WEIGHTS} and {CONFIG} "
            "(vitviz), saev's sae.pt (a JSON line, then a torch state dict), or ViT-Prisma's "
            "config.json with a .pt state dict"
        )
    if d_in is not None and sae.config.d_in != d_in:
        raise SAEError(
            f"{path} reads {sae.config.d_in}-wide activations, not {d_in}: it was trained on another "
            "model or block width"
        )
    return sae.eval()


def _json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _build(config: SAEConfig, tensors: dict[str, torch.Tensor], source: Path) -> TopKSAE:
    sae = TopKSAE(config)
    expected = {name: tuple(t.shape) for name, t in sae.state_dict().items()}
    missing = sorted({"W_enc", "b_enc", "W_dec", "b_dec"} - set(tensors))
    if missing:
        raise SAEFormatError(f"{source} lacks the tensors {missing}")
    for name, tensor in tensors.items():
        if name in expected and tuple(tensor.shape) != expected[name]:
            raise SAEFormatError(f"{source}: {name} is {tuple(tensor.shape)}, but its config says {expected[name]}")
    with torch.no_grad():
        for name, value in sae.state_dict().items():
            if name in tensors:
                value.copy_(tensors[name].float())
    return sae


def _vitviz(folder: Path, header: dict) -> TopKSAE:
    if header.get("version") != 1:
        raise SAEFormatError(f"{folder / CONFIG} is version {header.get('version')!r}; this vitviz reads version 1")
    if not (folder / WEIGHTS).is_file():
        raise SAEFormatError(f"{folder} has {CONFIG} but no {WEIGHTS}")
    try:
        config = SAEConfig(**header["config"])
    except (KeyError, TypeError) as error:
        raise SAEFormatError(f"{folder / CONFIG}: its config is not an SAEConfig ({error})") from None
    return _build(config, load_file(folder / WEIGHTS), folder / WEIGHTS)


def _saev_header(path: Path) -> dict | None:
    """saev's first line, when the file starts with a JSON object on one line."""
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 20)
        value = json.loads(line)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _saev(path: Path) -> TopKSAE:
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        state = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    cfg = header.get("cfg", header)
    try:
        d_vit, latents = int(cfg["d_vit"]), int(cfg["d_vit"]) * int(cfg["exp_factor"])
    except (KeyError, TypeError, ValueError):
        raise SAEFormatError(f"{path}: saev's header has no d_vit and exp_factor") from None
    kind, top_k = header.get("cls"), cfg.get("top_k")  # schema 1, first form: the activation's class at the top
    if isinstance(cfg.get("activation"), dict):  # schema 2 (and 1's second form)
        kind, top_k = cfg["activation"].get("cls"), cfg["activation"].get("params", {}).get("top_k")
    # saev's "BatchTopK" keeps the top k of each token, like TopK
    activation = "topk" if kind in ("TopK", "BatchTopK") else "relu"
    if kind not in (None, "Relu", "TopK", "BatchTopK", "SparseAutoencoderConfig"):
        raise SAEFormatError(f"{path}: saev activation {kind!r} is not one vitviz reads (Relu, TopK, BatchTopK)")
    config = SAEConfig(
        d_in=d_vit, latents=latents, k=int(top_k or 1), activation=activation, pre_encoder_bias="schema" not in header
    )
    return _build(config, state, path)


def _prisma(path: Path, folder: Path, header: dict) -> TopKSAE:
    norm = header.get("normalize_activations") or "none"
    if norm != "none":
        raise SAEFormatError(
            f"{folder / CONFIG}: normalize_activations={norm!r} normalises each token by its own "
            "statistics, which decode(codes) cannot undo; vitviz reads ViT-Prisma SAEs "
            "with 'none'"
        )
    weights = [path] if path.is_file() and path.suffix in (".pt", ".pth") else sorted(folder.glob("*.pt*"))
    if len(weights) != 1:
        raise SAEFormatError(f"{folder}: expected one .pt weights file beside config.json, found {len(weights)}")
    state = torch.load(weights[0], map_location="cpu", weights_only=True)
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    d_in = int(header["d_in"])
    latents = int(header.get("d_sae") or d_in * int(header["expansion_factor"]))
    kind = header.get("activation_fn_str", "relu")
    if kind not in ("relu", "topk"):
        raise SAEFormatError(f"{folder / CONFIG}: activation_fn_str {kind!r} is not one vitviz reads (relu, topk)")
    k = int((header.get("activation_fn_kwargs") or {}).get("k", 1))
    block = header.get("hook_point_layer")
    config = SAEConfig(
        d_in=d_in,
        latents=latents,
        k=k,
        activation=kind,
        pre_encoder_bias=True,
        block=block if isinstance(block, int) else None,
    )
    return _build(config, state, weights[0])
