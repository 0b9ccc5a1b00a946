"""PostgreSQL's JIT is off on each session unless POSTGRES_JIT (issue 34: it compiled the
vetting queue's nested queries for up to seconds each, to save milliseconds)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from annotation.core.sql import session_settings


class FakeConnection:
    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.statements: list[str] = []

    @contextmanager
    def cursor(self) -> Any:
        yield self

    def execute(self, sql: str) -> None:
        self.statements.append(sql)


def test_it_is_connected_to_every_new_database_session() -> None:
    keys = [entry[0][0] for entry in connection_created.receivers]
    assert "specvet_session_settings" in keys


def test_it_turns_jit_off_on_postgresql_unless_asked(settings) -> None:
    postgres = FakeConnection("postgresql")
    session_settings(sender=None, connection=postgres)
    assert postgres.statements == ["SET jit = off"]
    settings.POSTGRES_JIT = True
    kept = FakeConnection("postgresql")
    session_settings(sender=None, connection=kept)
    assert kept.statements == []


def test_it_leaves_other_databases_alone() -> None:
    sqlite = FakeConnection("sqlite")
    session_settings(sender=None, connection=sqlite)
    assert sqlite.statements == []


@pytest.mark.django_db
def test_a_postgresql_session_runs_without_jit() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
