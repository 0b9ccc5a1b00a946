"""Accounts and their roles (staff only): who holds which role, and changing it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from annotation import permissions, services
from annotation.forms_accounts import ROLE_LABELS, UserRolesForm
from annotation.permissions import require_role
from annotation.roles import Role, accounts_with_roles, user_roles

PAGE_SIZE = 50


@require_role(permissions.ROLES_MANAGE)
@require_GET
def roles_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:150]
    page = Paginator(accounts_with_roles(query), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [{"user": user, "roles": {role.value for role in user_roles(user)}} for user in page]
    context = {
        "page": page,
        "rows": rows,
        "roles": [(role.value, ROLE_LABELS[role]) for role in Role],
        "q": query,
        "query": f"q={query}" if query else "",
    }
    return render(request, "accounts/roles.html", context)


@require_role(permissions.ROLES_MANAGE)
@require_POST
def roles_set(request: HttpRequest, user_id: int) -> HttpResponse:
    account = get_object_or_404(get_user_model(), pk=user_id)
    form = UserRolesForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Roles of {account.get_username()} unchanged: {form.errors}")
    else:
        try:
            granted, revoked = services.user_roles_set(
                user=account,
                roles=form.chosen(),
                actor=request.user,  # type: ignore[arg-type]
            )
        except services.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        changes = [f"+{r.value}" for r in granted] + [f"-{r.value}" for r in revoked]
        text = ", ".join(changes) if changes else "no change"
        messages.success(request, f"Roles of {account.get_username()}: {text}.")
    back = request.POST.get("next", "")
    if not back.startswith(reverse("account_roles")):
        back = reverse("account_roles")
    return redirect(back)
