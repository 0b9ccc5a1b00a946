"""Output serializers every domain's APIs share: usernames, pagination, jobs."""

from __future__ import annotations

from typing import Any

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
