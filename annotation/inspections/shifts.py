"""The shift sentinel's writes: before a run's confident verdicts are accepted automatically, its
spectra are compared with its model's calibration set (agent.shift: S/N, resolution, coverage,
distance to the real library; KS and PSI per feature, for the run and each survey in it).

- A run gets a check when it is created if its model has a calibration set (the vetted labels
  its latest recalibration on the task was fit on: annotation.learning registers where to read
  them; this domain imports no higher one). Until the check is done, its confident answers wait
  for experts ("shift check pending").
- A run or survey subset that has shifted keeps its confident answers with experts
  ("distribution shift") and its catalog entries are marked ``shifted``; the others are
  released to automatic acceptance.
- Each recalibration compares the model's shifted runs again with the new calibration set, which
  now holds the vetted labels experts gave them: a run it covers is "recalibrated" and released.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent.shift import (
    MIN_REFERENCE,
    SpectrumDistance,
    compare_groups,
    corpus_library_distance,
    grouped,
    held_groups,
    spectrum_features,
)
from annotation.core.errors import WrongState
from annotation.core.services import audit_log_record, job_create
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    ShiftCheck,
    ShiftState,
    TriageReason,
)
from annotation.inspections.selectors import ShiftHold
from annotation.inspections.triage import CalibrationSet, calibration_set
from annotation.spectra.models import Spectrum

logger = logging.getLogger(__name__)

SHIFT_JOB = "shift_check"
HELD = (TriageReason.DISTRIBUTION_SHIFT, TriageReason.SHIFT_PENDING)


@lru_cache(maxsize=1)
def shift_library() -> tuple[SpectrumDistance | None, str]:
    """The distance to the library (built once per process from the real corpus's development
    part) and what it is; swap this function to use another library distance."""
    library = corpus_library_distance()
    if library is None:
        return None, "not computed: the real corpus is not in the cache (make real-data)"
    return library, (
        f"continuum-normalised line depths, nearest of {len(library.names)} development "
        "spectra of the real corpus (agent.shift.LibraryDistance)"
    )


# --- starting and running a check -----------------------------------------------------------------


@transaction.atomic
def shift_check_start(*, run: InspectionRun, actor: User | None) -> ShiftCheck | None:
    """A pending check of ``run`` and the job that compares it, when its model has a calibration
    set of at least MIN_REFERENCE spectra on the task (None otherwise: nothing to compare with).
    The run's confident answers finished meanwhile wait for experts."""
    reference = calibration_set(run.task_id, run.model_key)
    if reference is None or len(reference.spectrum_ids) < MIN_REFERENCE:
        return None
    check = ShiftCheck.objects.create(
        run=run,
        state=ShiftState.PENDING,
        calibration_fit_id=reference.fit_id,
        reference=reference.label[:200],
        n_reference=len(reference.spectrum_ids),
    )
    shift_route(run=run, hold=ShiftHold(state=ShiftState.PENDING))
    job = job_create(
        kind=SHIFT_JOB, params={"check_id": check.pk, "run_id": run.pk}, created_by=actor
    )
    ShiftCheck.objects.filter(pk=check.pk).update(job=job)
    return check


def shift_check_request(*, run: InspectionRun, actor: User) -> ShiftCheck:
    """Compare the run again (its owner or staff); refused when its model has no calibration
    set to compare with."""
    check = shift_check_start(run=run, actor=actor)
    if check is None:
        raise WrongState(
            f"run {run.pk} has no calibration set to compare with: its model has no "
            f"recalibration on task {run.task.code} with at least {MIN_REFERENCE} vetted labels"
        )
    return check


