"""Create or update the PostgreSQL role the app connects as (run as the owner, after migrate).

    DATABASE_URL=postgres://owner@db/specvet python manage.py db_roles specvet_app \
        --password-file /run/secrets/specvet_app_password
    DATABASE_URL=postgres://owner@db/specvet python manage.py db_roles specvet_app --print-sql

The app role may read and write the ordinary tables but only INSERT and SELECT the audit log
(annotation.core.db_roles). Run it again after each migrate: it is idempotent. The owner needs
no superuser: CREATEROLE (to create the app role) and owning the database and its tables do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection, transaction

from annotation.core.db_roles import RoleSetupError, app_role_statements


class Command(BaseCommand):
    help = (
        "Create or update the PostgreSQL role the app connects as, with only the rights it needs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", help="the app role's name, e.g. specvet_app")
        parser.add_argument(
            "--password-file", type=Path, help="a file holding the role's password (login)"
        )
        parser.add_argument(
            "--print-sql", action="store_true", help="print the statements instead of running them"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                f"db_roles sets up PostgreSQL roles; DATABASE_URL is {connection.vendor}"
            )
        password = None
        if options["password_file"] is not None:
            try:
                password = options["password_file"].read_text(encoding="utf-8").strip()
            except OSError as error:
                raise CommandError(f"--password-file: {error}") from None
            if not password:
                raise CommandError(f"--password-file {options['password_file']} is empty")
        try:
            statements = app_role_statements(
                connection, role=options["role"], with_password=password is not None
            )
        except RoleSetupError as error:
            raise CommandError(str(error)) from None
        if options["print_sql"]:
            for statement in statements:
                self.stdout.write(statement.replace("%s", "'<password>'") + ";")
            return
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement, [password] if "%s" in statement else None)
        except DatabaseError as error:
            # PostgreSQL's refusal (a right the owner lacks, say), without the password: nothing
            # was changed, the statements ran in one transaction.
            raise CommandError(f"nothing changed: {str(error).splitlines()[0]}") from None
        self.stdout.write(
            f"role {options['role']}: SELECT, INSERT, UPDATE, DELETE on the app's tables; "
            "SELECT and INSERT only on the audit log"
        )
