"""Every write specvet makes. Keyword-only, atomic; views, APIs and tasks call these."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import re
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import UploadedFile
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import BinaryField, F, Field, Model, Value
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agent import inspection_tasks as agent_tasks
from agent.resolution import Resolution
from agent.spectra import Spectrum as SpectrumValue
from agent.spectra import SpectrumFormatError, load_spectra, spectrum_to_npz_bytes
from agent.trajectory import Trajectory
from annotation import endpoints
from annotation.models import (
    Audit,
    AuditLog,
    AuditVerdict,
    CampaignItem,
    Candidate,
    CandidateState,
    CatalogEntry,
    Curation,
    CurationState,
    DatasetExport,
    ExpertDecision,
    ExpertDecisionValue,
    ImageBlob,
    InspectionRun,
    Job,
    JobState,
    Judge,
    JudgeScore,
    Label,
    LiveStep,
    ModelEndpoint,
    PairItem,
    PairJudgement,
    PairOutcome,
    PolicyCheckpoint,
    RatingAssignment,
    RatingCampaign,
    RevisionDraft,
    Rollout,
    Spectrum,
    Task,
    TrainingMetric,
    TrainingRun,
    TrainingStage,
    TrajectoryVersion,
    VersionKind,
    Vote,
    VoteValue,
)
from annotation.permissions import check_owner_or_staff
from annotation.roles import Role, forget_roles, user_roles
from annotation.uploads import read_limits


class UploadRejected(ValueError):
    """An upload refused before reading: too large, too many files, empty."""


def audit_log_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    obj: Any,
    from_state: str = "",
    to_state: str = "",
    comment: str = "",
    data: dict[str, Any] | None = None,
) -> AuditLog:
    """Append one entry to the audit log: the one way every part records a decision.

    Call it inside the transaction of the change it records. ``obj`` is kept as its model name
    and primary key, not a foreign key, so an object's history outlives it; ``actor`` is a
    protected key, so a user with history is deactivated rather than deleted. Entries are never
    updated or deleted (on PostgreSQL a trigger refuses it, migration 0011).
    """
    return AuditLog.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        object_type=type(obj).__name__,
        object_pk=str(obj.pk),
        from_state=from_state,
        to_state=to_state,
        comment=comment,
        data=data or {},
    )


@transaction.atomic
def api_token_issue(*, user: AbstractBaseUser) -> Token:
    """A new API token for ``user``; the one before it (if any) stops working at once."""
    replaced = Token.objects.filter(user=user).delete()[0] > 0
    token = Token.objects.create(user=user)
    audit_log_record(  # the user, not the token: a token's primary key is its secret
        actor=user,
        action="api_token_issued",
        obj=user,
        comment="replaced the previous token" if replaced else "first token",
    )
    return token


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _recorded_fields(obj: Model, names: Iterable[str] | None = None) -> list[Field[Any, Any]]:
    wanted = None if names is None else set(names)
    return [
        field
        for field in obj._meta.concrete_fields
        if not isinstance(field, BinaryField) and (wanted is None or field.name in wanted)
    ]


@transaction.atomic
def admin_object_save(
    *, obj: Model, actor: AbstractBaseUser, changed_fields: Iterable[str], adding: bool
) -> Model:
    """Save an object edited in the Django admin and record each changed field, old and new."""
    fields = _recorded_fields(obj, changed_fields)
    before: dict[str, Any] = {}
    if fields and not adding:
        before = (
            type(obj)
            ._default_manager.filter(pk=obj.pk)
            .values(*[field.attname for field in fields])
            .first()
            or {}
        )
    obj.save()
    changes = {
        field.name: [_jsonable(before.get(field.attname)), _jsonable(getattr(obj, field.attname))]
        for field in fields
    }
    # A form may report a field as changed that holds the same value (JSON fields do).
    changes = {name: pair for name, pair in changes.items() if adding or pair[0] != pair[1]}
    if not (adding or changes):
        return obj
    audit_log_record(
        actor=actor,
        action="admin_added" if adding else "admin_changed",
        obj=obj,
        comment=", ".join(
            f"{name}: {str(old)[:60]} -> {str(new)[:60]}" for name, (old, new) in changes.items()
        )[:2000],
        data={"fields": changes},
    )
    return obj


@transaction.atomic
def admin_object_delete(*, obj: Model, actor: AbstractBaseUser) -> None:
    """Delete an object from the Django admin, recording what it held first."""
    snapshot = {
        field.name: _jsonable(getattr(obj, field.attname)) for field in _recorded_fields(obj)
    }
    audit_log_record(
        actor=actor,
        action="admin_deleted",
        obj=obj,
        comment=str(obj)[:2000],
        data={"fields": snapshot},
    )
    obj.delete()


# --- tasks -----------------------------------------------------------------------------------


@transaction.atomic
def tasks_seed_builtin() -> list[Task]:
    """Create or refresh the built-in tasks from agent/data/tasks.json."""
    rows = []
    for value in agent_tasks.all_tasks():
        data = agent_tasks.task_to_dict(value)
        row, _ = Task.objects.update_or_create(
            code=value.code,
            defaults={
                "name": data["name"],
                "question": data["question"],
                "guideline": data["guideline"],
                "windows": data["windows"],
                "contaminants": data["contaminants"],
                "builtin": True,
            },
        )
        rows.append(row)
    return rows


# --- spectra ---------------------------------------------------------------------------------


def spectrum_content_hash(value: SpectrumValue) -> str:
    digest = hashlib.sha256()
    for array in (value.wavelength, value.flux):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ImportResult:
    created: list[Spectrum]
    duplicates: int


def _spectrum_row(
    value: SpectrumValue,
    *,
    dataset: str,
    source_name: str,
    uploaded_by: AbstractBaseUser | None,
    task: Task | None,
    label: str,
    split: str,
    synthetic: bool,
) -> Spectrum:
    good = value.good
    finite_wave = value.wavelength[good] if good.any() else value.wavelength
    resolution = value.resolution
    return Spectrum(
        object_id=value.object_id[:120] or source_name[:120],
        survey=value.survey[:40],
        ra=value.ra,
        dec=value.dec,
        snr=value.snr if value.snr is not None and np.isfinite(value.snr) else None,
        redshift=float(value.redshift),
        n_pixels=len(value),
        wavelength_min=float(finite_wave[0]),
        wavelength_max=float(finite_wave[-1]),
        arrays=spectrum_to_npz_bytes(value),
        content_hash=spectrum_content_hash(value),
        meta=value.meta,
        source_name=source_name[:255],
        resolution_r=None if resolution is None else resolution.resolving_power_at(6000.0),
        resolution_source="" if resolution is None else resolution.source,
        dataset=dataset,
        split=split,
        task=task,
        label=label,
        synthetic=synthetic or bool(value.meta.get("synthetic")),
        uploaded_by=uploaded_by
        if uploaded_by is not None and uploaded_by.is_authenticated
        else None,
    )


@transaction.atomic
def spectra_store(
    *,
    values: Iterable[SpectrumValue],
    dataset: str,
    source_name: str,
    uploaded_by: AbstractBaseUser | None = None,
    task: Task | None = None,
    label: str = "",
    split: str = "",
    synthetic: bool = False,
) -> ImportResult:
    """Store already-validated spectra; one already in the dataset (same arrays) is skipped."""
    created: list[Spectrum] = []
    duplicates = 0
    for value in values:
        row = _spectrum_row(
            value,
            dataset=dataset,
            source_name=source_name,
            uploaded_by=uploaded_by,
            task=task,
            label=label,
            split=split,
            synthetic=synthetic,
        )
        if Spectrum.objects.filter(dataset=dataset, content_hash=row.content_hash).exists():
            duplicates += 1
            continue
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            duplicates += 1  # a concurrent import stored the same spectrum first
            continue
        created.append(row)
    if created:
        audit_log_record(
            actor=uploaded_by,
            action="spectra_imported",
            obj=created[0],
            comment=f"{len(created)} spectra from {source_name} into {dataset}",
            data={"ids": [row.pk for row in created], "duplicates": duplicates},
        )
    return ImportResult(created=created, duplicates=duplicates)


def spectra_import_path(
    *,
    path: Path,
    dataset: str = "uploads",
    uploaded_by: AbstractBaseUser | None = None,
    task: Task | None = None,
    label: str = "",
    split: str = "",
    synthetic: bool = False,
) -> ImportResult:
    """Read a survey file (format detected from its content) and store every spectrum in it.

    Raises SpectrumFormatError, naming the file and the reason, before anything is stored.
    """
    values = load_spectra(path, limits=read_limits())
    return spectra_store(
        values=values,
        dataset=dataset,
        source_name=Path(path).name,
        uploaded_by=uploaded_by,
        task=task,
        label=label,
        split=split,
        synthetic=synthetic,
    )


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_file_name(name: str) -> str:
    cleaned = _UNSAFE_NAME.sub("_", Path(name).name).strip("._")
    return (cleaned or "upload")[:120]


def spectra_import_uploads(
    *,
    files: list[UploadedFile],
    uploaded_by: AbstractBaseUser,
    dataset: str = "uploads",
    task: Task | None = None,
    label: str = "",
    resolution: Resolution | None = None,
) -> ImportResult:
    """Import uploaded files all-or-nothing: one bad file and nothing is stored.

    ``resolution`` (source "user") replaces what the files or survey defaults say, for every
    spectrum of the upload."""
    if not files:
        raise UploadRejected("no file was uploaded")
    if len(files) > settings.SPECTRUM_UPLOAD_MAX_FILES:
        raise UploadRejected(
            f"{len(files)} files uploaded; at most {settings.SPECTRUM_UPLOAD_MAX_FILES} at once"
        )
    for upload in files:
        if upload.size is not None and upload.size > settings.SPECTRUM_UPLOAD_MAX_BYTES:
            raise UploadRejected(
                f"{safe_file_name(upload.name or '')}: {upload.size} bytes is over the limit of "
                f"{settings.SPECTRUM_UPLOAD_MAX_BYTES} bytes"
            )
    parsed: list[tuple[str, list[SpectrumValue]]] = []
    with tempfile.TemporaryDirectory(prefix="specvet-upload-") as tmp:
        for number, upload in enumerate(files):
            name = safe_file_name(upload.name or f"upload-{number}")
            # A per-file folder keeps the user's file name, so errors name what they uploaded.
            target = Path(tmp) / str(number) / name
            target.parent.mkdir()
            with target.open("wb") as handle:
                for chunk in upload.chunks():
                    handle.write(chunk)
            try:
                parsed.append((name, load_spectra(target, limits=read_limits())))
            except SpectrumFormatError as error:
                raise SpectrumFormatError(str(error).replace(str(target), name)) from None
    created: list[Spectrum] = []
    duplicates = 0
    with transaction.atomic():
        for name, values in parsed:
            if resolution is not None:
                for value in values:
                    value.resolution = resolution
            result = spectra_store(
                values=values,
                dataset=dataset,
                source_name=name,
                uploaded_by=uploaded_by,
                task=task,
                label=label,
            )
            created.extend(result.created)
            duplicates += result.duplicates
    return ImportResult(created=created, duplicates=duplicates)


# --- jobs ------------------------------------------------------------------------------------


@transaction.atomic
def job_create(
    *,
    kind: str,
    params: dict[str, Any],
    created_by: AbstractBaseUser | None = None,
    total: int = 0,
) -> Job:
    """Record a job and enqueue it once the transaction commits."""
    from annotation import tasks

    job = Job.objects.create(
        kind=kind,
        params=params,
        total=total,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    audit_log_record(actor=created_by, action="job_created", obj=job, to_state=job.state)
    transaction.on_commit(lambda: tasks.run_job.delay(job.pk))
    return job


def job_claim(*, job_id: int) -> bool:
    """Move a queued job to running. Returns False when it is not runnable (finished, cancelled).

    A job left "running" by a worker that died is claimable again: the redelivered task
    (acks_late) resumes it; runners skip the items already done and count them as done, so the
    progress counters start over here. Call it holding the job's lease (annotation/leases.py).
    A job whose JOB_MAX_ATTEMPTS are used up fails instead: a job that kills its worker every
    time must not be delivered forever.
    """
    now = timezone.now()
    runnable = Job.objects.filter(pk=job_id, state__in=[JobState.QUEUED, JobState.RUNNING])
    claimed = runnable.filter(attempts__lt=settings.JOB_MAX_ATTEMPTS).update(
        state=JobState.RUNNING,
        started_at=now,
        attempts=F("attempts") + 1,
        done=0,
        failed=0,
        error="",
    )
    if claimed == 1:
        return True
    runnable.update(
        state=JobState.FAILED,
        error=_GAVE_UP.format(attempts=settings.JOB_MAX_ATTEMPTS),
        finished_at=now,
    )
    return False


_GAVE_UP = (
    "gave up after {attempts} attempts: the last one never finished (its worker was lost: "
    "killed, out of memory, or its machine went down); see the worker logs"
)


def job_wait(*, job_id: int, error: str) -> bool:
    """running -> queued with the reason it waits (a model endpoint outage), for a later retry.

    Returns False when the job is no longer running (cancelled meanwhile): no retry then.
    """
    waiting = Job.objects.filter(pk=job_id, state=JobState.RUNNING).update(
        state=JobState.QUEUED, error=error[:10000]
    )
    return waiting == 1


def job_progress(*, job_id: int, done: int = 0, failed: int = 0) -> None:
    Job.objects.filter(pk=job_id).update(done=F("done") + done, failed=F("failed") + failed)


def job_set_total(*, job_id: int, total: int) -> None:
    Job.objects.filter(pk=job_id).update(total=total)


def job_succeed(*, job_id: int, result: dict[str, Any]) -> None:
    Job.objects.filter(pk=job_id, state=JobState.RUNNING).update(
        state=JobState.SUCCEEDED, result=result, finished_at=timezone.now()
    )


def job_fail(*, job_id: int, error: str) -> None:
    Job.objects.filter(pk=job_id).exclude(state=JobState.CANCELLED).update(
        state=JobState.FAILED, error=error[:10000], finished_at=timezone.now()
    )


@transaction.atomic
def job_cancel(*, job: Job, actor: AbstractBaseUser) -> bool:
    check_owner_or_staff(actor, job.created_by_id, what="job", action="cancel")
    updated = Job.objects.filter(pk=job.pk, state__in=[JobState.QUEUED, JobState.RUNNING]).update(
        state=JobState.CANCELLED, finished_at=timezone.now()
    )
    if updated:
        audit_log_record(
            actor=actor, action="job_cancelled", obj=job, from_state=job.state, to_state="cancelled"
        )
    return updated == 1


def job_is_cancelled(*, job_id: int) -> bool:
    return Job.objects.filter(pk=job_id, state=JobState.CANCELLED).exists()


# --- roles ---------------------------------------------------------------------------------------


@transaction.atomic
def user_roles_set(
    *, user: AbstractBaseUser, roles: Iterable[Role], actor: AbstractBaseUser | None
) -> tuple[list[Role], list[Role]]:
    """Give ``user`` exactly ``roles``; returns (granted, revoked), each change audit-logged.

    Group roles are group memberships; the staff role is ``is_staff``. ``actor`` None is the
    command line. Superusers hold every role and are changed only in the admin, by superusers;
    nobody removes their own staff role (the page would lock them out of it).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    locked = get_user_model().objects.select_for_update().get(pk=user.pk)
    if getattr(locked, "is_superuser", False):
        raise NotAllowed(f"{locked.get_username()} is a superuser and holds every role already")
    wanted = set(roles)
    before = set(user_roles(locked))
    if actor is not None and actor.pk == locked.pk and Role.STAFF in before - wanted:
        raise NotAllowed("you cannot remove your own staff role; ask another staff member")
    granted = sorted(wanted - before)
    revoked = sorted(before - wanted)
    for role in granted + revoked:
        if role == Role.STAFF:
            locked.is_staff = role in granted  # type: ignore[attr-defined]
            locked.save(update_fields=["is_staff"])
            continue
        group, _ = Group.objects.get_or_create(name=role.value)
        if role in granted:
            locked.groups.add(group)  # type: ignore[attr-defined]
        else:
            locked.groups.remove(group)  # type: ignore[attr-defined]
    user_roles_changes_record(user=locked, granted=granted, revoked=revoked, actor=actor)
    user.is_staff = locked.is_staff  # type: ignore[attr-defined]  # the caller's copy too
    forget_roles(user)
    return granted, revoked


