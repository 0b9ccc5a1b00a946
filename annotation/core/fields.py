"""Serializer fields shared by the APIs."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

# Primary keys are 64-bit. A larger id names nothing, and SQLite refuses it inside IN (...)
# with an OverflowError (a 500) where PostgreSQL finds no row: refuse it as bad input instead.
MAX_ID = 2**63 - 1


def IdField(**kwargs: Any) -> serializers.IntegerField:  # noqa: N802 (reads like a field class)
    """An object id given in a request body or query."""
    return serializers.IntegerField(min_value=1, max_value=MAX_ID, **kwargs)
