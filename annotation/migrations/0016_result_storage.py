# What a candidate's results cost PostgreSQL to store (issue 16): PNGs are compressed already,
# so the server stops trying to compress them again; the rollouts' and live steps' JSON is
# compressed with lz4, several times faster than the default pglz, where the server has it.
# Storage settings only: no row is rewritten, values stored before keep their compression.
from __future__ import annotations

from django.db import migrations

FORWARD = """
DO $$
BEGIN
    ALTER TABLE annotation_imageblob ALTER COLUMN png SET STORAGE EXTERNAL;
    BEGIN
        EXECUTE 'ALTER TABLE annotation_rollout ALTER COLUMN data SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE annotation_livestep ALTER COLUMN data SET COMPRESSION lz4';
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'lz4 compression not available; keeping the default';
    END;
END $$;
"""

BACKWARD = """
DO $$
BEGIN
    ALTER TABLE annotation_imageblob ALTER COLUMN png SET STORAGE EXTENDED;
    BEGIN
        EXECUTE 'ALTER TABLE annotation_rollout ALTER COLUMN data SET COMPRESSION default';
        EXECUTE 'ALTER TABLE annotation_livestep ALTER COLUMN data SET COMPRESSION default';
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
END $$;
"""


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0015_candidate_stack")]

    operations = [migrations.RunPython(forward, backward)]
