# Reserved in the migration chain so parallel work on one app label never forks it.
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotation", "0012_trust_misc")]

    operations: list = [
        migrations.AddField(
            model_name="spectrum",
            name="resolution_r",
            field=models.FloatField(
                blank=True, help_text="resolving power lambda/FWHM at 6000 Å", null=True
            ),
        ),
        migrations.AddField(
            model_name="spectrum",
            name="resolution_source",
            field=models.CharField(
                blank=True,
                help_text="file, survey default, sampling estimate or user (agent.resolution)",
                max_length=20,
            ),
        ),
    ]
