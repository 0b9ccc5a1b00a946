from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0029_issue35similar_spectrum_embedding"),
    ]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="retry_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
