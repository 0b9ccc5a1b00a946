"""Each domain's pages and API twins, spectra first (it holds the home page)."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("", include("annotation.spectra.urls")),
    path("", include("annotation.curation.urls")),
    path("", include("annotation.inspections.urls")),
    path("", include("annotation.catalog.urls")),
    path("", include("annotation.rating.urls")),
    path("", include("annotation.training_runs.urls")),
    path("", include("annotation.core.urls")),
]
