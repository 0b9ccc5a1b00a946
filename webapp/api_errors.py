"""DRF's exception handler, answering a body over Django's upload limits in JSON like every other
refusal: 413 over DATA_UPLOAD_MAX_MEMORY_SIZE, 400 over DATA_UPLOAD_MAX_NUMBER_FIELDS/FILES.

Django refuses such bodies with exceptions DRF leaves to Django, whose answer is an HTML 400
page with no reason, unlike the API's other refusals and unlike its schema."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http.multipartparser import MultiPartParserError
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError, ValidationError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response
from rest_framework.views import exception_handler


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


def _body_exception(exc: Exception, request: Any) -> Exception:
    """The API's refusal for Django's refusal of a body; other exceptions as they are."""
    if isinstance(exc, RequestDataTooBig):
        size = request.META.get("CONTENT_LENGTH", "?") if request is not None else "?"
        return PayloadTooLarge(
            f"the request body ({size} bytes) is over the "
            f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE}-byte limit (DATA_UPLOAD_MAX_MEMORY_SIZE); "
            "send less, or upload files as multipart where the API takes files"
        )
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return ParseError(f"the request body has too many fields or files: {exc}")
    if isinstance(exc, MultiPartParserError):
        return ParseError(f"Multipart form parse error - {exc}")  # DRF's words
    return exc


def body_refusal(exc: Exception, request: Any) -> tuple[int, str]:
    """(status, detail) of the API's answer to a body Django refused to read, for a caller
    outside DRF (webapp.middleware reads bodies before any view)."""
    refusal = _body_exception(exc, request)
    if isinstance(refusal, APIException):
        return refusal.status_code, str(refusal.detail)
    return status.HTTP_400_BAD_REQUEST, f"the request body cannot be read: {exc}"


MISSING = "does_not_exist"  # DRF's code for a reference (code, id, name) that names nothing


def _codes_all_missing(codes: Any) -> bool:
    if isinstance(codes, dict):
        return bool(codes) and all(_codes_all_missing(inner) for inner in codes.values())
    if isinstance(codes, list):
        return bool(codes) and all(_codes_all_missing(inner) for inner in codes)
    return codes == MISSING


def _messages(detail: Any, at: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [m for key, inner in detail.items() for m in _messages(inner, f"{at}{key}.")]
    if isinstance(detail, list):
        return [m for inner in detail for m in _messages(inner, at)]
    return [f"{at.rstrip('.')}: {detail}" if at else str(detail)]


def missing_reference(exc: Exception, request: Any) -> NotFound | None:
    """A write whose only fault is naming objects that do not exist (a task code, a run id, an
    export version): 404, like an id in the path, with every such field named; the request is
    well formed, so it is no 400. A query filter naming nothing keeps its 400 (or empty list)."""
    if not isinstance(exc, ValidationError) or request is None or request.method in SAFE_METHODS:
        return None
    if not _codes_all_missing(exc.get_codes()):
        return None
    return NotFound("; ".join(_messages(exc.detail)))


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    exc = missing_reference(exc, request) or exc
    return exception_handler(_body_exception(exc, request), context)
