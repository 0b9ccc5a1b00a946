"""The process's FAISS index over the stored embeddings (annotation.spectra.embeddings), kept in
step with the database at every query.

- Changed and new embeddings: each query first reads the rows written since the last one
  (``updated_at`` at or after the watermark) and replaces their vectors in place
  (agent.vector_index.replace), so a spectrum stored a moment ago is found at once.
- Deleted spectra: their rows go with them (CASCADE), so nothing announces them. The index may
  still hold their ids; it never matters, because the caller keeps only the ids that its
  visibility query (annotation.catalog.similar) returns. The index is rebuilt when the rows
  it holds exceed the table's count by REBUILD_SLACK (checked at most every COUNT_EVERY_S),
  when it has grown GROWTH_REBUILD-fold since it was built (its IVF lists were trained for
  another size), and when the basis changes.

Each web process holds its own copy, built on its first query. Training the IVF lists at
10^6 vectors takes minutes, so with ``SPECVET_NEIGHBOUR_INDEX`` set (a file path) a built
index is saved there (written to a temporary file, then renamed) with its basis and watermark,
and a process starting later reads it and catches up from the watermark instead of building;
``manage.py embeddings_sync --index`` builds and saves it ahead of the first query.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from agent import vector_index
from agent.vector_index import faiss
from annotation.spectra import embeddings
from annotation.spectra.models import SpectrumEmbedding

REBUILD_SLACK = 0.2
GROWTH_REBUILD = 4.0
COUNT_EVERY_S = 60.0
READ_CHUNK = 20_000
WATERMARK_MARGIN = timedelta(minutes=5)


@dataclass
class _State:
    basis: str
    index: faiss.Index
    params: vector_index.IndexParams
    built_size: int
    watermark: datetime | None
    checked_at: float = field(default_factory=time.monotonic)


_lock = threading.Lock()
_state: _State | None = None


@dataclass(frozen=True)
class _Read:
    ids: np.ndarray
    matrix: np.ndarray
    dropped: np.ndarray  # spectra whose embedding now has no vector (an error)
    newest: datetime | None


def _rows(since: datetime | None) -> _Read:
    """Ids and vectors of the embeddings of the current basis written at or after ``since``
    (all when None), those that lost their vector, and the newest ``updated_at`` read."""
    basis = embeddings.current_basis()
    rows = SpectrumEmbedding.objects.filter(basis=basis.id).order_by("updated_at", "pk")
    if since is not None:
        rows = rows.filter(updated_at__gte=since)
    ids: list[int] = []
    dropped: list[int] = []
    vectors: list[np.ndarray] = []
    newest = since
    for spectrum_id, vector, error, updated_at in rows.values_list(
        "spectrum_id", "vector", "error", "updated_at"
    ).iterator(chunk_size=READ_CHUNK):
        newest = updated_at if newest is None or updated_at > newest else newest
        if error or not vector:
            dropped.append(spectrum_id)
            continue
        ids.append(spectrum_id)
        vectors.append(np.frombuffer(bytes(vector), dtype=np.float32))
    matrix = np.array(vectors, dtype=np.float32).reshape(len(vectors), basis.size)
    return _Read(np.array(ids, np.int64), matrix, np.array(dropped, np.int64), newest)


def saved_path() -> Path | None:
    value = os.environ.get("SPECVET_NEIGHBOUR_INDEX", "").strip()
    return Path(value) if value else None


def _save(state: _State, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    faiss.write_index(state.index, str(temporary))
    os.replace(temporary, path)
    meta = {
        "basis": state.basis,
        "kind": state.params.kind,
        "nlist": state.params.nlist,
        "nprobe": state.params.nprobe,
        "built_size": state.built_size,
        "watermark": None if state.watermark is None else state.watermark.isoformat(),
    }
    path.with_suffix(".json").write_text(json.dumps(meta))


def _load(path: Path) -> _State | None:
    """The saved index when it is of the current basis (else None: build a new one)."""
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        if meta["basis"] != embeddings.current_basis().id:
            return None
        index = faiss.read_index(str(path))
    except (OSError, ValueError, KeyError, RuntimeError):
        return None
    params = vector_index.IndexParams(meta["kind"], meta["nlist"], meta["nprobe"])
    if params.kind == "ivf":
        faiss.extract_index_ivf(index).nprobe = params.nprobe
    watermark = datetime.fromisoformat(meta["watermark"]) if meta["watermark"] else None
    return _State(meta["basis"], index, params, int(meta["built_size"]), watermark)


def _build(*, use_saved: bool = True) -> _State:
    path = saved_path()
    if use_saved and path is not None and path.exists():
        loaded = _load(path)
        if loaded is not None:
            return loaded
    read = _rows(None)
    params = vector_index.IndexParams.for_size(len(read.ids))
    index = vector_index.build_index(read.matrix, read.ids, params)
    state = _State(embeddings.current_basis().id, index, params, len(read.ids), read.newest)
    if path is not None:
        _save(state, path)
    return state


def rebuild() -> int:
    """Build the index now (and save it when SPECVET_NEIGHBOUR_INDEX is set); its size."""
    global _state
    with _lock:
        _state = _build(use_saved=False)
        return int(_state.index.ntotal)


def _needs_rebuild(state: _State) -> bool:
    if state.basis != embeddings.current_basis().id:
        return True
    if state.index.ntotal > GROWTH_REBUILD * max(state.built_size, 1) and (
        state.index.ntotal >= vector_index.IVF_MIN_VECTORS
    ):
        return True
    if time.monotonic() - state.checked_at < COUNT_EVERY_S:
        return False
    state.checked_at = time.monotonic()
    stored = SpectrumEmbedding.objects.filter(basis=state.basis, error="").count()
    return state.index.ntotal > (1.0 + REBUILD_SLACK) * stored


def current_index() -> _State:
    """The index, in step with the table (call under ``_lock``)."""
    global _state
    if _state is None:
        _state = _build()
    if _needs_rebuild(_state):
        _state = _build(use_saved=False)
        return _state
    # re-read a margin before the watermark: a transaction that stamped its rows earlier may
    # have committed after the last read
    since = None if _state.watermark is None else _state.watermark - WATERMARK_MARGIN
    read = _rows(since)
    if len(read.ids):
        vector_index.replace(_state.index, read.matrix, read.ids)
    vector_index.remove(_state.index, read.dropped)
    _state.watermark = read.newest
    return _state


@dataclass(frozen=True)
class Found:
    ids: list[int]
    distances: list[float]  # Euclidean, same order
    method: str


def nearest(query: np.ndarray, k: int) -> Found:
    """The ``k`` stored spectra nearest ``query`` (may include deleted or hidden ones: the
    caller filters)."""
    with _lock:
        state = current_index()
        ids, squared = vector_index.search(state.index, query, k)
        method = state.params.describe()
    distances = np.sqrt(np.maximum(squared, 0.0))
    return Found([int(pk) for pk in ids], [float(d) for d in distances], method)


def size() -> int:
    with _lock:
        return int(current_index().index.ntotal)


def reset() -> None:
    """Forget the index (tests; a refitted basis is noticed without it)."""
    global _state
    with _lock:
        _state = None
