"""Role rules for pages (require_role) and APIs (HasRoleRule), and owner-or-staff checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from rest_framework.permissions import BasePermission

from annotation.core.models import Job
from annotation.core.roles import Role, has_role, user_roles

View = TypeVar("View", bound=Callable[..., HttpResponseBase])
User = AbstractBaseUser | AnonymousUser | None

# Every role refusal starts with this, on pages and in API answers (tests look for it).
REFUSAL = "Not allowed by your roles"


@dataclass(frozen=True)
class Rule:
    """Who may do something: any of ``roles`` (``None``: any signed-in account)."""

    roles: frozenset[Role] | None
    action: str  # what the rule guards, for the refusal message

    def allows(self, user: User) -> bool:
        if self.roles is None:
            return bool(user is not None and user.is_authenticated and user.is_active)
        return has_role(user, *self.roles)

    def refusal(self, user: User) -> str:
        needed = " or ".join(sorted(role.value for role in self.roles or ()))
        held = ", ".join(sorted(role.value for role in user_roles(user))) or "none"
        return (
            f"{REFUSAL}: to {self.action} you need the {needed} role (yours: {held}). "
            "Staff grant roles on the Roles page."
        )

    def check(self, user: User) -> None:
        if not self.allows(user):
            raise RoleRequired(self.refusal(user))


def rule(*roles: Role, action: str) -> Rule:
    return Rule(frozenset(roles), action)


class RoleRequired(PermissionDenied):
    """Refused by role (403); pages render templates/403.html, APIs answer {"detail": ...}."""


EXPERT, RATER, ML, VIEWER, STAFF = (
    Role.EXPERT,
    Role.RATER,
    Role.ML_ENGINEER,
    Role.VIEWER,
    Role.STAFF,
)

# --- everyone signed in ------------------------------------------------------------------------
SIGNED_IN = Rule(None, "see the home page")

# --- spectra and catalog: read by every role but raters (whose items are blinded) --------------
BROWSE = rule(VIEWER, EXPERT, ML, STAFF, action="browse spectra and the catalog")
UPLOAD = rule(EXPERT, ML, STAFF, action="upload spectra")
REDSHIFT_DECIDE = rule(EXPERT, action="accept or override a spectrum's redshift")

# --- curation ------------------------------------------------------------------------------------
CURATION_READ = rule(EXPERT, ML, STAFF, action="read curated trajectories")
CURATE = rule(EXPERT, action="screen, revise, audit and vote on trajectories")
CURATION_MANAGE = rule(STAFF, action="reassign curation roles or run standardization")
DRAFT = rule(ML, action="start drafts or import trajectories")
JOBS_READ = rule(ML, STAFF, action="follow background jobs")
JOB_CONTROL = rule(ML, STAFF, action="cancel background jobs")
DATASETS_READ = rule(ML, STAFF, action="read and download SFT datasets")
DATASET_EXPORT = rule(ML, action="export SFT datasets")

# --- inspections -------------------------------------------------------------------------------
INSPECTION_READ = rule(EXPERT, ML, STAFF, action="follow inspection runs")
INSPECT = rule(ML, action="start inspection runs")
INSPECTION_CONTROL = rule(ML, STAFF, action="cancel or retry inspection runs")
INSPECTION_RESEND = rule(STAFF, action="resend interrupted inspection candidates")
EVIDENCE_ABLATE = rule(STAFF, action="ablate the evidence of a sample of a run's verdicts")
TOOL_IMAGE = rule(EXPERT, ML, STAFF, RATER, action="see the agent's tool images")

# --- catalog vetting -----------------------------------------------------------------------------
VET = rule(EXPERT, action="vet candidates")
MODEL_PROMOTE = rule(STAFF, action="promote a model to current for a task")
VETTING_MANAGE = rule(STAFF, action="reassign, close or requeue vetting candidates")

# --- rating ------------------------------------------------------------------------------------
RATING_READ = rule(RATER, STAFF, action="open rating campaigns")
RATE = rule(RATER, action="rate trajectories")
RATING_MANAGE = rule(STAFF, action="create and run rating campaigns and LLM judges")

# --- training ------------------------------------------------------------------------------------
TRAINING_READ = rule(ML, STAFF, action="follow training runs and policies")
TRAIN = rule(ML, action="start training runs")
TRAINING_CONTROL = rule(ML, STAFF, action="cancel training runs")

# --- accounts ------------------------------------------------------------------------------------
ROLES_MANAGE = rule(STAFF, action="manage accounts and roles")
ENDPOINTS_MANAGE = rule(STAFF, action="manage model endpoints")
# Who may list endpoint names and models (to choose one); only staff see URLs and credentials.
ENDPOINTS_READ = rule(EXPERT, ML, STAFF, action="list model endpoints")
AUDIT_LOG_READ = rule(STAFF, action="browse the audit log")


def require_role(required: Rule) -> Callable[[View], View]:
    """Page decorator: refuse (403) unless the user meets ``required``. Put it outermost, so a
    refused user learns nothing else (not even which methods the page takes)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            required.check(request.user)
            return view(request, *args, **kwargs)

        wrapped.role_rule = required  # type: ignore[attr-defined]
        return wrapped  # type: ignore[return-value]

    return decorate


