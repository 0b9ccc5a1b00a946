"""API twins of the core pages (accounts and roles, tokens, the audit log, model endpoints, jobs)
and WorkflowApi, the base that answers a service's refusal through core.errors."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import PermissionDenied
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.core import endpoints, errors, permissions, selectors, services
from annotation.core.http import _expert
from annotation.core.models import AuditLog, Job, ModelEndpoint
from annotation.core.permissions import AUDIT_LOG_READ, job_cancel_allowed
from annotation.core.roles import Role, accounts_with_roles, has_role, user_roles
from annotation.core.serializers import (
    BAD_REQUEST,
    ErrorOutputSerializer,
    JobOutputSerializer,
    _paginated,
)
from webapp.auth import session_signed_in_at, token_expires_at


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

    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.ROLES_MANAGE

    @extend_schema(
        parameters=[OpenApiParameter("q", str, description="part of a username")],
        responses=AccountRolesOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        paginator = PageNumberPagination()
        rows = accounts_with_roles(request.query_params.get("q", "").strip()[:150])
        page = paginator.paginate_queryset(rows, request, view=self)
        assert page is not None  # PAGE_SIZE is set, so the paginator always pages
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
                actor=_expert(request),
            )
        except errors.WorkflowError as error:
            return error_response(error)
        account.refresh_from_db()
        data = _account(account) | {
            "granted": [r.value for r in granted],
            "revoked": [r.value for r in revoked],
        }
        return Response(data)


ERROR = OpenApiResponse(
    response=ErrorOutputSerializer, description="The rule or reason that refused the request."
)


class TokenStatusSerializer(serializers.Serializer):
    created = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expired = serializers.BooleanField()


def _status(token: Token) -> dict[str, object]:
    expires_at = token_expires_at(token)
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
        token = Token.objects.filter(user=_expert(request)).first()
        return Response({"token": _status(token) if token is not None else None})


class ApiTokenIssueApi(APIView):
    """Issue a new token for the signed-in user; the previous one stops working at once. The key
    is shown in this answer only. A signed-in session may ask; a call made with a token must send
    the account's password (a token never issues its own successor)."""

    role_rule = permissions.SIGNED_IN

    class InputSerializer(serializers.Serializer):
        password = serializers.CharField(
            required=False, write_only=True, trim_whitespace=False, max_length=4096
        )

    class OutputSerializer(TokenStatusSerializer):
        key = serializers.CharField()

    @extend_schema(
        request=InputSerializer, responses={201: OutputSerializer, 400: BAD_REQUEST, 403: ERROR}
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        user = _expert(request)
        password = params.validated_data.get("password")
        if password is not None:
            # authenticate() runs django-axes too: wrong passwords here count toward lockout.
            checked = authenticate(
                request._request, username=user.get_username(), password=password
            )
            if checked is None or checked.pk != user.pk:
                return error_response(errors.NotAllowed("the password is wrong (or locked out)"))
            proved_at, via = timezone.now(), "password"
        elif isinstance(request.successful_authenticator, SessionAuthentication):
            proved_at, via = session_signed_in_at(request._request), "session"
        else:
            return error_response(
                errors.NotAllowed(
                    "a token cannot issue its successor: send the account's password as "
                    '{"password": "..."}, or sign in and issue one at /accounts/token/'
                )
            )
        token = services.api_token_issue(user=user, proved_at=proved_at, via=via)
        body = self.OutputSerializer({**_status(token), "key": token.key}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class AuditLogListApi(APIView):
    """Every recorded decision, newest first; filter by object, actor (username) and action."""

    role_rule = AUDIT_LOG_READ

    class FilterSerializer(serializers.Serializer):
        object_type = serializers.CharField(required=False, allow_blank=True, max_length=60)
        object_pk = serializers.CharField(required=False, allow_blank=True, max_length=64)
        actor = serializers.CharField(required=False, allow_blank=True, max_length=150)
        action = serializers.CharField(required=False, allow_blank=True, max_length=60)

    class OutputSerializer(serializers.ModelSerializer):
        actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
            slug_field="username", read_only=True, allow_null=True
        )

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
        rows = selectors.audit_log_list(user=request.user, **filters.validated_data)
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)


class EndpointChoiceSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelEndpoint
        fields = ["id", "name", "model", "enabled"]


class EndpointSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

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


def error_response(error: errors.WorkflowError) -> Response:
    """A refused action, answered as every page answers it (core.errors.http_status)."""
    return Response(errors.error_body(error), status=errors.http_status(error))


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
            endpoint = services.model_endpoint_create(
                actor=_expert(request), **params.validated_data
            )
        except errors.WorkflowError as error:
            return error_response(error)
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
            services.model_endpoint_update(endpoint=endpoint, actor=_expert(request), **given)
        except errors.WorkflowError as error:
            return error_response(error)
        return Response(EndpointSerializer(endpoint).data)


class WorkflowApi(APIView):
    """Answers the services' refusals with their message and the matching status."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, errors.WorkflowError):
            return error_response(exc)
        return super().handle_exception(exc)


# --- jobs ------------------------------------------------------------------------------------


class JobListApi(WorkflowApi):
    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.JOBS_READ

    @extend_schema(responses=JobOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = selectors.jobs_visible_to(
            user=request.user, rows=Job.objects.select_related("created_by").order_by("-id")
        )
        return _paginated(request, self, rows, JobOutputSerializer)


class JobDetailApi(WorkflowApi):
    role_rule = permissions.JOBS_READ

    @extend_schema(responses=JobOutputSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = get_object_or_404(
            selectors.jobs_visible_to(
                user=request.user, rows=Job.objects.select_related("created_by")
            ),
            pk=job_id,
        )
        return Response(JobOutputSerializer(job).data)


class JobCancelApi(WorkflowApi):
    role_rule = permissions.JOB_CONTROL

    @extend_schema(
        request=None,
        responses={
            200: inline_serializer(
                "JobCancelOutput",
                {"cancelled": serializers.BooleanField(), "job": JobOutputSerializer()},
            ),
            403: ERROR,
        },
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = get_object_or_404(selectors.jobs_visible_to(user=request.user), pk=job_id)
        if not job_cancel_allowed(job, _expert(request)):
            raise PermissionDenied("only the job's creator or staff can cancel it")
        cancelled = services.job_cancel(job=job, actor=_expert(request))
        job.refresh_from_db()
        return Response({"cancelled": cancelled, "job": JobOutputSerializer(job).data})
