"""The signed-in user's API token: when it expires, and issuing a new one."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from annotation import permissions, services
from webapp.auth import token_expires_at


@permissions.require_role(permissions.SIGNED_IN)
@never_cache  # the page shows a new key once
@require_http_methods(["GET", "POST"])
def api_token_page(request: HttpRequest) -> HttpResponse:
    key = ""
    if request.method == "POST":
        key = services.api_token_issue(user=request.user).key  # type: ignore[arg-type]
    token = Token.objects.filter(user=request.user).first()
    expires_at = token_expires_at(token.created) if token is not None else None
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
