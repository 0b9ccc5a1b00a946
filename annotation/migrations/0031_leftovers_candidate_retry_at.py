from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0030_plant35_planted_audits"),
    ]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="retry_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
