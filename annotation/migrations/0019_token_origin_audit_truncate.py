# Issue 22: where an API token's password proof came from (ApiTokenOrigin); the database table
# that counts failed logins per address for every app process (CACHES["logins"] without a
# CACHE_URL); and on PostgreSQL a trigger refusing TRUNCATE of the audit log to any role but its
# owner (the migration role: test databases and `flush` are reset by it; the app role has no
# TRUNCATE right either, see `manage.py db_roles`).
from __future__ import annotations

import django.db.models.deletion
from django.core.management import call_command
from django.db import migrations, models

FUNCTION = "annotation_auditlog_no_truncate"
TRIGGER = "annotation_auditlog_no_truncate"


def create_login_cache_table(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


def create_truncate_trigger(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"""
        CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger AS $$
        BEGIN
            IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID),
                           'USAGE') THEN
                RETURN NULL;
            END IF;
            RAISE EXCEPTION 'audit log entries are append-only: % on % refused', TG_OP, TG_TABLE_NAME
                USING ERRCODE = 'insufficient_privilege';
        END;
        $$ LANGUAGE plpgsql
        """,
        params=None,  # the body's % are PL/pgSQL's, not query placeholders
    )
    schema_editor.execute(
        f'CREATE TRIGGER {TRIGGER} BEFORE TRUNCATE ON "annotation_auditlog" '
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )


def drop_truncate_trigger(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP TRIGGER IF EXISTS {TRIGGER} ON "annotation_auditlog"')
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0018_run_reproducibility"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiTokenOrigin",
            fields=[
                (
                    "token",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="origin",
                        serialize=False,
                        to="authtoken.token",
                    ),
                ),
                ("proved_at", models.DateTimeField()),
                ("via", models.CharField(max_length=16)),
            ],
        ),
        migrations.RunPython(create_login_cache_table, migrations.RunPython.noop),
        migrations.RunPython(create_truncate_trigger, drop_truncate_trigger),
    ]
