"""DRF endpoints: one view per operation, nested Input/Output serializers."""

from __future__ import annotations

import base64
from typing import Any

from django.conf import settings
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent.resolution import Resolution, ResolutionError, parse_user_value
from agent.spectra import Declared, SpectrumFormatError
from agent.spectra.declared import COLUMNS_HELP, DeclarationError, parse_columns
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.http import _expert
from annotation.core.serializers import CONFLICT
from annotation.spectra import selectors, services
from annotation.spectra.models import Label, RedshiftSource, Spectrum, Task


class TaskListApi(APIView):
    role_rule = permissions.BROWSE

    class OutputSerializer(serializers.ModelSerializer):
        class Meta:
            model = Task
            fields = ["code", "name", "question", "guideline", "windows", "contaminants", "builtin"]

    @extend_schema(responses=OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(Task.objects.all(), many=True).data)


class SpectrumOutputSerializer(serializers.ModelSerializer):
    task: serializers.SlugRelatedField[Task] = serializers.SlugRelatedField(
        slug_field="code", read_only=True
    )

    class Meta:
        model = Spectrum
        fields = [
            "id",
            "object_id",
            "survey",
            "ra",
            "dec",
            "snr",
            "redshift",
            "n_pixels",
            "wavelength_min",
            "wavelength_max",
            "dataset",
            "split",
            "task",
            "label",
            "synthetic",
            "source_name",
            "resolution_r",
            "resolution_source",
            "created_at",
        ]


