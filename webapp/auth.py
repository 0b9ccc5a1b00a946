"""Authentication glue: API tokens that expire, and the client address login throttling counts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import caches
from django.core.exceptions import ObjectDoesNotExist
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token


class TokenExpired(exceptions.APIException):
    # Its own code, so a client can tell an expired token from a wrong one.
    status_code = 401
    default_code = "token_expired"
    auth_header = 'Token realm="api"'


def token_proved_at(token: Token) -> datetime:
    """When the password proof behind ``token`` was given (ApiTokenOrigin); a token issued
    before origins were recorded counts from its own creation."""
    try:
        return token.origin.proved_at
    except ObjectDoesNotExist:
        return token.created


def token_expires_at(token: Token) -> datetime:
    """API_TOKEN_TTL_HOURS after it was issued, and never later than API_TOKEN_FAMILY_MAX_HOURS
    after the password proof it was issued on (reissuing from a session keeps that proof)."""
    by_age = token.created + timedelta(hours=settings.API_TOKEN_TTL_HOURS)
    by_proof = token_proved_at(token) + timedelta(hours=settings.API_TOKEN_FAMILY_MAX_HOURS)
    return min(by_age, by_proof)


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF token authentication that refuses a token past token_expires_at."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user, token = super().authenticate_credentials(key)
        expired = token_expires_at(token)
        if timezone.now() >= expired:
            page, issue = reverse("api_token_page"), reverse("api_token_issue")
            raise TokenExpired(
                f"API token expired on {expired:%Y-%m-%d %H:%M} UTC (a token lasts "
                f"{settings.API_TOKEN_TTL_HOURS} hours, and at most "
                f"{settings.API_TOKEN_FAMILY_MAX_HOURS} hours after the password sign-in it "
                f"was issued on). Sign in and issue a new one at {page}, or POST {issue} "
                "signed in or with your password."
            )
        return user, token


SIGNED_IN_AT = "specvet_signed_in_at"  # session key: when this session's password was checked


@receiver(user_logged_in)
def remember_sign_in_time(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[SIGNED_IN_AT] = timezone.now().isoformat()


def session_signed_in_at(request: HttpRequest) -> datetime:
    """When the password behind this signed-in session was checked; sessions older than this
    record count from the account's last sign-in."""
    stored = request.session.get(SIGNED_IN_AT)
    if stored:
        return datetime.fromisoformat(stored)
    last_login = getattr(request.user, "last_login", None)
    return last_login if last_login is not None else timezone.now()


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


LOGIN_CACHE = "logins"  # shared by every app process (settings.CACHES)


def _address_key(address: str | None) -> str:
    return f"login-failures-by-address:{address or 'unknown'}"


def address_failures(request: HttpRequest) -> int:
    return int(caches[LOGIN_CACHE].get(_address_key(client_ip(request))) or 0)


@receiver(user_login_failed)
def count_failure_by_address(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any
) -> None:
    """django-axes locks a user name *and* address pair; an attacker who tries one password on
    many user names never reaches that limit. This counts every failure from an address over
    the cool-off window (fixed from its first failure)."""
    if request is None or not settings.AXES_ENABLED:
        return
    key, cache = _address_key(client_ip(request)), caches[LOGIN_CACHE]
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


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    """django-axes' answer to a locked-out attempt (AXES_LOCKOUT_CALLABLE): the lockout page for
    the login pages, and for an API (``POST /api/token/issue/`` with a password) the API's own
    JSON refusal, ``{"detail": ...}`` with Retry-After, as its schema documents."""
    from axes.helpers import (  # type: ignore[import-untyped]  # no type hints shipped
        get_client_username,
        get_cool_off,
        get_failure_limit,
    )

    cool_off = get_cool_off(request)
    limit = get_failure_limit(request, credentials)
    username = get_client_username(request, credentials) or ""
    if request.path.startswith("/api/"):
        wait = (
            f"try again in {cool_off} (h:mm:ss); each further failed attempt starts the wait again"
            if cool_off
            else "ask staff to unlock it"
        )
        response: HttpResponse = JsonResponse(
            {
                "detail": f"signing in as {username} from this address is locked after {limit} "
                f"failed attempts; {wait}"
            },
            status=429,
        )
        if cool_off:
            response["Retry-After"] = str(int(cool_off.total_seconds()))
        return response
    context = {"failure_limit": limit, "username": username, "cooloff_timedelta": cool_off}
    return render(request, settings.AXES_LOCKOUT_TEMPLATE, context, status=429)
