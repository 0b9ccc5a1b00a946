from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()

# Importing every view happens at the worker's start instead of inside its first request,
# which otherwise waits seconds on a loaded machine before the first byte.
_url_patterns = get_resolver().url_patterns
