"""Catalog pages about stored spectra: a row's sparkline and the duplicate groups."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from annotation import blinding
from annotation.catalog import duplicates, sparklines
from annotation.catalog import selectors as catalog
from annotation.core import permissions
from annotation.core.permissions import require_role


@require_role(permissions.BROWSE)
@require_GET
@cache_control(private=True, max_age=sparklines.CACHE_SECONDS)
def catalog_sparkline(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    svg = sparklines.spectrum_sparkline(spectrum_id)
    if svg is None:
        raise Http404("no such spectrum")
    response = HttpResponse(svg, content_type="image/svg+xml")
    # Numbers only, but an SVG opened on its own is a document: it may run nothing.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return response


@require_role(permissions.BROWSE)
@require_GET
def duplicate_group(request: HttpRequest, content_hash: str) -> HttpResponse:
    if not duplicates.is_content_hash(content_hash):
        raise Http404("not a content hash")
    group = duplicates.duplicate_group(
        content_hash, entries=blinding.catalog_entries_visible_to(user=request.user)
    )
    if not group.spectra:
        raise Http404("no spectrum holds this content")
    return render(request, "catalog/duplicate_group.html", {"group": group})


@require_role(permissions.BROWSE)
@require_GET
def duplicate_groups(request: HttpRequest) -> HttpResponse:
    page = catalog.page_number(request.GET.get("page"))
    groups, more = duplicates.duplicate_groups(page)
    return render(
        request,
        "catalog/duplicate_groups.html",
        {"groups": groups, "page": page, "more": more},
    )
