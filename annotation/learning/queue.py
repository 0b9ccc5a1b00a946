"""The active vetting queue: which candidate an expert sees next (reads only).

The catalog's queue (candidates routed to experts, or in conflict, that this expert has not
decided and whose label is not made) gains the open audit samples' candidates, and is ranked by
what a decision is worth:

    score = uncertainty + disagreement + rarity        (each in [0, 1])
    uncertainty  = 1 - 2 |q - 1/2|, q the recalibrated P(YES) (raw without a fit; 1 without a verdict)
    disagreement = 1 when the models that answered this spectrum on the task disagree, else 0
    rarity       = 10 / (10 + L), L the task's vetted labels of the class the verdict names

Conflicts between experts come first whatever their score; ties go to the oldest. The ranking
reads the SCAN_LIMIT oldest candidates of the queue in four queries and scores them here (a
score in SQL cost a correlated subquery per queued candidate: seconds at 20,000). Gold items
are mixed in by ``next_candidate`` at ``agent.vetting_statistics.gold_rate`` of the expert's
record, chosen by a generator seeded with the expert and the record's length, so a page reload
shows the same item and the expert cannot tell a gold item from any other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from agent.vetting_statistics import gold_rate, raw_p_yes
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


def active_queue(*, user: Any, base: QuerySet[Candidate]) -> QuerySet[Candidate]:
    """The catalog's queue for ``user`` with the open audit samples' candidates that wait for
    them, oldest first (``ranked`` orders them by value)."""
    audit = (
        Candidate.objects.filter(
            pk__in=selectors.open_audit_candidates().values("candidate_id"),
            state=CandidateState.DONE,
        )
        .exclude(answered_by(user))
        .exclude(catalog_entry__label_state__in=LabelState.LABELLED)
    )
    # The open audit samples' few candidates by id, and no OR of two subqueries when there are
    # none: PostgreSQL runs `id IN (a) OR id IN (b)` as a subplan per row, which it scans
    # linearly once the queue's estimate outgrows work_mem (minutes at 10^6 candidates).
    audit_ids = list(audit.values_list("pk", flat=True))
    queued = Q(pk__in=base.values("pk"))
    rows = Candidate.objects.filter(queued | Q(pk__in=audit_ids) if audit_ids else queued)
    return rows.select_related("run__task", "spectrum").order_by("finished_at", "id")


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


def _disputed(spectrum_ids: QuerySet[Any]) -> set[tuple[int, int]]:
    """(task id, spectrum id) where the models that answered disagree."""
    rows = (
        Candidate.objects.filter(state=CandidateState.DONE, spectrum_id__in=spectrum_ids)
        .exclude(verdict="")
        .values("run__task_id", "spectrum_id")
        .annotate(
            verdicts=Count("verdict", distinct=True), models=Count("run__model_key", distinct=True)
        )
        .filter(verdicts__gt=1, models__gt=1)
        .values_list("run__task_id", "spectrum_id")
    )
    return set(rows)


def ranked(queue: QuerySet[Candidate], *, limit: int = SCAN_LIMIT) -> list[Ranked]:
    """The queue's ``limit`` oldest candidates, best first (module docstring)."""
    conflict = Exists(
        CatalogEntry.objects.filter(candidate=OuterRef("pk"), label_state=LabelState.CONFLICT)
    )
    rows = list(
        queue.annotate(active_conflict=conflict).values_list(
            "pk",
            "verdict",
            "confidence",
            "run__task_id",
            "run__model_key",
            "spectrum_id",
            "active_conflict",
        )[:limit]
    )
    if not rows:
        return []
    fits = selectors.latest_fits(task_ids={row[3] for row in rows})
    labels = _label_counts()
    disputed = _disputed(queue.values("spectrum_id"))
    out = []
    for pk, verdict, confidence, task_id, model_key, spectrum_id, in_conflict in rows:
        fit = fits.get((task_id, model_key))
        q = selectors.recalibrated_p_yes(verdict=verdict, confidence=confidence, fit=fit)
        q = raw_p_yes(verdict, confidence) if q is None else q
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
    expert may read). A gold item is shown only while something waits in the queue."""
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
    return queue.get(pk=best)
