"""Model endpoints through the API: staff register and change them; experts and ML engineers
list the enabled ones' names and models, to choose one (never their URLs or credentials)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import endpoints, permissions, services
from annotation.models import ModelEndpoint
from annotation.roles import Role, has_role


class EndpointChoiceSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelEndpoint
        fields = ["id", "name", "model", "enabled"]


class EndpointSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ModelEndpoint
        fields = [
            "id",
            "name",
            "base_url",
            "model",
            "credential_kind",
            "credential_env",
            "credential_file",
            "timeout",
            "enabled",
            "created_by",
            "created_at",
            "updated_at",
        ]


def _error(error: services.WorkflowError) -> Response:
    code = status.HTTP_403_FORBIDDEN if isinstance(error, services.NotAllowed) else 400
    return Response({"detail": str(error)}, status=code)


class EndpointListApi(APIView):
    """Staff: every endpoint in full. Others: the enabled endpoints' names and models."""

    role_rule = permissions.ENDPOINTS_READ

    @extend_schema(responses=EndpointSerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = ModelEndpoint.objects.select_related("created_by").order_by("name")
        if has_role(request.user, Role.STAFF):
            return Response(EndpointSerializer(rows, many=True).data)
        return Response(EndpointChoiceSerializer(rows.filter(enabled=True), many=True).data)


class EndpointInputSerializer(serializers.Serializer):
    base_url = serializers.CharField(max_length=endpoints.MAX_BASE_URL_CHARS)
    model = serializers.CharField(max_length=200)
    credential_env = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default="", help_text="a variable name"
    )
    credential_file = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default="", help_text="a file path"
    )
    timeout = serializers.FloatField(
        min_value=endpoints.TIMEOUT_RANGE[0], max_value=endpoints.TIMEOUT_RANGE[1], default=60.0
    )
    enabled = serializers.BooleanField(default=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for secret in ("api_key", "key", "token", "password"):
            if secret in self.initial_data:
                raise serializers.ValidationError(
                    {
                        secret: "an endpoint stores no key: name its credential_env or credential_file"
                    }
                )
        return attrs


class EndpointCreateApi(APIView):
    role_rule = permissions.ENDPOINTS_MANAGE

    class InputSerializer(EndpointInputSerializer):
        name = serializers.CharField(max_length=60)

    @extend_schema(request=InputSerializer, responses={201: EndpointSerializer})
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            endpoint = services.model_endpoint_create(actor=request.user, **params.validated_data)
        except services.WorkflowError as error:
            return _error(error)
        return Response(EndpointSerializer(endpoint).data, status=status.HTTP_201_CREATED)


class EndpointDetailApi(APIView):
    role_rule = permissions.ENDPOINTS_MANAGE

    @extend_schema(responses=EndpointSerializer)
    def get(self, request: Request, endpoint_id: int) -> Response:
        endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
        return Response(EndpointSerializer(endpoint).data)


class EndpointUpdateApi(APIView):
    """Change the fields given (the name never changes); ``enabled: false`` switches it off."""

    role_rule = permissions.ENDPOINTS_MANAGE

    class InputSerializer(EndpointInputSerializer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, partial=True, **kwargs)

    @extend_schema(request=InputSerializer, responses=EndpointSerializer)
    def post(self, request: Request, endpoint_id: int) -> Response:
        endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        given = {key: value for key, value in params.validated_data.items() if key in request.data}
        try:
            services.model_endpoint_update(endpoint=endpoint, actor=request.user, **given)
        except services.WorkflowError as error:
            return _error(error)
        return Response(EndpointSerializer(endpoint).data)
