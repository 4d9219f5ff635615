"""SAEs on disk: ``load_sae(spec)`` reads every format of vitviz.sae.formats, ``save_sae`` writes vitviz's own
folder or SAELens 6's.

A spec is a local file or folder, or ``hf:<owner>/<repo>[/<subfolder>]`` on the Hugging Face Hub (fetched into its
cache, read offline once there). The formats, detected in this order (each module's docstring has the layout):
- vitviz's folder: ``sae.safetensors`` (``W_enc`` (d_in, latents), ``b_enc``, ``W_dec`` (latents, d_in, unit-norm
  rows), ``b_dec``, ``mean``, ``scale``, ``threshold``, float32) and ``config.json`` (``format``: "vitviz-sae",
  ``version``: 1, ``config``: the ``SAEConfig``, ``model``, ``training``); ``metrics.json`` beside them holds the
  held-out metrics. Loaded as a ``TopKSAE``.
- saev's ``sae.pt`` (every header schema), SAELens's ``cfg.json`` + ``sae_weights.safetensors``, sparsify's
  ``<hookpoint>/cfg.json`` + ``sae.safetensors``, ViT-Prisma's ``config.json`` + ``.pt``: loaded as an
  ``ExternalSAE`` that computes them as their libraries do.

Every SAE loaded has ``encode(x)``, ``reconstruct(x)``, ``decode(codes)``, ``block``, ``block_for(num_blocks)``,
``tokens``, ``model`` and ``scaling_missing`` (and a warning when that is set, unless an estimated scaling from
`vitviz sae calibrate` is beside it: then that is applied, with a warning saying so).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from vitviz.messages import clip_text
from vitviz.sae import scaling as input_scaling
from vitviz.sae.errors import SAEError, SAEFormatError
from vitviz.sae.formats import FORMATS, saelens
from vitviz.sae.formats.hub import local_path
from vitviz.sae.formats.module import ExternalSAE, warn_scaling
from vitviz.sae.formats.vitviz import CONFIG, FORMAT_NAME, WEIGHTS
from vitviz.sae.model import TopKSAE

FORMAT = FORMAT_NAME
METRICS = "metrics.json"
SAVE_FORMATS = ("vitviz", "saelens")


def save_sae(
    sae: nn.Module,
    folder: str | Path,
    model: str | None = None,
    training: dict | None = None,
    format: str = "vitviz",
) -> Path:
    """Write ``sae`` into ``folder`` (created); returns the folder. ``format="vitviz"``: ``sae.safetensors`` and
    ``config.json`` of a TopKSAE; ``format="saelens"``: SAELens 6's ``cfg.json`` and ``sae_weights.safetensors``
    (any SAE SAELens can compute; ``load_sae`` reads it back to the same codes and reconstructions)."""
    folder = Path(folder)
    if format == "saelens":
        return saelens.save(sae, folder, model=model)
    if format != "vitviz":
        raise SAEError(f"format must be one of {SAVE_FORMATS}; got {clip_text(repr(format), 60)}")
    if not isinstance(sae, TopKSAE):
        raise SAEError("vitviz's own format holds TopKSAEs; write this SAE with format='saelens'")
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().float().cpu().contiguous() for name, tensor in sae.state_dict().items()}
    save_file(tensors, folder / WEIGHTS)
    header = {
        "format": FORMAT,
        "version": 1,
        "config": sae.config.to_dict(),
        "model": model if model is not None else sae.model,
        "training": training or {},
    }
    (folder / CONFIG).write_text(json.dumps(header, indent=1))
    return folder


def load_sae(spec: str | Path, d_in: int | None = None, scaling: str | Path | None = None) -> TopKSAE | ExternalSAE:
    """An SAE (eval mode, CPU) from a local file or folder or ``hf:<repo>[/<subfolder>]`` in any format of the
    module docstring. ``d_in``, if given, is the width the caller will feed it: another width is refused.

    A file that lacks the input scaling it was trained with (``scaling_missing``) gets the one in ``scaling`` (a
    file `vitviz sae calibrate` wrote), else the ``input_scaling.json`` beside it when there is one, with a warning
    that says it is estimated (vitviz.sae.scaling); else a warning that it is missing."""
    path = local_path(spec)
    chosen = next((f for f in FORMATS if f.detect(path)), None)
    if chosen is None:
        raise SAEFormatError(
            f"{clip_text(str(path))} is not an SAE vitviz reads: {_found(path)}; expected "
            + "; ".join(f.description for f in FORMATS)
        )
    try:
        sae = chosen.load(path)
    except (OSError, RuntimeError) as error:  # a file that vanished or a tensor torch could not read
        raise SAEFormatError(f"{clip_text(str(path))}: {type(error).__name__}: {clip_text(str(error), 150)}") from None
    if d_in is not None and sae.config.d_in != d_in:
        raise SAEError(
            f"{clip_text(str(spec))} reads {sae.config.d_in}-wide activations, not {d_in}: it was trained on another "
            "model or block width"
        )
    found = Path(scaling) if scaling is not None else input_scaling.beside(path)
    if scaling is not None and not (isinstance(sae, ExternalSAE) and sae.config.scaling_missing):
        raise SAEError(f"{clip_text(str(spec))} has its input scaling in its own file: it takes no --scaling file")
    if isinstance(sae, ExternalSAE) and sae.config.scaling_missing and (scaling is not None or found.is_file()):
        input_scaling.apply(sae, input_scaling.read(found, sae.config.d_in))
        warnings.warn(f"{clip_text(str(spec))}: {sae.scaling_note} ({found})", UserWarning, stacklevel=2)
    elif isinstance(sae, ExternalSAE):
        warn_scaling(sae.config, clip_text(str(spec)))
    return sae.eval()


def _found(path: Path) -> str:
    """What a path that is no SAE holds, for the message: its files, or its first bytes."""
    if path.is_dir():
        names = sorted(p.name for p in path.iterdir())[:8]
        return f"found the files {names}" if names else "found an empty folder"
    with open(path, "rb") as f:
        start = f.read(24)
    return f"found a file starting {start!r}"


__all__ = ["load_sae", "save_sae"]
