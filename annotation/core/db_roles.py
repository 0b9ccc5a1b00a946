"""The two PostgreSQL roles of a deployment: the owner, who runs migrations and owns every
table, and the app role the web and workers connect as, with only the rights they need.

The app role reads and writes the ordinary tables, but may only INSERT and SELECT the audit log:
no UPDATE, DELETE or TRUNCATE, and, owning nothing, it cannot disable or drop the log's triggers
(ALTER TABLE needs the owner) nor set ``session_replication_role`` (superuser only).
"""

from __future__ import annotations

import re

from django.db.backends.base.base import BaseDatabaseWrapper

AUDIT_TABLE = "annotation_auditlog"
READ_ONLY_TABLES = ("django_migrations",)  # the owner's bookkeeping: the app only reads it
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class RoleSetupError(ValueError):
    """A role name or database the setup refuses; names the input and the rule."""


def app_role_statements(
    connection: BaseDatabaseWrapper, *, role: str, with_password: bool
) -> list[str]:
    """The statements, run as the owner, that create (or update) ``role`` and grant it what the
    app needs. Idempotent: run again after every ``migrate`` (new tables get the same grants by
    default privileges too). ``with_password`` adds a ``%s`` placeholder for the password."""
    if not ROLE_NAME.fullmatch(role):
        raise RoleSetupError(
            f"app role {role!r}: use lower-case letters, digits and _, at most 63, "
            "not starting with a digit"
        )
    quote = connection.ops.quote_name
    app = quote(role)
    owner = quote(connection.settings_dict["USER"] or "postgres")
    if role == (connection.settings_dict["USER"] or "postgres"):
        raise RoleSetupError(f"app role {role!r} is the owner's role: the app needs its own")
    database = quote(connection.settings_dict["NAME"])
    statements = [
        *_role_statements(role, app),
        f"ALTER ROLE {app} LOGIN" + (" PASSWORD %s" if with_password else ""),
        f"REVOKE ALL ON DATABASE {database} FROM {app}",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {app}",
        f"GRANT USAGE ON SCHEMA public TO {app}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {app}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
        f"GRANT USAGE, SELECT ON SEQUENCES TO {app}",
        f"REVOKE ALL ON {quote(AUDIT_TABLE)} FROM {app}",
        f"GRANT SELECT, INSERT ON {quote(AUDIT_TABLE)} TO {app}",
    ]
    for table in READ_ONLY_TABLES:
        statements += [
            f"REVOKE ALL ON {quote(table)} FROM {app}",
            f"GRANT SELECT ON {quote(table)} TO {app}",
        ]
    return statements


# The attributes the app role must not have, as pg_roles names them and as ALTER ROLE removes them.
FORBIDDEN_ATTRIBUTES = (
    ("rolsuper", "SUPERUSER"),
    ("rolcreatedb", "CREATEDB"),
    ("rolcreaterole", "CREATEROLE"),
    ("rolbypassrls", "BYPASSRLS"),
    ("rolreplication", "REPLICATION"),
)
# Only a superuser may set or clear these (PostgreSQL 15: even naming them in ALTER ROLE).
SUPERUSER_ONLY = ("rolsuper", "rolbypassrls", "rolreplication")


def _role_statements(role: str, app: str) -> list[str]:
    """Create ``role`` without any forbidden attribute, or check an existing one has none.

    The owner need not be a superuser: a role with CREATEROLE may create a role whose attributes
    are all off, but PostgreSQL 15 refuses it any ALTER ROLE that names SUPERUSER, BYPASSRLS or
    REPLICATION, even to turn them off (and 16 refuses it CREATEDB unless it has CREATEDB). So the
    attributes are set once, at CREATE ROLE (where off is allowed), and an existing role is only
    altered for what it actually has: a forbidden attribute on an existing role is removed when
    the owner may (a superuser, or CREATEROLE for CREATEDB and CREATEROLE), and otherwise the
    setup stops, naming it, rather than leave an app role that could switch the triggers off.
    """
    off = " ".join(f"NO{name}" for _, name in FORBIDDEN_ATTRIBUTES)
    found = " || ".join(
        f"CASE WHEN r.{column} THEN ' NO{name}' ELSE '' END"
        for column, name in FORBIDDEN_ATTRIBUTES
    )
    superuser_only = " OR ".join(f"r.{column}" for column in SUPERUSER_ONLY)
    # CREATE ROLE has no IF NOT EXISTS: a DO block creates the role when it is missing.
    return [
        "DO $$ DECLARE r pg_roles%ROWTYPE; extra text; BEGIN "
        f"SELECT * INTO r FROM pg_roles WHERE rolname = '{role}'; "
        f"IF NOT FOUND THEN CREATE ROLE {app} NOLOGIN {off}; RETURN; END IF; "
        f"extra := {found}; "
        "IF extra = '' THEN RETURN; END IF; "
        f"IF ({superuser_only}) AND NOT (SELECT rolsuper FROM pg_roles "
        "WHERE rolname = current_user) THEN "
        f"RAISE EXCEPTION 'app role {role} has%; only a superuser can remove that: ask one to "
        f"run ALTER ROLE {role}%, then run db_roles again', "
        "replace(extra, ' NO', ' '), extra; END IF; "
        f"EXECUTE 'ALTER ROLE {app}' || extra; END $$",
    ]
