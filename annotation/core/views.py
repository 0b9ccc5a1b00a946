"""Core pages: accounts and roles, the API token, the audit log, model endpoints, jobs."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling
from rest_framework.authtoken.models import Token

from annotation.core import endpoints, errors, permissions, selectors, services
from annotation.core.forms import ROLE_LABELS, AuditLogFilterForm, ModelEndpointForm, UserRolesForm
from annotation.core.http import HtmxHttpRequest, _expert, _page
from annotation.core.models import Job, ModelEndpoint
from annotation.core.permissions import AUDIT_LOG_READ, job_cancel_allowed, require_role
from annotation.core.roles import Role, accounts_with_roles, user_roles
from webapp.auth import session_signed_in_at, token_expires_at

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
        except errors.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        changes = [f"+{r.value}" for r in granted] + [f"-{r.value}" for r in revoked]
        text = ", ".join(changes) if changes else "no change"
        messages.success(request, f"Roles of {account.get_username()}: {text}.")
    back = request.POST.get("next", "")
    if not back.startswith(reverse("account_roles")):
        back = reverse("account_roles")
    return redirect(back)


@permissions.require_role(permissions.SIGNED_IN)
@never_cache  # the page shows a new key once
@require_http_methods(["GET", "POST"])
def api_token_page(request: HttpRequest) -> HttpResponse:
    key = ""
    if request.method == "POST":
        key = services.api_token_issue(
            user=_expert(request), proved_at=session_signed_in_at(request), via="session"
        ).key
    token = Token.objects.filter(user=_expert(request)).first()
    expires_at = token_expires_at(token) if token is not None else None
    return render(
        request,
        "accounts/api_token.html",
        {
            "token": token,
            "key": key,
            "expires_at": expires_at,
            "expired": expires_at is not None and expires_at <= timezone.now(),
            "ttl_hours": settings.API_TOKEN_TTL_HOURS,
        },
    )


PAGE_SIZE = 50


@require_role(AUDIT_LOG_READ)
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditLogFilterForm(request.GET)
    filters = form.cleaned_data if form.is_valid() else {}
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": Paginator(
            selectors.audit_log_list(user=request.user, **filters), PAGE_SIZE
        ).get_page(request.GET.get("page")),
        "query": query.urlencode(),
    }
    return render(request, "audit/log.html", context)


def _listed() -> QuerySet[ModelEndpoint]:
    return ModelEndpoint.objects.select_related("created_by").annotate(
        n_runs=Count("runs", distinct=True), n_judges=Count("judges", distinct=True)
    )


@require_role(permissions.ENDPOINTS_MANAGE)
@require_GET
def endpoint_list(request: HttpRequest) -> HttpResponse:
    context = {
        "endpoints": _listed(),
        "default_name": endpoints.DEFAULT_ENDPOINT,
        "secret_dirs": endpoints.secret_dirs(),
    }
    return render(request, "endpoints/list.html", context)


@require_role(permissions.ENDPOINTS_MANAGE)
@require_http_methods(["GET", "POST"])
def endpoint_create(request: HttpRequest) -> HttpResponse:
    form = ModelEndpointForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            endpoint = services.model_endpoint_create(
                actor=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                **form.values(),
            )
        except errors.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        except errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Endpoint {endpoint.name} registered.")
            return redirect("endpoint_list")
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "endpoints/form.html", {"form": form, "endpoint": None}, status=status)


@require_role(permissions.ENDPOINTS_MANAGE)
@require_http_methods(["GET", "POST"])
def endpoint_edit(request: HttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
    form = ModelEndpointForm(request.POST or None, endpoint=endpoint)
    if request.method == "POST" and form.is_valid():
        try:
            services.model_endpoint_update(
                endpoint=endpoint,
                actor=request.user,  # type: ignore[arg-type]
                **form.values(),
            )
        except errors.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        except errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Endpoint {endpoint.name} saved.")
            return redirect("endpoint_list")
    status = 400 if form.is_bound and form.errors else 200
    context = {"form": form, "endpoint": endpoint, "default_name": endpoints.DEFAULT_ENDPOINT}
    return render(request, "endpoints/form.html", context, status=status)


@require_role(permissions.ENDPOINTS_MANAGE)
@require_POST
def endpoint_toggle(request: HttpRequest, endpoint_id: int) -> HttpResponse:
    """Switch an endpoint off or on; htmx swaps its row, a plain form goes back to the list."""
    endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
    try:
        services.model_endpoint_update(
            endpoint=endpoint,
            actor=request.user,  # type: ignore[arg-type]
            enabled=not endpoint.enabled,
        )
    except errors.NotAllowed as error:
        raise PermissionDenied(str(error)) from error
    if request.htmx:  # type: ignore[attr-defined]
        row = _listed().get(pk=endpoint.pk)
        context = {"endpoint": row, "default_name": endpoints.DEFAULT_ENDPOINT}
        return render(request, "endpoints/_row.html", context)
    state = "enabled" if endpoint.enabled else "disabled"
    messages.success(request, f"Endpoint {endpoint.name} {state}.")
    return redirect("endpoint_list")


def _get_job_for_user(request: HttpRequest, job_id: int) -> Job:
    rows = selectors.jobs_visible_to(
        user=request.user, rows=Job.objects.select_related("created_by")
    )
    return get_object_or_404(rows, pk=job_id)


def _get_rw_job_for_user(request: HttpRequest, job_id: int) -> Job:
    job = _get_job_for_user(request, job_id)
    if not job_cancel_allowed(job, _expert(request)):
        raise PermissionDenied("only the job's creator or staff can cancel it")
    return job


# --- jobs --------------------------------------------------------------------------------------


@require_role(permissions.JOBS_READ)
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.jobs_visible_to(
        user=request.user, rows=Job.objects.select_related("created_by").order_by("-id")
    )
    return render(request, "jobs/list.html", {"page": _page(request, rows)})


@require_role(permissions.JOBS_READ)
@require_GET
def job_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    context = {
        "job": job,
        "progress": selectors.job_progress(job=job),
        "can_cancel": not job.finished and job_cancel_allowed(job, _expert(request)),
    }
    if request.htmx:
        html = render_to_string("jobs/detail.html#progress", context, request=request)
        return HttpResponseStopPolling(html) if job.finished else HttpResponse(html)
    return render(request, "jobs/detail.html", context)


@require_role(permissions.JOB_CONTROL)
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _get_rw_job_for_user(request, job_id)
    if services.job_cancel(job=job, actor=_expert(request)):
        messages.success(request, f"Job {job.pk} was cancelled.")
    else:
        messages.info(request, f"Job {job.pk} had already finished.")
    return redirect("job_detail", job.pk)
