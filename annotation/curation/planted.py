"""Planted-error audits: copies of approved trajectories with a known error (agent.planting),
sent to auditors like any other audit, and each auditor's catch rate.

A planted copy is a ``Curation`` with ``planted=True`` and a ``PlantedError`` saying what was
changed. It holds the source's versions up to the approved one, that one replaced by the
planted revision (same number, kind and author), and a history that reads like the source's up
to its submission for audit; the planting itself is logged on the ``PlantRound``, never on the
copy. Auditors meet it in the same queues, pages and API answers as a real audit.

Scoring: each auditor's verdict on a copy is one trial for that auditor and that error kind.
Caught = the auditor requested changes. Located = caught and a step comment was left on the
planted turn (the changed tool step, or the final answer for a flipped answer). Rates carry a
Wilson 95 % interval. After its one audit round a copy stops: no standardization, no vote, no
revision, and it is left out of every export, count and agreement statistic.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, QuerySet

from agent import planting
from agent.editing import apply_edit, edit_from_trajectory
from agent.planting import wilson_interval
from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.models import AuditLog
from annotation.core.services import audit_log_record
from annotation.curation import selectors
from annotation.curation.models import (
    Audit,
    AuditVerdict,
    Curation,
    CurationState,
    PlantedError,
    PlantedErrorKind,
    PlantRound,
    TrajectoryVersion,
    VersionKind,
)
from annotation.curation.revised import REVIEWED_STATES
from annotation.curation.services import _is_staff, curation_reassign, trajectory_to_stored
from annotation.spectra import selectors as spectra_selectors

MAX_PER_ROUND = 50
MAX_SEED = 2**31 - 1  # the seed column is a 32-bit integer
# The source's history entries a copy replays (everything before its first audit).
REPLAYED_ACTIONS = (
    "curation_created",
    "screening_opened",
    "screened_keep",
    "revision_claimed",
    "revision_saved",
)


# --- writes ---------------------------------------------------------------------------------------


def plant_sources() -> QuerySet[Curation]:
    """Trajectories a copy may be made from: real ones that passed audit."""
    return Curation.objects.filter(planted=False, state__in=REVIEWED_STATES).order_by("id")


def approved_version(source: Curation) -> TrajectoryVersion:
    """The version the auditors approved (not the standardizer's rewrite)."""
    number = source.audits.filter(verdict=AuditVerdict.APPROVE).aggregate(
        number=Max("version_number")
    )["number"]
    rows = source.versions.exclude(kind=VersionKind.STANDARDIZED)
    if number is not None:
        rows = rows.filter(number__lte=number)
    version = rows.order_by("-number").first()
    if version is None:
        raise WorkflowError(f"curation {source.pk} has no approved version to copy")
    return version


@transaction.atomic
def plant_round_create(
    *,
    actor: User,
    kinds: Sequence[str],
    count: int,
    seed: int,
    auditors: Sequence[User] = (),
    note: str = "",
) -> PlantRound:
    """Plant ``count`` copies (kinds taken in turn) of approved trajectories chosen by ``seed``.

    With ``auditors`` (one or two experts) each copy is assigned to them, as staff assign any
    audit; without, the copies wait in the "audits to claim" queue like any other.
    """
    if not _is_staff(actor):
        raise NotAllowed("only staff plant audit errors")
    kinds = list(dict.fromkeys(kinds))
    unknown = [kind for kind in kinds if kind not in PlantedErrorKind.values]
    if not kinds or unknown:
        raise WorkflowError(
            f"choose error kinds among {', '.join(PlantedErrorKind.values)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    if not 0 <= seed <= MAX_SEED:
        raise WorkflowError(f"seed must be between 0 and {MAX_SEED}, got {seed}")
    if not 1 <= count <= MAX_PER_ROUND:
        raise WorkflowError(f"count must be between 1 and {MAX_PER_ROUND}, got {count}")
    auditors = list({auditor.pk: auditor for auditor in auditors}.values())
    if len(auditors) > 2:
        raise WorkflowError("name at most two auditors")
    ids = list(plant_sources().values_list("id", flat=True))
    if len(ids) < count:
        raise WrongState(
            f"only {len(ids)} approved trajectories can be copied; ask for {len(ids) or 'none'}"
        )
    rng = random.Random(seed)
    chosen = sorted(rng.sample(ids, count))
    plant_round = PlantRound.objects.create(
        created_by=actor, seed=seed, kinds=kinds, note=note.strip()[:200]
    )
    for position, source_id in enumerate(chosen):
        source = Curation.objects.select_related("spectrum", "task").get(pk=source_id)
        wanted = [kinds[(position + shift) % len(kinds)] for shift in range(len(kinds))]
        _plant_one(
            plant_round=plant_round,
            source=source,
            kinds=wanted,
            seed=seed * 1000 + position,
            auditors=auditors,
            actor=actor,
        )
    audit_log_record(
        actor=actor,
        action="planted_round_created",
        obj=plant_round,
        comment=note,
        data={"kinds": kinds, "count": count, "seed": seed, "auditors": [a.pk for a in auditors]},
    )
    return plant_round


def _plant_one(
    *,
    plant_round: PlantRound,
    source: Curation,
    kinds: list[str],
    seed: int,
    auditors: Sequence[User],
    actor: User,
) -> PlantedError:
    version = approved_version(source)
    base = selectors.version_trajectory(version)
    steps, answer = edit_from_trajectory(base)
    kind = next((k for k in kinds if planting.applicable(k, steps)), None)
    if kind is None:
        raise WorkflowError(f"curation {source.pk}: none of the kinds fits (no tool step)")
    tool = spectra_selectors.spectrum_tool(source.spectrum)
    planted = planting.plant(kind, steps, answer, seed=seed, coverage=tool.coverage())
    trajectory = apply_edit(base, tool=tool, steps=planted.steps, answer=planted.answer)
    copy = Curation.objects.create(
        task=source.task,
        spectrum=source.spectrum,
        ground_truth=source.ground_truth,
        source=source.source,
        teacher=source.teacher,
        draft_job=source.draft_job,
        reviser=source.reviser,
        state=CurationState.IN_AUDIT,
        audit_round=1,
        head_number=version.number,
        planted=True,
    )
    for earlier in source.versions.filter(number__lt=version.number).order_by("number"):
        TrajectoryVersion.objects.create(
            curation=copy,
            number=earlier.number,
            kind=earlier.kind,
            data=earlier.data,
            author=earlier.author,
            comment=earlier.comment,
        )
    TrajectoryVersion.objects.create(
        curation=copy,
        number=version.number,
        kind=version.kind,
        data=trajectory_to_stored(trajectory),
        author=version.author,
        comment=version.comment,
    )
    _replay_history(source=source, copy=copy, up_to=version.number)
    for role, auditor in zip(("auditor_1", "auditor_2"), auditors, strict=False):
        copy = curation_reassign(curation=copy, role=role, user=auditor, actor=actor)
    return PlantedError.objects.create(
        plant_round=plant_round,
        curation=copy,
        source=source,
        source_version=version.number,
        kind=kind,
        target=planted.target,
        description=planted.description,
    )


def _replay_history(*, source: Curation, copy: Curation, up_to: int) -> None:
    """The copy's history reads like its source's up to the submission for audit."""
    entries = AuditLog.objects.filter(
        object_type="Curation", object_pk=str(source.pk), action__in=REPLAYED_ACTIONS
    ).order_by("id")
    for entry in entries:
        if entry.action == "revision_saved" and int(entry.data.get("version", 0)) > up_to:
            continue
        audit_log_record(
            actor=entry.actor,
            action=entry.action,
            obj=copy,
            from_state=entry.from_state,
            to_state=entry.to_state,
            comment=entry.comment,
            data=entry.data,
        )
    audit_log_record(
        actor=source.reviser,
        action="submitted_for_audit",
        obj=copy,
        from_state=CurationState.IN_REVISION,
        to_state=CurationState.IN_AUDIT,
        data={"head": up_to, "round": 1},
    )


# --- reads -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """One auditor's verdict on one planted copy."""

    planted: PlantedError
    auditor: str
    verdict: str
    caught: bool
    located: bool


def trials(*, errors: Iterable[PlantedError] | None = None) -> list[Trial]:
    """Every verdict given on a planted copy (its one round), in order."""
    if errors is None:
        errors = PlantedError.objects.select_related("curation")
    found = []
    by_curation = {error.curation_id: error for error in errors}
    audits = (
        Audit.objects.filter(curation_id__in=by_curation, round=1)
        .select_related("auditor")
        .order_by("id")
    )
    seen: set[tuple[int, int]] = set()
    for audit in audits:
        key = (audit.curation_id, audit.auditor_id)
        if key in seen:
            continue
        seen.add(key)
        error = by_curation[audit.curation_id]
        caught = audit.verdict == AuditVerdict.REQUEST_CHANGES
        located = caught and str(error.target) in (audit.step_comments or {})
        found.append(Trial(error, audit.auditor.get_username(), audit.verdict, caught, located))
    return found


@dataclass(frozen=True)
class Rate:
    """Caught (and located) out of n, with Wilson 95 % intervals."""

    key: str
    label: str
    n: int
    caught: int
    located: int

    @property
    def rate(self) -> float | None:
        return self.caught / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.caught, self.n)

    @property
    def located_rate(self) -> float | None:
        return self.located / self.n if self.n else None

    @property
    def located_interval(self) -> tuple[float, float]:
        return wilson_interval(self.located, self.n)

    def as_dict(self) -> dict[str, Any]:
        low, high = self.interval
        located_low, located_high = self.located_interval
        return {
            "key": self.key,
            "label": self.label,
            "n": self.n,
            "caught": self.caught,
            "catch_rate": self.rate,
            "wilson_low": low,
            "wilson_high": high,
            "located": self.located,
            "located_rate": self.located_rate,
            "located_wilson_low": located_low,
            "located_wilson_high": located_high,
        }


def _rates(groups: dict[tuple[str, str], list[Trial]]) -> list[Rate]:
    return [
        Rate(
            key,
            label,
            len(rows),
            sum(t.caught for t in rows),
            sum(t.located for t in rows),
        )
        for (key, label), rows in sorted(groups.items())
    ]


@dataclass(frozen=True)
class CatchRates:
    overall: Rate
    by_auditor: list[Rate]
    by_kind: list[Rate]
    by_auditor_and_kind: list[Rate]
    pending: int  # planted copies still waiting for a verdict

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "by_auditor": [rate.as_dict() for rate in self.by_auditor],
            "by_kind": [rate.as_dict() for rate in self.by_kind],
            "by_auditor_and_kind": [rate.as_dict() for rate in self.by_auditor_and_kind],
            "pending": self.pending,
        }


