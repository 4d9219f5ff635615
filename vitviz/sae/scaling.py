"""The input scaling an SAE was trained with, where its file lacks it: estimated from a dataset index's own
activations (`vitviz sae calibrate INDEX SAE`), stored beside the SAE, applied by ``load_sae`` when present.

saev's data loader (``saev.data``, ``scale_mean`` and ``scale_norm``) feeds its SAEs ``(x - mu) / s`` with ``mu``
the mean activation and ``s = mean_i |x_i - mu| / sqrt(d)``: the mean L2 norm of the centred tokens over sqrt(d), so
that the scaled tokens' mean norm is sqrt(d) (its preprint words it as the mean *squared* norm being d; the code,
followed here, uses the mean norm). It computes both on a random sample of its training tokens and never saves them
in sae.pt (``ExternalSAE.scaling_missing``). Here they are computed on every token of an index at the SAE's block
(the patch tokens for saev's SAEs), two passes shard by shard, in float64.

The file, ``input_scaling.json`` in the SAE's folder (or ``--out``)::

    {"format": "vitviz-input-scaling", "version": 1, "estimated": true, "definition": DEFINITION,
     "mean": [d floats], "scale": s, "index": "/path/to/index", "index_created": "...", "block": B,
     "tokens": "patches", "images": n, "token_count": m, "sae": "the spec it was calibrated for"}
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from vitviz.messages import clip_text
from vitviz.sae.errors import SAEError, SAEFormatError

SCALING_FILE = "input_scaling.json"
FORMAT = "vitviz-input-scaling"
DEFINITION = "x_scaled = (x - mean) / scale, scale = mean_i |x_i - mean| / sqrt(d) (saev's scale_mean, scale_norm)"
MAX_BYTES = 1 << 22  # a mean of 8,192 floats as JSON is about 200 kB


@dataclass(frozen=True)
class InputScaling:
    """``(x - mean) / scale`` before the SAE, undone after; where it came from."""

    mean: list[float]
    scale: float
    estimated: bool
    index: str | None = None
    index_created: str | None = None
    block: int | None = None
    tokens: str = "patches"
    images: int = 0
    token_count: int = 0
    sae: str | None = None

    def note(self) -> str:
        """One line for the user: the scaling in use, and that it is an estimate."""
        if not self.estimated:
            return "input scaling from the file beside the SAE"
        return (
            f"input scaling estimated from {self.index} (block {self.block}, {self.token_count:,} {self.tokens} "
            f"tokens of {self.images:,} images), not the one the SAE was trained with"
        )


def estimate(chunks: Callable[[], Iterable[np.ndarray]]) -> tuple[np.ndarray, float, int]:
    """(mean (d,), scale, tokens) of the tokens ``chunks()`` yields as (m, d) arrays, by saev's definition (module
    docstring); two passes, float64 sums."""
    total, count = None, 0
    for chunk in chunks():
        values = np.asarray(chunk, dtype=np.float64)
        total = values.sum(axis=0) if total is None else total + values.sum(axis=0)
        count += len(values)
    if not count:
        raise SAEError("there are no tokens to estimate the input scaling from")
    mean = total / count
    norms = 0.0
    for chunk in chunks():
        norms += float(np.linalg.norm(np.asarray(chunk, dtype=np.float64) - mean, axis=1).sum())
    scale = norms / count / math.sqrt(len(mean))
    if not math.isfinite(scale) or scale <= 0:
        raise SAEError(f"the tokens' spread is {scale}: no input scaling can be estimated from them")
    return mean, scale, count


def from_index(index, block: int, tokens: str, sae: str | None = None) -> InputScaling:
    """The estimated scaling of every readable image's ``tokens`` ("patches" or "all") of ``block`` in ``index``
    (a DatasetIndex)."""
    from vitviz.sae.indexed import readable_images, token_source

    if tokens not in ("patches", "all"):
        raise SAEError(f"an input scaling is estimated on patch tokens or all tokens, not {tokens!r}")
    images = readable_images(index)
    mean, scale, count = estimate(token_source(index, block, images, tokens))
    return InputScaling(
        mean=mean.tolist(),
        scale=scale,
        estimated=True,
        index=str(index.folder),
        index_created=index.manifest.get("created"),
        block=block,
        tokens=tokens,
        images=len(images),
        token_count=count,
        sae=sae,
    )


def write(scaling: InputScaling, path: str | Path) -> Path:
    """Write the scaling as JSON (to a temporary name, then renamed); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps({"format": FORMAT, "version": 1, "definition": DEFINITION} | asdict(scaling)))
    partial.replace(path)
    return path


def read(path: str | Path, d_in: int) -> InputScaling:
    """A scaling file for a ``d_in``-wide SAE; SAEFormatError (one line) when it is not one."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise SAEFormatError(f"{clip_text(str(path))} is larger than an input scaling file may be")
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        if isinstance(error, SAEFormatError):
            raise
        why = type(error).__name__
        raise SAEFormatError(f"{clip_text(str(path))} is not a readable input scaling file ({why})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SAEFormatError(f"{clip_text(str(path))} is not an input scaling file (format {FORMAT!r})")
    mean, scale = data.get("mean"), data.get("scale")
    if (
        not isinstance(mean, list)
        or len(mean) != d_in
        or not all(isinstance(v, int | float) and math.isfinite(v) for v in mean)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise SAEFormatError(
            f"{clip_text(str(path))}: its mean must be {d_in} finite numbers and its scale a positive number"
        )
    fields = {name: data[name] for name in InputScaling.__dataclass_fields__ if name in data}
    return InputScaling(**(fields | {"mean": [float(v) for v in mean], "scale": float(scale)}))


def beside(path: Path) -> Path:
    """Where the scaling of the SAE at ``path`` (a local file or folder) is kept: its folder's input_scaling.json."""
    return (path if path.is_dir() else path.parent) / SCALING_FILE


def apply(sae, scaling: InputScaling) -> None:
    """Set the scaling on an SAE that lacks one (an ``ExternalSAE``)."""
    if not hasattr(sae, "set_input_scaling"):
        raise SAEError("this SAE keeps its input normalisation in its own file: it takes no input scaling")
    sae.set_input_scaling(torch.tensor(scaling.mean, dtype=torch.float32), scaling.scale, scaling.note())
