"""Writes every domain shares: the audit log, API tokens, admin edits, jobs, roles, model endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import BinaryField, F, Field, Model
from django.utils import timezone
from rest_framework.authtoken.models import Token

from annotation.core import endpoints
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.models import ApiTokenOrigin, AuditLog, Job, JobState, ModelEndpoint
from annotation.core.permissions import check_owner_or_staff
from annotation.core.roles import Role, forget_roles, user_roles


def audit_log_record(
    *,
    actor: User | None,
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
        object_type=obj._meta.object_name,  # not type(obj): request.user is a lazy proxy
        object_pk=str(obj.pk),
        from_state=from_state,
        to_state=to_state,
        comment=comment,
        data=data or {},
    )


TOKEN_PROOFS = ("session", "password")


@transaction.atomic
def api_token_issue(*, user: User, proved_at: datetime, via: str) -> Token:
    """A new API token for ``user``; the one before it (if any) stops working at once.

    ``proved_at`` is when the user's password was last checked for this request: the session's
    sign-in (``via="session"``) or now, for a password sent with it (``via="password"``). Never
    a token: a token that could issue its successor would live forever."""
    if via not in TOKEN_PROOFS:
        raise WorkflowError(f"a token is issued on a session or a password, not {via!r}")
    replaced = Token.objects.filter(user=user).delete()[0] > 0
    token = Token.objects.create(user=user)
    ApiTokenOrigin.objects.create(token=token, proved_at=proved_at, via=via)
    audit_log_record(  # the user, not the token: a token's primary key is its secret
        actor=user,
        action="api_token_issued",
        obj=user,
        comment=("replaced the previous token" if replaced else "first token") + f", via {via}",
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
    *, obj: Model, actor: User, changed_fields: Iterable[str], adding: bool
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
def admin_object_delete(*, obj: Model, actor: User) -> None:
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


# --- jobs ------------------------------------------------------------------------------------


@transaction.atomic
def job_create(
    *,
    kind: str,
    params: dict[str, Any],
    created_by: User | None = None,
    total: int = 0,
) -> Job:
    """Record a job and enqueue it once the transaction commits."""
    from annotation.core import tasks

    job = Job.objects.create(
        kind=kind,
        params=params,
        total=total,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    audit_log_record(actor=created_by, action="job_created", obj=job, to_state=job.state)
    transaction.on_commit(lambda: tasks.run_job.delay(job.pk))
    return job


def unfinished_jobs_resend(*, exclude_kinds: Iterable[str] = ()) -> int:
    """Send every queued or running job again; returns how many.

    For a broker that cannot redeliver (the demo's filesystem broker hands a message over once,
    so a worker killed outright loses it): call it before any worker starts. A job whose first
    message is still queued gets a second one, which its lease and claim make a no-op; a job
    left running is claimed again as a redelivery would (JOB_MAX_ATTEMPTS still applies). Kinds
    with their own task (training runs) are excluded here and sent by their domain.
    """
    from annotation.core import tasks

    ids = list(
        Job.objects.filter(state__in=[JobState.QUEUED, JobState.RUNNING])
        .exclude(kind__in=list(exclude_kinds))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for job_id in ids:
        tasks.run_job.delay(job_id)
    return len(ids)


def job_claim(*, job_id: int) -> bool:
    """Move a queued job to running. Returns False when it is not runnable (finished, cancelled).

    A job left "running" by a worker that died is claimable again: the redelivered task
    (acks_late) resumes it; runners skip the items already done and count them as done, so the
    progress counters start over here. Call it holding the job's lease (annotation/core/leases.py).
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
def job_cancel(*, job: Job, actor: User) -> bool:
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
    *, user: User, roles: Iterable[Role], actor: User | None
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
            locked.is_staff = role in granted
            locked.save(update_fields=["is_staff"])
            continue
        group, _ = Group.objects.get_or_create(name=role.value)
        if role in granted:
            locked.groups.add(group)
        else:
            locked.groups.remove(group)
    user_roles_changes_record(user=locked, granted=granted, revoked=revoked, actor=actor)
    user.is_staff = locked.is_staff  # the caller's copy too
    forget_roles(user)
    return granted, revoked


def user_roles_changes_record(
    *,
    user: User,
    granted: Iterable[Role],
    revoked: Iterable[Role],
    actor: User | None,
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


def user_role_grant(*, user: User, role: Role, actor: User | None) -> bool:
    """Add one role; False when the user held it already."""
    granted, _ = user_roles_set(user=user, roles=user_roles(user) | {role}, actor=actor)
    return bool(granted)


def user_role_revoke(*, user: User, role: Role, actor: User | None) -> bool:
    """Remove one role; False when the user did not hold it."""
    _, revoked = user_roles_set(user=user, roles=user_roles(user) - {role}, actor=actor)
    return bool(revoked)


def _actor_name(actor: User | None) -> str:
    if actor is None or not actor.is_authenticated:
        return "manage.py"
    return actor.get_username()


# --- model endpoints ------------------------------------------------------------------------------

ENDPOINT_FIELDS = ("base_url", "model", "credential_env", "credential_file", "timeout", "enabled")
# The default endpoint follows the OPENAI_* settings; staff may only switch it off and on.
SETTINGS_MANAGED_FIELDS = ("base_url", "model", "credential_env", "credential_file")


def _require_endpoint_staff(actor: User | None) -> None:
    from annotation.core.roles import Role, has_role

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
    actor: User,
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
def model_endpoint_update(*, endpoint: ModelEndpoint, actor: User, **values: Any) -> ModelEndpoint:
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
    endpoint: ModelEndpoint, *, changes: dict[str, list[Any]], actor: User | None
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
