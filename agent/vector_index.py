"""Nearest-neighbour search over spectral embeddings (agent.similarity): a FAISS index and the
exact numpy search it is checked against.

Which index (``IndexParams.for_size``):

- under IVF_MIN_VECTORS vectors, exact: ``IndexIDMap2(IndexFlatL2)``, a scan of every vector
  (at 10^4 x 32 floats that is ~1 ms, and an IVF would have too few points per list to train);
- from IVF_MIN_VECTORS up, ``IndexIVFFlat`` (L2): ``nlist`` = 4 sqrt(n) inverted lists (4000 at
  10^6), k-means trained on at most TRAIN_PER_LIST points per list (a sample, so training stays
  bounded), vectors stored uncompressed (32 float32 = 128 bytes each, 128 MB at 10^6), and a
  query scans the ``nprobe`` = nlist / 40 nearest lists (100 at 10^6: 2.5 % of the vectors).
  IVF rather than HNSW because the catalog deletes and replaces vectors: IVF removes ids in
  place (``remove_ids``), HNSW cannot remove, so it would need rebuilding after every change.

Both index types take the caller's int64 ids (spectrum primary keys), so a result names its
spectrum whatever order vectors were added in.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# faiss's loader announces at INFO which build it loaded, into every command's output
logging.getLogger("faiss.loader").setLevel(logging.WARNING)
import faiss  # noqa: E402

IVF_MIN_VECTORS = 10_000
TRAIN_PER_LIST = 64
LISTS_PER_SQRT = 4
PROBE_FRACTION = 40  # nprobe = nlist / PROBE_FRACTION
SEED = 1234
DISTANCE_BUDGET = 1 << 22  # distances held at once by the exact search (16 MiB of float32)


@dataclass(frozen=True)
class IndexParams:
    kind: str  # "flat" (exact) or "ivf"
    nlist: int = 0
    nprobe: int = 0

    @classmethod
    def for_size(cls, n: int) -> IndexParams:
        if n < IVF_MIN_VECTORS:
            return cls("flat")
        nlist = int(LISTS_PER_SQRT * math.sqrt(n))
        return cls("ivf", nlist=nlist, nprobe=max(8, nlist // PROBE_FRACTION))

    def describe(self) -> str:
        if self.kind == "flat":
            return "FAISS IndexFlatL2 (exact)"
        return f"FAISS IndexIVFFlat L2, nlist={self.nlist}, nprobe={self.nprobe}"


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vectors, dtype=np.float32)


def build_index(vectors: np.ndarray, ids: np.ndarray, params: IndexParams) -> faiss.Index:
    """An index of ``vectors`` (n x d) under ``ids`` (n int64)."""
    matrix = _as_matrix(vectors)
    keys = np.ascontiguousarray(ids, dtype=np.int64)
    dim = matrix.shape[1]
    index: Any
    if params.kind == "flat":
        index = faiss.IndexIDMap2(faiss.IndexFlatL2(dim))
    else:
        quantizer = faiss.IndexFlatL2(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, params.nlist, faiss.METRIC_L2)
        sample = min(len(matrix), params.nlist * TRAIN_PER_LIST)
        rng = np.random.default_rng(SEED)
        chosen = (
            rng.choice(len(matrix), size=sample, replace=False) if sample < len(matrix) else None
        )
        index.cp.seed = SEED
        index.train(matrix if chosen is None else matrix[np.sort(chosen)])
        index.nprobe = params.nprobe
        # a hash table from id to list entry: ids are replaced and removed in place
        index.set_direct_map_type(faiss.DirectMap.Hashtable)  # type: ignore[attr-defined]
    if len(matrix):
        index.add_with_ids(matrix, keys)
    return index


def replace(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray) -> None:
    """Put ``vectors`` under ``ids``, taking out what those ids held before."""
    keys = np.ascontiguousarray(ids, dtype=np.int64)
    remove(index, keys)
    if len(keys):
        index.add_with_ids(_as_matrix(vectors), keys)


def remove(index: faiss.Index, ids: np.ndarray) -> int:
    keys = np.ascontiguousarray(ids, dtype=np.int64)
    if not len(keys):
        return 0
    if isinstance(index, faiss.IndexIVF):
        # the hash-table direct map removes by an explicit array of ids only
        return int(index.remove_ids(faiss.IDSelectorArray(len(keys), faiss.swig_ptr(keys))))
    return int(index.remove_ids(faiss.IDSelectorBatch(len(keys), faiss.swig_ptr(keys))))


def search(index: faiss.Index, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids and squared L2 distances of the ``k`` nearest (fewer when the index holds fewer;
    FAISS's -1 padding is dropped)."""
    distances, ids = index.search(_as_matrix(query.reshape(1, -1)), k)
    keep = ids[0] >= 0
    return ids[0][keep], distances[0][keep]


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    matrix = _as_matrix(vectors)
    return np.einsum("ij,ij->i", matrix, matrix)


def exact_search(
    vectors: np.ndarray,
    ids: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    chunk: int = 262_144,
    norms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The reference: squared L2 to every vector in numpy, in chunks (memory stays bounded);
    ``(ids, distances)`` of shape (n_queries, k), nearest first. ``norms``: the vectors'
    squared norms, computed once for many searches (``squared_norms``)."""
    matrix = _as_matrix(vectors)
    norms = squared_norms(matrix) if norms is None else norms
    queries = _as_matrix(np.atleast_2d(queries))
    # at most DISTANCE_BUDGET distances at once, however many queries: memory stays bounded
    chunk = max(1024, min(chunk, DISTANCE_BUDGET // len(queries)))
    q_norm = (queries**2).sum(axis=1)[:, None]
    best_d = np.full((len(queries), 0), np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(matrix), chunk):
        part = matrix[start : start + chunk]
        d = q_norm - 2.0 * queries @ part.T + norms[start : start + chunk][None, :]
        take = min(k, part.shape[0])
        top = np.argpartition(d, take - 1, axis=1)[:, :take]
        best_d = np.concatenate([best_d, np.take_along_axis(d, top, axis=1)], axis=1)
        best_i = np.concatenate([best_i, np.asarray(ids, dtype=np.int64)[start + top]], axis=1)
        if best_d.shape[1] > k:
            keep = np.argpartition(best_d, k - 1, axis=1)[:, :k]
            best_d = np.take_along_axis(best_d, keep, axis=1)
            best_i = np.take_along_axis(best_i, keep, axis=1)
    order = np.argsort(best_d, axis=1, kind="stable")
    return np.take_along_axis(best_i, order, axis=1), np.maximum(
        np.take_along_axis(best_d, order, axis=1), 0.0
    )


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each row of ``truth`` (exact neighbours' ids) that ``found`` holds."""
    hits = [
        len(set(f.tolist()) & set(t.tolist())) / max(len(t), 1)
        for f, t in zip(found, truth, strict=True)
    ]
    return float(np.mean(hits)) if hits else 0.0
