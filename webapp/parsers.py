"""The API's JSON parser: DRF's, refusing bodies nested deeper than MAX_JSON_DEPTH with 400."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant

from agent import bounded_json


class DepthLimitedJSONParser(JSONParser):
    """Python's json recurses once per nesting level, so ``[`` × 100,000 in a body would raise
    RecursionError (a 500); this parser measures the nesting first and answers 400."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            return bounded_json.loads(
                text,
                what="the request body",
                parse_constant=strict_constant if self.strict else None,
            )
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