def user_roles_changes_record(
    *,
    user: AbstractBaseUser,
    granted: Iterable[Role],
    revoked: Iterable[Role],
    actor: AbstractBaseUser | None,
) -> None:
    """One audit entry per role granted or revoked (also for changes made in the admin)."""
    changes = [("role_granted", role) for role in granted]
    changes += [("role_revoked", role) for role in revoked]
    for action, role in changes:
        audit_log_record(
            actor=actor,
            action=action,
            obj=user,
            to_state=role.value,
            comment=f"{action.replace('_', ' ')}: {role.value} for {user.get_username()}",
            data={"username": user.get_username(), "role": role.value, "by": _actor_name(actor)},
        )
    forget_roles(user)


def user_role_grant(*, user: AbstractBaseUser, role: Role, actor: AbstractBaseUser | None) -> bool:
    """Add one role; False when the user held it already."""
    granted, _ = user_roles_set(user=user, roles=user_roles(user) | {role}, actor=actor)
    return bool(granted)


def user_role_revoke(*, user: AbstractBaseUser, role: Role, actor: AbstractBaseUser | None) -> bool:
    """Remove one role; False when the user did not hold it."""
    _, revoked = user_roles_set(user=user, roles=user_roles(user) - {role}, actor=actor)
    return bool(revoked)


def _actor_name(actor: AbstractBaseUser | None) -> str:
    if actor is None or not actor.is_authenticated:
        return "manage.py"
    return actor.get_username()


# --- curation: stored trajectories ------------------------------------------------------------


class WorkflowError(Exception):
    """A curation action that the rules refuse; the message says which rule."""


class NotAllowed(WorkflowError):
    """The user has no right to this action on this trajectory (role or separation of duties)."""


class WrongState(WorkflowError):
    """The trajectory is not in a state where this action applies (perhaps someone else moved it)."""


class VersionConflict(WorkflowError):
    """A save based on a version that is no longer the latest; nothing was saved."""

    def __init__(self, *, base: int, head: int) -> None:
        super().__init__(
            f"this edit is based on version {base}, but version {head} has been saved since; "
            "reload to see it, then apply your changes again (your text is kept in the form)"
        )
        self.base = base
        self.head = head


def image_blob_store(png: bytes) -> str:
    digest = hashlib.sha256(png).hexdigest()
    ImageBlob.objects.get_or_create(sha256=digest, defaults={"png": png})
    return digest


def image_blobs_store(pngs: dict[str, bytes]) -> None:
    """Store PNGs keyed by their sha256 in one statement, whatever their number.

    A blob stored before (or by another worker meanwhile) is skipped by the server, which checks
    the key before it stores anything: a duplicate costs only its bytes on the wire, less than a
    query to find the known ones first.
    """
    if pngs:
        ImageBlob.objects.bulk_create(
            [ImageBlob(sha256=digest, png=_row_value(png)) for digest, png in pngs.items()],
            ignore_conflicts=True,
        )


def _row_value(value: Any) -> Any:
    """A value that makes a bulk insert on PostgreSQL use VALUES rows instead of arrays
    (UNNEST): psycopg escapes array elements in Python, about 4 ms per candidate for the images
    and live steps of one rule-based episode, ten times the cost of the rows."""
    return Value(value)


