"""Vector search over the stored patch features and pooled embeddings (FAISS), built at the end of the pass.

Vectors are L2-normalised, so inner product is cosine similarity. Up to ``EXACT_LIMIT`` vectors the index is
exact (``IndexFlatIP``); above it, an inverted file (``IndexIVFScalarQuantizer``, fp16 codes: half the memory of
IVFFlat and the same ranking to fp16 precision). Its ``nprobe`` is the smallest that reaches ``TARGET_RECALL``
recall@10 against exact search on a sample of queries; that recall is stored with the index (in the manifest).
A vector's id is ``image_id * patches_per_image + row * cols + col`` (patches) or ``image_id`` (images); images
that could not be read are left out.
"""

from __future__ import annotations

import os
import struct
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vitviz.dataset.checks import IndexFormatError

EXACT_LIMIT = 200_000  # vectors: exact search is fast enough below this (about 10 ms a query for 192 dimensions)
TARGET_RECALL = 0.95
SAMPLE_QUERIES = 200
TRAIN_LIMIT = 50_000  # vectors the IVF's k-means sees
NPROBES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SEARCH = "search"
Chunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]  # yields (ids (n,), vectors (n, D)) in id order


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, fp32 (zero rows stay zero). torch does the fp16 cast and the norms: numpy's
    take several times longer, and the index normalises every stored patch vector once."""
    x = np.asarray(vectors)
    with warnings.catch_warnings():  # a read-only memory map: torch only reads it (.float() and normalize copy)
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        rows = torch.from_numpy(x)
    return F.normalize(rows.float(), dim=-1, eps=1e-12).numpy()


def build_vector_index(chunks: Chunks, count: int, dimension: int, exact_limit: int = EXACT_LIMIT, seed: int = 0):
    """A FAISS index of ``count`` vectors (fed chunk by chunk, never all at once) and what was measured of it."""
    import faiss

    if count <= exact_limit:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
        for ids, vectors in chunks():
            index.add_with_ids(normalised(vectors), ids.astype(np.int64))
        return index, {"kind": "exact", "vectors": count, "recall_at_10": 1.0}
    # sqrt(n) lists, the low end of FAISS's guideline: building (k-means, then assigning every vector) stays
    # minutes on a CPU for millions of vectors; nprobe then buys back the recall. At least 39 training points a list.
    nlist = int(min(np.sqrt(count), min(TRAIN_LIMIT, count) // 39))
    quantizer = faiss.IndexFlatIP(dimension)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dimension, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
    )
    rng = np.random.default_rng(seed)
    train = _sample(chunks, count, min(TRAIN_LIMIT, count), rng)
    index.train(train)
    for ids, vectors in chunks():
        index.add_with_ids(normalised(vectors), ids.astype(np.int64))
    queries = _sample(chunks, count, min(SAMPLE_QUERIES, count), rng)
    nprobe, recall = choose_nprobe(index, queries, chunks, dimension)
    index.nprobe = nprobe
    return index, {
        "kind": "ivf",
        "vectors": count,
        "nlist": nlist,
        "nprobe": nprobe,
        "recall_at_10": recall,
        "recall_sample": len(queries),
    }


def _sample(chunks: Chunks, count: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` vectors drawn uniformly without replacement, normalised, read in one pass over the chunks."""
    wanted = np.sort(rng.choice(count, size=size, replace=False))
    picked, seen = [], 0
    for _, vectors in chunks():
        inside = wanted[(wanted >= seen) & (wanted < seen + len(vectors))] - seen
        picked.append(normalised(vectors[inside]))
        seen += len(vectors)
    return np.concatenate(picked)


def exact_neighbours(queries: np.ndarray, chunks: Chunks, k: int) -> np.ndarray:
    """The ids of the exact top-k by cosine for each query (q, k), merged chunk by chunk."""
    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_ids = np.full((len(queries), k), -1, dtype=np.int64)
    for ids, vectors in chunks():
        scores = queries @ normalised(vectors).T  # (q, n)
        scores = np.concatenate([best_scores, scores], axis=1)
        all_ids = np.concatenate([best_ids, np.broadcast_to(ids, (len(queries), len(ids)))], axis=1)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        best_scores, best_ids = np.take_along_axis(scores, top, 1), np.take_along_axis(all_ids, top, 1)
    return best_ids


def recall_at(approximate: np.ndarray, exact: np.ndarray) -> float:
    """The fraction of the exact top-k found in the approximate top-k, over all queries."""
    hits = sum(len(set(a.tolist()) & set(e.tolist()) - {-1}) for a, e in zip(approximate, exact))
    return hits / max(1, int((exact >= 0).sum()))