def _features(spectrum_ids: Iterable[int]) -> list[tuple[int, str, dict[str, float | None]]]:
    """(id, survey, features) of each stored spectrum, read a few hundred at a time."""
    from annotation.spectra.selectors import spectrum_value

    distance, _ = shift_library()
    ids = sorted(set(spectrum_ids))
    out = []
    for start in range(0, len(ids), 500):
        for row in Spectrum.objects.filter(pk__in=ids[start : start + 500]).order_by("pk"):
            try:
                value = spectrum_value(row)
                out.append((row.pk, row.survey, spectrum_features(value, distance)))
            except (ValueError, TypeError) as error:  # a damaged stored spectrum is left out
                logger.warning("shift check: spectrum %s left out: %s", row.pk, error)
    return out


def _vetted_in(
    key: str, rows: list[tuple[int, str, dict[str, float | None]]], reference: CalibrationSet
) -> int:
    """How many of the run's spectra in group ``key`` the calibration set holds vetted."""
    inside = {pk for pk, survey, _ in rows if key == "" or key == f"survey={survey}"}
    return len(inside & set(reference.spectrum_ids))


def shift_check_run(*, check_id: int) -> ShiftCheck:
    """The job's body: compare the run with its model's current calibration set and record.

    A group that differs is not held when the calibration set already holds at least
    MIN_REFERENCE of its spectra with vetted labels: experts' labels on that population went
    into the recalibration ("recalibrated")."""
    check = ShiftCheck.objects.select_related("run__task").get(pk=check_id)
    run = check.run
    reference = calibration_set(run.task_id, run.model_key)
    if reference is None:
        return shift_check_record(
            check=check, state=ShiftState.FAILED, error="the calibration set is gone"
        )
    run_rows = _features(Candidate.objects.filter(run=run).values_list("spectrum_id", flat=True))
    reference_rows = _features(reference.spectrum_ids)
    groups = compare_groups(
        grouped([(survey, f) for _, survey, f in reference_rows]),
        grouped([(survey, f) for _, survey, f in run_rows]),
    )
    found, shifted, recalibrated = [], [], []
    held = held_groups(groups)
    for group in groups:
        row = group.as_dict()
        if group.key in held:
            row["vetted_in_calibration_set"] = _vetted_in(group.key, run_rows, reference)
            if row["vetted_in_calibration_set"] >= MIN_REFERENCE:
                recalibrated.append(group.key)
            else:
                shifted.append(group.key)
        found.append(row)
    if shifted:
        state = ShiftState.SHIFTED
    elif recalibrated:
        state = ShiftState.RECALIBRATED
    else:
        previous = (
            ShiftCheck.objects.filter(run=run, pk__lt=check.pk)
            .exclude(state__in=[ShiftState.PENDING, ShiftState.FAILED])
            .order_by("-id")
            .values_list("state", flat=True)
            .first()
        )
        was_shifted = previous in (ShiftState.SHIFTED, ShiftState.RECALIBRATED)
        state = ShiftState.RECALIBRATED if was_shifted else ShiftState.CLEAR
    return shift_check_record(
        check=check,
        state=state,
        reference=reference,
        groups=found,
        shifted_groups=shifted,
        n_run=len(run_rows),
        n_reference=len(reference_rows),
        library=shift_library()[1],
    )


@transaction.atomic
def shift_check_record(
    *,
    check: ShiftCheck,
    state: str,
    reference: CalibrationSet | None = None,
    groups: list[dict[str, Any]] | None = None,
    shifted_groups: list[str] | None = None,
    n_run: int = 0,
    n_reference: int = 0,
    library: str = "",
    error: str = "",
) -> ShiftCheck:
    """Record what the check found and route the run's finished candidates by it."""
    check.state = state
    check.groups = groups or []
    check.shifted_groups = shifted_groups or []
    check.n_run, check.library, check.error = n_run, library[:200], error
    if reference is not None:
        check.calibration_fit_id, check.reference = reference.fit_id, reference.label[:200]
        check.n_reference = n_reference
    check.finished_at = timezone.now()
    latest = ShiftCheck.objects.filter(run=check.run).order_by("-id").values_list("pk").first()
    if latest is not None and latest[0] == check.pk:  # an older check never overrides a newer
        check.routed = shift_route(
            run=check.run, hold=ShiftHold(state=state, groups=frozenset(check.shifted_groups))
        )
    check.save()
    audit_log_record(
        actor=None,
        action="shift_check",
        obj=check,
        to_state=state,
        comment=f"run {check.run_id} against {check.reference}"
        + (
            f": shifted {', '.join(k or 'the whole run' for k in check.shifted_groups)}"
            if check.shifted_groups
            else ""
        ),
        data={"run": check.run_id, "shifted_groups": check.shifted_groups, **check.routed},
    )
    return check


