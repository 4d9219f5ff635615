"""The SAE files vitviz reads: one module per library, each registering an ``SAEFileFormat`` record (name, detect,
load), so adding a format is adding one module and one line to ``FORMATS``.

- ``base.py``      the ``SAEFileFormat`` record and the bounded reading every format shares: JSON and header lines up
                   to a size, torch files with ``weights_only=True``, safetensors by name and shape, NaN refused.
- ``module.py``    ``ExternalSAE``: one module computing every architecture below exactly (input normalisation,
                   pre-encoder bias, ReLU / TopK / JumpReLU / gated / group-max, skip connection);
                   ``encode``, ``reconstruct``, ``decode``, ``block``, ``tokens``, ``model``.
- ``vitviz.py``    vitviz's own folder (sae.safetensors + config.json), loaded as the ``TopKSAE`` it was saved from.
- ``saev.py``      saev's ``sae.pt``: a JSON header line (legacy, schemas 1-5), then a torch state dict; DINOv3
                   repositories' ``layer_N/<run>/sae.pt`` with ``manifest.jsonl``.
- ``saelens.py``   SAELens's cfg.json + sae_weights.safetensors (v6 and the flat pre-6 layout); ``save`` writes
                   vitviz's SAEs in SAELens 6's layout.
- ``prisma.py``    ViT-Prisma's config.json + ``n_images_*.pt``.
- ``sparsify.py``  EleutherAI sparsify's ``<hookpoint>/cfg.json`` + ``sae.safetensors``.
- ``hub.py``       where a spec's files are: a local path, or ``hf:<repo>[/<subfolder>]`` through the Hub's cache.

The order of ``FORMATS`` is the order of detection: the first whose ``detect`` says yes reads the file.
"""

from vitviz.sae.formats import prisma, saelens, saev, sparsify, vitviz
from vitviz.sae.formats.base import SAEFileFormat
from vitviz.sae.formats.module import ExternalConfig, ExternalSAE

FORMATS: tuple[SAEFileFormat, ...] = (vitviz.FORMAT, saev.FORMAT, saelens.FORMAT, sparsify.FORMAT, prisma.FORMAT)

__all__ = ["FORMATS", "ExternalConfig", "ExternalSAE", "SAEFileFormat"]
