"""The active vetting queue: which candidate an expert sees next (reads only).

The catalog's queue (candidates routed to experts, or in conflict, that this expert has not
decided and whose label is not made) gains the open audit samples' candidates, and is ranked by
what a decision is worth:

    score = uncertainty + disagreement + rarity        (each in [0, 1])
    uncertainty  = 1 - 2 |q - 1/2|, q the recalibrated P(YES) (raw without a fit; 1 without a verdict)
    disagreement = 1 when the models that answered this spectrum on the task disagree, else 0
    rarity       = 10 / (10 + L), L the task's vetted labels of the class the verdict names

Conflicts between experts come first whatever their score; ties go to the oldest. The ranking
reads the SCAN_LIMIT oldest candidates of the queue, one per spectrum and task (``oldest``:
the routed ones on their partial index, then the few others), and scores them here (a score
in SQL cost a correlated subquery per queued candidate: seconds at 20,000); disagreement and
one per spectrum are asked only of the spectra another candidate shares. Gold items
are mixed in by ``next_candidate`` at ``agent.vetting_statistics.gold_rate`` of the expert's
record, chosen by a generator seeded with the expert and the record's length, so a page reload
shows the same item and the expert cannot tell a gold item from any other.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, Min, OuterRef, QuerySet

from agent.vetting_statistics import apply_fit, gold_rate, raw_p_yes
from annotation.inspections.decision_history import answered_by, one_per_spectrum_task
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry, ExpertDecision
from annotation.learning import selectors
from annotation.learning.models import GoldAnswer, GoldItem
from annotation.spectra.labels import LabelState
from annotation.spectra.models import SpectrumLabel

RARITY_SCALE = 10.0
SCAN_LIMIT = 20_000


@dataclass(frozen=True)
class Ranked:
    pk: int
    conflict: bool
    p_yes: float  # recalibrated when the model has a fit
    uncertainty: float
    disagreement: float
    rarity: float

    @property
    def score(self) -> float:
        return self.uncertainty + self.disagreement + self.rarity


def open_audit_ids() -> QuerySet[Any] | None:
    """The open audit samples' candidate ids, None while no sample is open: they wait in every
    expert's queue (``catalog.queue.vetter_queue_rows``) beside the routed candidates."""
    items = selectors.open_audit_candidates()
    return items.order_by().values("candidate_id") if items.exists() else None


def _label_counts() -> dict[int, dict[str, int]]:
    counts = (
        SpectrumLabel.objects.filter(state__in=LabelState.LABELLED)
        .exclude(value="")
        .values_list("task_id", "value")
        .annotate(n=Count("id"))
    )
    per_task: dict[int, dict[str, int]] = {}
    for task_id, value, n in counts:
        per_task.setdefault(task_id, {})[value] = n
    return per_task


CHUNK = 5_000  # spectrum ids per query (SQLite's limit on parameters is 32,766)


def _chunks(ids: set[int]) -> Iterator[list[int]]:
    ordered = sorted(ids)
    for at in range(0, len(ordered), CHUNK):
        yield ordered[at : at + CHUNK]


def _disputed(spectrum_ids: set[int]) -> set[tuple[int, int]]:
    """(task id, spectrum id) of ``spectrum_ids`` where the models that answered disagree."""
    found: set[tuple[int, int]] = set()
    for chunk in _chunks(spectrum_ids):
        rows = (
            Candidate.objects.filter(state=CandidateState.DONE, spectrum_id__in=chunk)
            .exclude(verdict="")
            .values("run__task_id", "spectrum_id")
            .annotate(
                verdicts=Count("verdict", distinct=True),
                models=Count("run__model_key", distinct=True),
            )
            .filter(verdicts__gt=1, models__gt=1)
            .values_list("run__task_id", "spectrum_id")
        )
        found.update(rows)
    return found


ROW_FIELDS = (
    "pk", "verdict", "confidence", "run__task_id", "run__model_key", "spectrum_id",
    "active_conflict", "shared", "finished_at",
)  # fmt: skip
Row = tuple[Any, ...]