def _hash_images(node: Any, pngs: dict[str, bytes]) -> Any:
    """A trajectory or step dict with inline base64 PNGs replaced by their sha256; the PNGs are
    collected in ``pngs`` for ``image_blobs_store`` (no database access here)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "png_base64":
                png = base64.b64decode(value)
                digest = hashlib.sha256(png).hexdigest()
                pngs[digest] = png
                out["png_sha256"] = digest
            else:
                out[key] = _hash_images(value, pngs)
        return out
    if isinstance(node, list):
        return [_hash_images(item, pngs) for item in node]
    return node


def _swap_images(node: Any, *, to_hash: bool) -> Any:
    """Walk a trajectory dict, replacing inline base64 PNGs by blob hashes or back."""
    if to_hash:
        pngs: dict[str, bytes] = {}
        hashed = _hash_images(node, pngs)
        image_blobs_store(pngs)
        return hashed
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "png_sha256":
                blob = ImageBlob.objects.get(sha256=value)
                out["png_base64"] = base64.b64encode(bytes(blob.png)).decode("ascii")
            else:
                out[key] = _swap_images(value, to_hash=to_hash)
        return out
    if isinstance(node, list):
        return [_swap_images(item, to_hash=to_hash) for item in node]
    return node


def trajectory_to_stored(trajectory: Trajectory) -> dict[str, Any]:
    return _swap_images(trajectory.to_dict(), to_hash=True)


def trajectory_from_stored(data: dict[str, Any]) -> Trajectory:
    return Trajectory.from_dict(_swap_images(data, to_hash=False))


def _add_version(
    *,
    curation: Curation,
    kind: str,
    trajectory: Trajectory,
    author: AbstractBaseUser | None,
    comment: str = "",
) -> TrajectoryVersion:
    number = curation.head_number + 1
    version = TrajectoryVersion.objects.create(
        curation=curation,
        number=number,
        kind=kind,
        data=trajectory_to_stored(trajectory),
        author=author if author is not None and author.is_authenticated else None,
        comment=comment,
    )
    curation.head_number = number
    return version


# What each transition is called in a message a user reads (the audit log keeps the action name).
_ACTION_WORDS = {
    "screening_opened": "open the draft for screening",
    "screened_keep": "keep this draft",
    "screened_discard": "discard this draft",
    "revision_resumed": "resume the revision",
    "submitted_for_audit": "submit for audit",
    "audit_round_approved": "close the audit round",
    "audit_round_changes_requested": "close the audit round",
    "standardized": "standardize",
    "vote_opened": "open the vote",
    "vote_closed": "close the vote",
}


def _state_words(state: str | None) -> str:
    """A curation state as users read it ("in revision", not "in_revision")."""
    if state in CurationState.values:
        return str(CurationState(state).label)
    return "gone" if state is None else str(state).replace("_", " ")


def _transition(
    *,
    curation: Curation,
    allowed_from: Iterable[str],
    to_state: str,
    actor: AbstractBaseUser | None,
    action: str,
    comment: str = "",
    extra: dict[str, Any] | None = None,
) -> None:
    """Move the curation to `to_state` if (and only if) it is still in an allowed state.

    Race-safe: a conditional UPDATE; when another request moved it first, nothing changes and
    WrongState is raised. Must be called inside the caller's transaction.
    """
    allowed = list(allowed_from)
    from_state = curation.state
    updates: dict[str, Any] = {"state": to_state, "updated_at": timezone.now(), **(extra or {})}
    changed = Curation.objects.filter(pk=curation.pk, state__in=allowed).update(**updates)
    if changed != 1:
        current = Curation.objects.filter(pk=curation.pk).values_list("state", flat=True).first()
        doing = _ACTION_WORDS.get(action, action.replace("_", " "))
        raise WrongState(
            f"cannot {doing}: the trajectory is {_state_words(current)}, "
            f"not {' or '.join(map(_state_words, allowed))}; reload the page to see where it is"
        )
    for field, value in updates.items():
        setattr(curation, field, value)
    audit_log_record(
        actor=actor,
        action=action,
        obj=curation,
        from_state=from_state,
        to_state=to_state,
        comment=comment,
        data={"head": curation.head_number, "round": curation.audit_round},
    )


def _locked(curation: Curation) -> Curation:
    """Lock the curation row (PostgreSQL) for a multi-step decision and refresh the caller's
    instance from it, so the caller sees the outcome."""
    Curation.objects.select_for_update().filter(pk=curation.pk).values_list("pk").get()
    curation.refresh_from_db()
    return curation


def _is_staff(user: AbstractBaseUser) -> bool:
    return bool(getattr(user, "is_staff", False))


# --- curation: actions --------------------------------------------------------------------------


@transaction.atomic
def curation_create(
    *,
    spectrum: Spectrum,
    task: Task,
    trajectory: Trajectory,
    ground_truth: str,
    source: str = "draft",
    teacher: dict[str, Any] | None = None,
    draft_job: Job | None = None,
    created_by: AbstractBaseUser | None = None,
) -> Curation:
    """Store a drafted or imported trajectory as version 1, ready for screening."""
    if ground_truth not in Label.values:
        raise WorkflowError(f"ground truth must be YES or NO, got {ground_truth!r}")
    curation = Curation.objects.create(
        task=task,
        spectrum=spectrum,
        ground_truth=ground_truth,
        source=source,
        teacher=teacher or trajectory.policy,
        draft_job=draft_job,
    )
    kind = VersionKind.DRAFT if source == "draft" else VersionKind.IMPORT
    _add_version(curation=curation, kind=kind, trajectory=trajectory, author=created_by)
    curation.save(update_fields=["head_number"])
    audit_log_record(
        actor=created_by,
        action="curation_created",
        obj=curation,
        to_state=curation.state,
        comment=source,
    )
    _transition(
        curation=curation,
        allowed_from=[CurationState.DRAFTED],
        to_state=CurationState.SCREENING,
        actor=created_by,
        action="screening_opened",
    )
    return curation


@transaction.atomic
def curation_screen(
    *, curation: Curation, user: AbstractBaseUser, keep: bool, reason: str = ""
) -> Curation:
    """Any expert keeps a draft for revision or discards it (with a reason)."""
    if not keep and not reason.strip():
        raise WorkflowError("discarding a draft needs a reason")
    _transition(
        curation=curation,
        allowed_from=[CurationState.SCREENING],
        to_state=CurationState.IN_REVISION if keep else CurationState.DISCARDED,
        actor=user,
        action="screened_keep" if keep else "screened_discard",
        comment=reason,
    )
    return curation


def _claim_role(*, curation: Curation, role: str, user: AbstractBaseUser) -> bool:
    """Take an empty role slot; True if this user now holds it."""
    updated = Curation.objects.filter(pk=curation.pk, **{f"{role}__isnull": True}).update(
        **{role: user}
    )
    curation.refresh_from_db()
    return updated == 1 or getattr(curation, f"{role}_id") == user.pk


@transaction.atomic
def curation_claim_revision(*, curation: Curation, user: AbstractBaseUser) -> Curation:
    """The first expert to claim a kept draft becomes its reviser (one reviser per trajectory)."""
    if curation.state not in (CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED):
        raise WrongState(
            f"cannot claim the revision: the trajectory is {_state_words(curation.state)}"
        )
    if user.pk in (curation.auditor_1_id, curation.auditor_2_id):
        raise NotAllowed("an auditor of this trajectory cannot also revise it")
    if not _claim_role(curation=curation, role="reviser", user=user):
        raise NotAllowed("another expert is already revising this trajectory")
    audit_log_record(actor=user, action="revision_claimed", obj=curation, to_state=curation.state)
    return curation


@transaction.atomic
def curation_save_revision(
    *,
    curation: Curation,
    user: AbstractBaseUser,
    base_number: int,
    trajectory: Trajectory,
    comment: str = "",
) -> TrajectoryVersion:
    """Save the reviser's edit as a new immutable version, refusing a stale base (409)."""
    curation = _locked(curation)
    if curation.reviser_id != user.pk:
        raise NotAllowed("only the reviser of this trajectory can save revisions")
    if curation.state not in (CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED):
        raise WrongState(
            f"cannot save a revision: the trajectory is {_state_words(curation.state)}"
        )
    if curation.head_number != base_number:
        raise VersionConflict(base=base_number, head=curation.head_number)
    updated = Curation.objects.filter(pk=curation.pk, head_number=base_number).update(
        head_number=base_number + 1, updated_at=timezone.now()
    )
    if updated != 1:  # SQLite has no row locks: the conditional update is the guard there
        raise VersionConflict(base=base_number, head=base_number + 1)
    version = TrajectoryVersion.objects.create(
        curation=curation,
        number=base_number + 1,
        kind=VersionKind.REVISION,
        data=trajectory_to_stored(trajectory),
        author=user,
        comment=comment,
    )
    curation.head_number = base_number + 1
    RevisionDraft.objects.filter(curation=curation).delete()
    if curation.state == CurationState.CHANGES_REQUESTED:
        _transition(
            curation=curation,
            allowed_from=[CurationState.CHANGES_REQUESTED],
            to_state=CurationState.IN_REVISION,
            actor=user,
            action="revision_resumed",
        )
    audit_log_record(
        actor=user,
        action="revision_saved",
        obj=curation,
        from_state=curation.state,
        to_state=curation.state,
        comment=comment,
        data={"version": version.number},
    )
    return version


@transaction.atomic
def curation_autosave(
    *, curation: Curation, user: AbstractBaseUser, base_number: int, data: dict[str, Any]
) -> RevisionDraft:
    """Keep the reviser's unsaved editor state (not a version; replaced by the next autosave)."""
    if curation.reviser_id != user.pk:
        raise NotAllowed("only the reviser of this trajectory can autosave it")
    draft, _ = RevisionDraft.objects.update_or_create(
        curation=curation, defaults={"author": user, "base_number": base_number, "data": data}
    )
    return draft


@transaction.atomic
def curation_submit_for_audit(
    *, curation: Curation, user: AbstractBaseUser, base_number: int
) -> Curation:
    """The reviser sends the latest version to the two auditors; a new audit round starts."""
    curation = _locked(curation)
    if curation.reviser_id != user.pk:
        raise NotAllowed("only the reviser can submit this trajectory for audit")
    if curation.head_number != base_number:
        raise VersionConflict(base=base_number, head=curation.head_number)
    _transition(
        curation=curation,
        allowed_from=[CurationState.IN_REVISION],
        to_state=CurationState.IN_AUDIT,
        actor=user,
        action="submitted_for_audit",
        extra={"audit_round": curation.audit_round + 1},
    )
    return curation


def _check_may_audit(*, curation: Curation, user: AbstractBaseUser) -> None:
    """Separation of duties for an auditor slot, whatever roles the user held before.

    Nobody audits their own revision: not the reviser, nor anyone who wrote a revision of this
    trajectory. An auditor freed while a round is open does not come back in that round (their
    verdict stays on record without counting); they may audit again from the next round.
    """
    from annotation.selectors import revision_authors

    if curation.reviser_id == user.pk or user.pk in revision_authors(curation):
        raise NotAllowed("nobody audits their own revision")
    if (
        curation.state == CurationState.IN_AUDIT
        and user.pk not in (curation.auditor_1_id, curation.auditor_2_id)
        and curation.audits.filter(round=curation.audit_round, auditor=user).exists()
    ):
        raise NotAllowed(
            "this expert has already audited this round; they can audit again in the next one"
        )


@transaction.atomic
def curation_claim_audit(*, curation: Curation, user: AbstractBaseUser) -> Curation:
    """Take one of the two auditor slots. Nobody audits their own revision."""
    curation = _locked(curation)
    if curation.state != CurationState.IN_AUDIT:
        raise WrongState(f"cannot claim an audit: the trajectory is {_state_words(curation.state)}")
    _check_may_audit(curation=curation, user=user)
    if user.pk in (curation.auditor_1_id, curation.auditor_2_id):
        return curation
    if not (
        _claim_role(curation=curation, role="auditor_1", user=user)
        or _claim_role(curation=curation, role="auditor_2", user=user)
    ):
        raise NotAllowed("this trajectory already has its two auditors")
    audit_log_record(actor=user, action="audit_claimed", obj=curation, to_state=curation.state)
    return curation


@transaction.atomic
def audit_submit(
    *,
    curation: Curation,
    user: AbstractBaseUser,
    version_number: int,
    verdict: str,
    comment: str = "",
    step_comments: dict[str, str] | None = None,
) -> Audit:
    """Record one auditor's independent verdict on the current version.

    When both current auditors' verdicts on the head are in (selectors.deciding_audits): both
    approve -> approved; otherwise the trajectory goes back to the reviser (changes requested)
    and both audits start again on the next version.
    """
    from annotation.selectors import deciding_audits

    curation = _locked(curation)
    if curation.state != CurationState.IN_AUDIT:
        raise WrongState(f"cannot audit: the trajectory is {_state_words(curation.state)}")
    if user.pk not in (curation.auditor_1_id, curation.auditor_2_id):
        raise NotAllowed("only the two assigned auditors can audit this trajectory")
    _check_may_audit(curation=curation, user=user)
    if version_number != curation.head_number:
        raise VersionConflict(base=version_number, head=curation.head_number)
    if verdict not in AuditVerdict.values:
        raise WorkflowError(f"verdict must be approve or request_changes, got {verdict!r}")
    if verdict == AuditVerdict.REQUEST_CHANGES and not (comment.strip() or step_comments):
        raise WorkflowError("requesting changes needs a comment saying what to change")
    try:
        with transaction.atomic():
            audit = Audit.objects.create(
                curation=curation,
                round=curation.audit_round,
                version_number=version_number,
                auditor=user,
                verdict=verdict,
                comment=comment,
                step_comments={str(k): v for k, v in (step_comments or {}).items() if v.strip()},
            )
    except IntegrityError:
        raise WorkflowError("you have already audited this round") from None
    audit_log_record(
        actor=user,
        action=f"audit_{verdict}",
        obj=curation,
        from_state=curation.state,
        to_state=curation.state,
        comment=comment,
        data={"round": curation.audit_round, "version": version_number},
    )
    deciding = deciding_audits(curation)
    if len(deciding) == 2:
        approved = all(a.verdict == AuditVerdict.APPROVE for a in deciding)
        _transition(
            curation=curation,
            allowed_from=[CurationState.IN_AUDIT],
            to_state=CurationState.APPROVED if approved else CurationState.CHANGES_REQUESTED,
            actor=user,
            action="audit_round_approved" if approved else "audit_round_changes_requested",
        )
        if approved:
            job_create(kind="standardize", params={"curation_ids": [curation.pk]}, created_by=user)
    return audit