class HasRoleRule(BasePermission):
    """DRF: the view's ``role_rule`` decides; a view without one is refused."""

    message = f"{REFUSAL}: this endpoint declares no role rule"

    def has_permission(self, request: Any, view: Any) -> bool:
        required = getattr(view, "role_rule", None)
        if not isinstance(required, Rule):
            return False
        if not required.allows(request.user):
            self.message = required.refusal(request.user)
            return False
        return True


class RoleRuleMiddleware:
    """Refuse any page of this app whose view declares no rule (APIs have HasRoleRule)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        if not getattr(view_func, "login_required", True):
            return  # the login page, and DRF views (they authenticate tokens themselves)
        if view_func.__module__.startswith("annotation.") and not isinstance(
            getattr(view_func, "role_rule", None), Rule
        ):
            raise RoleRequired(f"{REFUSAL}: this page declares no role rule")


# --- object-level: owners and staff ------------------------------------------------------------


class OwnerRequired(PermissionDenied):
    """Refused because the object belongs to someone else (403)."""


def is_owner_or_staff(user: User, owner_id: int | None) -> bool:
    if has_role(user, Role.STAFF):
        return True
    return bool(user is not None and owner_id is not None and owner_id == user.pk)


def check_owner_or_staff(user: User, owner_id: int | None, *, what: str, action: str) -> None:
    """Only who started ``what`` (or staff) may ``action`` it; objects nobody owns: staff only."""
    if not is_owner_or_staff(user, owner_id):
        raise OwnerRequired(f"Only the person who started this {what}, or staff, can {action} it.")


# --- navigation ----------------------------------------------------------------------------------

# Menu entries shown only to who may use them; hiding is a courtesy, the rules above are the lock.
NAV = {
    "spectra": BROWSE,
    "upload": UPLOAD,
    "my_work": CURATE,
    "curation": CURATION_READ,
    "curation_manage": CURATION_MANAGE,
    "datasets": DATASETS_READ,
    "inspections": INSPECTION_READ,
    "training": TRAINING_READ,
    "rating": RATING_READ,
    "catalog": BROWSE,
    "evaluations": BROWSE,
    "vetting": VET,
    "vetting_manage": VETTING_MANAGE,
    "roles": ROLES_MANAGE,
    # buttons and links inside pages
    "draft": DRAFT,
    "inspect": INSPECT,
    "train": TRAIN,
    "export_datasets": DATASET_EXPORT,
    "jobs": JOBS_READ,
    "manage_rating": RATING_MANAGE,
    "audit_log": AUDIT_LOG_READ,
    "endpoints": ENDPOINTS_MANAGE,
}


def nav_context(request: HttpRequest) -> dict[str, Any]:
    """Template context: ``can.<entry>`` for the menu and ``my_roles`` for the page header."""
    user = getattr(request, "user", None)
    return {
        "can": {name: required.allows(user) for name, required in NAV.items()},
        "my_roles": sorted(role.value for role in user_roles(user)),
    }


def job_cancel_allowed(job: Job, user: AbstractBaseUser) -> bool:
    return is_owner_or_staff(user, job.created_by_id)