def unrouted_in_queues() -> QuerySet[Any]:
    """The ids of the candidates a queue may hold that are not routed to experts: those whose
    experts disagree (a conflict) and those in an open audit sample (few, beside the routed)."""
    conflicts = CatalogEntry.objects.filter(label_state=LabelState.CONFLICT).order_by()
    audit = selectors.open_audit_candidates().order_by()
    return conflicts.values("candidate_id").union(audit.values("candidate_id"))


def waiting_count(queue: QuerySet[Candidate]) -> int:
    """``one_per_spectrum_task(queue).count()``: the spectra and tasks the queue serves. Its
    routed candidates' groups are counted on their partial index (covering the columns the
    queue tests), then the groups that only unrouted ones serve (few) are added. ``queue``
    may be narrowed by filters that hold for all the candidates of a spectrum and task alike
    (``catalog.queue.metadata_rows``). Counting the whole queue at once read every candidate
    of every run: 0.8-2 s at 10^6."""
    routed = queue.filter(needs_expert=True).order_by()
    count = routed.values("spectrum_id", "run__task_id").distinct().count()
    others = queue.filter(needs_expert=False, pk__in=unrouted_in_queues()).order_by()
    groups = set(others.values_list("spectrum_id", "run__task_id"))
    for chunk in _chunks({spectrum_id for spectrum_id, _ in groups}):
        groups -= set(
            routed.filter(spectrum_id__in=chunk).values_list("spectrum_id", "run__task_id")
        )
    return count + len(groups)


def _first_of_each(queue: QuerySet[Candidate], rows: list[Row]) -> list[Row]:
    """``rows`` less those whose spectrum and task have a candidate of lower id in ``queue``
    (``one_per_spectrum_task``), asked only of the spectra with other candidates."""
    spectra = {row[5] for row in rows if row[7]}
    firsts: set[int] = set()
    for chunk in _chunks(spectra):
        groups = (
            queue.order_by()
            .filter(spectrum_id__in=chunk)
            .values("spectrum_id", "run__task_id")
            .annotate(first=Min("pk"))
            .values_list("first", flat=True)
        )
        firsts.update(groups)
    return [row for row in rows if row[5] not in spectra or row[0] in firsts]


def _first_rows(queue: QuerySet[Candidate], part: QuerySet[Candidate], limit: int) -> list[Row]:
    """The ``limit`` oldest rows of ``part`` (of ``queue``) first of their spectrum and task,
    read ``limit`` at a time until there are as many or ``part`` ends."""
    rows = part.order_by("finished_at", "id").values_list(*ROW_FIELDS)
    kept: list[Row] = []
    offset = 0
    while True:
        batch = list(rows[offset : offset + limit])
        kept += _first_of_each(queue, batch)
        if len(kept) >= limit or len(batch) < limit:
            return kept
        offset += limit


def oldest(queue: QuerySet[Candidate], limit: int) -> list[Row]:
    """The ``limit`` oldest rows (ROW_FIELDS) of ``one_per_spectrum_task(queue)`` in the
    queue's order (finished_at, id).

    The candidates routed to experts (their partial index, candidate_queue_order, holds the
    columns read) and the others (``unrouted_in_queues``: conflicts, open audit samples) are
    each read ``limit`` at a time until enough are first of their spectrum and task, then
    merged. One query sorting the whole queue with one per spectrum and task in SQL (a GROUP
    BY of all of it) read every candidate of every run twice: 2-8 s at 10^6 candidates.
    """
    conflict = Exists(
        CatalogEntry.objects.filter(candidate=OuterRef("pk"), label_state=LabelState.CONFLICT)
    )
    # whether another candidate has the spectrum: one probe of its index per row read
    shared = Exists(
        Candidate.objects.filter(spectrum_id=OuterRef("spectrum_id")).exclude(pk=OuterRef("pk"))
    )
    annotated = queue.annotate(active_conflict=conflict, shared=shared)
    routed = annotated.filter(needs_expert=True)
    others = annotated.filter(needs_expert=False, pk__in=unrouted_in_queues())
    kept = [*_first_rows(queue, routed, limit), *_first_rows(queue, others, limit)]
    nulls_last = connection.features.nulls_order_largest  # where the database sorts NULL

    def key(row: Row) -> tuple[Any, ...]:
        at = row[-1]
        return (at is None) == nulls_last, () if at is None else (at,), row[0]

    unique = {row[0]: row for row in kept}
    return sorted(unique.values(), key=key)[:limit]