@transaction.atomic
def curation_standardize(
    *,
    curation: Curation,
    trajectory: Trajectory,
    standardizer: dict[str, Any],
    actor: AbstractBaseUser | None = None,
) -> TrajectoryVersion:
    """Store the standardized (iMCoT) version after checking its tool actions are unchanged,
    then open the final vote."""
    from agent.editing import check_same_tool_actions

    curation = _locked(curation)
    if curation.state != CurationState.APPROVED:
        raise WrongState(f"cannot standardize: the trajectory is {_state_words(curation.state)}")
    approved = trajectory_from_stored(curation.versions.get(number=curation.head_number).data)
    problems = check_same_tool_actions(approved, trajectory)
    if problems:
        raise WorkflowError("the standardized text changed tool actions: " + "; ".join(problems))
    version = _add_version(
        curation=curation,
        kind=VersionKind.STANDARDIZED,
        trajectory=trajectory,
        author=actor,
        comment=json.dumps(standardizer, sort_keys=True),
    )
    Curation.objects.filter(pk=curation.pk).update(head_number=curation.head_number)
    _transition(
        curation=curation,
        allowed_from=[CurationState.APPROVED],
        to_state=CurationState.STANDARDIZED,
        actor=actor,
        action="standardized",
        comment=str(standardizer.get("name", "")),
    )
    _transition(
        curation=curation,
        allowed_from=[CurationState.STANDARDIZED],
        to_state=CurationState.IN_VOTE,
        actor=actor,
        action="vote_opened",
    )
    return version


def acceptance_rule() -> str:
    rule = getattr(settings, "CURATION_ACCEPTANCE_RULE", "unanimous")
    if rule not in ("unanimous", "majority"):
        raise WorkflowError(f"CURATION_ACCEPTANCE_RULE must be unanimous or majority, got {rule!r}")
    return rule


@transaction.atomic
def vote_cast(*, curation: Curation, user: AbstractBaseUser, value: str, comment: str = "") -> Vote:
    """One vote per voter (the reviser and the two auditors). The last vote decides."""
    curation = _locked(curation)
    if curation.state != CurationState.IN_VOTE:
        raise WrongState(f"cannot vote: the trajectory is {_state_words(curation.state)}")
    if user.pk not in (curation.reviser_id, curation.auditor_1_id, curation.auditor_2_id):
        raise NotAllowed("only the reviser and the two auditors vote on this trajectory")
    if value not in VoteValue.values:
        raise WorkflowError(f"vote must be accept or reject, got {value!r}")
    try:
        with transaction.atomic():
            vote = Vote.objects.create(curation=curation, voter=user, value=value, comment=comment)
    except IntegrityError:
        raise WorkflowError("you have already voted on this trajectory") from None
    audit_log_record(actor=user, action=f"vote_{value}", obj=curation, comment=comment)
    values = list(curation.votes.values_list("value", flat=True))
    if len(values) == 3:
        accepts = values.count(VoteValue.ACCEPT)
        accepted = accepts == 3 if acceptance_rule() == "unanimous" else accepts >= 2
        _transition(
            curation=curation,
            allowed_from=[CurationState.IN_VOTE],
            to_state=CurationState.ACCEPTED if accepted else CurationState.REJECTED,
            actor=user,
            action="vote_closed",
            comment=f"{accepts} of 3 accept ({acceptance_rule()})",
        )
    return vote


ROLES = ("reviser", "auditor_1", "auditor_2")


@transaction.atomic
def curation_reassign(
    *, curation: Curation, role: str, user: AbstractBaseUser | None, actor: AbstractBaseUser
) -> Curation:
    """Staff hand a role to another expert (or free it), keeping the separation of duties."""
    if not _is_staff(actor):
        raise NotAllowed("only staff can reassign roles")
    if role not in ROLES:
        raise WorkflowError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    curation = _locked(curation)
    if user is not None:
        others = {r: getattr(curation, f"{r}_id") for r in ROLES if r != role}
        if user.pk in others.values():
            raise NotAllowed("one expert cannot hold two roles on the same trajectory")
        if role != "reviser":
            _check_may_audit(curation=curation, user=user)
    previous = getattr(curation, f"{role}_id")
    Curation.objects.filter(pk=curation.pk).update(**{role: user})
    setattr(curation, role, user)
    audit_log_record(
        actor=actor,
        action="role_reassigned",
        obj=curation,
        from_state=curation.state,
        to_state=curation.state,
        comment=f"{role}: {previous} -> {user.pk if user else None}",
    )
    return curation


# --- curation: imports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CurationImportResult:
    created: list[Curation]
    skipped: list[str]  # one sentence per trajectory that could not be imported


def _spectrum_for(trajectory: Trajectory) -> Spectrum | None:
    from agent.formats import specvi_code

    meta = trajectory.meta
    if meta.get("sample_index") is not None:
        rows = Spectrum.objects.filter(meta__index=meta["sample_index"])
        by_task = rows.filter(meta__task__iexact=specvi_code(trajectory.task))
        return (by_task if by_task.exists() else rows).order_by("id").first()
    rows = Spectrum.objects.filter(object_id=trajectory.spectrum.object_id)
    if trajectory.spectrum.survey not in ("", "unknown"):
        rows = rows.filter(survey=trajectory.spectrum.survey)
    return rows.order_by("id").first()


def curation_import(
    *,
    trajectories: Iterable[Trajectory],
    created_by: AbstractBaseUser | None,
    source: str,
) -> CurationImportResult:
    """Import existing trajectories (ShareGPT cold-start rows or project JSON) for screening.

    Each needs its spectrum in the database (so revisions can re-render the tool's views): a
    ShareGPT row is matched to a SpecVI-Bench row by sample index, project JSON by object id.
    """
    created: list[Curation] = []
    skipped: list[str] = []
    tasks = {task.code: task for task in Task.objects.all()}
    for position, trajectory in enumerate(trajectories):
        where = f"trajectory {position + 1} ({trajectory.spectrum.object_id})"
        task = tasks.get(trajectory.task)
        if task is None:
            skipped.append(f"{where}: unknown task {trajectory.task!r}")
            continue
        spectrum = _spectrum_for(trajectory)
        if spectrum is None:
            skipped.append(
                f"{where}: its spectrum is not loaded; load the SpecVI-Bench parquet or the "
                "survey file first"
            )
            continue
        truth = trajectory.meta.get("ground_truth") or spectrum.label
        if truth not in Label.values:
            skipped.append(f"{where}: no YES/NO ground truth in the row or on the spectrum")
            continue
        created.append(
            curation_create(
                spectrum=spectrum,
                task=task,
                trajectory=trajectory,
                ground_truth=truth,
                source=source,
                created_by=created_by,
            )
        )
    return CurationImportResult(created=created, skipped=skipped)


