"""Who may do what: the five roles of specvet as Django groups.

A role is a Django group of the same name. Staff status (``is_staff``) is the staff role; the
others come from group membership. Superusers hold every role. Separation-of-duties rules in the
workflows (nobody audits their own revision, ...) apply to every role, staff included.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet


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
        if "groups" in getattr(user, "_prefetched_objects_cache", {}):
            names = {group.name for group in user.groups.all()}  # type: ignore[attr-defined]
        else:
            names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
        cached = frozenset(role for role in GROUP_ROLES if role.value in names)
        if getattr(user, "is_staff", False):
            cached = cached | {Role.STAFF}
        # A per-request cache on the user object: an attribute no user class declares.
        user._specvet_roles = cached  # type: ignore[attr-defined]
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser | None, *roles: Role) -> bool:
    """True when the user holds at least one of ``roles``."""
    return bool(user_roles(user) & set(roles))


def forget_roles(user: AbstractBaseUser) -> None:
    """Drop the per-request cache after the user's groups changed."""
    if hasattr(user, "_specvet_roles"):
        del user._specvet_roles


def parse_role(text: str) -> Role:
    """A role from its name (``ml_engineer``, ``ML engineer`` and ``ml-engineer`` alike)."""
    key = text.strip().lower().replace("-", "_").replace(" ", "_")
    try:
        return Role(key)
    except ValueError:
        names = ", ".join(role.value for role in Role)
        raise ValueError(f"no role {text!r}; the roles are {names}") from None


def users_holding(role: Role) -> QuerySet[Any]:
    """Active accounts that hold ``role`` (superusers hold them all)."""
    users = get_user_model().objects.filter(is_active=True)
    held = Q(is_superuser=True) | (
        Q(is_staff=True) if role == Role.STAFF else Q(groups__name=role.value)
    )
    return users.filter(held).distinct()


def accounts_with_roles(query: str = "") -> QuerySet[Any]:
    """Accounts by username (``query``: part of it), their groups loaded for ``user_roles``."""
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    return users.filter(username__icontains=query) if query else users
