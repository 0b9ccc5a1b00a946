"""Experts' answers on a spectrum for a task, over every run that inspected it (reads only).

A label is about a spectrum and a task, so each expert has one answer there: their latest, on
whichever run's candidate they gave it. An earlier answer is kept and shown as replaced by the
later one; the label (``annotation.spectra.labels``) and the catalog's expert consensus count
only each expert's latest. The history, the consensus and the label all read the same rows and
the same rule, so the entry page tells one story.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from annotation.inspections.models import ExpertDecision, ExpertDecisionValue
from annotation.inspections.quality import joined_issues, mean_quality
from annotation.spectra.labels import DecisionRecord, label_from_decisions

EXPERT_SPLIT = "split"  # the catalog's expert decision when the experts disagree


def _record(row: ExpertDecision) -> DecisionRecord:
    return DecisionRecord(
        decision_id=row.pk,
        expert_id=row.expert_id,
        expert=row.expert.get_username(),
        value=row.decision,
        decided_at=row.created_at,
        changed_at=row.updated_at,
        candidate_id=row.candidate_id,
        run_id=row.candidate.run_id,
        model_key=row.model_key_seen,
        model_label=row.model_label_seen,
        verdict_seen=row.verdict_seen,
        confidence_seen=row.confidence_seen,
        quality=row.quality,
        issues=tuple(row.issues or ()),
    )


def _rows(*, spectrum_id: int, task_id: int) -> list[ExpertDecision]:
    return list(
        ExpertDecision.objects.filter(
            candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id
        )
        .select_related("expert", "candidate")
        .order_by("created_at", "id")
    )


def decision_records(*, spectrum_id: int, task_id: int) -> list[DecisionRecord]:
    """Every expert decision on the spectrum for the task, any run, oldest first."""
    return [_record(row) for row in _rows(spectrum_id=spectrum_id, task_id=task_id)]


@dataclass(frozen=True)
class Consensus:
    """What the experts' latest answers say together, as the catalog entry shows it."""

    decision: str  # their common answer, EXPERT_SPLIT when they differ, "" when none
    quality: float | None  # the mean of the qualities given
    issues: str  # every issue flag raised, comma-separated codes


def consensus_of(latest: Sequence[DecisionRecord]) -> Consensus:
    """The common answer of ``latest`` (one record per expert), "split" when they disagree:
    the latest alone would hide a YES behind a later NO."""
    given = {record.value for record in latest}
    decision = (given.pop() if len(given) == 1 else EXPERT_SPLIT) if given else ""
    return Consensus(
        decision=decision,
        quality=mean_quality(record.quality for record in latest),
        issues=joined_issues(list(record.issues) for record in latest),
    )


@dataclass(frozen=True)
class HistoryRow:
    """One stored answer, with whether a later answer of the same expert replaced it."""

    decision: ExpertDecision
    replaced_by: ExpertDecision | None  # the same expert's next answer on the spectrum and task
    replaces: tuple[int, ...]  # the ids of the same expert's earlier answers there

    @property
    def current(self) -> bool:
        return self.replaced_by is None


def _ordered_by_expert(rows: Iterable[ExpertDecision]) -> dict[int, list[ExpertDecision]]:
    """Each expert's answers, the latest last: the order ``spectra.labels`` reads them in."""
    by_expert: dict[int, list[ExpertDecision]] = {}
    for row in sorted(rows, key=lambda r: (r.updated_at, r.pk)):
        by_expert.setdefault(row.expert_id, []).append(row)
    return by_expert


def decision_history(
    *, spectrum_id: int, task_id: int, run_ids: Collection[int] | None = None
) -> list[HistoryRow]:
    """Every expert answer on the spectrum for the task, oldest first, each marked current or
    replaced; ``run_ids``: only the answers given on those runs' candidates (what the reader
    may see) are listed, though a hidden later answer still marks an earlier one replaced."""
    rows = _rows(spectrum_id=spectrum_id, task_id=task_id)
    marks: dict[int, tuple[ExpertDecision | None, tuple[int, ...]]] = {}
    for answers in _ordered_by_expert(rows).values():
        for at, row in enumerate(answers):
            later = answers[at + 1] if at + 1 < len(answers) else None
            marks[row.pk] = (later, tuple(earlier.pk for earlier in answers[:at]))
    return [
        HistoryRow(decision=row, replaced_by=marks[row.pk][0], replaces=marks[row.pk][1])
        for row in rows
        if run_ids is None or row.candidate.run_id in run_ids
    ]


def expert_answer(*, spectrum_id: int, task_id: int, expert_id: int) -> ExpertDecision | None:
    """The expert's current answer on the spectrum for the task (any run), if any."""
    return (
        ExpertDecision.objects.filter(
            expert_id=expert_id, candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id
        )
        .select_related("candidate")
        .order_by("-updated_at", "-id")
        .first()
    )


def expert_tallies(pairs: Collection[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Who says what ("YES 1 · NO 1"), each expert's latest answer counted once, for the
    (spectrum id, task id) pairs whose experts disagree: one query for a page."""
    if not pairs:
        return {}
    wanted = Q()
    for spectrum_id, task_id in pairs:
        wanted |= Q(candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id)
    rows = ExpertDecision.objects.filter(wanted).values_list(
        "candidate__spectrum_id",
        "candidate__run__task_id",
        "expert_id",
        "decision",
        "updated_at",
        "id",
    )
    latest: dict[tuple[int, int], dict[int, tuple[datetime, int, str]]] = {}
    for spectrum_id, task_id, expert_id, decision, updated_at, pk in rows:
        answers = latest.setdefault((spectrum_id, task_id), {})
        held = answers.get(expert_id)
        if held is None or (updated_at, pk) > (held[0], held[1]):
            answers[expert_id] = (updated_at, pk, decision)
    order = {value: index for index, value in enumerate(ExpertDecisionValue.values)}
    tallies = {}
    for pair, answers in latest.items():
        counts: dict[str, int] = {}
        for _, _, decision in answers.values():
            counts[decision] = counts.get(decision, 0) + 1
        if len(counts) > 1:
            tallies[pair] = " · ".join(
                f"{value} {n}" for value, n in sorted(counts.items(), key=lambda kv: order[kv[0]])
            )
    return tallies


def latest_answers(records: Iterable[DecisionRecord]) -> list[DecisionRecord]:
    """Each expert's latest answer, in the order the experts first answered (the label rule's)."""
    return label_from_decisions(records).decisions