def choose_nprobe(index, queries: np.ndarray, chunks: Chunks, dimension: int, k: int = 10) -> tuple[int, float]:
    """The smallest nprobe whose recall@k on ``queries`` reaches TARGET_RECALL (else the largest tried)."""
    exact = exact_neighbours(queries, chunks, k)
    recall = 0.0
    for nprobe in NPROBES:
        nprobe = min(nprobe, index.nlist)
        index.nprobe = nprobe
        _, found = index.search(queries, k)
        recall = recall_at(found, exact)
        if recall >= TARGET_RECALL or nprobe == index.nlist:
            break
    return nprobe, recall


def save(index, path: Path) -> None:
    import faiss

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    faiss.write_index(index, str(temporary))
    temporary.replace(path)


# What this module writes: an IDMap2 over a flat index (fp32 codes) or an IVF of fp16 scalar-quantised codes; bytes
# per vector at the least (codes and id)
WRITTEN = {b"IxM2": 4, b"IwSq": 2, b"IwSQ": 2}
HEADER = struct.Struct("<4siqqqBi")  # fourcc, d, ntotal, two unused, is_trained, metric: every index's header
LOOP_LIMIT = 1 << 16  # inverted lists FAISS may loop over while reading (this module makes at most ~1,300)
_reading = threading.Lock()  # FAISS's reading limits are process-wide: one read at a time sets and restores them


def load(path: Path, dimension: int, vectors: int):
    """The FAISS index in ``path``, checked to hold ``vectors`` vectors of ``dimension`` (the manifest's, checked
    against the stored arrays). Its header is read and checked against the file's size before FAISS reads it, and
    FAISS reads with limits no larger than the file, so a header claiming 2^62 vectors allocates nothing; any
    failure of FAISS is an IndexFormatError naming the file."""
    import faiss

    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
    except OSError as error:
        raise IndexFormatError(f"{path}: cannot be read ({error.strerror or error}); index the dataset again") from None
    if len(head) < HEADER.size or head[:4] not in WRITTEN:
        raise IndexFormatError(
            f"{path} is not a FAISS index this vitviz writes ({'empty' if not head else 'an unknown header'}); "
            "index the dataset again"
        )
    fourcc, d, ntotal, *_ = HEADER.unpack(head)
    if (d, ntotal) != (dimension, vectors):
        raise IndexFormatError(
            f"{path} holds {ntotal} vectors of dimension {d}, the index stores {vectors} of dimension {dimension}; "
            "index the dataset again"
        )
    if size < HEADER.size + ntotal * (d * WRITTEN[fourcc] + 8):
        raise IndexFormatError(f"{path} is {size:,} bytes, too short for {ntotal} vectors: it is truncated")
    with _reading:
        limits = faiss.get_deserialization_vector_byte_limit(), faiss.get_deserialization_loop_limit()
        faiss.set_deserialization_vector_byte_limit(size + 1)  # no vector larger than the file
        faiss.set_deserialization_loop_limit(LOOP_LIMIT)
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP)  # the vectors stay on disk until touched
        except Exception as error:  # FAISS raises RuntimeError, MemoryError, bare AssertionError
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            reason = first.rsplit("Error: ", 1)[-1][:160]  # FAISS's message without its C++ source path
            problem = f"{path} is not a readable FAISS index ({reason}); index the dataset again"
            raise IndexFormatError(problem) from None
        finally:
            faiss.set_deserialization_vector_byte_limit(limits[0])
            faiss.set_deserialization_loop_limit(limits[1])
    # the header's numbers, and those of the parts a search goes through (a crafted inner index could differ)
    if fourcc == b"IxM2":
        found = [(index.d, index.ntotal), (index.index.d, index.index.ntotal)]
    else:  # the coarse quantizer's dimension, and the vectors in the inverted lists
        found = [(index.d, index.ntotal), (index.quantizer.d, vectors), (index.d, index.invlists.compute_ntotal())]
    if any(pair != (dimension, vectors) for pair in found):
        raise IndexFormatError(
            f"{path} holds vectors of dimension {index.d} and count {index.ntotal} ({found[1:]} inside), the index "
            f"stores {vectors} of dimension {dimension}; index the dataset again"
        )
    return index


def search(index, query: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(similarities (k,), ids (k,)) of the k nearest stored vectors to one query, best first."""
    if nprobe is not None and hasattr(index, "nprobe"):
        index.nprobe = nprobe
    scores, ids = index.search(normalised(query[None]), k)
    keep = ids[0] >= 0
    return scores[0][keep], ids[0][keep]
