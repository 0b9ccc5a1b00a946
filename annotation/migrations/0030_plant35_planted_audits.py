# Planted-error audits (issue 35 part 1): copies of approved trajectories with a known error.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0029_issue35similar_spectrum_embedding'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='curation',
            name='planted',
            field=models.BooleanField(db_index=True, default=False),
        ),
        migrations.RemoveConstraint(
            model_name='curation',
            name='curation_one_draft_per_job_and_spectrum',
        ),
        migrations.AddConstraint(
            model_name='curation',
            constraint=models.UniqueConstraint(condition=models.Q(('draft_job__isnull', False), ('planted', False)), fields=('draft_job', 'spectrum'), name='curation_one_draft_per_job_and_spectrum'),
        ),
        migrations.CreateModel(
            name='PlantRound',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seed', models.IntegerField()),
                ('kinds', models.JSONField()),
                ('note', models.CharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('created_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='PlantedError',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('source_version', models.PositiveIntegerField()),
                ('kind', models.CharField(choices=[('wrong_window', 'wrong wavelength window'), ('misread_line', 'misread line'), ('flipped_answer', 'flipped final answer'), ('contradicting_step', 'step contradicts its tool image')], max_length=24)),
                ('target', models.PositiveIntegerField()),
                ('description', models.TextField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('curation', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='planted_error', to='annotation.curation')),
                ('plant_round', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='errors', to='annotation.plantround')),
                ('source', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotation.curation')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
    ]
