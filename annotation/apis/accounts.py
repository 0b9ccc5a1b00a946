"""Accounts and their roles through the API (staff only), the twin of the roles page."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import permissions, services
from annotation.roles import Role, accounts_with_roles, user_roles


class AccountRolesOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    is_active = serializers.BooleanField()
    is_superuser = serializers.BooleanField()
    roles = serializers.ListField(child=serializers.ChoiceField(choices=[r.value for r in Role]))


def _account(user: object) -> dict[str, object]:
    return {
        "id": user.pk,  # type: ignore[attr-defined]
        "username": user.get_username(),  # type: ignore[attr-defined]
        "is_active": user.is_active,  # type: ignore[attr-defined]
        "is_superuser": user.is_superuser,  # type: ignore[attr-defined]
        "roles": sorted(role.value for role in user_roles(user)),  # type: ignore[arg-type]
    }


class AccountRolesListApi(APIView):
    """Every account with its roles, by username; ``q`` filters by part of the username."""

    role_rule = permissions.ROLES_MANAGE

    @extend_schema(
        parameters=[OpenApiParameter("q", str, description="part of a username")],
        responses=AccountRolesOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        paginator = PageNumberPagination()
        rows = accounts_with_roles(request.query_params.get("q", "").strip()[:150])
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response([_account(user) for user in page])


class AccountRolesSetApi(APIView):
    """Give an account exactly the roles listed (each change is recorded in the audit log)."""

    role_rule = permissions.ROLES_MANAGE

    class InputSerializer(serializers.Serializer):
        roles = serializers.ListField(
            child=serializers.ChoiceField(choices=[r.value for r in Role]), allow_empty=True
        )

    class OutputSerializer(AccountRolesOutputSerializer):
        granted = serializers.ListField(child=serializers.CharField())
        revoked = serializers.ListField(child=serializers.CharField())

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request, user_id: int) -> Response:
        account = get_object_or_404(get_user_model(), pk=user_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            granted, revoked = services.user_roles_set(
                user=account,
                roles={Role(value) for value in params.validated_data["roles"]},
                actor=request.user,
            )
        except services.NotAllowed as error:
            return Response({"detail": str(error)}, status=status.HTTP_403_FORBIDDEN)
        account.refresh_from_db()
        data = _account(account) | {
            "granted": [r.value for r in granted],
            "revoked": [r.value for r in revoked],
        }
        return Response(data)
