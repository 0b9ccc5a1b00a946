"""The home page (each user's pending work, across domains), then each domain's pages."""

from __future__ import annotations

from django.urls import include, path

from annotation import home

urlpatterns = [
    path("", home.home, name="home"),
    path("", include("annotation.spectra.urls")),
    path("", include("annotation.curation.urls")),
    path("", include("annotation.inspections.urls")),
    path("", include("annotation.catalog.urls")),
    path("", include("annotation.learning.urls")),
    path("", include("annotation.rating.urls")),
    path("", include("annotation.training_runs.urls")),
    path("", include("annotation.core.urls")),
]