# --- datasets ------------------------------------------------------------------------------------

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _zip_bytes(files: dict[str, bytes]) -> bytes:
    """A zip whose bytes depend only on the file names and contents (sorted, fixed dates)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def dataset_files(curations: Iterable[Curation]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The SFT dataset's files (TRL jsonl, ShareGPT json, PNGs) and its manifest body."""
    from agent.formats import to_sharegpt_row, to_trl_example

    files: dict[str, bytes] = {}
    trl_lines: list[str] = []
    sharegpt_rows: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="specvet-export-") as tmp:
        image_dir = Path(tmp) / "sharegpt_images"
        for curation in curations:
            version = curation.versions.get(number=curation.head_number)
            trajectory = trajectory_from_stored(version.data)
            example = to_trl_example(trajectory, images_as="png")
            paths = []
            for png in example["images"]:
                name = f"images/{hashlib.sha256(png).hexdigest()}.png"
                files[name] = png
                paths.append(name)
            trl_lines.append(
                json.dumps(
                    {
                        "messages": example["messages"],
                        "images": paths,
                        "task": curation.task.code,
                        "ground_truth": curation.ground_truth,
                        "curation_id": curation.pk,
                        "version": version.number,
                        "trajectory_id": trajectory.id,
                    },
                    ensure_ascii=False,
                    sort_keys=True,
                )
            )
            sharegpt_rows.append(
                to_sharegpt_row(
                    trajectory,
                    image_dir=image_dir,
                    image_prefix="sharegpt_images",
                    sample_index=curation.pk,
                    ground_truth=curation.ground_truth,
                )
            )
            per_task = counts.setdefault(curation.task.code, {"YES": 0, "NO": 0})
            per_task[curation.ground_truth] += 1
        for image in sorted(image_dir.glob("*.png")) if image_dir.exists() else []:
            files[f"sharegpt_images/{image.name}"] = image.read_bytes()
    files["trl.jsonl"] = ("\n".join(trl_lines) + "\n").encode() if trl_lines else b""
    files["sharegpt.json"] = (
        json.dumps(sharegpt_rows, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    ).encode()
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    body = {
        "name": "specvet cold-start SFT dataset",
        "n_trajectories": len(trl_lines),
        "counts": counts,
        "formats": {
            "trl": "trl.jsonl (messages + images paths; tool results are user <tool_response> turns)",
            "sharegpt": "sharegpt.json (LLaMA-Factory ShareGPT, images in sharegpt_images/)",
        },
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
        "content_hash": digest.hexdigest(),
    }
    return files, body


@transaction.atomic
def dataset_export_create(*, actor: AbstractBaseUser | None, task: str = "") -> DatasetExport:
    """Export the accepted trajectories as the next dataset version (or the latest, if equal)."""
    from annotation.selectors import accepted_curations

    curations = list(accepted_curations(task=task))
    if not curations:
        raise WorkflowError("there is no accepted trajectory to export yet")
    files, body = dataset_files(curations)
    latest = DatasetExport.objects.select_for_update().order_by("-version").first()
    if latest is not None and latest.content_hash == body["content_hash"]:
        return latest
    version = (latest.version if latest else 0) + 1
    manifest = {**body, "version": version, "task_filter": task or None}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    export = DatasetExport(
        version=version,
        content_hash=body["content_hash"],
        manifest=manifest,
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    export.archive.save(f"specvet-sft-v{version}.zip", ContentFile(_zip_bytes(files)), save=False)
    export.save()
    audit_log_record(
        actor=actor,
        action="dataset_exported",
        obj=export,
        comment=f"version {version}: {body['n_trajectories']} trajectories",
        data={"content_hash": body["content_hash"]},
    )
    return export


# --- model endpoints ------------------------------------------------------------------------------

ENDPOINT_FIELDS = ("base_url", "model", "credential_env", "credential_file", "timeout", "enabled")
# The default endpoint follows the OPENAI_* settings; staff may only switch it off and on.
SETTINGS_MANAGED_FIELDS = ("base_url", "model", "credential_env", "credential_file")


def _require_endpoint_staff(actor: AbstractBaseUser | None) -> None:
    from annotation.roles import Role, has_role

    if not has_role(actor, Role.STAFF):
        raise NotAllowed("only staff can register or change model endpoints")


def _endpoint_values(values: dict[str, Any]) -> dict[str, Any]:
    """Checked endpoint fields; only the ones given."""
    try:
        checked: dict[str, Any] = {}
        if "base_url" in values:
            checked["base_url"] = endpoints.check_base_url(values["base_url"])
        if "model" in values:
            checked["model"] = endpoints.check_model(values["model"])
        if "credential_env" in values or "credential_file" in values:
            env, file = endpoints.check_credential(
                env=values.get("credential_env", ""), file=values.get("credential_file", "")
            )
            checked.update(credential_env=env, credential_file=file)
        if "timeout" in values:
            checked["timeout"] = endpoints.check_timeout(values["timeout"])
    except (endpoints.EndpointError, TypeError, ValueError) as error:
        raise WorkflowError(str(error)) from None
    if "enabled" in values:
        checked["enabled"] = bool(values["enabled"])
    return checked


@transaction.atomic
def model_endpoint_create(
    *,
    actor: AbstractBaseUser,
    name: str,
    base_url: str,
    model: str,
    credential_env: str = "",
    credential_file: str = "",
    timeout: float = 60.0,
    enabled: bool = True,
) -> ModelEndpoint:
    """Staff register an endpoint. Its credential is a reference, never the key itself."""
    _require_endpoint_staff(actor)
    try:
        name = endpoints.check_name(name)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    if name == endpoints.DEFAULT_ENDPOINT:
        raise WorkflowError(
            f"the endpoint {name!r} is registered from the OPENAI_* settings; choose another name"
        )
    values = _endpoint_values(
        {
            "base_url": base_url,
            "model": model,
            "credential_env": credential_env,
            "credential_file": credential_file,
            "timeout": timeout,
            "enabled": enabled,
        }
    )
    if ModelEndpoint.objects.filter(name=name).exists():
        raise WorkflowError(f"a model endpoint named {name!r} exists already")
    endpoint = ModelEndpoint.objects.create(name=name, created_by=actor, **values)
    audit_log_record(
        actor=actor,
        action="endpoint_created",
        obj=endpoint,
        to_state="enabled" if endpoint.enabled else "disabled",
        comment=f"{endpoint.name}: {endpoint.model} at {endpoint.base_url}",
        data={field: getattr(endpoint, field) for field in ENDPOINT_FIELDS},
    )
    return endpoint


@transaction.atomic
def model_endpoint_update(
    *, endpoint: ModelEndpoint, actor: AbstractBaseUser, **values: Any
) -> ModelEndpoint:
    """Change an endpoint's fields (any of ENDPOINT_FIELDS; its name never changes).

    Runs and judges resolve the endpoint when they call it, so a change applies to their next
    call, and a disabled endpoint is called by nobody.
    """
    _require_endpoint_staff(actor)
    unknown = sorted(set(values) - set(ENDPOINT_FIELDS))
    if unknown:
        raise WorkflowError(f"endpoint fields {unknown} cannot be changed")
    locked = ModelEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    if "credential_env" in values or "credential_file" in values:
        values = {
            "credential_env": values.get("credential_env", ""),
            "credential_file": values.get("credential_file", ""),
            **values,
        }
    checked = _endpoint_values(values)
    changes = {
        field: [getattr(locked, field), value]
        for field, value in checked.items()
        if getattr(locked, field) != value
    }
    managed = sorted(set(changes) & set(SETTINGS_MANAGED_FIELDS))
    if locked.name == endpoints.DEFAULT_ENDPOINT and managed:
        raise WorkflowError(
            f"the {locked.name!r} endpoint follows the OPENAI_* settings ({', '.join(managed)}"
            " come from them): change the settings and run migrate, or register another endpoint"
        )
    if changes:
        _endpoint_apply(locked, changes=changes, actor=actor)
    endpoint.refresh_from_db()
    return endpoint


def _endpoint_apply(
    endpoint: ModelEndpoint, *, changes: dict[str, list[Any]], actor: AbstractBaseUser | None
) -> None:
    before = "enabled" if endpoint.enabled else "disabled"
    for field, (_, new) in changes.items():
        setattr(endpoint, field, new)
    endpoint.save()
    after = "enabled" if endpoint.enabled else "disabled"
    action = "endpoint_changed"
    if set(changes) == {"enabled"}:
        action = f"endpoint_{after}"
    audit_log_record(
        actor=actor,
        action=action,
        obj=endpoint,
        from_state=before,
        to_state=after,
        comment=", ".join(f"{field}: {old!r} -> {new!r}" for field, (old, new) in changes.items()),
        data={"changes": changes},
    )


@transaction.atomic
def model_endpoint_sync_default() -> ModelEndpoint | None:
    """Register or update the endpoint "default" from OPENAI_BASE_URL and OPENAI_MODEL; its key
    is the OPENAI_API_KEY variable (or OPENAI_API_KEY_FILE). Idempotent; None when unset.

    Run after every migrate (annotation/apps.py), so a deployment that changes the settings
    updates the endpoint, with an audit entry, without writing anything on a page view.
    Whether it is enabled stays staff's choice once it exists.
    """
    if not (settings.OPENAI_BASE_URL and settings.OPENAI_MODEL):
        return None
    wanted = _endpoint_values(
        {
            "base_url": settings.OPENAI_BASE_URL,
            "model": settings.OPENAI_MODEL,
            "credential_env": "OPENAI_API_KEY",
            "credential_file": "",
        }
    )
    endpoint = (
        ModelEndpoint.objects.select_for_update().filter(name=endpoints.DEFAULT_ENDPOINT).first()
    )
    if endpoint is None:
        endpoint = ModelEndpoint.objects.create(name=endpoints.DEFAULT_ENDPOINT, **wanted)
        audit_log_record(
            actor=None,
            action="endpoint_created",
            obj=endpoint,
            to_state="enabled",
            comment=f"from the OPENAI_* settings: {endpoint.model} at {endpoint.base_url}",
            data={field: getattr(endpoint, field) for field in ENDPOINT_FIELDS},
        )
        return endpoint
    changes = {
        field: [getattr(endpoint, field), value]
        for field, value in wanted.items()
        if getattr(endpoint, field) != value
    }
    if changes:
        _endpoint_apply(endpoint, changes=changes, actor=None)
    return endpoint


# --- inspection runs ------------------------------------------------------------------------------

POLICY_KINDS = ("rule-based", "transformers", "openai")


# What a user's OpenAI-compatible spec may hold: which endpoint, and how patiently to call it.
OPENAI_SPEC_KEYS = ("kind", "endpoint", "model", *endpoints.CALL_OPTIONS)


def endpoint_spec_check(
    spec: dict[str, Any], *, user: AbstractBaseUser | None
) -> tuple[dict[str, Any], ModelEndpoint]:
    """The stored form of a user's ``{"kind": "openai", "endpoint": NAME | ID, ...}`` spec and
    its endpoint. No URL or key is accepted: the endpoint's own are used when the call is made.
    """
    from annotation.roles import Role, has_role

    for refused in ("base_url", "api_key"):
        if refused in spec:
            raise WorkflowError(
                f"{refused} is not accepted; choose a registered endpoint: "
                f"{endpoints.choices_text()}"
            )
    unknown = sorted(set(spec) - set(OPENAI_SPEC_KEYS))
    if unknown:
        raise WorkflowError(
            f"policy spec keys {unknown} are not accepted for an endpoint; "
            f"allowed: {', '.join(OPENAI_SPEC_KEYS)}"
        )
    if user is not None and not has_role(user, Role.ML_ENGINEER, Role.EXPERT, Role.STAFF):
        raise NotAllowed("calling a model endpoint needs the ml_engineer, expert or staff role")
    try:
        endpoint = endpoints.find_usable(spec.get("endpoint") or endpoints.DEFAULT_ENDPOINT)
        options = endpoints.call_options(spec)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    model = spec.get("model")
    if model not in (None, "", endpoint.model):
        raise WorkflowError(
            f"model {model!r} is not served by endpoint {endpoint.name!r}, which serves "
            f"{endpoint.model!r}; choose the endpoint registered for that model"
        )
    stored = {"kind": "openai", "endpoint": endpoint.name, "model": endpoint.model, **options}
    return stored, endpoint


def _checked_model_path(raw: Any) -> str:
    """A local checkpoint folder the server may load: registered, or inside a configured root.

    The filesystem twin of registered endpoints: a path typed by a user never makes the server
    load (and so read, and run the code of) an arbitrary folder.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise WorkflowError("a local checkpoint policy needs model_path")
    # Lexical, not resolve(): the folder is loaded by a worker, maybe on another machine.
    folder = Path(os.path.normpath(raw.strip()))
    if PolicyCheckpoint.objects.filter(path=str(folder)).exists():
        return str(folder)
    roots = [Path(os.path.normpath(root)) for root in settings.POLICY_CHECKPOINT_ROOTS]
    if folder.is_absolute() and any(folder.is_relative_to(root) for root in roots):
        return str(folder)
    raise WorkflowError(
        f"model_path {raw.strip()!r} is neither a registered checkpoint nor inside a checkpoint "
        f"folder ({', '.join(str(root) for root in roots)}); staff set POLICY_CHECKPOINT_ROOTS"
    )


def _check_policy_spec(
    spec: dict[str, Any], *, user: AbstractBaseUser | None
) -> tuple[dict[str, Any], ModelEndpoint | None]:
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise WorkflowError(f"policy kind must be one of {', '.join(POLICY_KINDS)}; got {kind!r}")
    if kind == "openai":
        return endpoint_spec_check(spec, user=user)
    if kind == "transformers":
        spec = {**spec, "model_path": _checked_model_path(spec.get("model_path"))}
    if "base_url" in spec or "api_key" in spec:
        raise WorkflowError(f"a {kind} policy takes no base_url or api_key")
    return dict(spec), None


@transaction.atomic
def inspection_run_create(
    *,
    task: Task,
    spectrum_ids: list[int],
    policy_spec: dict[str, Any],
    created_by: AbstractBaseUser | None,
    name: str = "",
    sampling: dict[str, Any] | None = None,
    rollouts: int = 1,
    max_tool_calls: int = 8,
    confidence_threshold: float = 0.0,
    enqueue: bool = True,
) -> InspectionRun:
    """Create a run with one candidate per spectrum; each candidate is enqueued on commit
    (``enqueue=False``: the caller sends them, as ``bench_candidates`` does to its workers)."""
    from agent.policies.base import code_version
    from annotation import tasks

    if not spectrum_ids:
        raise WorkflowError("an inspection run needs at least one candidate spectrum")
    if not 1 <= rollouts <= 16:
        raise WorkflowError(f"rollouts per candidate must be 1-16, got {rollouts}")
    if not 0 <= max_tool_calls <= 16:
        raise WorkflowError(f"max tool calls must be 0-16, got {max_tool_calls}")
    if not 0.0 <= confidence_threshold <= 1.0:
        raise WorkflowError(f"confidence threshold must be in [0, 1], got {confidence_threshold}")
    unique_ids = sorted(set(spectrum_ids))
    found = set(Spectrum.objects.filter(pk__in=unique_ids).values_list("pk", flat=True))
    missing = [pk for pk in unique_ids if pk not in found]
    if missing:
        raise WorkflowError(f"unknown spectrum ids: {missing[:10]}")
    checked_spec, endpoint = _check_policy_spec(policy_spec, user=created_by)
    run = InspectionRun.objects.create(
        name=name[:120],
        task=task,
        policy_spec=checked_spec,
        endpoint=endpoint,
        sampling=sampling or {},
        rollouts=rollouts,
        max_tool_calls=max_tool_calls,
        confidence_threshold=confidence_threshold,
        code_version=code_version()[:80],
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    Candidate.objects.bulk_create([Candidate(run=run, spectrum_id=pk) for pk in unique_ids])
    audit_log_record(
        actor=created_by,
        action="inspection_run_created",
        obj=run,
        comment=f"{len(unique_ids)} candidates, {run.policy_spec.get('kind')}"
        + (f" on endpoint {endpoint.name}" if endpoint else ""),
    )
    if enqueue:
        candidate_ids = list(run.candidates.values_list("pk", flat=True))
        transaction.on_commit(lambda: [tasks.run_candidate.delay(pk) for pk in candidate_ids])
    return run


def _commit_without_waiting() -> None:
    """Let this transaction's commit return before PostgreSQL has flushed it to disk.

    For a write whose loss in a database crash is harmless because a later, durable commit on
    the same connection flushes it anyway (WAL is flushed in order), or a redelivery redoes it.
    It saves a disk flush (about 4 ms here) per call.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


@transaction.atomic
def candidate_claim(*, candidate_id: int) -> bool:
    """pending -> running (or running again after a worker died: acks_late redelivery).

    Call it holding the candidate's lease (annotation/leases.py). A candidate whose
    JOB_MAX_ATTEMPTS are used up fails instead of running again. A claim lost in a database
    crash leaves the candidate as it was before, no worse than a crash a moment earlier.
    """
    _commit_without_waiting()
    now = timezone.now()
    runnable = Candidate.objects.filter(
        pk=candidate_id,
        state__in=[CandidateState.PENDING, CandidateState.RUNNING],
        run__cancelled=False,
    )
    claimed = runnable.filter(attempts__lt=settings.JOB_MAX_ATTEMPTS).update(
        state=CandidateState.RUNNING,
        attempts=F("attempts") + 1,
        started_at=now,
        error="",
    )
    if claimed == 1:
        return True
    runnable.update(
        state=CandidateState.FAILED,
        error=_GAVE_UP.format(attempts=settings.JOB_MAX_ATTEMPTS),
        finished_at=now,
    )
    return False


def candidate_wait(*, candidate_id: int, error: str) -> bool:
    """running -> pending with the reason it waits (a model endpoint outage), for a later retry.

    Returns False when the candidate is no longer running (cancelled meanwhile).
    """
    waiting = Candidate.objects.filter(pk=candidate_id, state=CandidateState.RUNNING).update(
        state=CandidateState.PENDING, error=error[:10000]
    )
    return waiting == 1


# The rule-based inspector's steps (milliseconds apart, no model to wait for) are written
# together with their rollout, unless one comes this long after the last write.
LIVE_STEP_FLUSH_SECONDS = 0.1


@transaction.atomic
def live_steps_reset(*, candidate: Candidate, rollout_index: int) -> None:
    """Forget the live steps of an unfinished rollout before it is run again (no duplicates)."""
    if not Rollout.objects.filter(candidate=candidate, index=rollout_index).exists():
        LiveStep.objects.filter(candidate=candidate, rollout_index=rollout_index).delete()


def _live_steps_insert(
    *, candidate: Candidate, rollout_index: int, steps: list[Any], pngs: dict[str, bytes]
) -> None:
    """One INSERT for the steps (their PNGs are only collected in ``pngs``, stored by the
    caller); a step written before under the same index is replaced, as a redelivery would."""
    from agent.trajectory import step_to_dict

    if not steps:
        return
    LiveStep.objects.bulk_create(
        [
            LiveStep(
                candidate=candidate,
                rollout_index=_row_value(rollout_index),
                step_index=step.index,
                data=_hash_images(step_to_dict(step), pngs),
            )
            for step in steps
        ],
        update_conflicts=True,
        unique_fields=["candidate", "rollout_index", "step_index"],
        update_fields=["data"],
    )


@transaction.atomic
def live_steps_write(*, candidate: Candidate, rollout_index: int, steps: list[Any]) -> None:
    """Write live steps and their images: three statements at most, however many steps."""
    pngs: dict[str, bytes] = {}
    _live_steps_insert(candidate=candidate, rollout_index=rollout_index, steps=steps, pngs=pngs)
    image_blobs_store(pngs)


class LiveStepBuffer:
    """The live steps of one rollout on their way to the database.

    A model's steps (``batch=False``) are written as each one arrives, so the live view shows
    every turn while the model works on the next, however long that takes. With ``batch=True``
    (a policy that never waits, such as the rule-based inspector) they are held and written by
    ``rollout_record`` in its transaction, or earlier when one comes LIVE_STEP_FLUSH_SECONDS
    after the last write. Pass ``add`` as the rollout's ``on_step``.
    """

    def __init__(
        self,
        *,
        candidate: Candidate,
        rollout_index: int,
        batch: bool = False,
        flush_after: float | None = None,
    ) -> None:
        self.candidate = candidate
        self.rollout_index = rollout_index
        self.batch = batch
        self.flush_after = LIVE_STEP_FLUSH_SECONDS if flush_after is None else flush_after
        self.pending: list[Any] = []
        self._last_write = time.monotonic()

    def add(self, step: Any, *_: Any) -> None:
        self.pending.append(step)
        if not self.batch or time.monotonic() - self._last_write >= self.flush_after:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            live_steps_write(
                candidate=self.candidate, rollout_index=self.rollout_index, steps=self.pending
            )
            self.pending = []
        self._last_write = time.monotonic()


@transaction.atomic
def rollout_record(
    *,
    candidate: Candidate,
    index: int,
    trajectory: Trajectory,
    confidence: float | None,
    seconds: float,
    live: LiveStepBuffer | None = None,
    finish_with: list[Rollout] | None = None,
) -> Rollout:
    """Store a finished rollout with its unwritten live steps, in one transaction.

    With ``finish_with`` (the candidate's earlier rollouts) this is the candidate's last rollout:
    its verdict and catalog entry are written in the same transaction. For a one-rollout
    candidate that is seven statements: two for the images, one each for the live steps, the
    rollout, the candidate and the catalog entry (see ``candidate_finish``).
    """
    pngs: dict[str, bytes] = {}
    if live is not None:
        _live_steps_insert(candidate=candidate, rollout_index=index, steps=live.pending, pngs=pngs)
        live.pending = []
    rollout = Rollout(
        candidate=candidate,
        index=index,
        data=_hash_images(trajectory.to_dict(), pngs),
        prediction=(trajectory.answer.prediction or "") if trajectory.answer else "",
        confidence=confidence,
        n_tool_calls=trajectory.n_tool_calls,
        format_ok=bool(trajectory.format_ok),
        stop_reason=trajectory.stop_reason or "",
        seconds=seconds,
    )
    image_blobs_store(pngs)
    # The lease keeps a second worker out; a rollout already stored under this index is kept.
    Rollout.objects.bulk_create([rollout], ignore_conflicts=True)
    if finish_with is not None:
        _candidate_finish(candidate=candidate, rollouts=[*finish_with, rollout])
    return rollout


def candidate_verdict(rollouts: list[Rollout]) -> tuple[str, float | None, float]:
    """(verdict, confidence, vote share) of a candidate from its rollouts.

    The verdict is the majority answer. The confidence is the policy's own probability of that
    answer averaged over rollouts when the policy reports one, else the vote share.
    """
    from agent.calibration import majority_verdict

    verdict, share = majority_verdict([r.prediction or None for r in rollouts])
    if verdict is None:
        return "", 0.5 if share else 0.0, share
    reported = [r for r in rollouts if r.confidence is not None and r.prediction]
    if reported and len(reported) == len(rollouts):
        probabilities = [
            r.confidence if r.prediction == verdict else 1.0 - r.confidence for r in reported
        ]
        return verdict, sum(probabilities) / len(probabilities), share
    return verdict, share, share


_CATALOG_FIELDS = [
    "run",
    "object_id",
    "survey",
    "ra",
    "dec",
    "task_code",
    "verdict",
    "confidence",
    "snr",
    "policy_name",
    "synthetic",
]


def _candidate_finish(*, candidate: Candidate, rollouts: list[Rollout]) -> None:
    """Two statements: the candidate's final state, then its catalog entry (an upsert that keeps
    an expert decision already recorded). Reads nothing: the run, task and spectrum come loaded
    with the candidate."""
    run = candidate.run
    verdict, confidence, share = candidate_verdict(rollouts)
    needs_expert = not verdict or (confidence or 0.0) < run.confidence_threshold
    final = {
        "state": CandidateState.DONE,
        "verdict": verdict,
        "confidence": confidence,
        "vote_share": share,
        "needs_expert": needs_expert,
        "finished_at": timezone.now(),
    }
    Candidate.objects.filter(pk=candidate.pk).update(**final)
    for name, value in final.items():
        setattr(candidate, name, value)
    spectrum = candidate.spectrum
    CatalogEntry.objects.bulk_create(
        [
            CatalogEntry(
                candidate=candidate,
                run=run,
                object_id=spectrum.object_id,
                survey=spectrum.survey,
                ra=spectrum.ra,
                dec=spectrum.dec,
                task_code=run.task.code,
                verdict=verdict,
                confidence=confidence,
                snr=spectrum.snr,
                policy_name=str(run.policy_info.get("name") or run.policy_spec.get("kind"))[:120],
                synthetic=spectrum.synthetic,
            )
        ],
        update_conflicts=True,
        unique_fields=["candidate"],
        update_fields=_CATALOG_FIELDS,
    )


@transaction.atomic
def candidate_finish(*, candidate: Candidate, rollouts: list[Rollout] | None = None) -> Candidate:
    """Aggregate the rollouts, route uncertain verdicts to experts, and update the catalog."""
    if rollouts is None:
        rollouts = list(candidate.rollouts.order_by("index"))
    _candidate_finish(candidate=candidate, rollouts=rollouts)
    return candidate


def candidate_fail(*, candidate_id: int, error: str) -> None:
    Candidate.objects.filter(pk=candidate_id).exclude(state=CandidateState.CANCELLED).update(
        state=CandidateState.FAILED, error=error[:10000], finished_at=timezone.now()
    )


@transaction.atomic
def candidate_retry(*, candidate: Candidate, actor: AbstractBaseUser) -> Candidate:
    from annotation import tasks

    # Checked before any write: a refused retry must not re-open the owner's cancelled run.
    run = InspectionRun.objects.only("created_by").get(pk=candidate.run_id)
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="retry")
    updated = Candidate.objects.filter(
        pk=candidate.pk, state__in=[CandidateState.FAILED, CandidateState.CANCELLED]
    ).update(state=CandidateState.PENDING, error="", finished_at=None)
    if updated != 1:
        raise WrongState("only failed or cancelled candidates can be retried")
    InspectionRun.objects.filter(pk=candidate.run_id).update(cancelled=False)
    audit_log_record(actor=actor, action="candidate_retried", obj=candidate)
    transaction.on_commit(lambda: tasks.run_candidate.delay(candidate.pk))
    candidate.refresh_from_db()
    return candidate


@transaction.atomic
def inspection_run_cancel(*, run: InspectionRun, actor: AbstractBaseUser) -> int:
    """Stop a run: pending candidates are cancelled; running ones stop after their episode."""
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="cancel")
    InspectionRun.objects.filter(pk=run.pk).update(cancelled=True)
    cancelled = Candidate.objects.filter(run=run, state=CandidateState.PENDING).update(
        state=CandidateState.CANCELLED, finished_at=timezone.now()
    )
    audit_log_record(
        actor=actor, action="inspection_run_cancelled", obj=run, comment=f"{cancelled} cancelled"
    )
    run.cancelled = True
    return cancelled


