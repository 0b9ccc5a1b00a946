"""The app's PostgreSQL role cannot rewrite the audit log by any route the issue tried.

Run with DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>: the test database's tables are
owned by the role the tests connect as (the owner); ``manage.py db_roles`` makes the app role,
and each attempt runs under ``SET ROLE`` to it. Roles are transactional in PostgreSQL, so the
role vanishes with the test's transaction.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from annotation.core import services as core_services
from annotation.core.db_roles import RoleSetupError, app_role_statements

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL roles"),
]

APP = "specvet_app_h22_test"


@pytest.fixture
def app_role(db, staff):
    call_command("db_roles", APP)
    return core_services.audit_log_record(actor=staff, action="test_entry", obj=staff)


def as_app(statement: str, params=None):
    """Run ``statement`` as the app role; the savepoint keeps the test's transaction usable."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {APP}")
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE annotation_auditlog SET comment = 'rewritten'",
        "DELETE FROM annotation_auditlog",
        "TRUNCATE annotation_auditlog",
        "ALTER TABLE annotation_auditlog DISABLE TRIGGER ALL",
        "DROP TRIGGER annotation_auditlog_append_only ON annotation_auditlog",
        "SET session_replication_role = replica",
        "CREATE TABLE annotation_auditlog_copy (id int)",
    ],
)
def test_it_refuses_the_app_role_every_way_to_rewrite_the_log(app_role, statement):
    with pytest.raises(DatabaseError, match="permission denied|must be owner"):
        as_app(statement)
    app_role.refresh_from_db()
    assert app_role.comment == ""


def test_it_lets_the_app_role_append_and_read_the_log_and_work_elsewhere(app_role, staff):
    as_app(
        "INSERT INTO annotation_auditlog (action, object_type, object_pk, from_state, to_state,"
        " comment, data, created_at) VALUES ('by_app', 'User', %s, '', '', '', '{}', now())",
        [str(staff.pk)],
    )
    assert as_app("SELECT count(*) FROM annotation_auditlog")[0][0] == 2
    as_app("UPDATE annotation_job SET state = state")  # ordinary tables: read and write
    as_app("UPDATE auth_user SET last_login = now() WHERE id = %s", [staff.pk])
    with pytest.raises(DatabaseError, match="permission denied"):
        as_app("DELETE FROM django_migrations")


def test_it_refuses_truncate_to_a_role_granted_it_by_mistake(app_role):
    """The trigger holds where a grant slipped: only the table's owner may truncate."""
    with connection.cursor() as cursor:
        cursor.execute(f"GRANT TRUNCATE ON annotation_auditlog TO {APP}")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks on the entry
    with pytest.raises(DatabaseError, match="append-only: TRUNCATE on annotation_auditlog"):
        as_app("TRUNCATE annotation_auditlog")


def test_it_refuses_an_app_role_named_like_the_owner_or_unsafe(db):
    with pytest.raises(RoleSetupError, match="owner's role"):
        app_role_statements(connection, role=connection.settings_dict["USER"], with_password=False)
    with pytest.raises(CommandError, match="lower-case letters"):
        call_command("db_roles", 'x"; DROP TABLE annotation_auditlog; --')


def test_it_prints_the_statements_without_running_them(db, capsys):
    call_command("db_roles", APP, "--print-sql")
    printed = capsys.readouterr().out
    assert f'GRANT SELECT, INSERT ON "annotation_auditlog" TO "{APP}";' in printed
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", [APP])
        assert cursor.fetchone()[0] == 0


# --- the documented set-up with an owner that is not a superuser (issue 32, item 8) -------------

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def createrole_owner(tmp_path) -> Iterator[dict[str, str]]:
    """A database owned by a role with CREATEROLE but no superuser, holding the tables the
    grants name (the audit log, django_migrations) and an ordinary one; dropped afterwards with
    both roles."""
    settings = connection.settings_dict
    server = {
        "host": settings["HOST"] or "127.0.0.1",
        "port": str(settings["PORT"] or 5432),
        "user": settings["USER"] or "postgres",
        "password": settings["PASSWORD"] or "",
    }
    try:
        admin = psycopg.connect(**server, dbname="postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL is not reachable: {error}")
    suffix = secrets.token_hex(4)
    names = {
        "owner": f"specvet_owner_{suffix}",
        "app": f"specvet_app_{suffix}",
        "database": f"specvet_roles_{suffix}",
        "password": secrets.token_hex(12),
    }
    owner_url = (
        f"postgres://{names['owner']}:{names['password']}@{server['host']}:{server['port']}/"
        f"{names['database']}"
    )
    try:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER PASSWORD {}").format(
                sql.Identifier(names["owner"]), sql.Literal(names["password"])
            )
        )
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(names["database"]), sql.Identifier(names["owner"])
            )
        )
        with psycopg.connect(owner_url, autocommit=True) as owner:
            for statement in (
                "CREATE TABLE annotation_auditlog (id serial PRIMARY KEY, comment text)",
                "CREATE TABLE django_migrations (id serial PRIMARY KEY, name text)",
                "CREATE TABLE annotation_job (id serial PRIMARY KEY, state text)",
                "INSERT INTO annotation_auditlog (comment) VALUES ('')",
                "INSERT INTO annotation_job (state) VALUES ('done')",
            ):
                owner.execute(statement)
        yield {**names, "owner_url": owner_url, "host": server["host"], "port": server["port"]}
    finally:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(names["database"])
            )
        )
        for role in (names["app"], names["owner"]):
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.close()


