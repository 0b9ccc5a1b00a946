"""Who may do what: the five roles of specvet as Django groups.

A role is a Django group of the same name. Staff status (``is_staff``) is the staff role; the
others come from group membership. Superusers hold every role. Separation-of-duties rules in the
workflows (nobody audits their own revision, ...) apply to every role, staff included.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class Role(StrEnum):
    EXPERT = "expert"  # screen, revise, audit, vote, vet
    RATER = "rater"  # rate the campaigns they are assigned
    ML_ENGINEER = "ml_engineer"  # drafts, inspections, training, exports
    VIEWER = "viewer"  # catalog and spectra, read-only
    STAFF = "staff"  # accounts, roles, endpoints, campaigns


GROUP_ROLES = (Role.EXPERT, Role.RATER, Role.ML_ENGINEER, Role.VIEWER)


def user_roles(user: AbstractBaseUser | AnonymousUser | None) -> frozenset[Role]:
    """The roles a user holds; none for anonymous or inactive users."""
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    if getattr(user, "is_superuser", False):
        return frozenset(Role)
    cached = getattr(user, "_specvet_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
        cached = frozenset(role for role in GROUP_ROLES if role.value in names)
        if getattr(user, "is_staff", False):
            cached = cached | {Role.STAFF}
        user._specvet_roles = cached  # type: ignore[union-attr]
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser | None, *roles: Role) -> bool:
    """True when the user holds at least one of ``roles``."""
    return bool(user_roles(user) & set(roles))


def forget_roles(user: AbstractBaseUser) -> None:
    """Drop the per-request cache after the user's groups changed."""
    if hasattr(user, "_specvet_roles"):
        del user._specvet_roles  # type: ignore[attr-defined]
