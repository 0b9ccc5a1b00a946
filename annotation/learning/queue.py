"""The active vetting queue: which candidate an expert sees next (reads only).

The catalog's queue (candidates routed to experts, or in conflict, that this expert has not
decided and whose label is not made) gains the open audit samples' candidates, and is ordered by
what a decision is worth, in SQL so any length of queue costs one query:

    score = uncertainty + disagreement + rarity        (each in [0, 1])
    uncertainty  = 1 - 2 |q - 1/2|, q the recalibrated P(YES) (raw without a fit; 1 without a verdict)
    disagreement = 1 when another model gave this spectrum another verdict on the task, else 0
    rarity       = 10 / (10 + L), L the task's vetted labels of the class the verdict names

Conflicts between experts come first whatever their score; ties go to the oldest. Gold items
are mixed in by ``next_candidate`` at ``agent.vetting_statistics.gold_rate`` of the expert's
record, chosen by a generator seeded with the expert and the record's length, so a page reload
shows the same item and the expert cannot tell a gold item from any other.
"""

from __future__ import annotations

import random
from typing import Any

from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Abs, Coalesce, Exp, Greatest, Least, Ln

from agent.vetting_statistics import CLIP, gold_rate
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry, ExpertDecision
from annotation.learning import selectors
from annotation.learning.models import GoldAnswer, GoldItem
from annotation.spectra.labels import LabelState
from annotation.spectra.models import SpectrumLabel

RARITY_SCALE = 10.0


def _float(value: float) -> Value:
    return Value(float(value), output_field=FloatField())


def _fit_cases(name: str, default: float) -> Any:
    whens = [
        When(run__task_id=task_id, run__model_key=key, then=_float(fit.params[name]))
        for (task_id, key), fit in selectors.latest_fits().items()
    ]
    return (
        Case(*whens, default=_float(default), output_field=FloatField())
        if whens
        else _float(default)
    )


def _rarity() -> Any:
    counts = (
        SpectrumLabel.objects.filter(state__in=LabelState.LABELLED)
        .exclude(value="")
        .values_list("task_id", "value")
        .annotate(n=Count("id"))
    )
    per_task: dict[int, dict[str, int]] = {}
    for task_id, value, n in counts:
        per_task.setdefault(task_id, {})[value] = n
    whens = []
    for task_id, by_value in per_task.items():
        for value in ("YES", "NO"):
            whens.append(
                When(
                    run__task_id=task_id,
                    verdict=value,
                    then=_float(RARITY_SCALE / (RARITY_SCALE + by_value.get(value, 0))),
                )
            )
        fewest = min(by_value.get("YES", 0), by_value.get("NO", 0))
        whens.append(
            When(run__task_id=task_id, then=_float(RARITY_SCALE / (RARITY_SCALE + fewest)))
        )
    return Case(*whens, default=_float(1.0), output_field=FloatField()) if whens else _float(1.0)


def scored(rows: QuerySet[Candidate]) -> QuerySet[Candidate]:
    """``rows`` annotated with the score's parts and ordered as the module docstring says."""
    confidence = Coalesce(F("confidence"), _float(0.5))
    p_yes = Case(
        When(verdict="YES", then=confidence),
        When(verdict="NO", then=_float(1.0) - confidence),
        default=_float(0.5),
        output_field=FloatField(),
    )
    clipped = Least(Greatest(p_yes, _float(CLIP)), _float(1.0 - CLIP))
    z = _fit_cases("slope", 1.0) * Ln(clipped / (_float(1.0) - clipped)) + _fit_cases(
        "intercept", 0.0
    )
    q = _float(1.0) / (_float(1.0) + Exp(-Least(Greatest(z, _float(-30.0)), _float(30.0))))
    other_verdict = (
        Candidate.objects.filter(
            spectrum_id=OuterRef("spectrum_id"),
            run__task_id=OuterRef("run__task_id"),
            state=CandidateState.DONE,
        )
        .exclude(run__model_key=OuterRef("run__model_key"))
        .exclude(verdict="")
        .exclude(verdict=OuterRef("verdict"))
    )
    in_conflict = Exists(
        CatalogEntry.objects.filter(candidate=OuterRef("pk"), label_state=LabelState.CONFLICT)
    )
    return (
        rows.annotate(
            active_conflict=in_conflict,
            recalibrated_p_yes=q,
            uncertainty=Case(
                When(verdict="", then=_float(1.0)),
                default=_float(1.0) - _float(2.0) * Abs(q - _float(0.5)),
                output_field=FloatField(),
            ),
            disagreement=Case(When(Exists(other_verdict), then=_float(1.0)), default=_float(0.0)),
            rarity=_rarity(),
        )
        .annotate(value_score=F("uncertainty") + F("disagreement") + F("rarity"))
        .order_by(F("active_conflict").desc(), F("value_score").desc(), "finished_at", "id")
    )


def active_queue(*, user: Any, base: QuerySet[Candidate]) -> QuerySet[Candidate]:
    """The catalog's queue for ``user`` with the open audit samples' candidates that wait for
    them, ordered by value (module docstring)."""
    decided = ExpertDecision.objects.filter(candidate=OuterRef("pk"), expert=user)
    audit = (
        Candidate.objects.filter(
            pk__in=selectors.open_audit_candidates().values("candidate_id"),
            state=CandidateState.DONE,
        )
        .exclude(Exists(decided))
        .exclude(catalog_entry__label_state__in=LabelState.LABELLED)
    )
    rows = Candidate.objects.filter(Q(pk__in=base.values("pk")) | Q(pk__in=audit.values("pk")))
    return scored(rows.select_related("run__task", "spectrum"))


def items_vetted(user: Any) -> int:
    """The expert's record: their vetting decisions and gold answers."""
    return (
        ExpertDecision.objects.filter(expert=user).count()
        + GoldAnswer.objects.filter(vetter=user).count()
    )


def gold_candidates(user: Any) -> QuerySet[Candidate]:
    """Active gold items this expert has neither answered nor helped label (no decision of
    theirs on any candidate of the spectrum for the task)."""
    decided_spectrum = ExpertDecision.objects.filter(
        expert=user,
        candidate__spectrum_id=OuterRef("spectrum_id"),
        candidate__run__task_id=OuterRef("run__task_id"),
    )
    answered = GoldAnswer.objects.filter(vetter=user).values("gold__candidate_id")
    return (
        Candidate.objects.filter(
            pk__in=GoldItem.objects.filter(active=True).values("candidate_id"),
            state=CandidateState.DONE,
        )
        .exclude(pk__in=answered)
        .exclude(Exists(decided_spectrum))
        .select_related("run__task", "spectrum")
        .order_by("id")
    )


def next_candidate(
    *, user: Any, queue: QuerySet[Candidate], gold: QuerySet[Candidate], skipped: list[int]
) -> Candidate | None:
    """The queue's first candidate not skipped (the first skipped when all were), or, at the
    gold rate of the expert's record, a gold item from ``gold`` (already narrowed to what the
    expert may read). A gold item is shown only while something waits in the queue."""
    waiting = queue.exclude(pk__in=skipped).first() if skipped else None
    waiting = waiting or queue.first()
    if waiting is None:
        return None
    record = items_vetted(user)
    chooser = random.Random(f"gold:{user.pk}:{record}")
    if chooser.random() < gold_rate(record):
        ids = list(gold.exclude(pk__in=skipped).values_list("pk", flat=True)[:500])
        if ids:
            return gold.get(pk=chooser.choice(ids))
    return waiting
