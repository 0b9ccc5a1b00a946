"""Forms of the curation pages, and the reading of what experts submit (editor, uploads)."""

from __future__ import annotations

import io
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict

from agent.editing import EditedAnswer, EditedStep, EditError, edit_from_trajectory
from agent.formats import DatasetFormatError, cold_start_warnings, load_sharegpt_file
from agent.reading import UnsafeArchive, check_zip_directory, iter_zip_member
from agent.trajectory import Trajectory, TrajectoryFormatError
from annotation.core.errors import WorkflowError
from annotation.core.models import ModelEndpoint
from annotation.core.roles import Role, users_holding
from annotation.core.tempfiles import temp_dir
from annotation.curation.models import AuditVerdict, CurationState, VoteValue
from annotation.curation.selectors import draft_candidates
from annotation.curation.services import ROLES
from annotation.spectra.models import Label, Task

MAX_EDITOR_STEPS = 20
MAX_IMPORT_MEMBERS = 100_000
MAX_IMPORT_DIRECTORY_BYTES = 32 * 1024 * 1024
ZIP_MAGIC = b"PK\x03\x04"


# --- the revision editor ---------------------------------------------------------------------


@dataclass
class StepDraft:
    """One tool step as the expert typed it (the range stays text until it is saved)."""

    think: str = ""
    lo: str = ""
    hi: str = ""
    label: str = ""


@dataclass
class EditorState:
    """The revision editor's content: what autosave keeps and what a save turns into a version."""

    steps: list[StepDraft] = field(default_factory=list)
    final_think: str = ""
    prediction: str = "NO"
    justification: str = ""
    comment: str = ""

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: Any) -> EditorState:
        """From an autosave; tolerant of missing keys, since it is only ever our own JSON."""
        if not isinstance(data, dict):
            return cls()
        steps = [
            StepDraft(**{key: str(step.get(key, "")) for key in ("think", "lo", "hi", "label")})
            for step in data.get("steps", [])
            if isinstance(step, dict)
        ][:MAX_EDITOR_STEPS]
        return cls(
            steps=steps,
            final_think=str(data.get("final_think", "")),
            prediction=str(data.get("prediction", "NO")),
            justification=str(data.get("justification", "")),
            comment=str(data.get("comment", "")),
        )

    @classmethod
    def from_post(cls, post: QueryDict) -> EditorState:
        try:
            count = int(post.get("steps-count", "0"))
        except ValueError:
            count = 0
        count = max(0, min(count, MAX_EDITOR_STEPS))
        steps = [
            StepDraft(
                think=post.get(f"step-{index}-think", ""),
                lo=post.get(f"step-{index}-lo", "").strip(),
                hi=post.get(f"step-{index}-hi", "").strip(),
                label=post.get(f"step-{index}-label", ""),
            )
            for index in range(count)
        ]
        return cls(
            steps=steps,
            final_think=post.get("final_think", ""),
            prediction=post.get("prediction", "NO"),
            justification=post.get("justification", ""),
            comment=post.get("comment", ""),
        )

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory) -> EditorState:
        steps, answer = edit_from_trajectory(trajectory)
        return cls(
            steps=[
                StepDraft(
                    think=step.think,
                    lo=_number_text(step.wavelength_range[0]),
                    hi=_number_text(step.wavelength_range[1]),
                    label=step.label,
                )
                for step in steps
            ],
            final_think=answer.think,
            prediction=answer.prediction,
            justification=answer.justification,
        )

    def to_edit(self) -> tuple[list[EditedStep], EditedAnswer]:
        """The structured edit for agent.editing.apply_edit; EditError names the bad field."""
        if len(self.steps) > MAX_EDITOR_STEPS:
            raise EditError(f"a trajectory has at most {MAX_EDITOR_STEPS} tool steps")
        steps = []
        for number, step in enumerate(self.steps, start=1):
            low, high = _float_or_none(step.lo), _float_or_none(step.hi)
            if low is None or high is None:
                raise EditError(
                    f"step {number} wavelength range must be two numbers [min, max] in Angstrom; "
                    f"got [{step.lo or 'empty'}, {step.hi or 'empty'}]"
                )
            steps.append(EditedStep(step.think, (low, high), step.label))
        answer = EditedAnswer(self.final_think, self.prediction, self.justification)
        return steps, answer


