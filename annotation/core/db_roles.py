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
    login = (
        "LOGIN PASSWORD %s NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOREPLICATION"
        if with_password
        else "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOREPLICATION"
    )
    statements = [
        # CREATE ROLE has no IF NOT EXISTS: create when missing, then set the attributes.
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
        f"'{role}') THEN CREATE ROLE {app}; END IF; END $$",
        f"ALTER ROLE {app} {login}",
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
