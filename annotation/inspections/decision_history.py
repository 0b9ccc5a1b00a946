"""Experts' answers on a spectrum for a task, over every run that inspected it (reads only).

A label is about a spectrum and a task, so each expert has one answer there: their latest, on
whichever run's candidate they gave it. An earlier answer is kept and shown as replaced by the
later one; the label (``annotation.spectra.labels``) and the catalog's expert consensus count
only each expert's latest. The history, the consensus and the label all read the same rows and
the same rule, so the entry page tells one story.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, Min, OuterRef, QuerySet

from annotation.inspections.models import (
    Candidate,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.inspections.quality import joined_issues, mean_quality
from annotation.spectra.labels import DecisionRecord, label_from_decisions
from annotation.spectra.models import Spectrum

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


def _consensus(answers: list[tuple[str, int | None, Iterable[str]]]) -> Consensus:
    given = {value for value, _, _ in answers}
    decision = (given.pop() if len(given) == 1 else EXPERT_SPLIT) if given else ""
    return Consensus(
        decision=decision,
        quality=mean_quality(quality for _, quality, _ in answers),
        issues=joined_issues(issues for _, _, issues in answers),
    )


def consensus_of(latest: Sequence[DecisionRecord]) -> Consensus:
    """The common answer of ``latest`` (one record per expert), "split" when they disagree:
    the latest alone would hide a YES behind a later NO."""
    return _consensus([(record.value, record.quality, record.issues) for record in latest])


def stored_consensus(decisions: Iterable[Mapping[str, Any]]) -> Consensus:
    """``consensus_of`` the decisions a label row stores (``DecisionRecord.as_dict()``, each
    expert's latest), for a catalog entry made after them."""
    return _consensus(
        [(str(d.get("value", "")), d.get("quality"), d.get("issues") or ()) for d in decisions]
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
    *, spectrum_id: int, task_id: int, runs: QuerySet[InspectionRun] | None = None
) -> list[HistoryRow]:
    """Every expert answer on the spectrum for the task, oldest first, each marked current or
    replaced; ``runs``: only the answers given on those runs' candidates (what the reader may
    read) are listed, though a hidden later answer still marks an earlier one replaced."""
    rows = _rows(spectrum_id=spectrum_id, task_id=task_id)
    marks: dict[int, tuple[ExpertDecision | None, tuple[int, ...]]] = {}
    for answers in _ordered_by_expert(rows).values():
        for at, row in enumerate(answers):
            later = answers[at + 1] if at + 1 < len(answers) else None
            marks[row.pk] = (later, tuple(earlier.pk for earlier in answers[:at]))
    if runs is not None and rows:
        readable = set(
            runs.filter(pk__in={row.candidate.run_id for row in rows}).values_list("pk", flat=True)
        )
        rows = [row for row in rows if row.candidate.run_id in readable]
    return [
        HistoryRow(decision=row, replaced_by=marks[row.pk][0], replaces=marks[row.pk][1])
        for row in rows
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


def expert_tallies(candidate_ids: Collection[int]) -> dict[int, str]:
    """Who says what ("YES 1 · NO 1") on each candidate's spectrum for its task, each expert's
    latest answer (any run) counted once, for the candidates whose experts disagree: two
    queries for a page."""
    if not candidate_ids:
        return {}
    pair_of = {
        pk: (spectrum_id, task_id)
        for pk, spectrum_id, task_id in Candidate.objects.filter(pk__in=candidate_ids).values_list(
            "pk", "spectrum_id", "run__task_id"
        )
    }
    rows = ExpertDecision.objects.filter(
        candidate__spectrum_id__in={spectrum_id for spectrum_id, _ in pair_of.values()},
        candidate__run__task_id__in={task_id for _, task_id in pair_of.values()},
    ).values_list(
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
    return {pk: tallies[pair] for pk, pair in pair_of.items() if pair in tallies}


def latest_answers(records: Iterable[DecisionRecord]) -> list[DecisionRecord]:
    """Each expert's latest answer, in the order the experts first answered (the label rule's)."""
    return label_from_decisions(records).decisions


def answered_by(user: Any) -> Exists:
    """For a Candidate query: whether ``user`` has answered the candidate's spectrum for its
    task, on this candidate or on another run's (that answer is theirs until they change it)."""
    return Exists(
        ExpertDecision.objects.filter(
            expert=user,
            candidate__spectrum_id=OuterRef("spectrum_id"),
            candidate__run__task_id=OuterRef("run__task_id"),
        )
    )


def one_per_spectrum_task(rows: QuerySet[Candidate]) -> QuerySet[Candidate]:
    """``rows`` less all but the first (lowest id) of each spectrum's candidates for a task:
    a queue serves a spectrum and task once however many runs inspected it."""
    first = (
        rows.order_by()
        .values("spectrum_id", "run__task_id")
        .annotate(first=Min("pk"))
        .values("first")
    )
    return rows.filter(pk__in=first)


@dataclass(frozen=True)
class SameContent:
    """Another stored spectrum holding the same content (same SHA-256), with the expert's
    current answer on it for the task ("" when none)."""

    spectrum_id: int
    dataset: str
    answer: str


SAME_CONTENT_SHOWN = 20


def same_content_answers(*, spectrum: Spectrum, task_id: int, expert_id: int) -> list[SameContent]:
    """The other spectra with ``spectrum``'s content (each labelled on its own, so the queue
    may serve the same content again, once per spectrum), with the expert's answers on them."""
    if not spectrum.content_hash:
        return []
    others = list(
        Spectrum.objects.filter(content_hash=spectrum.content_hash)
        .exclude(pk=spectrum.pk)
        .order_by("pk")
        .values_list("pk", "dataset")[:SAME_CONTENT_SHOWN]
    )
    answers: dict[int, str] = {}
    rows = (
        ExpertDecision.objects.filter(
            expert_id=expert_id,
            candidate__spectrum_id__in=[pk for pk, _ in others],
            candidate__run__task_id=task_id,
        )
        .order_by("updated_at", "id")
        .values_list("candidate__spectrum_id", "decision")
    )
    for spectrum_id, decision in rows:
        answers[spectrum_id] = decision  # the latest wins
    return [SameContent(pk, dataset, answers.get(pk, "")) for pk, dataset in others]