def shift_check_fail(*, check_id: int, error: str) -> None:
    """The comparison could not run: the answers it holds keep waiting for experts."""
    check = ShiftCheck.objects.select_related("run").get(pk=check_id)
    shift_check_record(check=check, state=ShiftState.FAILED, error=error[:2000])


def _in_groups(groups: frozenset[str]) -> Q:
    if "" in groups:
        return Q()
    surveys = [key.removeprefix("survey=") for key in groups if key.startswith("survey=")]
    return Q(spectrum__survey__in=surveys) if surveys else Q(pk__in=[])


def shift_route(*, run: InspectionRun, hold: ShiftHold) -> dict[str, int]:
    """Route the run's finished candidates by its latest check: confident answers (no other
    reason to see experts) wait while it is pending or failed, stay with experts in a shifted
    group, and are released elsewhere; the catalog's ``shifted`` follows. Returns how many moved
    each way. Call inside the transaction that records the check."""
    done = Candidate.objects.filter(run=run, state=CandidateState.DONE)
    entries = CatalogEntry.objects.filter(run=run)
    if hold.state in (ShiftState.PENDING, ShiftState.FAILED):
        sent = done.filter(triage_reason="").update(
            triage_reason=TriageReason.SHIFT_PENDING, needs_expert=True
        )
        return {"to_experts": sent, "released": 0}
    sent = 0
    inside = _in_groups(hold.groups) if hold.state == ShiftState.SHIFTED else Q(pk__in=[])
    if hold.state == ShiftState.SHIFTED:
        sent = (
            done.filter(inside)
            .filter(triage_reason__in=["", TriageReason.SHIFT_PENDING])
            .update(triage_reason=TriageReason.DISTRIBUTION_SHIFT, needs_expert=True)
        )
    held_outside = done.filter(triage_reason__in=HELD).exclude(
        pk__in=done.filter(inside).values("pk")
    )
    released = held_outside.update(triage_reason="", needs_expert=False)
    entries.filter(shifted=True).update(shifted=False)
    if hold.state == ShiftState.SHIFTED:
        entries.filter(candidate__in=done.filter(inside).values("pk")).update(shifted=True)
    return {"to_experts": sent, "released": released}


def shift_checks_recalibrate(*, task_id: int, model_key: str) -> list[dict[str, Any]]:
    """After a recalibration: compare each of the model's runs on the task whose latest check
    shifted or failed with the new calibration set, now in this process (the recalibration job)."""
    out = []
    runs = InspectionRun.objects.filter(task_id=task_id, model_key=model_key)
    for run in runs.order_by("pk"):
        latest = ShiftCheck.objects.filter(run=run).order_by("-id").first()
        if latest is None or latest.state not in (ShiftState.SHIFTED, ShiftState.FAILED):
            continue
        reference = calibration_set(task_id, model_key)
        if reference is None or len(reference.spectrum_ids) < MIN_REFERENCE:
            # nothing to compare with yet: the run stays held as it was
            shift_route(
                run=run,
                hold=ShiftHold(state=latest.state, groups=frozenset(latest.shifted_groups)),
            )
            continue
        check = ShiftCheck.objects.create(
            run=run,
            state=ShiftState.PENDING,
            calibration_fit_id=reference.fit_id,
            reference=reference.label[:200],
            n_reference=len(reference.spectrum_ids),
        )
        done = shift_check_run(check_id=check.pk)
        out.append({"run": run.pk, "check": done.pk, "state": done.state, **done.routed})
    return out
