# Reserved in the migration chain so parallel work on one app label never forks it.
from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("annotation", "0013_spectrum_resolution")]

    operations: list = []
