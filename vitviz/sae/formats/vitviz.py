"""vitviz's own SAE folder (written by ``vitviz.sae.files.save_sae``): ``config.json`` with ``"format":
"vitviz-sae"``, ``"version": 1``, the ``SAEConfig`` under ``config``, the model it was trained on under ``model``;
``sae.safetensors`` with ``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``, ``mean``, ``scale`` and ``threshold``. It loads
as the ``TopKSAE`` it was saved from: the block is the config's, the tokens are the patch tokens."""

from __future__ import annotations

from pathlib import Path

from vitviz.sae.errors import SAEFormatError
from vitviz.sae.formats.base import SAEFileFormat, check_size, fill, folder_of, json_object, load_safetensors
from vitviz.sae.model import SAEConfig, TopKSAE

FORMAT_NAME = "vitviz-sae"
WEIGHTS, CONFIG = "sae.safetensors", "config.json"


def detect(path: Path) -> bool:
    header = json_object(folder_of(path) / CONFIG)
    return header is not None and header.get("format") == FORMAT_NAME


def load(path: Path) -> TopKSAE:
    folder = folder_of(path)
    header = json_object(folder / CONFIG) or {}
    if header.get("version") != 1:
        raise SAEFormatError(f"{folder / CONFIG} is version {header.get('version')!r}; this vitviz reads version 1")
    if not (folder / WEIGHTS).is_file():
        raise SAEFormatError(f"{folder} has {CONFIG} but no {WEIGHTS}")
    try:
        config = SAEConfig(**header["config"])
    except (KeyError, TypeError, ValueError) as error:
        raise SAEFormatError(f"{folder / CONFIG}: its config is not an SAEConfig ({error})") from None
    check_size(config.d_in, config.latents, str(folder / CONFIG))
    sae = TopKSAE(config)
    fill(sae, load_safetensors(folder / WEIGHTS), folder / WEIGHTS, optional=("mean", "threshold"))
    model = header.get("model")
    sae.model = model if isinstance(model, str) else None
    return sae


FORMAT = SAEFileFormat(
    name="vitviz",
    description=f"vitviz's folder ({WEIGHTS} + {CONFIG})",
    detect=detect,
    load=load,
)
