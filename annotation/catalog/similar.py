"""Reads for "find more like this": the stored spectra nearest a spectrum in embedding space
(annotation.spectra.embeddings, agent.similarity), filtered, each with its vetted labels, and
the finished candidates that would put a selection of them in the vetting queue.

Every neighbour goes through one visibility query (``_allowed``): the spectra that exist now,
less those the blinding rule hides from the user (``blinding.spectra_visible_to``), with the
page's filters. The FAISS index may be behind the table (a spectrum deleted since it was
built): an id it returns that this query does not is dropped, so a deleted or hidden spectrum
never shows. The labels shown, and the "vetted" filter, leave out those the gold-masking rule
withholds (a gold item waiting for the user), as the catalog does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db.models import Q, QuerySet

from annotation import blinding, gold_masking
from annotation.catalog.selectors import CatalogQueryError
from annotation.inspections.models import Candidate, CandidateState
from annotation.spectra import embeddings, neighbour_index
from annotation.spectra.labels import LabelState
from annotation.spectra.models import Spectrum, SpectrumEmbedding, SpectrumLabel, Task

DEFAULT_K = 10
MAX_K = 100
DATASET_MAX = 80
TASK_MAX = 16
VETTED_CHOICES = ("yes", "no")
FIRST_FETCH = 50  # the index is asked for max(4 k, FIRST_FETCH), then 4 times more, ...
MAX_FETCH = 20_000  # ... up to this; past it the filtered spectra are searched exactly
EXACT_MAX = 200_000  # the most filtered spectra searched exactly (numpy) when the index fell short


@dataclass(frozen=True)
class SimilarFilters:
    k: int = DEFAULT_K
    task: str = ""  # a task code: spectra labelled or inspected for it (unknown: none match)
    dataset: str = ""
    vetted: str = ""  # yes: with a vetted label (for ``task``, or any); no: without; "": any


def similar_filters_from_query(params: Mapping[str, Any]) -> SimilarFilters:
    """Read k, task, dataset and vetted; raises CatalogQueryError naming a bad one."""
    raw_k = str(params.get("k") or DEFAULT_K).strip()
    if not raw_k.isdigit() or not 1 <= int(raw_k) <= MAX_K:
        raise CatalogQueryError(f"k must be a whole number from 1 to {MAX_K}, got {raw_k[:20]!r}")
    task = str(params.get("task") or "").strip()
    if len(task) > TASK_MAX:
        raise CatalogQueryError(f"task must be at most {TASK_MAX} characters")
    dataset = str(params.get("dataset") or "").strip()
    if len(dataset) > DATASET_MAX:
        raise CatalogQueryError(f"dataset must be at most {DATASET_MAX} characters")
    vetted = str(params.get("vetted") or "").strip()
    if vetted and vetted not in VETTED_CHOICES:
        raise CatalogQueryError(f"vetted must be one of {', '.join(VETTED_CHOICES)} or empty")
    return SimilarFilters(k=int(raw_k), task=task, dataset=dataset, vetted=vetted)


@dataclass(frozen=True)
class Neighbour:
    spectrum_id: int
    object_id: str
    survey: str
    dataset: str
    redshift: float
    snr: float | None
    distance: float
    labels: tuple[tuple[str, str], ...]  # (task code, YES/NO) the user may read


@dataclass(frozen=True)
class SimilarResult:
    spectrum_id: int
    basis: str
    method: str  # which search answered: the FAISS index, or exact numpy over filtered spectra
    neighbours: list[Neighbour] = field(default_factory=list)
    error: str = ""  # why the spectrum itself has no embedding


def spectrum_for(*, user: Any, spectrum_id: int) -> Spectrum | None:
    """The spectrum, if it exists and the user may read it here."""
    rows = blinding.spectra_visible_to(user=user, rows=Spectrum.objects.filter(pk=spectrum_id))
    return rows.first()


def _allowed(*, user: Any, exclude: int, filters: SimilarFilters) -> QuerySet[Spectrum]:
    rows = blinding.spectra_visible_to(user=user, rows=Spectrum.objects.exclude(pk=exclude))
    if filters.dataset:
        rows = rows.filter(dataset=filters.dataset)
    if filters.task:
        inspected = Candidate.objects.filter(run__task__code=filters.task).values("spectrum_id")
        rows = rows.filter(Q(task__code=filters.task) | Q(pk__in=inspected))
    return rows


def _query_vector(spectrum: Spectrum) -> tuple[np.ndarray | None, str]:
    """The stored vector when it is current, else one computed now (not stored: a read)."""
    basis = embeddings.current_basis()
    stored = SpectrumEmbedding.objects.filter(spectrum=spectrum, basis=basis.id).first()
    if stored is not None and stored.redshift == embeddings.rest_frame_z(spectrum):
        return embeddings.vector_of(stored), stored.error
    values = embeddings.embedding_values(spectrum, basis)
    vector = bytes(values["vector"])
    if not vector:
        return None, str(values["error"])
    return np.frombuffer(vector, dtype=np.float32), ""


def visible_labels(*, user: Any, spectra: list[Spectrum]) -> dict[int, list[tuple[str, str]]]:
    """Each spectrum's vetted labels (task code, value), less those gold masking withholds."""
    mask = gold_masking.gold_mask_for(user)
    hashes = {row.pk: row.content_hash for row in spectra}
    labels: dict[int, list[tuple[str, str]]] = {row.pk: [] for row in spectra}
    rows = (
        SpectrumLabel.objects.filter(spectrum_id__in=list(hashes), state__in=LabelState.LABELLED)
        .exclude(value="")
        .values_list("spectrum_id", "task__code", "value")
        .order_by("spectrum_id", "task__code")
    )
    for spectrum_id, code, value in rows:
        if not mask.hides(
            spectrum_id=spectrum_id, task_code=code, content_hash=hashes[spectrum_id]
        ):
            labels[spectrum_id].append((code, value))
    return labels