def catch_rates(found: list[Trial] | None = None) -> CatchRates:
    """Catch rates per auditor, per error kind, per both and overall."""
    found = trials() if found is None else found
    labels = dict(PlantedErrorKind.choices)
    by_auditor: dict[tuple[str, str], list[Trial]] = defaultdict(list)
    by_kind: dict[tuple[str, str], list[Trial]] = defaultdict(list)
    both: dict[tuple[str, str], list[Trial]] = defaultdict(list)
    for trial in found:
        kind = trial.planted.kind
        by_auditor[(trial.auditor, trial.auditor)].append(trial)
        by_kind[(kind, str(labels.get(kind, kind)))].append(trial)
        both[(f"{trial.auditor}:{kind}", f"{trial.auditor}, {labels.get(kind, kind)}")].append(
            trial
        )
    pending = Curation.objects.filter(planted=True, state=CurationState.IN_AUDIT).count()
    return CatchRates(
        overall=Rate(
            "all",
            "all planted errors",
            len(found),
            sum(t.caught for t in found),
            sum(t.located for t in found),
        ),
        by_auditor=_rates(by_auditor),
        by_kind=_rates(by_kind),
        by_auditor_and_kind=_rates(both),
        pending=pending,
    )


def plant_rounds() -> QuerySet[PlantRound]:
    return PlantRound.objects.select_related("created_by").prefetch_related(
        "errors__curation", "errors__curation__auditor_1", "errors__curation__auditor_2"
    )