def ranked(queue: QuerySet[Candidate], *, limit: int = SCAN_LIMIT) -> list[Ranked]:
    """The ``limit`` oldest candidates of ``queue``, one per spectrum and task (the lowest
    id), best first (module docstring)."""
    rows = oldest(queue, limit)
    if not rows:
        return []
    fits = selectors.latest_fits(task_ids={row[3] for row in rows})
    scalings = {key: selectors.calibrator(fit) for key, fit in fits.items()}
    labels = _label_counts()
    # only the scanned candidates' spectra with other candidates: the rest is not scored
    disputed = _disputed({row[5] for row in rows if row[7]})
    out = []
    for pk, verdict, confidence, task_id, model_key, spectrum_id, in_conflict, _, _ in rows:
        scaling = scalings.get((task_id, model_key))
        q = raw_p_yes(verdict, confidence)
        if scaling is not None and verdict in ("YES", "NO"):
            q = apply_fit(scaling, q)  # selectors.recalibrated_p_yes, its curve read once
        counts = labels.get(task_id, {})
        known = (
            counts.get(verdict, 0) if verdict else min(counts.get("YES", 0), counts.get("NO", 0))
        )
        out.append(
            Ranked(
                pk=pk,
                conflict=bool(in_conflict),
                p_yes=q,
                uncertainty=1.0 - 2.0 * abs(q - 0.5) if verdict else 1.0,
                disagreement=1.0 if (task_id, spectrum_id) in disputed else 0.0,
                rarity=RARITY_SCALE / (RARITY_SCALE + known),
            )
        )
    # sorted() is stable: among equals the oldest (the rows' order) stays first.
    return sorted(out, key=lambda r: (not r.conflict, -round(r.score, 12)))


def items_vetted(user: Any) -> int:
    """The expert's record: their vetting decisions and gold answers."""
    return (
        ExpertDecision.objects.filter(expert=user).count()
        + GoldAnswer.objects.filter(vetter=user).count()
    )


def gold_candidates(user: Any) -> QuerySet[Candidate]:
    """Active gold items this expert has neither answered nor helped label (no decision of
    theirs on any candidate of the spectrum for the task), one per spectrum and task: a gold
    answer on one run's candidate answers the spectrum's other gold items for the task."""
    answered = GoldAnswer.objects.filter(
        vetter=user,
        gold__candidate__spectrum_id=OuterRef("spectrum_id"),
        gold__candidate__run__task_id=OuterRef("run__task_id"),
    )
    rows = (
        Candidate.objects.filter(
            pk__in=GoldItem.objects.filter(active=True).values("candidate_id"),
            state=CandidateState.DONE,
        )
        .exclude(Exists(answered))
        .exclude(answered_by(user))
    )
    return one_per_spectrum_task(rows).select_related("run__task", "spectrum").order_by("id")


def next_candidate(
    *, user: Any, queue: QuerySet[Candidate], gold: QuerySet[Candidate], skipped: list[int]
) -> Candidate | None:
    """The queue's best candidate not skipped (the best skipped when all were), or, at the
    gold rate of the expert's record, a gold item from ``gold`` (already narrowed to what the
    expert may read). A gold item is shown only while something waits in the queue.
    ``queue``: the expert's queue rows (``catalog.queue.vetter_queue_rows``, maybe narrowed by
    filters), one per spectrum and task chosen here; every candidate of it not routed to
    experts is a conflict or in an open audit sample (``unrouted_in_queues``)."""
    order = ranked(queue)
    if not order:
        return None
    left_out = set(skipped)
    best = next((r.pk for r in order if r.pk not in left_out), order[0].pk)
    record = items_vetted(user)
    chooser = random.Random(f"gold:{user.pk}:{record}")
    if chooser.random() < gold_rate(record):
        ids = list(gold.exclude(pk__in=skipped).values_list("pk", flat=True)[:500])
        if ids:
            return gold.get(pk=chooser.choice(ids))
    # by its id alone: ``best`` was read from the queue just now, and the queue's filter
    # again (one spectrum per task: a GROUP BY of the whole queue) cost a second at 10^6
    return Candidate.objects.select_related("run__task", "spectrum").get(pk=best)