def inspection_run_set_policy_info(*, run: InspectionRun, info: dict[str, Any]) -> None:
    if not run.policy_info:
        InspectionRun.objects.filter(pk=run.pk).update(policy_info=info)
        run.policy_info = info


EXPERT_SPLIT = "split"  # the catalog's expert decision when the experts disagree


@transaction.atomic
def expert_decision_record(
    *, candidate: Candidate, expert: AbstractBaseUser, decision: str, comment: str = ""
) -> ExpertDecision:
    """An expert's YES / NO / unsure beside the agent's verdict; shown in the catalog."""
    if decision not in ExpertDecisionValue.values:
        raise WorkflowError(f"decision must be YES, NO or unsure, got {decision!r}")
    if candidate.state != CandidateState.DONE:
        raise WrongState(f"the candidate is {candidate.state}; vet it once the agent has finished")
    record, created = ExpertDecision.objects.update_or_create(
        candidate=candidate, expert=expert, defaults={"decision": decision, "comment": comment}
    )
    # The catalog's column holds the experts' common answer, or "split" when they disagree:
    # the latest decision alone would hide a YES behind a later NO.
    given = set(
        ExpertDecision.objects.filter(candidate=candidate).values_list("decision", flat=True)
    )
    consensus = given.pop() if len(given) == 1 else EXPERT_SPLIT
    CatalogEntry.objects.filter(candidate=candidate).update(expert_decision=consensus)
    audit_log_record(
        actor=expert,
        action="expert_decision",
        obj=candidate,
        to_state=decision,
        comment=comment,
        data={"changed": not created},
    )
    return record


