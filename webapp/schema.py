"""OpenAPI schema generation for the one-APIView-per-operation style."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema

GENERIC_NAMES = {"Input", "Output", "Filter", "Params", "Query"}


class SpecvetAutoSchema(AutoSchema):
    """Names nested `InputSerializer`/`OutputSerializer` classes after their view, so the
    components of different endpoints never collide."""

    def _get_serializer_name(
        self, serializer: Any, direction: str, bypass_extensions: bool = False
    ) -> str:
        name = super()._get_serializer_name(serializer, direction, bypass_extensions)
        if name in GENERIC_NAMES:
            view = type(self.view).__name__.removesuffix("Api")
            return f"{view}{name}"
        return name
