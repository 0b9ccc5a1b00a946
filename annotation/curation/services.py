"""Curation writes: draft -> screen -> revise -> two audits -> standardize -> three-expert vote."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.editing import check_same_tool_actions
from agent.trajectory import Trajectory
from annotation.core.errors import NotAllowed, VersionConflict, WorkflowError, WrongState
from annotation.core.models import ImageBlob, Job
from annotation.core.permissions import CURATE
from annotation.core.services import audit_log_record, job_create
from annotation.core.sql import rows_insert
from annotation.curation.models import (
    Audit,
    AuditVerdict,
    Curation,
    CurationState,
    RevisionDraft,
    TrajectoryVersion,
    VersionKind,
    Vote,
    VoteValue,
)
from annotation.curation.selectors import trajectory_from_stored
from annotation.spectra.models import Label, Spectrum, Task


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
    rows_insert(
        [ImageBlob(sha256=digest, png=png) for digest, png in pngs.items()],
        on_conflict="ON CONFLICT (sha256) DO NOTHING",
    )


class PngsByHash:
    """A ``Trajectory.to_dict`` PNG encoder that puts each PNG's sha256 in the dict and keeps the
    PNG for ``image_blobs_store`` (no database access here); a PNG met again (a rollout and its
    live steps share their images) is hashed once."""

    def __init__(self) -> None:
        self.pngs: dict[str, bytes] = {}
        # Keyed by id: each PNG is held here, so its id cannot be reused while this lives.
        self._seen: dict[int, tuple[bytes, str]] = {}

    def __call__(self, png: bytes) -> tuple[str, str]:
        seen = self._seen.get(id(png))
        if seen is None:
            digest = hashlib.sha256(png).hexdigest()
            self._seen[id(png)] = (png, digest)
            self.pngs[digest] = png
        else:
            digest = seen[1]
        return "png_sha256", digest


def trajectory_to_stored(trajectory: Trajectory) -> dict[str, Any]:
    pngs = PngsByHash()
    stored = trajectory.to_dict(png=pngs)
    image_blobs_store(pngs.pngs)
    return stored


def _add_version(
    *,
    curation: Curation,
    kind: str,
    trajectory: Trajectory,
    author: User | None,
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
    actor: User | None,
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


def _is_staff(user: User) -> bool:
    return bool(getattr(user, "is_staff", False))


def _check_not_planted(curation: Curation, doing: str) -> None:
    """A planted copy (annotation.curation.planted) stops after its one audit round."""
    if curation.planted:
        raise WrongState(f"cannot {doing}: the trajectory is closed")


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
    created_by: User | None = None,
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
def curation_screen(*, curation: Curation, user: User, keep: bool, reason: str = "") -> Curation:
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


def _claim_role(*, curation: Curation, role: str, user: User) -> bool:
    """Take an empty role slot; True if this user now holds it."""
    updated = Curation.objects.filter(pk=curation.pk, **{f"{role}__isnull": True}).update(
        **{role: user}
    )
    curation.refresh_from_db()
    return updated == 1 or getattr(curation, f"{role}_id") == user.pk


@transaction.atomic
def curation_claim_revision(*, curation: Curation, user: User) -> Curation:
    """The first expert to claim a kept draft becomes its reviser (one reviser per trajectory)."""
    if curation.state not in (CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED):
        raise WrongState(
            f"cannot claim the revision: the trajectory is {_state_words(curation.state)}"
        )
    _check_not_planted(curation, "claim the revision")
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
    user: User,
    base_number: int,
    trajectory: Trajectory,
    comment: str = "",
) -> TrajectoryVersion:
    """Save the reviser's edit as a new immutable version, refusing a stale base (409)."""
    curation = _locked(curation)
    _check_not_planted(curation, "save a revision")
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
    *, curation: Curation, user: User, base_number: int, data: dict[str, Any]
) -> RevisionDraft:
    """Keep the reviser's unsaved editor state (not a version; replaced by the next autosave)."""
    _check_not_planted(curation, "autosave")
    if curation.reviser_id != user.pk:
        raise NotAllowed("only the reviser of this trajectory can autosave it")
    draft, _ = RevisionDraft.objects.update_or_create(
        curation=curation, defaults={"author": user, "base_number": base_number, "data": data}
    )
    return draft


@transaction.atomic
def curation_submit_for_audit(*, curation: Curation, user: User, base_number: int) -> Curation:
    """The reviser sends the latest version to the two auditors; a new audit round starts."""
    curation = _locked(curation)
    _check_not_planted(curation, "submit for audit")
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


def _check_may_audit(*, curation: Curation, user: User) -> None:
    """Separation of duties for an auditor slot, whatever roles the user held before.

    Nobody audits their own revision: not the reviser, nor anyone who wrote a revision of this
    trajectory. An auditor freed while a round is open does not come back in that round (their
    verdict stays on record without counting); they may audit again from the next round.
    """
    from annotation.curation.selectors import revision_authors

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
def curation_claim_audit(*, curation: Curation, user: User) -> Curation:
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
    user: User,
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
    from annotation.curation.selectors import deciding_audits

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
        if approved and not curation.planted:  # a planted copy is never standardized
            job_create(kind="standardize", params={"curation_ids": [curation.pk]}, created_by=user)
    return audit


@transaction.atomic
def curation_standardize(
    *,
    curation: Curation,
    trajectory: Trajectory,
    standardizer: dict[str, Any],
    actor: User | None = None,
) -> TrajectoryVersion:
    """Store the standardized (iMCoT) version after checking its tool actions are unchanged,
    then open the final vote."""

    curation = _locked(curation)
    _check_not_planted(curation, "standardize")
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
def vote_cast(*, curation: Curation, user: User, value: str, comment: str = "") -> Vote:
    """One vote per voter (the reviser and the two auditors). The last vote decides."""
    curation = _locked(curation)
    _check_not_planted(curation, "vote")
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


def _check_may_take_a_role(*, curation: Curation, user: User) -> None:
    """Only an account that could do the work: active, holding the expert role (the role rule
    of revising and auditing) and able to read this trajectory (not rating a campaign that
    holds it). A viewer once became a reviser who could do nothing."""
    from annotation.blinding import curations_visible_to

    name = user.get_username()
    if not user.is_active:
        raise NotAllowed(f"{name} is deactivated")
    if not CURATE.allows(user):
        raise NotAllowed(f"{name} is not an expert: only experts revise and audit trajectories")
    if not curations_visible_to(user=user).filter(pk=curation.pk).exists():
        raise NotAllowed(f"{name} rates an open campaign holding this trajectory")


@transaction.atomic
def curation_reassign(*, curation: Curation, role: str, user: User | None, actor: User) -> Curation:
    """Staff hand a role to another expert (or free it), keeping the separation of duties."""
    if not _is_staff(actor):
        raise NotAllowed("only staff can reassign roles")
    if role not in ROLES:
        raise WorkflowError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    curation = _locked(curation)
    if user is not None:
        _check_may_take_a_role(curation=curation, user=user)
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


# --- drafts and imports ------------------------------------------------------------------------