# --- rating campaigns ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RatingSource:
    """One trajectory to put in a campaign, with what raters must not see kept apart."""

    source: str
    data: dict[str, Any]  # stored trajectory dict (blob hashes)
    policy_name: str
    task: Task
    spectrum: Spectrum | None
    dataset: str = ""


def balanced_assignment(
    n_items: int, n_raters: int, per_item: int, rng: np.random.Generator
) -> list[list[int]]:
    """For each item, `per_item` distinct raters; loads differ by at most one between raters."""
    if not 1 <= per_item <= n_raters:
        raise WorkflowError(
            f"raters per item must be between 1 and the number of raters ({n_raters}); "
            f"got {per_item}"
        )
    load = [0] * n_raters
    chosen: list[list[int]] = []
    for _ in range(n_items):
        tie_break = rng.permutation(n_raters)
        order = sorted(range(n_raters), key=lambda r: (load[r], tie_break[r]))
        picked = sorted(order[:per_item])
        for rater in picked:
            load[rater] += 1
        chosen.append(picked)
    return chosen


def _blind_id(rng: np.random.Generator) -> str:
    return "".join(f"{v:02x}" for v in rng.integers(0, 256, size=5))


@transaction.atomic
def campaign_create(
    *,
    name: str,
    raters: list[AbstractBaseUser],
    raters_per_item: int,
    sources: list[RatingSource],
    created_by: AbstractBaseUser | None,
    description: str = "",
    seed: int | None = None,
) -> RatingCampaign:
    """A rating campaign: items in random order, assigned to raters at random and balanced."""
    if not sources:
        raise WorkflowError("a campaign needs at least one trajectory to rate")
    unique_raters = list({rater.pk: rater for rater in raters}.values())
    seed = int(seed if seed is not None else np.random.SeedSequence().entropy % (2**62))
    rng = np.random.default_rng(seed)
    campaign = RatingCampaign.objects.create(
        name=name[:120],
        description=description,
        raters_per_item=raters_per_item,
        seed=seed,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    campaign.raters.set(unique_raters)
    order = rng.permutation(len(sources))
    items = []
    used: set[str] = set()
    for index in order:
        source = sources[int(index)]
        blind = _blind_id(rng)
        while blind in used:
            blind = _blind_id(rng)
        used.add(blind)
        items.append(
            CampaignItem.objects.create(
                campaign=campaign,
                blind_id=blind,
                data=source.data,
                policy_name=source.policy_name[:120],
                source=source.source[:80],
                dataset=source.dataset[:80],
                task=source.task,
                spectrum=source.spectrum,
            )
        )
    plan = balanced_assignment(len(items), len(unique_raters), raters_per_item, rng)
    per_rater: dict[int, list[CampaignItem]] = {r: [] for r in range(len(unique_raters))}
    for item, rater_indexes in zip(items, plan, strict=True):
        for rater_index in rater_indexes:
            per_rater[rater_index].append(item)
    assignments = []
    for rater_index, rater_items in per_rater.items():
        for position, item_index in enumerate(rng.permutation(len(rater_items))):
            assignments.append(
                RatingAssignment(
                    item=rater_items[int(item_index)],
                    rater=unique_raters[rater_index],
                    position=position,
                )
            )
    RatingAssignment.objects.bulk_create(assignments)
    audit_log_record(
        actor=created_by,
        action="campaign_created",
        obj=campaign,
        comment=f"{len(items)} items x {raters_per_item} raters, seed {seed}",
    )
    return campaign


def rating_sources_from_rollouts(rollouts: Iterable[Rollout]) -> list[RatingSource]:
    sources = []
    for rollout in rollouts:
        run = rollout.candidate.run
        spectrum = rollout.candidate.spectrum
        policy = str(run.policy_info.get("name") or run.policy_spec.get("kind"))
        sources.append(
            RatingSource(
                source=f"rollout:{rollout.pk}",
                data=rollout.data,
                # A run is one "model" for rating: the policy plus its run configuration.
                policy_name=f"{policy} · {run.name}" if run.name else policy,
                task=run.task,
                spectrum=spectrum,
                dataset=spectrum.survey,
            )
        )
    return sources


def rating_sources_from_curations(curations: Iterable[Curation]) -> list[RatingSource]:
    sources = []
    for curation in curations:
        version = curation.versions.get(number=curation.head_number)
        sources.append(
            RatingSource(
                source=f"curation:{curation.pk}@v{version.number}",
                data=version.data,
                policy_name=str(curation.teacher.get("name") or "teacher"),
                task=curation.task,
                spectrum=curation.spectrum,
                dataset=curation.spectrum.survey,
            )
        )
    return sources


@transaction.atomic
def campaign_add_pairs(
    *,
    campaign: RatingCampaign,
    pairs: list[tuple[CampaignItem, CampaignItem]],
    raters_per_pair: int,
) -> list[PairItem]:
    """Pairwise comparisons of two items for the same spectrum; which side is which is random
    per pair (and recorded, so outcomes map back to policies)."""
    rng = np.random.default_rng(campaign.seed + 1 + campaign.pairs.count())
    raters = list(campaign.raters.all())
    created = []
    for first, second in pairs:
        if first.spectrum_id is None or first.spectrum_id != second.spectrum_id:
            raise WorkflowError("a pair compares two trajectories of the same spectrum")
        if first.policy_name == second.policy_name:
            raise WorkflowError("a pair compares two different policies")
        left, right = (first, second) if rng.random() < 0.5 else (second, first)
        created.append(
            PairItem.objects.create(
                campaign=campaign, left=left, right=right, dataset=first.dataset
            )
        )
    plan = balanced_assignment(len(created), len(raters), raters_per_pair, rng)
    positions: dict[int, int] = {}
    judgements = []
    for pair, rater_indexes in zip(created, plan, strict=True):
        for rater_index in rater_indexes:
            rater = raters[rater_index]
            positions[rater.pk] = positions.get(rater.pk, -1) + 1
            judgements.append(PairJudgement(pair=pair, rater=rater, position=positions[rater.pk]))
    PairJudgement.objects.bulk_create(judgements)
    return created


def _open_campaign(campaign_id: int, refusal: str) -> RatingCampaign:
    """Lock the campaign row and refuse when it is closed.

    Score, judgement and close all take this lock, so a write and a close serialize: a write
    either commits before the close or sees it (never a cached ``closed`` read before it).
    """
    campaign = RatingCampaign.objects.select_for_update().get(pk=campaign_id)
    if campaign.closed:
        raise WrongState(refusal)
    return campaign


@transaction.atomic
def rating_submit(
    *, assignment: RatingAssignment, rater: AbstractBaseUser, score: int, comment: str = ""
) -> RatingAssignment:
    if assignment.rater_id != rater.pk:
        raise NotAllowed("this item is assigned to another rater")
    campaign = _open_campaign(
        assignment.item.campaign_id, "the campaign is closed; ratings can no longer change"
    )
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 5:
        raise WorkflowError(f"a score is a whole number from 0 to 5; got {score!r}")
    previous = (
        RatingAssignment.objects.filter(pk=assignment.pk).values_list("score", flat=True).get()
    )
    assignment.score = score
    assignment.comment = comment
    assignment.rated_at = timezone.now()
    assignment.save(update_fields=["score", "comment", "rated_at"])
    audit_log_record(
        actor=rater,
        action="rating_scored",
        obj=assignment,
        from_state="" if previous is None else str(previous),
        to_state=str(score),
        comment=comment,
        data={"campaign": campaign.pk, "item": assignment.item.blind_id},
    )
    return assignment


@transaction.atomic
def pair_judgement_submit(
    *, judgement: PairJudgement, rater: AbstractBaseUser, outcome: str
) -> PairJudgement:
    if judgement.rater_id != rater.pk:
        raise NotAllowed("this pair is assigned to another rater")
    campaign = _open_campaign(
        judgement.pair.campaign_id, "the campaign is closed; judgements can no longer change"
    )
    if outcome not in PairOutcome.values:
        raise WorkflowError(f"outcome must be left, tie or right; got {outcome!r}")
    previous = PairJudgement.objects.filter(pk=judgement.pk).values_list("outcome", flat=True).get()
    judgement.outcome = outcome
    judgement.judged_at = timezone.now()
    judgement.save(update_fields=["outcome", "judged_at"])
    audit_log_record(
        actor=rater,
        action="pair_judged",
        obj=judgement,
        from_state=previous,
        to_state=outcome,
        data={"campaign": campaign.pk, "pair": judgement.pair_id},
    )
    return judgement


@transaction.atomic
def campaign_close(*, campaign: RatingCampaign, actor: AbstractBaseUser) -> RatingCampaign:
    if not (_is_staff(actor) or campaign.created_by_id == actor.pk):
        raise NotAllowed("only staff or the campaign's creator can close it")
    _open_campaign(campaign.pk, "the campaign is already closed")
    updated = RatingCampaign.objects.filter(pk=campaign.pk, closed=False).update(
        closed=True, closed_at=timezone.now()
    )
    if updated != 1:  # SQLite has no row locks: the conditional update is the guard there
        raise WrongState("the campaign is already closed")
    campaign.refresh_from_db()
    audit_log_record(actor=actor, action="campaign_closed", obj=campaign)
    return campaign


@transaction.atomic
def judge_create(
    *,
    name: str,
    endpoint: ModelEndpoint,
    actor: AbstractBaseUser,
    prompt: str = "",
    include_images: bool = True,
) -> Judge:
    """A judge calling a registered, enabled endpoint; its URL and model are kept as they were."""
    from agent.judges import JUDGE_RUBRIC_PROMPT

    if not _is_staff(actor):
        raise NotAllowed("only staff can add LLM judges")
    try:
        endpoints.check_usable(endpoint)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    judge = Judge.objects.create(
        name=name,
        endpoint=endpoint,
        base_url=endpoint.base_url,
        model=endpoint.model,
        prompt=prompt or JUDGE_RUBRIC_PROMPT,
        include_images=include_images,
    )
    audit_log_record(
        actor=actor,
        action="judge_created",
        obj=judge,
        comment=f"{endpoint.model} on endpoint {endpoint.name}",
        data={"endpoint": endpoint.name},
    )
    return judge


def judge_score_record(
    *, judge: Judge, item: CampaignItem, score: int | None, reason: str, raw: str, error: str = ""
) -> JudgeScore:
    record, _ = JudgeScore.objects.update_or_create(
        judge=judge,
        item=item,
        defaults={"score": score, "reason": reason, "raw": raw, "error": error[:5000]},
    )
    return record


# --- training runs ------------------------------------------------------------------------------

TRAINING_JOB_KIND = "training"
# Overrides the start form and the API accept, with the type each must have.
TRAINING_OVERRIDES: dict[str, type] = {
    "learning_rate": float,
    "num_train_epochs": float,
    "max_steps": int,
    "use_lora": bool,
    "lora_r": int,
}
# Where a run keeps the data it materializes (relative to its output dir); the CLI reads the same.
SFT_DATA_FILE = "dataset/sharegpt.json"
GRPO_DATA_FILE = "dataset/label_only.parquet"
LABEL_SOURCE_MAX = 100000


def _training_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - set(TRAINING_OVERRIDES))
    if unknown:
        raise WorkflowError(
            f"unknown overrides {unknown}; allowed: {', '.join(sorted(TRAINING_OVERRIDES))}"
        )
    checked: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        kind = TRAINING_OVERRIDES[key]
        if kind is bool:
            if not isinstance(value, bool):
                raise WorkflowError(f"override {key} must be true or false; got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkflowError(f"override {key} must be a number; got {value!r}")
        elif kind is int and float(value) != int(value):
            raise WorkflowError(f"override {key} must be a whole number; got {value!r}")
        value = kind(value)
        if kind is not bool and not (math.isfinite(value) and value > 0):
            raise WorkflowError(f"override {key} must be positive; got {value!r}")
        checked[key] = value
    if checked.get("learning_rate", 0.0) > 1.0:
        raise WorkflowError(f"learning_rate {checked['learning_rate']} is above 1")
    return checked


def _label_source(source: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The normalized GRPO source and how many labelled spectra it selects."""
    from annotation.selectors import label_only_spectra

    tasks: set[str] = set()
    for code in source.get("tasks") or []:
        try:
            tasks.add(agent_tasks.get_task(str(code)).code)
        except agent_tasks.UnknownTaskError as error:
            raise WorkflowError(f"GRPO rewards need a built-in task: {error}") from error
    normalized = {
        "dataset": str(source.get("dataset") or "").strip(),
        "split": str(source.get("split") or "").strip(),
        "tasks": sorted(tasks),
        "limit": source.get("limit") or LABEL_SOURCE_MAX,
    }
    if not normalized["dataset"]:
        raise WorkflowError("GRPO needs the data set of its label-only spectra")
    if not normalized["tasks"]:
        raise WorkflowError("GRPO needs at least one task")
    limit = normalized["limit"]
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LABEL_SOURCE_MAX:
        raise WorkflowError(f"limit must be a whole number from 1 to {LABEL_SOURCE_MAX}")
    count = label_only_spectra(**normalized).count()
    if not count:
        raise WorkflowError(
            f"no spectrum labelled YES or NO for tasks {', '.join(normalized['tasks'])} in data "
            f"set {normalized['dataset']!r}"
            + (f", split {normalized['split']!r}" if normalized["split"] else "")
        )
    return normalized, count


def _training_config(
    *, stage: str, preset: str, overrides: dict[str, Any], base_model: str, output_dir: Path
) -> dict[str, Any]:
    """The run's complete YAML config: preset file, overrides, then this run's model and data."""
    from annotation.selectors import TRAINING_DATA_KEYS, training_preset_values

    values = {
        key: value
        for key, value in training_preset_values(stage=stage, preset=preset).items()
        if key not in TRAINING_DATA_KEYS
    }
    values.update(overrides)
    values["model_name_or_path"] = base_model
    values["output_dir"] = str(output_dir)
    values["run_name"] = output_dir.name
    if stage == TrainingStage.SFT:
        values["sharegpt"] = [str(output_dir / SFT_DATA_FILE)]
    else:
        values["verl_parquet"] = [str(output_dir / GRPO_DATA_FILE)]
    return values


@transaction.atomic
def training_run_create(
    *,
    stage: str,
    preset: str,
    created_by: AbstractBaseUser | None,
    base_model: str = "",
    base_checkpoint: PolicyCheckpoint | None = None,
    dataset_export: DatasetExport | None = None,
    label_source: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    name: str = "",
) -> TrainingRun:
    """Record an SFT or GRPO run and its job; the gpu-queue task is enqueued on commit.

    SFT trains on ``dataset_export``; GRPO on the labelled spectra ``label_source`` selects
    ({dataset, split, tasks, limit}). The base model is ``base_checkpoint``, else the folder
    ``base_model``, else the preset's model_name_or_path. Paths are checked by the worker, which
    may be another machine.
    """
    from annotation import tasks
    from annotation.selectors import (
        TRAINING_PRESETS,
        training_output_root,
        training_preset_values,
    )

    if stage not in TrainingStage.values:
        raise WorkflowError(
            f"stage must be one of {', '.join(TrainingStage.values)}; got {stage!r}"
        )
    if preset not in TRAINING_PRESETS:
        raise WorkflowError(f"preset must be one of {', '.join(TRAINING_PRESETS)}; got {preset!r}")
    preset_values = training_preset_values(stage=stage, preset=preset)
    checked = _training_overrides(overrides or {})
    if base_checkpoint is not None:
        base_model = base_checkpoint.path
    elif base_model.strip():
        base_model = _checked_model_path(base_model)
    base_model = (base_model or str(preset_values.get("model_name_or_path") or "")).strip()
    if not base_model:
        raise WorkflowError(f"the {preset} preset names no base model: give a checkpoint folder")
    source: dict[str, Any] = {}
    if stage == TrainingStage.SFT:
        if dataset_export is None:
            raise WorkflowError("SFT needs a dataset export of accepted trajectories")
        params = {"stage": stage, "dataset_export": dataset_export.version}
    else:
        source, count = _label_source(label_source or {})
        params = {"stage": stage, "label_source": source, "spectra": count}
    user = created_by if created_by is not None and created_by.is_authenticated else None
    job = Job.objects.create(kind=TRAINING_JOB_KIND, params=params, created_by=user)
    run = TrainingRun.objects.create(
        name=name.strip()[:120],
        stage=stage,
        preset=preset,
        overrides=checked,
        base_model=base_model[:500],
        base_checkpoint=base_checkpoint,
        dataset_export=dataset_export if stage == TrainingStage.SFT else None,
        label_source=source,
        job=job,
        created_by=user,
    )
    output_dir = training_output_root() / f"{stage}-run-{run.pk}"
    run.output_dir = str(output_dir)
    run.config = _training_config(
        stage=stage, preset=preset, overrides=checked, base_model=base_model, output_dir=output_dir
    )
    run.save(update_fields=["output_dir", "config"])
    Job.objects.filter(pk=job.pk).update(params={**params, "training_run": run.pk})
    audit_log_record(
        actor=created_by,
        action="training_run_created",
        obj=run,
        to_state=job.state,
        comment=f"{stage} from {base_model} ({preset})",
        data={"overrides": checked},
    )
    transaction.on_commit(lambda: tasks.run_training.delay(run.pk))
    return run


@transaction.atomic
def training_run_claim(*, run_id: int) -> bool:
    """Claim the run's job for this worker (see job_claim). A redelivered run starts over, so
    the metrics of the interrupted attempt are dropped."""
    run = TrainingRun.objects.get(pk=run_id)
    if not job_claim(job_id=run.job_id):
        return False
    TrainingMetric.objects.filter(run=run).delete()
    return True


def training_metrics_record(
    *, run_id: int, step: int, metrics: dict[str, float], epoch: float | None = None
) -> None:
    """Store one step's metrics; a value logged twice for the same step keeps the last one."""
    rows = [
        TrainingMetric(run_id=run_id, step=step, name=name[:64], value=value, epoch=epoch)
        for name, value in metrics.items()
        if math.isfinite(value)
    ]
    TrainingMetric.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "name", "step"],
        update_fields=["value", "epoch"],
    )