def db_roles_as(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py db_roles`` in its own process, connected as ``url``'s role."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "db_roles", *args],
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def role_attributes(world: dict[str, str], role: str) -> dict[str, bool]:
    columns = ("rolsuper", "rolcreatedb", "rolcreaterole", "rolbypassrls", "rolreplication")
    with psycopg.connect(world["owner_url"]) as owner:
        row = owner.execute(
            f"SELECT {', '.join(columns)}, rolcanlogin FROM pg_roles WHERE rolname = %s", [role]
        ).fetchone()
    assert row is not None, f"role {role} was not created"
    return dict(zip([*columns, "rolcanlogin"], row, strict=True))


def test_it_sets_up_the_app_role_as_an_owner_with_createrole_but_no_superuser(
    createrole_owner, tmp_path
):
    world = createrole_owner
    secret = tmp_path / "app-password"
    secret.write_text(world["password"][::-1])
    for _ in range(2):  # idempotent: run again after each migrate
        done = db_roles_as(world["owner_url"], world["app"], "--password-file", str(secret))
        assert done.returncode == 0, done.stderr[-2000:]
    attributes = role_attributes(world, world["app"])
    assert attributes.pop("rolcanlogin") is True
    assert not any(attributes.values()), attributes

    # The app role signs in with its password and has only the rights the app needs.
    app_url = (
        f"postgres://{world['app']}:{world['password'][::-1]}@{world['host']}:{world['port']}/"
        f"{world['database']}"
    )
    with psycopg.connect(app_url, autocommit=True) as app:
        app.execute("INSERT INTO annotation_auditlog (comment) VALUES ('by the app')")
        assert app.execute("SELECT count(*) FROM annotation_auditlog").fetchone() == (2,)
        app.execute("UPDATE annotation_job SET state = 'failed'")
        for refused in (
            "UPDATE annotation_auditlog SET comment = 'rewritten'",
            "DELETE FROM annotation_auditlog",
            "TRUNCATE annotation_auditlog",
            "ALTER TABLE annotation_auditlog DISABLE TRIGGER ALL",
            "DELETE FROM django_migrations",
            "SET session_replication_role = replica",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(refused)
    # Tables the owner makes later get the same grants (default privileges).
    with psycopg.connect(world["owner_url"], autocommit=True) as owner:
        owner.execute("CREATE TABLE annotation_later (id serial PRIMARY KEY)")
    with psycopg.connect(app_url, autocommit=True) as app:
        app.execute("INSERT INTO annotation_later DEFAULT VALUES")


def test_it_refuses_an_existing_app_role_a_superuser_right_it_cannot_remove(createrole_owner):
    """A CREATEROLE owner cannot take BYPASSRLS away: the command stops, naming it, and changes
    nothing, rather than leave an app role that ignores the database's rules."""
    world = createrole_owner
    with psycopg.connect(world["owner_url"], autocommit=True) as owner:
        owner.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN CREATEDB").format(sql.Identifier(world["app"]))
        )
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=str(settings["PORT"] or 5432),
        user=settings["USER"] or "postgres",
        password=settings["PASSWORD"] or "",
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(sql.SQL("ALTER ROLE {} BYPASSRLS").format(sql.Identifier(world["app"])))
    refused = db_roles_as(world["owner_url"], world["app"])
    assert refused.returncode != 0
    assert "has CREATEDB BYPASSRLS; only a superuser" in refused.stderr
    assert "NOBYPASSRLS" in refused.stderr
    assert "Traceback" not in refused.stderr
    attributes = role_attributes(world, world["app"])
    assert attributes["rolbypassrls"] and attributes["rolcreatedb"]
    assert not attributes["rolcanlogin"]
