"""The app's PostgreSQL role cannot rewrite the audit log by any route the issue tried.

Run with DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>: the test database's tables are
owned by the role the tests connect as (the owner); ``manage.py db_roles`` makes the app role,
and each attempt runs under ``SET ROLE`` to it. Roles are transactional in PostgreSQL, so the
role vanishes with the test's transaction.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

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
