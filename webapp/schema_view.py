"""The view serving the OpenAPI schema (its own module: drf-spectacular's view module loads
DEFAULT_SCHEMA_CLASS, webapp.schema, when it is imported)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from annotation.core.serializers import BadRequestOutputSerializer

SCHEMA_FORMATS = ("json", "yaml")


class SchemaView(SpectacularAPIView):
    """The served OpenAPI schema, refusing an unknown ``?format=`` with a documented 400.

    DRF's content negotiation answered ``?format=AAA`` with a 404 the schema did not list
    (rendered as YAML, since no renderer matched)."""

    @extend_schema(
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(
                BadRequestOutputSerializer,
                description="format is neither json nor yaml (the answer names the choices).",
            ),
        }
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        chosen = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE or "format")
        if chosen is not None and chosen not in SCHEMA_FORMATS:
            if force:  # the refusal below, answered as the API's other refusals
                return JSONRenderer(), JSONRenderer.media_type
            raise ValidationError(
                {
                    "format": [
                        f"format {chosen!r} is not one of {', '.join(SCHEMA_FORMATS)} "
                        "(or leave it out for YAML, or ask with an Accept header)"
                    ]
                }
            )
        return super().perform_content_negotiation(request, force=force)
