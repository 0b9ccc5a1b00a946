"""Issue 37: indexes for finding catalog rows (designation prefix, the cone search's (dec, ra)
box, the data-set filter)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0026_issue26viewer_redshift_decision"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="catalogentry",
            index=models.Index(
                fields=["designation"],
                name="catalog_designation_prefix",
                opclasses=["varchar_pattern_ops"],
            ),
        ),
        migrations.AddIndex(
            model_name="catalogentry",
            index=models.Index(fields=["dec", "ra"], name="catalog_position"),
        ),
        migrations.AddIndex(
            model_name="catalogentry",
            index=models.Index(fields=["dataset"], name="catalog_dataset"),
        ),
    ]
