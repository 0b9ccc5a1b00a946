"""The hot path's INSERT: bound parameters, PNG bytes intact, counted like any statement."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation.core import sql
from annotation.core.models import ImageBlob
from annotation.curation.services import PngsByHash, image_blobs_store

EVERY_BYTE = bytes(range(256)) * 4  # NUL, quotes and backslashes included


def _blob(png: bytes) -> ImageBlob:
    return ImageBlob(sha256=hashlib.sha256(png).hexdigest(), png=png)


def test_it_stores_every_byte_value_unchanged(db):
    sql.rows_insert([_blob(EVERY_BYTE)])
    stored = ImageBlob.objects.get(sha256=hashlib.sha256(EVERY_BYTE).hexdigest())
    assert bytes(stored.png) == EVERY_BYTE
    assert stored.created_at is not None  # auto_now_add filled as bulk_create fills it


def test_it_splits_an_insert_past_the_bound_parameter_limit(db, monkeypatch):
    monkeypatch.setattr(sql, "MAX_BOUND_PARAMETERS", 7)  # two rows of three fields per statement
    pngs = [b"png-%d" % index for index in range(5)]
    with CaptureQueriesContext(connection) as queries:
        sql.rows_insert([_blob(png) for png in pngs])
    assert len(queries.captured_queries) == 3
    assert ImageBlob.objects.filter(png__in=pngs).count() == 5


def test_it_numbers_placeholders_as_the_database_s_own_cursor_reads_them(db):
    marks = sql.placeholders(3)
    assert marks == (["$1", "$2", "$3"] if connection.vendor == "postgresql" else ["%s"] * 3)
    with sql.bound_cursor() as cursor:
        cursor.execute(
            f"SELECT {marks[2]}::text || {marks[0]}::text || {marks[1]}::text"
            if connection.vendor == "postgresql"
            else "SELECT %s || %s || %s",
            ["a", "b", "c"],
        )
        assert cursor.fetchone()[0] == ("cab" if connection.vendor == "postgresql" else "abc")


def test_it_shows_its_statements_to_djangos_execute_wrappers(db):
    seen: list[str] = []

    def wrapper(execute, statement, params, many, context):
        seen.append(statement)
        return execute(statement, params, many, context)

    with connection.execute_wrapper(wrapper):
        sql.rows_insert([_blob(b"counted")])
    assert len(seen) == 1 and seen[0].startswith("INSERT INTO")


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_it_sends_bytes_as_a_bound_parameter_not_in_the_text(db):
    with CaptureQueriesContext(connection) as queries:
        sql.rows_insert([_blob(b"\x00secret-bytes\xff")])
    (query,) = queries.captured_queries
    # Django's own cursor merges them on the client: '\\x00736563...'::bytea in the text.
    assert b"secret-bytes".hex() not in query["sql"]
    assert "%s" not in query["sql"] and "$1" in query["sql"]


def test_it_hashes_a_png_met_twice_once_and_stores_it_once(db, monkeypatch):
    png = b"\x89PNG\r\n\x1a\nshared"
    calls: list[bytes] = []
    real = hashlib.sha256

    def counting(data: bytes = b""):
        calls.append(data)
        return real(data)

    pngs = PngsByHash()
    monkeypatch.setattr("annotation.curation.services.hashlib.sha256", counting)
    first, second = pngs(png), pngs(png)
    monkeypatch.undo()
    assert first == second == ("png_sha256", real(png).hexdigest())
    assert len(calls) == 1
    image_blobs_store(pngs.pngs)
    assert bytes(ImageBlob.objects.get(sha256=first[1]).png) == png
