"""The audit log for staff: every recorded decision, filtered by object, actor and action."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotation import selectors
from annotation.forms_audit import AuditLogFilterForm
from annotation.permissions import AUDIT_LOG_READ, require_role

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
        "page": Paginator(selectors.audit_log_list(**filters), PAGE_SIZE).get_page(
            request.GET.get("page")
        ),
        "query": query.urlencode(),
    }
    return render(request, "audit/log.html", context)
