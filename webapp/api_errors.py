"""DRF's exception handler, answering a body over Django's upload limits in JSON like every other
refusal: 413 over DATA_UPLOAD_MAX_MEMORY_SIZE, 400 over DATA_UPLOAD_MAX_NUMBER_FIELDS/FILES.

Django refuses such bodies with exceptions DRF leaves to Django, whose answer is an HTML 400
page with no reason, unlike the API's other refusals and unlike its schema."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        request = context.get("request")
        size = request.META.get("CONTENT_LENGTH", "?") if request is not None else "?"
        exc = PayloadTooLarge(
            f"the request body ({size} bytes) is over the "
            f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE}-byte limit (DATA_UPLOAD_MAX_MEMORY_SIZE); "
            "send less, or upload files as multipart where the API takes files"
        )
    elif isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        exc = ParseError(f"the request body has too many fields or files: {exc}")
    return exception_handler(exc, context)
