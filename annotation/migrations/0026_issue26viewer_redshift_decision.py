"""A spectrum's redshift as an expert chose it (issue 26): a cross-correlation fit or a typed override."""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0025_issue25exports_loop_exports"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RedshiftDecision",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("z", models.FloatField()),
                ("z_err", models.FloatField(blank=True, null=True)),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("fit", "cross-correlation fit"),
                            ("override", "typed by the expert"),
                        ],
                        max_length=10,
                    ),
                ),
                ("template", models.CharField(blank=True, max_length=200)),
                ("rank", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("r_value", models.FloatField(blank=True, null=True)),
                ("decided_at", models.DateTimeField(auto_now_add=True)),
                (
                    "decided_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "spectrum",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="redshift_decisions",
                        to="annotation.spectrum",
                    ),
                ),
            ],
            options={
                "ordering": ["-decided_at", "-id"],
                "indexes": [
                    models.Index(
                        fields=["spectrum", "-decided_at"], name="redshift_decision_latest"
                    )
                ],
            },
        ),
    ]
