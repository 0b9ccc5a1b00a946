from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from annotation.core import services
from annotation.core.http import _expert
from annotation.core.models import AuditLog, ModelEndpoint
from annotation.core.roles import Role, has_role, user_roles
from annotation.spectra.models import Spectrum, Task


class AuditedAdmin(admin.ModelAdmin):
    """Admin edits go through the services, which record them in the audit log."""

    def save_model(self, request: HttpRequest, obj: Model, form: ModelForm, change: bool) -> None:
        services.admin_object_save(
            obj=obj, actor=_expert(request), changed_fields=form.changed_data, adding=not change
        )

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        services.admin_object_delete(obj=obj, actor=_expert(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            services.admin_object_delete(obj=obj, actor=_expert(request))


class StaffRoleEdits(AuditedAdmin):
    """The staff role edits tasks and spectrum labels here without Django model permissions
    (staff are no superusers); deleting stays with superusers."""

    def _staff(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._staff(request) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._staff(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._staff(request) or super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._staff(request) or super().has_change_permission(request, obj)


@admin.register(Task)
class TaskAdmin(StaffRoleEdits):
    list_display = ["code", "name", "builtin", "updated_at"]
    search_fields = ["code", "name"]
    readonly_fields = ["builtin"]


@admin.register(Spectrum)
class SpectrumAdmin(StaffRoleEdits):
    list_display = ["id", "object_id", "survey", "dataset", "task", "label", "snr", "synthetic"]
    list_filter = ["survey", "dataset", "label", "synthetic", "task"]
    search_fields = ["object_id", "source_name"]
    exclude = ["arrays"]
    readonly_fields = ["content_hash", "n_pixels", "wavelength_min", "wavelength_max"]


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    """Read-only: entries are written by the services and never changed or removed."""

    list_display = ["created_at", "actor", "action", "object_type", "object_pk", "to_state"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_pk", "actor__username", "comment"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


# --- accounts and roles: staff manage them here too ----------------------------------------------


class StaffManagesAccounts(admin.ModelAdmin):
    """The staff role manages accounts, superuser or not; only superusers delete accounts or
    touch superusers and raw permissions (no one grants themselves more than staff)."""

    def _staff(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._staff(request) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._staff(request) or super().has_view_permission(request, obj)


admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class AccountAdmin(StaffManagesAccounts, UserAdmin):
    list_display = ["username", "email", "is_active", "is_staff", "is_superuser", "role_names"]
    list_filter = ["is_active", "is_staff", "is_superuser", "groups"]

    @admin.display(description="roles")
    def role_names(self, user: Any) -> str:
        return ", ".join(sorted(role.value for role in user_roles(user))) or "—"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._staff(request) or super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return self._staff(request) or super().has_change_permission(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += ["is_superuser", "user_permissions"]
        return fields

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        stored = type(obj).objects.filter(pk=obj.pk).first() if change else None
        request._roles_before = user_roles(stored) if stored is not None else frozenset()  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def save_related(
        self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        user = type(form.instance).objects.get(pk=form.instance.pk)
        after = user_roles(user)
        before: frozenset[Role] = getattr(request, "_roles_before", frozenset())
        services.user_roles_changes_record(
            user=user,
            granted=sorted(after - before),
            revoked=sorted(before - after),
            actor=request.user,  # type: ignore[arg-type]
        )


@admin.register(Group)
class RoleGroupAdmin(StaffManagesAccounts, GroupAdmin):
    """Staff see which permissions each role's group carries; superusers change them."""


class ModelEndpointAdminForm(ModelForm):
    class Meta:
        model = ModelEndpoint
        fields = ["name", *services.ENDPOINT_FIELDS]

    def clean(self) -> dict[str, Any]:
        from django.core.exceptions import ValidationError

        from annotation.core import endpoints

        super().clean()
        data = self.cleaned_data
        adding = self.instance.pk is None
        try:
            if adding:
                endpoints.check_name(data.get("name", ""))
                if data.get("name") == endpoints.DEFAULT_ENDPOINT:
                    raise endpoints.EndpointError(
                        "'default' is registered from the OPENAI_* settings"
                    )
            endpoints.check_base_url(data.get("base_url", ""))
            endpoints.check_model(data.get("model", ""))
            endpoints.check_credential(
                env=data.get("credential_env", ""), file=data.get("credential_file", "")
            )
            endpoints.check_timeout(data.get("timeout") or 0)
        except endpoints.EndpointError as error:
            raise ValidationError(str(error)) from error
        managed = set(self.changed_data) & set(services.SETTINGS_MANAGED_FIELDS)
        if not adding and self.instance.name == endpoints.DEFAULT_ENDPOINT and managed:
            raise ValidationError(
                f"the 'default' endpoint follows the OPENAI_* settings ({', '.join(sorted(managed))})"
            )
        return data


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    """Staff register endpoints here too; saves go through the services (and the audit log)."""

    form = ModelEndpointAdminForm
    list_display = ["name", "model", "base_url", "credential_env", "credential_file", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "model", "base_url"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["name", "created_by", "created_at", "updated_at"] if obj else []

    # The staff role manages endpoints, as on the endpoints page; no model permission needed.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, Role.STAFF)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs and judges keep pointing at it: disable instead

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        values = {field: form.cleaned_data[field] for field in services.ENDPOINT_FIELDS}
        if change:
            stored = ModelEndpoint.objects.get(pk=obj.pk)
            saved = services.model_endpoint_update(
                endpoint=stored,
                actor=request.user,  # type: ignore[arg-type]
                **values,
            )
        else:
            saved = services.model_endpoint_create(
                actor=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                **values,
            )
        obj.pk = saved.pk