class SpectrumListApi(APIView):
    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.BROWSE

    class FilterSerializer(serializers.Serializer):
        task = serializers.CharField(required=False, allow_blank=True)
        # Serializer fields are popped into _declared_fields by the metaclass; the stubs
        # see a class attribute overriding Field.label (str) instead.
        label = serializers.ChoiceField(choices=["", *Label.values], required=False)  # type: ignore[assignment]
        survey = serializers.CharField(required=False, allow_blank=True)
        dataset = serializers.CharField(required=False, allow_blank=True)
        q = serializers.CharField(required=False, allow_blank=True)

    @extend_schema(parameters=[FilterSerializer], responses=SpectrumOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = selectors.spectrum_list(filters=selectors.SpectrumFilters(**filters.validated_data))
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(SpectrumOutputSerializer(page, many=True).data)


class SpectrumArrayPageSerializer(serializers.Serializer):
    offset = serializers.IntegerField()
    count = serializers.IntegerField()
    total = serializers.IntegerField()
    next_offset = serializers.IntegerField(allow_null=True, help_text="null on the last page")
    next = serializers.URLField(required=False, help_text="the next page's URL")
    wavelength = serializers.ListField(child=serializers.FloatField())
    flux = serializers.ListField(
        child=serializers.FloatField(allow_null=True), help_text="NaN as null"
    )
    ivar = serializers.ListField(child=serializers.FloatField(), allow_null=True)
    mask = serializers.ListField(
        child=serializers.BooleanField(), allow_null=True, help_text="true = bad pixel"
    )


class SpectrumDetailApi(APIView):
    role_rule = permissions.BROWSE

    class OutputSerializer(SpectrumOutputSerializer):
        meta = serializers.JSONField()

        class Meta(SpectrumOutputSerializer.Meta):
            fields = [*SpectrumOutputSerializer.Meta.fields, "meta"]

    class DocumentedOutputSerializer(OutputSerializer):
        """What the schema documents: the spectrum, and with ``?arrays=1`` a page of pixels."""

        arrays = SpectrumArrayPageSerializer(required=False)

        class Meta(SpectrumOutputSerializer.Meta):
            fields = [*SpectrumOutputSerializer.Meta.fields, "meta", "arrays"]

    class ArraysSerializer(serializers.Serializer):
        arrays = serializers.BooleanField(required=False, default=False)
        offset = serializers.IntegerField(required=False, default=0, min_value=0)
        # Bounded so one response stays a few MB whatever the spectrum holds; survey spectra
        # (DESI: 7,781 pixels) come whole in one page.
        limit = serializers.IntegerField(
            required=False,
            min_value=1,
            # Declared for the schema at start-up; validate_limit checks the setting as it is now.
            max_value=settings.SPECTRUM_API_MAX_ARRAY_PIXELS,
            error_messages={
                "max_value": "limit is over the {max_value} pixels one response carries "
                "(SPECTRUM_API_MAX_ARRAY_PIXELS); page with offset instead"
            },
        )

        def validate_limit(self, value: int) -> int:
            cap = settings.SPECTRUM_API_MAX_ARRAY_PIXELS
            if value > cap:
                raise serializers.ValidationError(
                    f"limit {value} is over the {cap} pixels one response carries "
                    "(SPECTRUM_API_MAX_ARRAY_PIXELS); page with offset instead"
                )
            return value

    @extend_schema(parameters=[ArraysSerializer], responses=DocumentedOutputSerializer)
    def get(self, request: Request, spectrum_id: int) -> Response:
        query = self.ArraysSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        row = get_object_or_404(Spectrum.objects.select_related("task"), pk=spectrum_id)
        data = self.OutputSerializer(row).data
        if query.validated_data["arrays"]:
            offset = query.validated_data["offset"]
            limit = query.validated_data.get("limit", settings.SPECTRUM_API_MAX_ARRAY_PIXELS)
            page = selectors.spectrum_array_page(row=row, offset=offset, limit=limit)
            if page["next_offset"] is not None:
                page["next"] = request.build_absolute_uri(
                    f"{request.path}?arrays=1&offset={page['next_offset']}&limit={limit}"
                )
            data["arrays"] = page
        return Response(data)


class SpectrumRenderApi(APIView):
    role_rule = permissions.BROWSE

    class InputSerializer(serializers.Serializer):
        wavelength_range = serializers.ListField(
            child=serializers.FloatField(), min_length=2, max_length=2, required=False
        )
        # Serializer fields are popped into _declared_fields by the metaclass; the stubs
        # see a class attribute overriding Field.label (str) instead.
        label = serializers.CharField(max_length=60, required=False, allow_blank=True)  # type: ignore[assignment]

    class OutputSerializer(serializers.Serializer):
        ok = serializers.BooleanField()
        text = serializers.CharField()
        wavelength_range = serializers.ListField(child=serializers.FloatField(), allow_null=True)
        # Serializer fields are popped into _declared_fields by the metaclass; the stubs
        # see a class attribute overriding Field.label (str) instead.
        label = serializers.CharField(allow_null=True)  # type: ignore[assignment]
        png_base64 = serializers.CharField(allow_null=True)

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request, spectrum_id: int) -> Response:
        row = get_object_or_404(Spectrum, pk=spectrum_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        result = selectors.spectrum_render(
            row=row,
            wavelength_range=params.validated_data.get("wavelength_range"),
            label=params.validated_data.get("label") or None,
        )
        return Response(
            {
                "ok": result.ok,
                "text": result.text,
                "wavelength_range": list(result.wavelength_range)
                if result.wavelength_range
                else None,
                "label": result.label,
                "png_base64": base64.b64encode(result.png).decode() if result.png else None,
            }
        )


class SpectrumPlotWindowApi(APIView):
    """The plot's pixels with rest wavelength in [lo, hi], thinned like the page's plot when the
    window holds more than max_points (every pixel otherwise): what a zoomed plot shows."""

    role_rule = permissions.BROWSE

    class FilterSerializer(serializers.Serializer):
        lo = serializers.FloatField(required=False)
        hi = serializers.FloatField(required=False)
        max_points = serializers.IntegerField(required=False, min_value=10)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            lo, hi = attrs.get("lo"), attrs.get("hi")
            if lo is not None and hi is not None and lo >= hi:
                raise serializers.ValidationError({"hi": f"must exceed lo ({lo}); got {hi}"})
            return attrs

    class OutputSerializer(serializers.Serializer):
        wavelength = serializers.ListField(child=serializers.FloatField())
        flux = serializers.ListField(child=serializers.FloatField(allow_null=True))
        lower = serializers.ListField(
            child=serializers.FloatField(allow_null=True), allow_null=True
        )
        upper = serializers.ListField(
            child=serializers.FloatField(allow_null=True), allow_null=True
        )
        n_pixels = serializers.IntegerField(help_text="pixels in the window before thinning")
        decimated = serializers.BooleanField()
        y_range = serializers.ListField(
            child=serializers.FloatField(),
            allow_null=True,
            help_text="flux range of the window: the agent image's limits (isolated spikes left out), padded",
        )

    @extend_schema(parameters=[FilterSerializer], responses=OutputSerializer)
    def get(self, request: Request, spectrum_id: int) -> Response:
        return self.window_response(request, get_object_or_404(Spectrum, pk=spectrum_id))

    def window_response(self, request: Request, row: Spectrum) -> Response:
        """The window the query asks for, of a spectrum the caller may read."""
        params = self.FilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        limit = settings.SPECTRUM_PLOT_MAX_POINTS
        data = params.validated_data
        return Response(
            selectors.spectrum_plot_window(
                row=row,
                lo=data.get("lo"),
                hi=data.get("hi"),
                max_points=min(data.get("max_points", limit), limit),
            )
        )


class SpectrumUploadApi(APIView):
    role_rule = permissions.UPLOAD

    parser_classes = [MultiPartParser]

    class InputSerializer(serializers.Serializer):
        files = serializers.ListField(child=serializers.FileField(), allow_empty=False)
        dataset = serializers.SlugField(
            max_length=80,
            default="uploads",
            error_messages={
                "invalid": "the data set name may hold only letters, digits, underscores (_) "
                "and hyphens (-), e.g. lamost-dr7"
            },
        )
        task = serializers.SlugRelatedField(
            slug_field="code", queryset=Task.objects.all(), required=False, allow_null=True
        )
        # Serializer fields are popped into _declared_fields by the metaclass; the stubs
        # see a class attribute overriding Field.label (str) instead.
        label = serializers.ChoiceField(choices=["", *Label.values], default="")  # type: ignore[assignment]
        resolution = serializers.CharField(
            max_length=40,
            required=False,
            allow_blank=True,
            default="",
            help_text="optional override of the instrumental resolution (source 'user'): a "
            "resolving power (1800, R=1800), an FWHM in Å (2.5 A) or in km/s (150 km/s)",
        )

        columns = serializers.CharField(
            max_length=200, required=False, allow_blank=True, default="", help_text=COLUMNS_HELP
        )
        wavelength_frame = serializers.ChoiceField(
            choices=["", "air", "vacuum"],
            default="",
            help_text="air or vacuum, when the file does not say; a file that says otherwise is "
            "refused. Left blank: as the file says, else assumed vacuum (recorded as assumed)",
        )

        def validate_columns(self, value: str) -> tuple[str, ...] | None:
            try:
                return parse_columns(value)
            except DeclarationError as error:
                raise serializers.ValidationError(str(error)) from None

        def validate_resolution(self, value: str) -> Resolution | None:
            if not value.strip():
                return None
            try:
                return parse_user_value(value)
            except ResolutionError as error:
                raise serializers.ValidationError(str(error)) from None

    @extend_schema(request=InputSerializer, responses={201: SpectrumOutputSerializer(many=True)})
    def post(self, request: Request) -> Response:
        try:
            form = request.data
        except UnsupportedMediaType:
            form = None
        if not isinstance(form, QueryDict):
            # A body-less request parses to a plain dict, a JSON one not at all: no files either way.
            return Response(
                {
                    "detail": "Nothing was stored. Send the spectrum files as multipart/form-data "
                    "in the field 'files' (the request had no multipart body)."
                },
                status=status.HTTP_400_BAD_REQUEST,
            )
        params = self.InputSerializer(data={**form.dict(), "files": request.FILES.getlist("files")})
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            result = services.spectra_import_uploads(
                files=data["files"],
                uploaded_by=_expert(request),
                dataset=data["dataset"],
                task=data.get("task"),
                label=data["label"],
                resolution=data.get("resolution"),
                declared=Declared(
                    columns=data.get("columns"), frame=data.get("wavelength_frame") or None
                ),
            )
        except (SpectrumFormatError, core_errors.UploadRejected) as error:
            return Response(
                {"detail": f"Nothing was stored. {error}"}, status=status.HTTP_400_BAD_REQUEST
            )
        return Response(
            {
                "created": SpectrumOutputSerializer(result.created, many=True).data,
                "duplicates": result.duplicates,
            },
            status=status.HTTP_201_CREATED,
        )


class RedshiftDecisionOutputSerializer(serializers.Serializer):
    z = serializers.FloatField()
    z_err = serializers.FloatField(allow_null=True)
    source = serializers.CharField()  # type: ignore[assignment]  # popped by the metaclass
    template = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    r_value = serializers.FloatField(allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True)
    decided_at = serializers.DateTimeField()


class SpectrumRedshiftApi(APIView):
    """The class-and-redshift fit (agent.redshift_fit, Redrock's method): the class of the
    lowest chi2 and its margin over the next class, the best alternatives (lowest chi2 first)
    with MARZ's quality, and the expert's current redshift (null until one is stored)."""

    role_rule = permissions.BROWSE

    class CandidateSerializer(serializers.Serializer):
        rank = serializers.IntegerField()
        z = serializers.FloatField()
        z_err = serializers.FloatField()
        velocity_kms = serializers.FloatField(help_text="c z: a star's velocity")
        velocity_err_kms = serializers.FloatField()
        template = serializers.CharField(source="template_text")
        kind = serializers.CharField(help_text="the template's: star, galaxy or qso")
        spectype = serializers.CharField(help_text="STAR, GALAXY or QSO")
        chi2 = serializers.FloatField()
        chi2_above_best = serializers.FloatField()
        delta_chi2 = serializers.FloatField(
            allow_null=True, help_text="to the next fit > 1000 km/s away (100 for stars)"
        )
        quality = serializers.IntegerField(help_text="MARZ's: 4, 3, 2, 1, or 6 for a star")
        quality_label = serializers.CharField()

    class OutputSerializer(serializers.Serializer):
        spectype = serializers.CharField(allow_blank=True)
        class_delta_chi2 = serializers.FloatField(allow_null=True)
        small_delta_chi2 = serializers.BooleanField()
        candidates = serializers.ListField(child=serializers.DictField())
        n_pixels = serializers.IntegerField()
        n_templates = serializers.IntegerField()
        seconds = serializers.FloatField()
        note = serializers.CharField(allow_blank=True)
        current = RedshiftDecisionOutputSerializer(allow_null=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, spectrum_id: int) -> Response:
        row = get_object_or_404(Spectrum, pk=spectrum_id)
        fit = selectors.spectrum_redshift_fit(row)
        current = selectors.spectrum_redshift_current(row)
        return Response(
            {
                "spectype": fit["spectype"],
                "class_delta_chi2": fit["class_delta_chi2"],
                "small_delta_chi2": fit["small_delta_chi2"],
                "candidates": self.CandidateSerializer(fit["candidates"], many=True).data,
                "n_pixels": fit["n_pixels"],
                "n_templates": fit["n_templates"],
                "seconds": fit["seconds"],
                "note": fit["note"],
                "current": RedshiftDecisionOutputSerializer(current).data if current else None,
            }
        )


class SpectrumRedshiftDecideApi(APIView):
    """Accept the fit's alternative ``rank`` (the server recomputes the fit), or store a typed
    ``z`` (override, with an optional ``z_err``). One that contradicts the fit's class (a STAR
    with |z| > 0.01, an alternative of another class) is refused with 409 unless ``confirm``."""

    role_rule = permissions.REDSHIFT_DECIDE

    class InputSerializer(serializers.Serializer):
        rank = serializers.IntegerField(required=False, min_value=1, max_value=20)
        z = serializers.FloatField(required=False)
        z_err = serializers.FloatField(required=False, min_value=0.0)
        confirm = serializers.BooleanField(required=False, default=False)

        def validate_z(self, value: float) -> float:
            if error := services.redshift_range_error(value):
                raise serializers.ValidationError(error)
            return value

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if "rank" not in attrs and "z" not in attrs:
                raise serializers.ValidationError("give rank (an alternative) or z")
            return attrs

    @extend_schema(
        request=InputSerializer, responses={201: RedshiftDecisionOutputSerializer, 409: CONFLICT}
    )
    def post(self, request: Request, spectrum_id: int) -> Response:
        row = get_object_or_404(Spectrum, pk=spectrum_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        fit = selectors.spectrum_redshift_fit(row)
        verdict = {"fit_class": fit["spectype"], "class_delta_chi2": fit["class_delta_chi2"],
                   "confirmed": data["confirm"]}  # fmt: skip
        try:
            if data.get("rank"):
                candidates = fit["candidates"]
                if data["rank"] > len(candidates):
                    raise core_errors.WorkflowError(
                        f"the fit has {len(candidates)} alternatives, not {data['rank']}"
                    )
                chosen = candidates[data["rank"] - 1]
                decision = services.spectrum_redshift_decide(
                    spectrum=row, actor=_expert(request), z=chosen["z"], z_err=chosen["z_err"],
                    source=RedshiftSource.FIT, template=chosen["template_text"],
                    rank=data["rank"], kind=chosen["kind"], quality=chosen["quality"], **verdict,
                )  # fmt: skip
            else:
                decision = services.spectrum_redshift_decide(
                    spectrum=row, actor=_expert(request), z=data["z"], z_err=data.get("z_err"),
                    source=RedshiftSource.OVERRIDE, **verdict,
                )  # fmt: skip
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            RedshiftDecisionOutputSerializer(decision).data, status=status.HTTP_201_CREATED
        )


class SpectrumRedshiftUndoApi(APIView):
    """Withdraw the caller's own newest redshift of the spectrum; answers the one vetted
    again as ``current`` (null: none, the file's z stands). 409 when there is none, 403 when it is another
    expert's."""

    role_rule = permissions.REDSHIFT_DECIDE

    class OutputSerializer(serializers.Serializer):
        current = RedshiftDecisionOutputSerializer(allow_null=True)

    @extend_schema(request=None, responses={200: OutputSerializer, 409: CONFLICT})
    def post(self, request: Request, spectrum_id: int) -> Response:
        row = get_object_or_404(Spectrum, pk=spectrum_id)
        try:
            current = services.spectrum_redshift_undo(spectrum=row, actor=_expert(request))
        except core_errors.WorkflowError as error:
            return error_response(error)
        data = RedshiftDecisionOutputSerializer(current).data if current else None
        return Response({"current": data})


class SpectrumOverlayApi(APIView):
    """Another spectrum on this one's plot axis, scaled to its median over the common range;
    or a template of the redshift fit's set at ``z``, scaled to the flux."""

    role_rule = permissions.BROWSE

    class FilterSerializer(serializers.Serializer):
        other = serializers.IntegerField(min_value=1, required=False)
        template = serializers.IntegerField(
            min_value=0, required=False, help_text="a template of the redshift fit's set"
        )
        z = serializers.FloatField(
            min_value=-0.01, max_value=10.0, required=False, help_text="the template's redshift"
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if ("other" in attrs) == ("template" in attrs):
                raise serializers.ValidationError("give other (a spectrum) or template, not both")
            return attrs

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField(help_text="the spectrum's id, or template-<index>")
        name = serializers.CharField(help_text="made inert for Plotly")
        name_text = serializers.CharField()
        scale = serializers.FloatField()
        overlap = serializers.ListField(child=serializers.FloatField(), allow_null=True)
        wavelength = serializers.ListField(child=serializers.FloatField())
        flux = serializers.ListField(child=serializers.FloatField(allow_null=True))

    @extend_schema(parameters=[FilterSerializer], responses=OutputSerializer)
    def get(self, request: Request, spectrum_id: int) -> Response:
        row = get_object_or_404(Spectrum, pk=spectrum_id)
        params = self.FilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        if "template" in data:
            part = selectors.spectrum_template_overlay(
                row=row, index=data["template"], z=data.get("z", 0.0)
            )
            if part is None:
                raise Http404("no such template")
            return Response(self.OutputSerializer(part).data)
        other = get_object_or_404(Spectrum, pk=data["other"])
        part = selectors.spectrum_overlay(
            row=row, other=other, max_points=settings.SPECTRUM_PLOT_MAX_POINTS
        )
        # Through the serializer: a spectrum's id is a text, as documented (it was an integer).
        return Response(self.OutputSerializer(part).data)
