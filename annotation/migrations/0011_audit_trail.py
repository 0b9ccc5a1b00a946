# The audit trail: an index to browse the log by action, and on PostgreSQL a trigger that makes
# the table append-only in the database itself (UPDATE and DELETE refused for every client,
# the ORM, raw SQL and psql alike). TRUNCATE is left alone: test databases are flushed with it.
from __future__ import annotations

from django.db import migrations, models

FUNCTION = "annotation_auditlog_append_only"
TRIGGER = "annotation_auditlog_append_only"


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"""
        CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION 'audit log entries are append-only: % on % refused', TG_OP, TG_TABLE_NAME
                USING ERRCODE = 'insufficient_privilege';
        END;
        $$ LANGUAGE plpgsql
        """,
        params=None,  # the body's % are PL/pgSQL's, not query placeholders
    )
    schema_editor.execute(
        f'CREATE TRIGGER {TRIGGER} BEFORE UPDATE OR DELETE ON "annotation_auditlog" '
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
    )


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP TRIGGER IF EXISTS {TRIGGER} ON "annotation_auditlog"')
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")


class Migration(migrations.Migration):
    dependencies = [("annotation", "0010_roles")]

    operations = [
        migrations.AddIndex(
            model_name="auditlog",
            index=models.Index(fields=["action", "id"], name="auditlog_action"),
        ),
        migrations.RunPython(create_trigger, drop_trigger),
    ]
