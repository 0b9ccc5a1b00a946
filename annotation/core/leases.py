"""Leases: at most one live worker runs a given job or candidate, however often it is delivered.

With late acknowledgement a task's message can be delivered again while a worker still runs it
(Redis hands it out again after the visibility timeout). The lease is a PostgreSQL session
advisory lock: the server drops it when the holder's connection ends, so the lease of a killed
worker ends with the worker and a redelivered task takes over at once, with no heartbeat and no
stale "running" flag to expire. It needs a direct or session-pooled connection (not pgbouncer's
transaction pooling). On SQLite (one machine, the embedded default) the lease is always granted.
``leases_held`` reads which leases are held: a "running" candidate whose lease nobody holds was
left by a worker that died (annotation.inspections.interrupted).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection


def lease_key(kind: str, pk: int) -> int:
    """A signed 64-bit advisory-lock key for (kind, pk), stable across processes."""
    digest = hashlib.blake2b(f"specvet:{kind}:{pk}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def lease(kind: str, pk: int) -> Iterator[bool]:
    """Hold the lease on (kind, pk) while the block runs; yield False if another worker holds it."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = lease_key(kind, pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except DatabaseError:
                # A broken connection has already dropped the lock with its session.
                pass


@contextmanager
def leases(kind: str, pks: list[int]) -> Iterator[set[int]]:
    """Hold the leases on (kind, pk) for each pk that no other worker holds, while the block
    runs; yield the set of those pks. One statement takes them and one gives them back."""
    if connection.vendor != "postgresql":
        yield set(pks)
        return
    keys = {lease_key(kind, pk): pk for pk in dict.fromkeys(pks)}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key FROM unnest(%s::bigint[]) AS key WHERE pg_try_advisory_lock(key)",
            [list(keys)],
        )
        held = [row[0] for row in cursor.fetchall()]
    try:
        yield {keys[key] for key in held}
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_advisory_unlock(key) FROM unnest(%s::bigint[]) AS key", [held]
                    )
            except DatabaseError:
                pass


def leases_held(kind: str, pks: Iterable[int]) -> set[int] | None:
    """The pks whose lease on (kind, pk) some session holds now, any worker's or this one's
    (a read of ``pg_locks``: a bigint advisory key shows as its high half in ``classid``, its
    low half in ``objid``, ``objsubid`` 1). None where the database has no leases (SQLite):
    there, nothing tells a live worker from a dead one."""
    if connection.vendor != "postgresql":
        return None
    keys = {lease_key(kind, pk): pk for pk in dict.fromkeys(pks)}
    if not keys:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key FROM (SELECT (classid::bigint << 32) | objid::bigint AS key FROM pg_locks "
            "WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())) AS held "
            "WHERE key = ANY(%s::bigint[])",
            [list(keys)],
        )
        return {keys[row[0]] for row in cursor.fetchall()}
