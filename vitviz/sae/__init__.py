"""Sparse autoencoders (SAEs) on one block's output tokens: training, loading, metrics and feature edits.

The map of this folder, in the order work flows:
- ``model.py``     ``SAEConfig`` and ``TopKSAE``: Gao et al.'s TopK SAE (normalised inputs, pre-encoder bias,
                   unit-norm decoder rows); ``encode(x) -> codes (..., N)``, ``decode(codes) -> x`` in x's units.
- ``data.py``      the training data: any sequential source of (n, d) chunks (memory-mapped fp16 ``.npy`` files...),
                   shuffled within a buffer, and one pass for the normalisation statistics and an init sample.
- ``training.py``  ``train_sae``: reconstruction + AuxK on dead latents, data initialisation, Adam with warm-up and
                   decay, progress, per-epoch checkpoints to resume, CPU or CUDA, deterministic for a seed, and a
                   memory check before allocating; Matryoshka prefixes (``TrainConfig.matryoshka``) as saev's.
- ``metrics.py``   explained variance, L0, dead and dense latents, normalised MSE; top-1 agreement and ViT-Prisma's
                   "CE loss recovered" with the block's patch tokens replaced by the reconstruction.
- ``editing.py``   ``with_sae(model, sae, block, scale={latent: factor})``: a model sharing every weight whose block
                   output on the patch tokens is h + decode(edited codes) - decode(codes).
- ``formats/``     the SAE files of other libraries, one module each (saev, SAELens, ViT-Prisma, sparsify) and
                   vitviz's own, registered as records (name, detect, load); ``ExternalSAE`` computes them exactly.
- ``files.py``     ``load_sae(spec)``: a local file or folder or ``hf:<repo>[/<subfolder>]`` in any of those formats;
                   ``save_sae``: vitviz's folder (safetensors + config.json) or SAELens 6's (``format="saelens"``).
- ``indexed.py``   the data from a dataset index (``vitviz index --activations B``): tokens read shard by shard,
                   memory-mapped; the held-out split by a hash of image_id; the index's model and images again.
- ``ablation.py``  ``ablate``: one latent edited over a dataset's images, per-class accuracy before and after.
- ``browse.py``    the feature browser's numbers: per-latent frequency, mean and largest code, histogram and top
                   images over an index (one pass, shard by shard, written once as Parquet next to the SAE); the
                   classes a latent raises (direct logit attribution of its decoder column), the later heads that
                   attend to where it fires, latents by their top images' labels and errors; one photo's latents.
- ``run.py``       ``train(out, latents=..., index=... | images=... | activations=...)``: one training run end to
                   end (data, split, ``train_sae``, held-out metrics, the folder written); `vitviz sae train`
                   (vitviz/commands/sae.py) calls it.
- ``evaluation.py`` ``evaluate_on_index``: several SAEs (any format) on an index's held-out images, one row each
                   (L0, EV, saev's NMSE, dead, dense, CE recovered, top-1): `vitviz sae evaluate`'s table.
- ``scaling.py``   the input scaling a file lacks (saev's mean and scalar): estimated from an index's tokens
                   (`vitviz sae calibrate`), kept beside the SAE as input_scaling.json, applied by ``load_sae``.
- ``errors.py``    ``SAEError`` (a ValueError) and its kinds: bad formats, not enough memory.

Why vitviz has its own SAE rather than a library's: ``overcomplete`` 0.3's TopKSAE encodes with Linear + BatchNorm by
default, its "AuxK" reconstructs the residual from the top half of all unchosen codes rather than from the top
k_aux dead latents as Gao et al. do, and it pulls in opencv-python and scikit-image; ``sae-lens`` is built for
language models through TransformerLens hooks. The SAE here is ~100 lines and is tested against a reference written
from the paper (tests/test_sae_model.py).
"""

from vitviz.sae.editing import replace_with, with_sae
from vitviz.sae.errors import SAEError, SAEFormatError, SAEMemoryError
from vitviz.sae.files import load_sae, save_sae
from vitviz.sae.formats import ExternalSAE
from vitviz.sae.metrics import evaluate, largest_activations, top1_agreement
from vitviz.sae.model import SAEConfig, TopKSAE
from vitviz.sae.run import TrainRecord, train
from vitviz.sae.training import TrainConfig, train_sae

__all__ = [
    "ExternalSAE",
    "SAEConfig",
    "SAEError",
    "SAEFormatError",
    "SAEMemoryError",
    "TopKSAE",
    "TrainConfig",
    "TrainRecord",
    "evaluate",
    "largest_activations",
    "load_sae",
    "replace_with",
    "save_sae",
    "top1_agreement",
    "train",
    "train_sae",
    "with_sae",
]
