"""Output serializers every domain's APIs share: usernames, pagination, jobs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.core.models import Job


def _username() -> serializers.SlugRelatedField:
    # Null when nobody holds the role or the account is gone: the schema must say so.
    return serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)


class JobOutputSerializer(serializers.ModelSerializer):
    created_by = _username()
    percent = serializers.IntegerField(read_only=True)
    finished = serializers.BooleanField(read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "state",
            "params",
            "result",
            "error",
            "total",
            "done",
            "failed",
            "percent",
            "finished",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]


def _paginated(request: Request, view: APIView, rows: Any, serializer: Any) -> Response:
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(rows, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)


# --- error bodies: what the API really answers when it refuses -----------------------------------


class ErrorOutputSerializer(serializers.Serializer):
    """A refusal (401, 403, 404, 409, 413, 429): DRF's and core.errors' ``{"detail": ...}``."""

    detail = serializers.CharField(help_text="why, in words a user can act on")


class ConflictOutputSerializer(ErrorOutputSerializer):
    """409: the object is not in a state where this applies (someone else may have moved it), or
    a save was based on a version that is no longer the latest (then ``head`` names the latest)."""

    head = serializers.IntegerField(
        required=False, help_text="the latest version number (only for a stale save)"
    )


# The schema adds the per-field keys (webapp.schema.BadRequestBodyExtension).
class BadRequestOutputSerializer(serializers.Serializer):
    """400: ``{"detail": ...}`` for a body that could not be read or a rule that refused, or for
    invalid input one list of messages per field (``{"rollouts": ["..."]}``; messages about the
    input as a whole under ``non_field_errors``; a nested field's errors nest the same way)."""

    detail = serializers.CharField(required=False)
    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)


# The responses of every operation that may answer them (webapp.schema adds them), and of the
# operations that declare them with extend_schema.
BAD_REQUEST = OpenApiResponse(
    BadRequestOutputSerializer,
    description="The input was refused: the body could not be read, a field is invalid "
    "(one list of messages per field), a rule refused the request, or a text (query "
    "parameter, field, file name) holds a NUL character (U+0000), which no text can store.",
)
UNAUTHENTICATED = OpenApiResponse(
    ErrorOutputSerializer,
    description="No credentials, a wrong token, or an expired one (sign in and issue a new one).",
)
FORBIDDEN = OpenApiResponse(
    ErrorOutputSerializer,
    description="Refused: the account's roles do not allow this (the answer names the role "
    "needed), an object rule refused it, or a session request came without its CSRF token.",
)
NOT_FOUND = OpenApiResponse(
    ErrorOutputSerializer,
    description="No such object, or one this account may not read (it is answered as if there "
    "were none); for a list, a page past the last.",
)
CONFLICT = OpenApiResponse(
    ConflictOutputSerializer,
    description="The object is not in a state where this applies (perhaps someone else moved "
    "it), or the save was based on an older version (head names the latest); nothing was saved.",
)
TOO_LARGE = OpenApiResponse(
    ErrorOutputSerializer,
    description="The request body is over DATA_UPLOAD_MAX_MEMORY_SIZE (the answer names it).",
)
THROTTLED = OpenApiResponse(
    ErrorOutputSerializer,
    description="Too many requests from this account; the answer says when to try again "
    "(Retry-After header).",
)
