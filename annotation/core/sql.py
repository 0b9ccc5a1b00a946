"""SQL that the ORM builds too slowly for the hot path of a candidate."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection
from django.db.models import Model


def session_settings(*, sender: Any, connection: Any, **kwargs: Any) -> None:
    """Each new PostgreSQL session: JIT compilation off unless settings.POSTGRES_JIT (Django's
    connection_created signal; one SET per connection, kept for CONN_MAX_AGE)."""
    from django.conf import settings

    if connection.vendor == "postgresql" and not getattr(settings, "POSTGRES_JIT", False):
        with connection.cursor() as cursor:
            cursor.execute("SET jit = off")


# PostgreSQL's wire protocol numbers a statement's parameters in 16 bits.
MAX_BOUND_PARAMETERS = 65535


@contextmanager
def bound_cursor() -> Iterator[Any]:
    """A cursor that sends its parameters apart from the SQL text (server-side binding) on
    PostgreSQL, Django's own cursor elsewhere.

    Django's psycopg cursors merge parameters into the text on the client, so a PNG travels as a
    hex literal twice its size that the server then parses back, and every JSON string is
    escaped first. Bound parameters go as they are (bytes in binary). The cursor is wrapped as
    Django wraps its own, so execute wrappers and query capture still see each statement.

    On PostgreSQL it is psycopg's ``RawCursor``: placeholders are PostgreSQL's own ``$1, $2, ...``
    (``placeholders`` writes them), not ``%s``. A ``%s`` cursor scans the text of every statement
    for its placeholders and caches none past 4 KB; for the multi-row INSERT of a batch's live
    steps, that scan was most of the CPU this process spent writing them.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg

    connection.ensure_connection()
    raw = psycopg.RawCursor(connection.connection)
    # django-stubs type these as taking a wrapper; Django passes them the driver's cursor.
    driver_cursor: Any = raw
    wrapped = (
        connection.make_debug_cursor(driver_cursor)
        if connection.queries_logged
        else connection.make_cursor(driver_cursor)
    )
    try:
        yield wrapped
    finally:
        raw.close()


def placeholders(count: int) -> list[str]:
    """``count`` parameter placeholders for a ``bound_cursor`` statement: ``$1`` to ``$count``
    on PostgreSQL, ``%s`` elsewhere."""
    if connection.vendor == "postgresql":
        return [f"${number}" for number in range(1, count + 1)]
    return ["%s"] * count


def rows_insert(objs: Sequence[Model], *, on_conflict: str = "") -> None:
    """INSERT model instances (all of one model) in one statement of VALUES rows (more only
    past MAX_BOUND_PARAMETERS values), followed by ``on_conflict`` as given
    (``ON CONFLICT ...``; PostgreSQL and SQLite).

    Each value is prepared as ``bulk_create`` prepares it (``pre_save`` fills ``auto_now_add``),
    without its compiler, which spends more CPU on a candidate's rows than the server takes to
    store them. Plain values only (no expressions); an auto primary key is left to the database
    and not read back.
    """
    if not objs:
        return
    meta = type(objs[0])._meta
    auto = meta.auto_field
    fields = [field for field in meta.concrete_fields if field is not auto]
    quote = connection.ops.quote_name
    head = f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
    per_statement = max(1, MAX_BOUND_PARAMETERS // len(fields))
    with bound_cursor() as cursor:
        for start in range(0, len(objs), per_statement):
            part = objs[start : start + per_statement]
            params = [
                field.get_db_prep_save(field.pre_save(obj, True), connection)
                for obj in part
                for field in fields
            ]
            marks = placeholders(len(params))
            width = len(fields)
            rows = ", ".join(
                "(" + ", ".join(marks[at : at + width]) + ")" for at in range(0, len(marks), width)
            )
            cursor.execute(f"{head}VALUES {rows} {on_conflict}", params)
