"""Authentication glue: API tokens that expire, and the client address login throttling counts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest
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
