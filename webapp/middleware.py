"""Security headers every response carries; the site's own error pages; quiet refusals; NUL
characters refused in one place."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render

from agent import bounded_json


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


# --- NUL characters --------------------------------------------------------------------------------

NUL = "\x00"


class NulCharacterRefusalMiddleware:
    """Refuse a request whose text holds a NUL character (U+0000), naming where, before any view.

    PostgreSQL text cannot store NUL: a query or a row holding one raised DataError, a 500, on
    any filter or field that reached the database (`?q=`, a task code, a name). Refused here
    once for every page and API, whatever the field: the query string, form fields and upload
    file names, a JSON body (``\\u0000`` escapes, at any depth), and the path. Pages get a 400
    page, APIs a JSON 400 ``{"detail": ...}``; a path with a NUL names nothing, so it is 404.
    File contents are not text and are not looked at.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path:
            return self._refuse(request, "the address (path)", status=404)
        try:
            where = nul_location(request)
        except (SuspiciousOperation, MultiPartParserError, UnreadablePostError) as error:
            # A multipart body Django cannot parse (or with too many files or fields), consumed
            # now: refused as the view would have refused it (an API in JSON, a page by
            # Django's 400).
            if not request.path.startswith("/api/"):
                raise
            # Here, not at the top: logging's set-up imports this module before the apps load.
            from webapp.api_errors import body_refusal

            status, detail = body_refusal(error, request)
            return JsonResponse({"detail": detail}, status=status)
        if where is not None:
            return self._refuse(request, where, status=400)
        return self.get_response(request)

    @staticmethod
    def _refuse(request: HttpRequest, where: str, *, status: int) -> HttpResponse:
        detail = (
            f"{where} holds a NUL character (\\x00), which no text here can contain; "
            "remove it and send the request again"
        )
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=status)
        if status == 404:
            return render(request, "404.html", {"reason": detail}, status=404)
        return render(request, "400.html", {"exception": detail}, status=400)


def nul_location(request: HttpRequest) -> str | None:
    """Where the request's text holds a NUL character ('the query parameter "q"', 'the field
    "policy.name" of the JSON body', ...), or None.

    Reading a form body here parses it once for the view too (Django keeps request.POST, DRF
    reads it from there). A body too large to read is left to the view (it is not read, so the
    view meets the same refusal); a multipart body Django cannot parse is consumed, so its
    error is raised for the caller to answer."""
    for key, values in request.GET.lists():
        if NUL in key or any(NUL in value for value in values):
            return f'the query parameter "{key.replace(NUL, "")}"'
    if request.method in {"GET", "HEAD", "OPTIONS"} or not request.META.get("CONTENT_LENGTH"):
        return None
    content_type = request.content_type or ""
    if content_type == "application/x-www-form-urlencoded":
        try:
            request.POST  # noqa: B018  (parsed now, so refusals below are per field)
        except (RequestDataTooBig, TooManyFieldsSent):
            return None  # nothing was kept: the view meets the same error
    if content_type in {"multipart/form-data", "application/x-www-form-urlencoded"}:
        for key, values in request.POST.lists():
            if NUL in key or any(NUL in value for value in values):
                return f'the form field "{key.replace(NUL, "")}"'
        for key, uploads in request.FILES.lists():
            if any(NUL in (upload.name or "") for upload in uploads):
                return f'the file name in "{key}"'
    elif content_type == "application/json" or content_type.endswith("+json"):
        try:
            return _json_nul_location(request.body)
        except RequestDataTooBig:
            return None  # not read: the view answers it (the API with its 413)
    return None


def _json_nul_location(body: bytes) -> str | None:
    """Where a JSON body holds NUL. JSON writes it as an escape (a raw NUL byte is not JSON,
    and the API's parser refuses it), so a body without the escape is not parsed twice."""
    if b"\\u0000" not in body:
        return None
    try:
        data = bounded_json.loads(body, what="the request body")
    except ValueError:
        return None  # the API's parser refuses it with the reason
    found = _json_path_with_nul(data)
    if found is None:
        return None
    if not found:
        return "the JSON body"
    return f'the field "{_json_path_text(found)}" of the JSON body'


def _json_path_with_nul(value: object) -> list[str | int] | None:
    """The keys and indexes down to the first key or string holding NUL ([] for the whole
    body), or None."""
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return where
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                if NUL in str(key):
                    return [*where, str(key).replace(NUL, "")]
                stack.append((inner, [*where, str(key)]))
        elif isinstance(item, list):
            stack.extend((inner, [*where, i]) for i, inner in reversed(list(enumerate(item))))
    return None


def _json_path_text(path: list[str | int]) -> str:
    """``policy.name``, ``files[2]``."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text
