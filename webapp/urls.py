from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

from webapp.schema_view import SchemaView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SchemaView.as_view(), name="api_schema"),
    path("", include("annotation.urls")),
]


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """An API URL that names no operation (a path parameter that is not a number, say) answers
    JSON like every other API refusal, so a client reads one error body; pages keep their page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no API operation at {request.path}"}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found