def _keep(
    *,
    user: Any,
    ids: list[int],
    distances: list[float],
    allowed: QuerySet[Spectrum],
    filters: SimilarFilters,
) -> list[Neighbour]:
    rows = {row.pk: row for row in allowed.filter(pk__in=ids)}
    ordered = [(rows[pk], d) for pk, d in zip(ids, distances, strict=True) if pk in rows]
    labels = visible_labels(user=user, spectra=[row for row, _ in ordered])
    kept = []
    for row, distance in ordered:
        held = labels[row.pk]
        vetted = any(code == filters.task for code, _ in held) if filters.task else bool(held)
        if (filters.vetted == "yes" and not vetted) or (filters.vetted == "no" and vetted):
            continue
        kept.append(
            Neighbour(
                spectrum_id=row.pk,
                object_id=row.object_id,
                survey=row.survey,
                dataset=row.dataset,
                redshift=row.redshift,
                snr=row.snr,
                distance=distance,
                labels=tuple(held),
            )
        )
    return kept


def _exact(query: np.ndarray, allowed: QuerySet[Spectrum]) -> tuple[list[int], list[float]]:
    """Every filtered spectrum's distance to ``query``, nearest first (numpy)."""
    rows = SpectrumEmbedding.objects.filter(
        spectrum__in=allowed.values("pk"), basis=embeddings.current_basis().id, error=""
    ).values_list("spectrum_id", "vector")
    ids, vectors = [], []
    for spectrum_id, vector in rows.iterator(chunk_size=10_000):
        ids.append(spectrum_id)
        vectors.append(np.frombuffer(bytes(vector), dtype=np.float32))
    if not ids:
        return [], []
    squared = ((np.array(vectors) - query[None, :]) ** 2).sum(axis=1)
    order = np.argsort(squared, kind="stable")
    return [ids[i] for i in order], [float(np.sqrt(squared[i])) for i in order]


