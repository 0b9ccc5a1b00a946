"""Helpers every page shares: the htmx request type, the signed-in user, pagination."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails
from rest_framework.request import Request

PAGE_SIZE = 50


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _expert(request: HttpRequest | Request) -> User:
    """The signed-in expert.

    Pages: LoginRequiredMiddleware keeps anonymous visitors out; APIs: IsAuthenticated (the
    default permission class) does. So `request.user` is never AnonymousUser here, which the
    type `User | AnonymousUser` cannot say: hence the cast.
    """
    return cast(User, request.user)


def _page(request: HttpRequest, rows: Any, *, size: int = PAGE_SIZE, param: str = "page") -> Page:
    return Paginator(rows, size).get_page(request.GET.get(param))


def _query_without(request: HttpRequest, *params: str) -> str:
    query = request.GET.copy()
    for param in params:
        query.pop(param, None)
    return query.urlencode()
