"""Benchmark "find more like this": the FAISS index against the exact numpy search, at the size
asked for, and on the real library's own embeddings.

    .venv/bin/python -m annotation.bench.similar --n 1000000
    .venv/bin/python -m annotation.bench.similar --n 100000

1. The real library (the corpus cache, ``python -m agent.real_corpus fetch``): every spectrum
   normalised (agent.similarity), a PCA basis fitted on the development part, all of them
   embedded. On these embeddings: recall@10 of an IVF index sized by the production rule's
   formula (forced to IVF although the library is small) against the exact search, and
   whether neighbours share the query's spectral letter (validation queries against the whole
   library, itself left out), beside a control with the letters shuffled, which must fall to
   chance.
2. ``--n`` synthetic embeddings drawn around the real ones (a real vector plus Gaussian noise
   of NOISE times each component's spread), written in chunks; the index the catalog would
   build for that many (agent.vector_index.IndexParams.for_size).
3. Neighbours verified first: recall@10 of the index against the exact search over the same
   vectors, for QUERIES held-out queries; below RECALL_MIN the run stops there.
4. Then one query at a time, timed: the index, and the exact search (norms precomputed, so the
   reference is a fair one); medians, p95 and their ratio. Peak memory is printed.

Plain Python: no Django, no database (the index code is the catalog's own).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

from agent import similarity, vector_index
from agent.vector_index import faiss

RECALL_MIN = 0.95
QUERIES = 200
TIMED = 50
NOISE = 0.25
CHUNK = 100_000
SEED = 35


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _real_library() -> similarity.LibraryEmbedding | None:
    try:
        rows = similarity.library_normalised(None)
    except Exception as error:  # the cache cannot be built here: say so, go on synthetic
        print(f"real library: unavailable ({error}); synthetic vectors only")
        return None
    development = [row for entry, row in rows if getattr(entry, "split", "") == "development"]
    basis = similarity.fit_basis(development, name=f"pca:{len(development)} development spectra")
    print(
        f"real library: {len(rows)} spectra normalised ({len(development)} development); "
        f"basis {basis.id}: {basis.size} components explain {basis.explained.sum():.1%} "
        "of the development variance"
    )
    return similarity.library_embeddings(basis, rows)


def _letter_agreement(library: similarity.LibraryEmbedding, letters: np.ndarray) -> float:
    """Mean fraction of each validation spectrum's 10 nearest others sharing its letter."""
    ids = np.arange(len(letters), dtype=np.int64)
    queries = [i for i, split in enumerate(library.splits) if split == "validation"]
    found, _ = vector_index.exact_search(library.vectors, ids, library.vectors[queries], 11)
    shares = []
    for row, query in enumerate(queries):
        others = [j for j in found[row] if j != query][:10]
        shares.append(np.mean([letters[j] == letters[query] for j in others]))
    return float(np.mean(shares))


def real_figures(library: similarity.LibraryEmbedding) -> None:
    n = len(library.ids)
    ids = np.arange(n, dtype=np.int64)
    nlist = max(2, int(vector_index.LISTS_PER_SQRT * np.sqrt(n)))
    params = vector_index.IndexParams(
        "ivf", nlist=nlist, nprobe=max(8, nlist // vector_index.PROBE_FRACTION)
    )
    index = vector_index.build_index(library.vectors, ids, params)
    truth, _ = vector_index.exact_search(library.vectors, ids, library.vectors, 10)
    found = np.array(
        [
            np.pad(vector_index.search(index, v, 10)[0], (0, 10), constant_values=-1)[:10]
            for v in library.vectors
        ]
    )
    print(
        f"real library recall@10 ({params.describe()}, {n} queries, each against all {n}): "
        f"{vector_index.recall_at(found, truth):.4f}"
    )
    letters = np.array(library.classes)
    same = _letter_agreement(library, letters)
    shuffled = _letter_agreement(library, np.random.default_rng(SEED).permutation(letters))
    print(
        f"real library, validation queries: {same:.1%} of the 10 nearest share the query's "
        f"spectral letter; control with letters shuffled: {shuffled:.1%}"
    )


def synthetic(n: int, dim: int, library: similarity.LibraryEmbedding | None) -> np.ndarray:
    """``n`` vectors around the real embeddings (or, without them, around random centres with
    a PCA-like falling spread), float32, filled chunk by chunk."""
    rng = np.random.default_rng(SEED)
    if library is not None:
        centres = library.vectors.astype(np.float32)
        spread = centres.std(axis=0) * NOISE
    else:
        spread = (np.arange(1, dim + 1, dtype=np.float32) ** -0.7) * NOISE
        centres = (rng.normal(0.0, 1.0, (1000, dim)) * spread / NOISE).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        picks = centres[rng.integers(0, len(centres), size)]
        out[start : start + size] = picks + rng.normal(0.0, 1.0, (size, dim)) * spread
    return out


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotation.bench.similar")
    parser.add_argument("--n", type=int, default=1_000_000, help="synthetic embeddings")
    parser.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads")
    parser.add_argument("--no-real", action="store_true", help="skip the real library")
    args = parser.parse_args(argv)
    if args.n < 1000:
        parser.error(f"--n must be at least 1000, got {args.n}")
    faiss.omp_set_num_threads(args.threads)
    library = None if args.no_real else _real_library()
    if library is not None:
        real_figures(library)
    dim = similarity.BASIS_SIZE
    started = time.perf_counter()
    vectors = synthetic(args.n + QUERIES, dim, library)
    queries, vectors = vectors[:QUERIES], vectors[QUERIES:]
    ids = np.arange(args.n, dtype=np.int64) + 1
    print(
        f"synthetic: {args.n} embeddings of {dim} float32 "
        f"({vectors.nbytes / 2**20:.0f} MiB) in {time.perf_counter() - started:.1f} s"
    )
    params = vector_index.IndexParams.for_size(args.n)
    started = time.perf_counter()
    index = vector_index.build_index(vectors, ids, params)
    print(f"index: {params.describe()}, built in {time.perf_counter() - started:.1f} s")
    norms = vector_index.squared_norms(vectors)

    # 1. neighbours verified first
    started = time.perf_counter()
    truth, _ = vector_index.exact_search(vectors, ids, queries, 10, norms=norms)
    found = np.array([vector_index.search(index, query, 10)[0] for query in queries])
    recall = vector_index.recall_at(found, truth)
    verdict = "ok" if recall >= RECALL_MIN else "TOO LOW"
    print(
        f"recall@10 against exact search, {QUERIES} held-out queries: {recall:.4f} "
        f"(needs >= {RECALL_MIN}: {verdict}) [{time.perf_counter() - started:.1f} s]"
    )
    if recall < RECALL_MIN:
        return 1

    # 2. one query at a time
    index_times, exact_times = [], []
    for query in queries[:TIMED]:
        started = time.perf_counter()
        vector_index.search(index, query, 10)
        index_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        vector_index.exact_search(vectors, ids, query, 10, norms=norms)
        exact_times.append(time.perf_counter() - started)
    index_p50, index_p95 = _ms(index_times)
    exact_p50, exact_p95 = _ms(exact_times)
    print(
        f"query time at n={args.n}, k=10, {args.threads} FAISS thread(s), {TIMED} queries: "
        f"index p50 {index_p50:.2f} ms (p95 {index_p95:.2f}); exact numpy p50 "
        f"{exact_p50:.1f} ms (p95 {exact_p95:.1f}); exact / index = {exact_p50 / index_p50:.0f}x; "
        f"goal < 200 ms: {'met' if index_p95 < 200 else 'NOT met'}"
    )
    print(f"peak memory: {_peak_mb():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
