"""Authentication glue: API tokens that expire, and the client address login throttling counts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication


class TokenExpired(exceptions.APIException):
    # Its own code, so a client can tell an expired token from a wrong one.
    status_code = 401
    default_code = "token_expired"
    auth_header = 'Token realm="api"'


def token_expires_at(created: datetime) -> datetime:
    return created + timedelta(hours=settings.API_TOKEN_TTL_HOURS)


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF token authentication that refuses a token older than API_TOKEN_TTL_HOURS."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user, token = super().authenticate_credentials(key)
        expired = token_expires_at(token.created)
        if timezone.now() >= expired:
            page, issue = reverse("api_token_page"), reverse("api_token_issue")
            raise TokenExpired(
                f"API token expired on {expired:%Y-%m-%d %H:%M} UTC (tokens last "
                f"{settings.API_TOKEN_TTL_HOURS} hours). Issue a new one at {page} "
                f"or POST {issue} signed in."
            )
        return user, token


def client_ip(request: HttpRequest) -> str | None:
    """The address login throttling counts: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT proxies in
    front, the address the outermost trusted proxy saw (entries a client forged further left in
    X-Forwarded-For are ignored)."""
    remote = request.META.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    return hops[-count] if len(hops) >= count else remote


# --- failed logins per address (spraying many user names) ----------------------------------------


def _address_key(address: str | None) -> str:
    return f"login-failures-by-address:{address or 'unknown'}"


def address_failures(request: HttpRequest) -> int:
    return int(cache.get(_address_key(client_ip(request))) or 0)


@receiver(user_login_failed)
def count_failure_by_address(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any
) -> None:
    """django-axes locks a user name *and* address pair; an attacker who tries one password on
    many user names never reaches that limit. This counts every failure from an address over
    the cool-off window (fixed from its first failure)."""
    if request is None or not settings.AXES_ENABLED:
        return
    key = _address_key(client_ip(request))
    cache.add(key, 0, timeout=int(settings.AXES_COOLOFF_TIME.total_seconds()))
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=int(settings.AXES_COOLOFF_TIME.total_seconds()))


class LoginAddressThrottleMiddleware:
    """Refuse login attempts (429) from an address with LOGIN_ADDRESS_FAILURE_LIMIT failures in
    the cool-off window, whatever user names they tried. The limit is far above the per-user one
    so a shared address (an institute behind one NAT) is not shut out by a few typos."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.method == "POST"
            and settings.AXES_ENABLED
            and request.path in {reverse("login"), reverse("admin:login")}
            and address_failures(request) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT
        ):
            return render(
                request,
                "registration/locked_out.html",
                {
                    "by_address": True,
                    "failure_limit": settings.LOGIN_ADDRESS_FAILURE_LIMIT,
                    "cooloff_timedelta": settings.AXES_COOLOFF_TIME,
                },
                status=429,
            )
        return self.get_response(request)