def training_run_step(*, run_id: int, step: int, total: int) -> None:
    Job.objects.filter(training_run__pk=run_id).update(done=step, total=max(total, step))


@transaction.atomic
def training_run_finish(
    *, run_id: int, checkpoint_path: str | Path, result: dict[str, Any]
) -> PolicyCheckpoint | None:
    """Register the saved checkpoint as a policy and mark the job succeeded. A run cancelled
    while its last steps ran is left cancelled and registers nothing (returns None)."""
    run = TrainingRun.objects.select_for_update().select_related("job").get(pk=run_id)
    if run.job.state != JobState.RUNNING:
        return None
    name = run.name or f"{run.stage}-run-{run.pk}"
    if PolicyCheckpoint.objects.filter(name=name).exists():
        name = f"{name} (run {run.pk})"
    checkpoint = policy_checkpoint_register(
        path=checkpoint_path, name=name, actor=run.created_by, run=run
    )
    job_succeed(job_id=run.job_id, result={**result, "checkpoint": checkpoint.pk})
    return checkpoint


@transaction.atomic
def training_run_cancel(*, run: TrainingRun, actor: AbstractBaseUser) -> bool:
    """Cancel the run's job; a training loop stops at its next step and registers nothing."""
    return job_cancel(job=run.job, actor=actor)


@transaction.atomic
def policy_checkpoint_register(
    *,
    path: str | Path,
    name: str,
    actor: AbstractBaseUser | None,
    run: TrainingRun | None = None,
) -> PolicyCheckpoint:
    """Register a checkpoint folder with its specvet_lineage.json as a selectable policy."""
    from training.checkpoint import LineageError, load_lineage

    folder = Path(path).resolve()
    try:
        lineage = load_lineage(folder)
    except LineageError as error:
        raise WorkflowError(f"cannot register {folder}: {error}") from error
    name = name.strip()[:120] or folder.name[:120]
    if PolicyCheckpoint.objects.filter(name=name).exists():
        raise WorkflowError(f"a checkpoint named {name!r} is already registered")
    existing = PolicyCheckpoint.objects.filter(path=str(folder)).first()
    if existing is not None:
        raise WorkflowError(f"{folder} is already registered as {existing.name!r}")
    checkpoint = PolicyCheckpoint.objects.create(
        name=name,
        stage=lineage.stage,
        path=str(folder),
        lineage=lineage.to_dict(),
        dataset_version=lineage.dataset_version[:64],
        base_model=lineage.base_model[:500],
        run=run,
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    audit_log_record(
        actor=actor,
        action="policy_checkpoint_registered",
        obj=checkpoint,
        comment=f"{lineage.stage} checkpoint at {folder}",
        data={"dataset_version": lineage.dataset_version, "run": run.pk if run else None},
    )
    return checkpoint