def similar_spectra(*, user: Any, spectrum: Spectrum, filters: SimilarFilters) -> SimilarResult:
    """The ``filters.k`` spectra nearest ``spectrum`` that the user may read and the filters
    admit, nearest first, with Euclidean distances in embedding space."""
    basis = embeddings.current_basis().id
    if filters.task and not Task.objects.filter(code=filters.task).exists():
        # like the catalog's filters: a task no spectrum is labelled or inspected for matches none
        return SimilarResult(spectrum.pk, basis, f"no task has the code {filters.task!r}")
    query, error = _query_vector(spectrum)
    if query is None:
        return SimilarResult(spectrum.pk, basis, "", error=error or "no embedding")
    allowed = _allowed(user=user, exclude=spectrum.pk, filters=filters)
    fetch = max(4 * filters.k, FIRST_FETCH)
    while True:
        found = neighbour_index.nearest(query, fetch + 1)
        kept = _keep(
            user=user, ids=found.ids, distances=found.distances, allowed=allowed, filters=filters
        )
        if len(kept) >= filters.k or len(found.ids) <= fetch:
            return SimilarResult(spectrum.pk, basis, found.method, kept[: filters.k])
        if fetch >= MAX_FETCH:
            break
        fetch = min(fetch * 4, MAX_FETCH)
    # a narrow filter far from the query: search the filtered spectra themselves, exactly
    if allowed.count() > EXACT_MAX:
        return SimilarResult(spectrum.pk, basis, found.method, kept[: filters.k])
    ids, distances = _exact(query, allowed)
    kept = []
    for start in range(0, len(ids), 4 * MAX_K):
        part = slice(start, start + 4 * MAX_K)
        kept += _keep(
            user=user, ids=ids[part], distances=distances[part], allowed=allowed, filters=filters
        )
        if len(kept) >= filters.k:
            break
    method = f"exact numpy over the {len(ids)} filtered spectra"
    return SimilarResult(spectrum.pk, basis, method, kept[: filters.k])


# --- queueing a selection for vetting ---------------------------------------------------------


@dataclass(frozen=True)
class QueuePlan:
    """What "queue these for vetting" does with a selection of spectra for one task."""

    task: str
    candidate_ids: list[int]  # finished candidates to (re)queue, one per spectrum
    waiting: list[int]  # spectra already waiting in the queue for the task
    labelled: list[int]  # spectra with a label for the task already (nothing to vet)
    no_candidate: list[int]  # spectra no finished inspection of the task covers
    not_found: list[int]  # ids the user may not read, or that do not exist


def queue_plan(*, user: Any, spectrum_ids: list[int], task: str) -> QueuePlan:
    """For each spectrum the user may read, the newest finished candidate of ``task`` it has
    that the user may read: requeued unless the spectrum is labelled for the task or a
    candidate of it already waits. Spectra no inspection covered need a run first."""
    if not Task.objects.filter(code=task).exists():
        raise CatalogQueryError(f"task: no task has the code {task[:20]!r}")
    wanted = sorted(set(spectrum_ids))
    visible = blinding.spectra_visible_to(user=user, rows=Spectrum.objects.filter(pk__in=wanted))
    found = set(visible.values_list("pk", flat=True))
    labelled = set(
        SpectrumLabel.objects.filter(
            spectrum_id__in=found, task__code=task, state__in=LabelState.LABELLED
        )
        .exclude(value="")
        .values_list("spectrum_id", flat=True)
    )
    finished = blinding.candidates_visible_to(
        user=user,
        rows=Candidate.objects.filter(
            spectrum_id__in=found - labelled, run__task__code=task, state=CandidateState.DONE
        ),
    ).order_by("spectrum_id", "-finished_at", "-pk")
    newest: dict[int, Candidate] = {}
    waiting: set[int] = set()
    for row in finished.only("pk", "spectrum_id", "needs_expert", "queue_closed_reason"):
        if row.needs_expert and not row.queue_closed_reason:
            waiting.add(row.spectrum_id)
        newest.setdefault(row.spectrum_id, row)
    to_queue = [row.pk for pk, row in sorted(newest.items()) if pk not in waiting]
    return QueuePlan(
        task=task,
        candidate_ids=to_queue,
        waiting=sorted(waiting),
        labelled=sorted(labelled),
        no_candidate=sorted(found - labelled - set(newest)),
        not_found=sorted(set(wanted) - found),
    )