def _number_text(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else repr(value)


def _float_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


# --- forms -------------------------------------------------------------------------------------


class ScreenForm(forms.Form):
    decision = forms.ChoiceField(choices=[("keep", "keep"), ("discard", "discard")])
    reason = forms.CharField(max_length=2000, required=False)


class AuditForm(forms.Form):
    version_number = forms.IntegerField(min_value=1)
    verdict = forms.ChoiceField(choices=AuditVerdict.choices)
    comment = forms.CharField(max_length=8000, required=False)

    def step_comments(self, post: QueryDict) -> dict[str, str]:
        """Per-step comments, keyed by the step's index as the service stores them."""
        comments = {}
        for key, value in post.items():
            if key.startswith("step-") and key.endswith("-comment"):
                index = key[len("step-") : -len("-comment")]
                # QueryDict.items() gives each key's last value, a str (the stubs allow a list).
                if index.isdigit() and isinstance(value, str) and value.strip():
                    comments[str(int(index))] = value.strip()[:4000]
        return comments


class VoteForm(forms.Form):
    value = forms.ChoiceField(choices=VoteValue.choices)
    comment = forms.CharField(max_length=4000, required=False)


class ReassignForm(forms.Form):
    role = forms.ChoiceField(choices=[(role, role.replace("_", " ")) for role in ROLES])
    user = forms.ModelChoiceField(
        queryset=users_holding(Role.EXPERT).order_by("username"),
        to_field_name="username",
        required=False,
        empty_label="nobody (free the role)",
    )


class CurationFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "any"), *CurationState.choices], required=False)
    task = forms.CharField(max_length=16, required=False)


def teacher_choices() -> list[tuple[str, str]]:
    """The rule-based inspector, then each enabled model endpoint by name (no URL is taken)."""
    choices = [("rule-based", "rule-based inspector (measures the arrays)")]
    for endpoint in ModelEndpoint.objects.filter(enabled=True).order_by("name"):
        choices.append((endpoint.name, f"model endpoint {endpoint.name} · {endpoint.model}"))
    return choices


def teacher_spec(choice: str) -> dict[str, Any]:
    """The draft job's teacher from a teacher choice: rule-based, or an endpoint's name."""
    if choice == "rule-based":
        return {"kind": "rule-based"}
    return {"kind": "openai", "endpoint": choice}


class DraftJobForm(forms.Form):
    """Which labelled spectra to draft, with which teacher."""

    task = forms.ModelChoiceField(queryset=Task.objects.all(), to_field_name="code")
    dataset = forms.CharField(max_length=80, required=False)
    split = forms.CharField(max_length=16, required=False)
    label = forms.ChoiceField(choices=[("", "YES and NO"), *Label.choices], required=False)
    skip_curated = forms.BooleanField(
        required=False,
        initial=True,
        label="skip spectra that already have a trajectory for this task",
    )
    limit = forms.IntegerField(min_value=1, max_value=1000, initial=20, label="first N")
    teacher = forms.ChoiceField(choices=teacher_choices)
    max_tool_calls = forms.IntegerField(min_value=1, max_value=16, initial=8)


class ImportForm(forms.Form):
    file = forms.FileField(
        help_text="A project JSONL (one trajectory JSON per line, images inline) or a ZIP "
        "holding a ShareGPT JSON file and its images folder."
    )
    task = forms.ModelChoiceField(
        queryset=Task.objects.all(),
        to_field_name="code",
        required=False,
        help_text="Only for ShareGPT rows whose source_name names no task.",
    )


# --- reading an import upload ------------------------------------------------------------------


class ImportFileError(ValueError):
    """An import file that cannot be read; nothing from it is stored."""


@dataclass(frozen=True)
class ImportFile:
    trajectories: list[Trajectory]
    source: str  # the curation source: "import:jsonl" or "import:sharegpt"
    # How the rows differ from what training and inference use (shown; nothing is refused).
    warnings: tuple[str, ...] = ()


def read_import_upload(upload: UploadedFile, *, task: str | None = None) -> ImportFile:
    """Every trajectory in an uploaded JSONL or ShareGPT ZIP; ImportFileError says why not."""
    name = upload.name or "upload"
    if upload.size is not None and upload.size > settings.SPECTRUM_UPLOAD_MAX_BYTES:
        raise ImportFileError(
            f"{name}: {upload.size} bytes is over the limit of "
            f"{settings.SPECTRUM_UPLOAD_MAX_BYTES} bytes"
        )
    upload.seek(0)
    if upload.read(len(ZIP_MAGIC)) == ZIP_MAGIC:
        data = b"".join(upload.chunks())
        trajectories = _read_sharegpt_zip(data, name, task)
        return ImportFile(trajectories, "import:sharegpt", tuple(cold_start_warnings(trajectories)))
    upload.seek(0)
    return ImportFile(_read_jsonl(upload, name), "import:jsonl")


