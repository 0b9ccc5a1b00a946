"""OpenAPI schema generation for the one-APIView-per-operation style."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import append_meta
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated

from annotation.core.permissions import Rule
from annotation.core.serializers import (
    BAD_REQUEST,
    FORBIDDEN,
    NOT_FOUND,
    THROTTLED,
    TOO_LARGE,
    UNAUTHENTICATED,
    BadRequestOutputSerializer,
)

GENERIC_NAMES = {"Input", "Output", "Filter", "Params", "Query"}
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class SpecvetAutoSchema(AutoSchema):
    """Names nested `InputSerializer`/`OutputSerializer` classes after their view, so the
    components of different endpoints never collide; and documents the refusals every operation
    of this API may answer, from what the view declares (authentication, role rule, path
    parameters, pagination, input and its size, throttling). Refusals particular to one operation (409, 413,
    202) are declared on it with extend_schema."""

    def _get_serializer_name(
        self, serializer: Any, direction: str, bypass_extensions: bool = False
    ) -> str:
        name = super()._get_serializer_name(serializer, direction, bypass_extensions)
        if name in GENERIC_NAMES:
            view = type(self.view).__name__.removesuffix("Api")
            return f"{view}{name}"
        return name

    def _map_serializer_field(
        self, field: Any, direction: Any, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        """An uploaded file is the part's bytes (``format: binary``), not a URI string: a
        generated client then sends a file, where it sent a text the API refuses. (Only with
        COMPONENT_SPLIT_REQUEST would drf-spectacular say so itself, renaming every
        component.) Files appear only in request bodies here."""
        if isinstance(field, serializers.FileField) and direction == "request":
            meta = self._get_serializer_field_meta(field, direction)
            return append_meta({"type": "string", "format": "binary"}, meta)
        mapped: dict[str, Any] = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction == "request" and not field.read_only:
            _declare_refused_blanks(field, mapped)
        return mapped

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(*args, **kwargs)
        for parameter in (operation or {}).get("parameters", []):
            schema = parameter.get("schema", {})
            # A choice of "" (no filter) is a choice: not also "at least one character".
            if "" in schema.get("enum", ()) and schema.get("minLength"):
                del schema["minLength"]
            # DRF reads an optional query parameter sent empty (?page=, ?snr_min=) as not sent,
            # as a form's blank field: say so, or a number's type forbids what is accepted.
            if parameter.get("in") == "query" and not parameter.get("required"):
                parameter["allowEmptyValue"] = True
        return operation

    def map_parsers(self) -> list[Any]:
        """A view that reads JSON is documented as taking JSON alone. DRF's form parsers also
        read its body, but a schema offering one body in three encodings makes a generated
        client send the last one listed (multipart), which cannot carry nested objects."""
        media_types: list[Any] = super().map_parsers()
        return [m for m in media_types if m == "application/json"] or media_types

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for code, response in self._refusals().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, direction=direction)
        return responses

    def _refusals(self) -> dict[str, OpenApiResponse]:
        """The statuses this view may refuse with, whatever the operation does."""
        view, unsafe = self.view, self.method in UNSAFE_METHODS
        found: dict[str, OpenApiResponse] = {}
        parameters = self.get_override_parameters()
        # A page past the last is 404 (DRF's PageNumberPagination), not a refused input.
        pages = [p for p in parameters if isinstance(p, OpenApiParameter) and p.name == "page"]
        takes_input = (unsafe and self.get_request_serializer() is not None) or len(
            parameters
        ) > len(pages)
        # WorkflowApi (core.apis) answers a service's plain WorkflowError with 400.
        # Imported here: the API modules' extend_schema decorators load this module.
        from annotation.core.apis import WorkflowApi

        answers_workflow_errors = unsafe and isinstance(view, WorkflowApi)
        if takes_input or answers_workflow_errors:
            found["400"] = BAD_REQUEST
        if unsafe and self.get_request_serializer() is not None:
            found["413"] = TOO_LARGE  # webapp.api_errors
        if any(isinstance(permission, IsAuthenticated) for permission in view.get_permissions()):
            found["401"] = UNAUTHENTICATED
        rule = getattr(view, "role_rule", None)
        # Any signed-in account passes a rule without roles; only session writes need CSRF.
        if not (isinstance(rule, Rule) and rule.roles is None and not unsafe):
            found["403"] = FORBIDDEN
        paginated = self.method == "GET" and (
            getattr(view, "pagination_class", None) is not None or bool(pages)
        )
        # webapp.api_errors: a write naming an object that does not exist is a 404.
        if (
            "{" in self.path
            or paginated
            or (unsafe and _names_objects(self.get_request_serializer()))
        ):
            found["404"] = NOT_FOUND
        if view.get_throttles():
            found["429"] = THROTTLED
        return found


def _names_objects(serializer: Any) -> bool:
    """Whether a request serializer has a field naming a stored object (a related field, in a
    list or a nested serializer too), or says its own checks do (``names_objects = True``,
    raising ValidationError with code "does_not_exist")."""
    if isinstance(serializer, type):
        serializer = serializer()
    if not isinstance(serializer, serializers.BaseSerializer):
        return False
    if getattr(serializer, "names_objects", False):  # its own checks name objects
        return True
    fields = getattr(serializer, "fields", {})
    for field in fields.values():
        inner = getattr(field, "child", None) or getattr(field, "child_relation", None)
        if isinstance(field, serializers.RelatedField | serializers.ManyRelatedField):
            return True
        if isinstance(inner, serializers.RelatedField):
            return True
        if isinstance(field, serializers.BaseSerializer) and _names_objects(field):
            return True
    return False


def _declare_refused_blanks(field: Any, schema: dict[str, Any]) -> None:
    """What DRF refuses in a request field and drf-spectacular leaves out of its schema: a blank
    text (``""``, or only spaces once trimmed), a blank object reference (read as null) and an
    empty list where ``allow_empty`` is off. A generated client (and Schemathesis) then knows
    such a request is invalid instead of meeting a 400 for a request its schema allowed."""
    blank_refused = isinstance(field, serializers.CharField) and not field.allow_blank
    if isinstance(field, serializers.ChoiceField):
        blank_refused = False  # its enum says it (and "" may be one of its choices)
    if isinstance(field, serializers.RelatedField):
        blank_refused = True  # "" is read as null: refused, or not an object
    if blank_refused and schema.get("type") == "string" and "format" not in schema:
        schema.setdefault("minLength", 1)
        own_pattern = any(isinstance(v, RegexValidator) for v in field.validators)
        if getattr(field, "trim_whitespace", False) and not own_pattern:
            schema.setdefault("pattern", r"\S")  # trimmed before it is checked
    if isinstance(field, serializers.ListField) and not field.allow_empty:
        schema.setdefault("minItems", 1)


class BadRequestBodyExtension(OpenApiSerializerExtension):
    """A 400 body names the invalid fields as its keys, so it takes any key besides ``detail``
    and ``non_field_errors``: a list of messages, or the nested errors of a nested field."""

    target_class = BadRequestOutputSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = {
            "oneOf": [
                {"type": "array", "items": {}},
                {"type": "object", "additionalProperties": {}},
                {"type": "string"},
            ]
        }
        return schema
