"""Model endpoints (staff only): register, change, switch off and on."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from annotation import endpoints, permissions, services
from annotation.forms_endpoints import ModelEndpointForm
from annotation.models import ModelEndpoint
from annotation.permissions import require_role


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
        except services.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        except services.WorkflowError as error:
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
        except services.NotAllowed as error:
            raise PermissionDenied(str(error)) from error
        except services.WorkflowError as error:
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
    except services.NotAllowed as error:
        raise PermissionDenied(str(error)) from error
    if request.htmx:  # type: ignore[attr-defined]
        row = _listed().get(pk=endpoint.pk)
        context = {"endpoint": row, "default_name": endpoints.DEFAULT_ENDPOINT}
        return render(request, "endpoints/_row.html", context)
    state = "enabled" if endpoint.enabled else "disabled"
    messages.success(request, f"Endpoint {endpoint.name} {state}.")
    return redirect("endpoint_list")
