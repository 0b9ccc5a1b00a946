"""SQL that the ORM builds too slowly for the hot path of a candidate."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import Model


def rows_insert(objs: Sequence[Model], *, on_conflict: str = "") -> None:
    """INSERT model instances (all of one model) in one statement of VALUES rows, followed by
    ``on_conflict`` as given (``ON CONFLICT ...``; PostgreSQL and SQLite).

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
    params = [
        field.get_db_prep_save(field.pre_save(obj, True), connection)
        for obj in objs
        for field in fields
    ]
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES {', '.join([row] * len(objs))} {on_conflict}",
            params,
        )
