"""The audit log through the API (staff only), the twin of the audit log page."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import selectors
from annotation.models import AuditLog
from annotation.permissions import AUDIT_LOG_READ


class AuditLogListApi(APIView):
    """Every recorded decision, newest first; filter by object, actor (username) and action."""

    role_rule = AUDIT_LOG_READ

    class FilterSerializer(serializers.Serializer):
        object_type = serializers.CharField(required=False, allow_blank=True, max_length=60)
        object_pk = serializers.CharField(required=False, allow_blank=True, max_length=64)
        actor = serializers.CharField(required=False, allow_blank=True, max_length=150)
        action = serializers.CharField(required=False, allow_blank=True, max_length=60)

    class OutputSerializer(serializers.ModelSerializer):
        actor = serializers.SlugRelatedField(slug_field="username", read_only=True)

        class Meta:
            model = AuditLog
            fields = [
                "id",
                "created_at",
                "actor",
                "action",
                "object_type",
                "object_pk",
                "from_state",
                "to_state",
                "comment",
                "data",
            ]

    @extend_schema(
        parameters=[FilterSerializer, OpenApiParameter("page", int, description="1-based page")],
        responses=inline_serializer(
            "AuditLogPage",
            {
                "count": serializers.IntegerField(),
                "next": serializers.URLField(allow_null=True),
                "previous": serializers.URLField(allow_null=True),
                "results": OutputSerializer(many=True),
            },
        ),
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = selectors.audit_log_list(**filters.validated_data)
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)