def _read_jsonl(upload: UploadedFile, name: str) -> list[Trajectory]:
    """A line at a time, so a huge line is refused before it is held, let alone parsed."""
    line_limit = settings.CURATION_IMPORT_MAX_LINE_BYTES
    trajectories = []
    seen_text = False
    for number, raw in enumerate(iter(lambda: upload.readline(line_limit + 1), b""), start=1):
        line = raw.rstrip(b"\r\n")
        if len(line) > line_limit:
            raise ImportFileError(
                f"{name} line {number} is over the {line_limit} bytes a JSONL line may have "
                "(CURATION_IMPORT_MAX_LINE_BYTES)"
            )
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ImportFileError(
                f"{name} is neither a ZIP nor UTF-8 JSONL text: line {number}: {error}"
            ) from None
        if not text.strip():
            continue
        seen_text = True
        try:
            trajectories.append(Trajectory.from_json(text))
        except TrajectoryFormatError as error:
            raise ImportFileError(f"{name} line {number}: {error}") from None
    if not seen_text:
        raise ImportFileError(f"{name} is empty")
    return trajectories


def _safe_member(member: zipfile.ZipInfo, name: str) -> PurePosixPath:
    path = PurePosixPath(member.filename.replace("\\", "/"))
    if (
        member.filename.startswith(("/", "\\"))
        or path.is_absolute()
        or ".." in path.parts
        or (path.parts and ":" in path.parts[0])
    ):
        raise ImportFileError(f"{name}: refusing the unsafe member name {member.filename!r}")
    if (member.external_attr >> 16) & 0o170000 == 0o120000:
        raise ImportFileError(f"{name}: refusing the symbolic link {member.filename!r}")
    return path


def _read_sharegpt_zip(data: bytes, name: str, task: str | None) -> list[Trajectory]:
    try:
        check_zip_directory(
            data,
            where=name,
            max_members=MAX_IMPORT_MEMBERS,
            max_directory_bytes=MAX_IMPORT_DIRECTORY_BYTES,
        )
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, UnsafeArchive) as error:
        raise ImportFileError(f"{name} is not a readable ZIP: {error}") from None
    with archive, tempfile.TemporaryDirectory(prefix="specvet-import-", dir=temp_dir()) as tmp:
        members = [member for member in archive.infolist() if not member.is_dir()]
        paths = [_safe_member(member, name) for member in members]
        unpacked_limit = settings.CURATION_IMPORT_MAX_UNPACKED_BYTES
        if sum(member.file_size for member in members) > unpacked_limit:
            raise ImportFileError(
                f"{name} unpacks to more than {unpacked_limit} bytes "
                "(CURATION_IMPORT_MAX_UNPACKED_BYTES); split it"
            )
        json_files = [path for path in paths if path.suffix.lower() == ".json"]
        if len(json_files) != 1:
            found = ", ".join(str(path) for path in json_files) or "none"
            raise ImportFileError(
                f"{name} must hold exactly one ShareGPT .json file next to its images folder; "
                f"found {found}"
            )
        # The JSON file is parsed whole (several times its size in memory): its own, lower limit.
        json_limit = settings.CURATION_IMPORT_MAX_JSON_BYTES
        json_member = members[paths.index(json_files[0])]
        if json_member.file_size > json_limit:
            raise ImportFileError(
                f"{name}: {json_files[0]} is {json_member.file_size} bytes, over the "
                f"{json_limit} bytes a ShareGPT file may have (CURATION_IMPORT_MAX_JSON_BYTES); "
                "split the trajectories over several imports"
            )
        root = Path(tmp)
        budget = unpacked_limit
        for member, path in zip(members, paths, strict=True):
            target = root.joinpath(*path.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            # Inflated chunk by chunk and counted: a member's declared size can lie.
            try:
                with target.open("wb") as sink:
                    for chunk in iter_zip_member(data, member, where=name, budget=budget):
                        sink.write(chunk)
            except UnsafeArchive as error:
                raise ImportFileError(str(error)) from None
            budget -= member.file_size
        try:
            return load_sharegpt_file(root.joinpath(*json_files[0].parts), task=task)
        except (DatasetFormatError, TrajectoryFormatError) as error:
            raise ImportFileError(str(error).replace(tmp + "/", "")) from None


def draft_params(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The draft job's params and total from a validated DraftJobForm (or API input)."""
    task: Task = data["task"]
    rows = draft_candidates(
        task=task,
        dataset=data.get("dataset") or "",
        split=data.get("split") or "",
        label=data.get("label") or "",
        skip_curated=bool(data.get("skip_curated")),
    )
    ids = list(rows.values_list("id", flat=True)[: data["limit"]])
    if not ids:
        raise WorkflowError(
            f"no labelled {task.code} spectrum matches these filters; load or label spectra first"
        )
    params = {
        "spectrum_ids": ids,
        "task": task.code,
        "teacher": teacher_spec(data["teacher"]),
        "max_tool_calls": data["max_tool_calls"],
    }
    return params, len(ids)
