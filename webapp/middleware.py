"""Security headers every response carries; the site's own error pages; quiet refusals."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render


class ContentSecurityPolicyMiddleware:
    """No inline scripts, no eval, nothing from other origins (assets are vendored).

    Styles allow 'unsafe-inline' because Plotly and htmx set element styles at run time; scripts,
    the dangerous part, come only from this origin.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        response.setdefault("Referrer-Policy", "same-origin")
        response.setdefault("X-Content-Type-Options", "nosniff")
        response.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


class FriendlyErrorPagesMiddleware:
    """The site's own 404 and 500 pages even with DEBUG on (the demo runs with it on).

    With DEBUG, Django answers a missing page or object with its technical 404, which lists every
    URL pattern, and a crash with the technical 500. The demo should look like production: a page
    that says what happened and where to go. FRIENDLY_ERROR_PAGES=False brings Django's back for
    development. A 403 needs nothing here: Django renders 403.html in either mode.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    @staticmethod
    def active() -> bool:
        return bool(settings.DEBUG and getattr(settings, "FRIENDLY_ERROR_PAGES", True))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # No URL pattern matched (process_exception is not called for that one).
        unresolved = getattr(request, "resolver_match", None) is None
        html = str(response.get("Content-Type", "")).startswith("text/html")
        if response.status_code == 404 and unresolved and html and self.active():
            return not_found_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not self.active() or request.path.startswith("/api/"):
            return None
        if isinstance(exception, Http404):
            return not_found_response(request)
        if isinstance(exception, PermissionDenied | BadRequest | SuspiciousOperation):
            return None  # Django's own handling (403.html, 400) already looks like production
        logging.getLogger("django.request").error(
            "Internal Server Error: %s",
            request.path,
            exc_info=exception,
            extra={"status_code": 500, "request": request},
        )
        response = render(request, "500.html", {"request_path": request.path}, status=500)
        response._has_been_logged = True  # type: ignore[attr-defined]  # once, with the traceback
        return response


def not_found_response(request: HttpRequest) -> HttpResponse:
    return render(request, "404.html", {"request_path": request.path}, status=404)


class RefusalWithoutTraceback(logging.Filter):
    """A 403 is a refusal the rules chose, not a fault: its log line keeps no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
