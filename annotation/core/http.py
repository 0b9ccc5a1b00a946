"""Helpers every page shares: the htmx request type, the signed-in user, pagination."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

PAGE_SIZE = 50


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _expert(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in expert (LoginRequiredMiddleware keeps anonymous visitors out)."""
    return request.user  # type: ignore[return-value]


def _page(request: HttpRequest, rows: Any, *, size: int = PAGE_SIZE, param: str = "page") -> Page:
    return Paginator(rows, size).get_page(request.GET.get(param))


def _query_without(request: HttpRequest, *params: str) -> str:
    query = request.GET.copy()
    for param in params:
        query.pop(param, None)
    return query.urlencode()
