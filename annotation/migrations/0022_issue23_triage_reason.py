# Issue 23: why a candidate went to experts, "outside what I know" among the reasons.
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotation", "0021_issue25_loop")]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="triage_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("no verdict", "no verdict"),
                    ("low confidence", "low confidence"),
                    ("outside what I know", "outside what I know"),
                    ("missing data", "missing data"),
                ],
                max_length=24,
            ),
        ),
    ]
