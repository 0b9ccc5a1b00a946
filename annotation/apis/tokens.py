"""The signed-in user's API token: its expiry, and issuing a new one."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import permissions, services
from webapp.auth import token_expires_at


class TokenStatusSerializer(serializers.Serializer):
    created = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expired = serializers.BooleanField()


def _status(token: Token) -> dict[str, object]:
    expires_at = token_expires_at(token.created)
    return {
        "created": token.created,
        "expires_at": expires_at,
        "expired": expires_at <= timezone.now(),
    }


class ApiTokenDetailApi(APIView):
    role_rule = permissions.SIGNED_IN

    class OutputSerializer(serializers.Serializer):
        token = TokenStatusSerializer(allow_null=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        token = Token.objects.filter(user=request.user).first()
        return Response({"token": _status(token) if token is not None else None})


class ApiTokenIssueApi(APIView):
    """Issue a new token for the signed-in user; the previous one stops working at once. The key
    is shown in this answer only."""

    role_rule = permissions.SIGNED_IN

    class OutputSerializer(TokenStatusSerializer):
        key = serializers.CharField()

    @extend_schema(request=None, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        token = services.api_token_issue(user=request.user)
        body = self.OutputSerializer({**_status(token), "key": token.key}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})
