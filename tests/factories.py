"""Factories and named actors for the web tests."""

from __future__ import annotations

import zlib

import factory
import numpy as np
from django.contrib.auth import get_user_model

from agent.spectra import Spectrum as SpectrumValue
from annotation.curation import services as curation_services
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task

PASSWORD = "a-long-test-password"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"expert{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def saved(self, create: bool, extracted: object, **kwargs: object) -> None:
        if create:
            self.save()

    @factory.post_generation
    def roles(self, create: bool, extracted: object, **kwargs: object) -> None:
        """``UserFactory(roles=["expert", "rater"])``: the roles a test user holds (none unless
        given, as for a new account)."""
        if create and extracted:
            give_roles(self, *extracted)  # type: ignore[misc]


def give_roles(user, *roles: str) -> None:
    """Add roles (annotation.roles.Role values) directly, without the audited service."""
    from django.contrib.auth.models import Group

    from annotation.core.roles import Role, forget_roles

    for role in map(Role, roles):
        if role == Role.STAFF:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        else:
            user.groups.add(Group.objects.get_or_create(name=role.value)[0])
    forget_roles(user)


def make_spectrum_value(
    *,
    object_id: str = "TEST-0001",
    line_center: float = 6564.61,
    line_amplitude: float = 2.0,
    n_pixels: int = 3900,
    seed: int = 0,
) -> SpectrumValue:
    """A LAMOST-like spectrum: log grid 3700-9100 Å, flat continuum, one Gaussian line."""
    rng = np.random.default_rng(seed)
    wave = np.logspace(np.log10(3700.0), np.log10(9100.0), n_pixels)
    flux = 1.0 + line_amplitude * np.exp(-0.5 * ((wave - line_center) / 8.0) ** 2)
    flux = flux + rng.normal(0.0, 0.02, n_pixels)
    ivar = np.full(n_pixels, 1.0 / 0.02**2)
    return SpectrumValue(
        wavelength=wave, flux=flux, ivar=ivar, survey="TEST", object_id=object_id, snr=50.0
    )


def make_spectrum(
    *,
    object_id: str = "TEST-0001",
    dataset: str = "tests",
    task: Task | None = None,
    label: str = "",
    seed: int | None = None,
    **value_kwargs: object,
) -> Spectrum:
    """A stored spectrum; without ``seed``, its noise is drawn from a seed of its object's own,
    so two objects are two spectra (the same pixels are stored once: see below)."""
    if seed is None:
        seed = zlib.crc32(object_id.encode())
    value = make_spectrum_value(object_id=object_id, seed=seed, **value_kwargs)  # type: ignore[arg-type]
    result = spectra_services.spectra_store(
        values=[value], dataset=dataset, source_name=f"{object_id}.fits", task=task, label=label
    )
    if result.created:
        return result.created[0]
    row = Spectrum.objects.get(
        dataset=dataset, content_hash=spectra_services.spectrum_content_hash(value)
    )
    # The same pixels are stored once: a test asking for another object with them would get
    # this row, with its own name, task and label, and fail far from the cause.
    asked = {"object_id": object_id, "task": task, "label": label}
    stored = {"object_id": row.object_id, "task": row.task, "label": row.label}
    if any(asked[key] not in ("", None, stored[key]) for key in asked):
        raise AssertionError(
            f"make_spectrum({object_id!r}, seed={seed}): these pixels are already stored in "
            f"data set {dataset!r} as {stored}; give this spectrum another seed"
        )
    return row


def make_endpoint(
    *,
    name: str = "gpu-1",
    base_url: str = "http://127.0.0.1:9/v1",
    model: str = "m",
    credential_env: str = "",
    enabled: bool = True,
):
    """A registered model endpoint (directly, without the audited service)."""
    from annotation.core.models import ModelEndpoint

    return ModelEndpoint.objects.create(
        name=name, base_url=base_url, model=model, credential_env=credential_env, enabled=enabled
    )


class ScriptedPolicy:
    """A policy that replays canned turns (for drafts in tests); with ``confidence`` its
    episodes report that confidence, as the rule-based inspector's do."""

    name = "scripted"

    def __init__(self, turns: list[str], confidence: float | None = None) -> None:
        self.turns = list(turns)
        self.confidence = confidence

    def info(self) -> dict[str, str]:
        return {"name": self.name, "model": "scripted/v1"}

    def begin(self, **episode: object) -> ScriptedEpisode:
        decision = None if self.confidence is None else {"confidence": self.confidence}
        return ScriptedEpisode(self, decision)

    def generate(self, messages: list[dict]) -> str:
        return self.turns.pop(0)


class ScriptedEpisode:
    """One episode of a ScriptedPolicy: its turns come from the policy, its decision is its own."""

    def __init__(self, policy: ScriptedPolicy, decision: dict | None) -> None:
        self.policy = policy
        self.decision = decision

    def generate(self, messages: list[dict]) -> str:
        return self.policy.generate(messages)


def tool_call_turn(lo: float, hi: float, label: str, think: str = "Check the line.") -> str:
    from agent.editing import step_text

    return step_text(think, (lo, hi), label)


def answer_turn(prediction: str = "YES", think: str = "Broad emission.") -> str:
    from agent.editing import answer_text

    return answer_text(think, prediction, "Broad Balmer emission with He I.")


def make_trajectory(row: Spectrum, task_code: str = "CV", turns: list[str] | None = None):
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect
    from annotation.spectra.selectors import spectrum_value

    turns = turns or [tool_call_turn(6500, 6630, "H-alpha"), answer_turn()]
    return inspect(spectrum_value(row), get_task(task_code), ScriptedPolicy(turns))


def make_curation(*, label: str = "YES", object_id: str = "CUR-1", seed: int | None = None):
    task = Task.objects.get(code="CV")
    row = make_spectrum(object_id=object_id, task=task, label=label, seed=seed)
    return curation_services.curation_create(
        spectrum=row,
        task=task,
        trajectory=make_trajectory(row),
        ground_truth=label,
        teacher={"name": "scripted"},
    )


def make_inspected(
    *,
    spectra: list[Spectrum],
    verdicts: dict[int, tuple[str, float]],
    task_code: str = "CV",
    created_by=None,
    threshold: float = 0.75,
    model: tuple[str, str] | None = None,
):
    """A finished rule-based run over ``spectra``: each candidate gets the verdict and confidence
    ``verdicts`` gives for ITS spectrum id (not by position). ``model`` (key, label) names the
    run's model, standing in for a different checkpoint or endpoint without loading one."""
    from annotation.inspections import services as inspection_services
    from annotation.inspections.models import InspectionRun, Rollout

    run = inspection_services.inspection_run_create(
        task=Task.objects.get(code=task_code),
        spectrum_ids=[row.pk for row in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=created_by,
        confidence_threshold=threshold,
        enqueue=False,
    )
    if model is not None:
        InspectionRun.objects.filter(pk=run.pk).update(model_key=model[0], model_label=model[1])
    candidates = list(run.candidates.select_related("run__task", "spectrum").order_by("pk"))
    for candidate in candidates:
        prediction, confidence = verdicts[candidate.spectrum_id]
        inspection_services.candidate_finish(
            candidate=candidate,
            rollouts=[
                Rollout(
                    candidate=candidate,
                    index=0,
                    data={},
                    prediction=prediction,
                    confidence=confidence,
                )
            ],
        )
    return run


def make_revised_curation(
    *,
    reviser,
    auditors,
    object_id: str = "REV-1",
    seed: int | None = None,
    think: str = "Zoom on the core.",
):
    """A drafted curation an expert revised (its first step's thinking and window changed) and
    two auditors approved: the trajectory the loop's SFT and DPO exports learn from."""
    from agent.editing import EditedStep, apply_edit, edit_from_trajectory
    from annotation.curation import selectors as curation_selectors
    from annotation.spectra import selectors as spectra_selectors

    curation = make_curation(object_id=object_id, seed=seed)
    curation_services.curation_screen(curation=curation, user=auditors[0], keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    head = curation_selectors.head_version(curation)
    base = curation_selectors.version_trajectory(head)
    _, answer = edit_from_trajectory(base)
    edited = apply_edit(
        base,
        tool=spectra_selectors.spectrum_tool(curation.spectrum),
        steps=[EditedStep(think, (6540.0, 6590.0), "H-alpha core")],
        answer=answer,
    )
    curation_services.curation_save_revision(
        curation=curation, user=reviser, base_number=head.number, trajectory=edited
    )
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    for auditor in auditors:
        curation_services.curation_claim_audit(curation=curation, user=auditor)
    for auditor in auditors:
        curation_services.audit_submit(
            curation=curation, user=auditor, version_number=curation.head_number, verdict="approve"
        )
    curation.refresh_from_db()
    return curation


def make_star_spectrum(
    *, velocity_kms: float = 30.0, object_id: str = "STAR-1", seed: int = 0
) -> Spectrum:
    """An SDSS-like spectrum of the synthetic K star template (agent.redshift_templates) at
    ``velocity_kms``, S/N about 30."""
    from agent.redshift import C_KMS
    from agent.redshift_templates import synthetic_templates

    template = next(t for t in synthetic_templates() if t.name == "synthetic K star")
    rng = np.random.default_rng(seed)
    wave = 10.0 ** np.arange(np.log10(3700.0), np.log10(9200.0), 1e-4)
    flux = np.interp(wave / (1.0 + velocity_kms / C_KMS), template.wavelength, template.flux)
    noise = float(np.median(np.abs(flux))) / 30.0
    value = SpectrumValue(
        wavelength=wave,
        flux=flux + rng.normal(0.0, noise, wave.size),
        ivar=np.full(wave.size, 1.0 / noise**2),
        survey="TEST",
        object_id=object_id,
    )
    return spectra_services.spectra_store(
        values=[value], dataset="tests", source_name=f"{object_id}.fits"
    ).created[0]


def make_galaxy_spectrum(
    *,
    z: float,
    object_id: str = "GALAXY-1",
    dataset: str = "tests",
    scale: float = 1.0,
    seed: int = 0,
    ra: float | None = None,
    dec: float | None = None,
    sky: bool = False,
) -> Spectrum:
    """An SDSS-like spectrum of the synthetic emission-line galaxy template redshifted to ``z``
    (agent.redshift_templates), S/N about 15, optionally with a sky spectrum."""
    from agent.redshift_templates import synthetic_templates

    template = synthetic_templates()[0]
    rng = np.random.default_rng(seed)
    wave = 10.0 ** np.arange(np.log10(3700.0), np.log10(9200.0), 1e-4)
    flux = scale * np.interp(wave / (1.0 + z), template.wavelength, template.flux)
    noise = float(np.median(np.abs(flux))) / 15.0
    value = SpectrumValue(
        wavelength=wave,
        flux=flux + rng.normal(0.0, noise, wave.size),
        ivar=np.full(wave.size, 1.0 / noise**2),
        survey="TEST",
        object_id=object_id,
        ra=ra,
        dec=dec,
        sky=np.where(np.abs(wave - 5578.9) < 3.0, 40.0, 2.0) if sky else None,
    )
    result = spectra_services.spectra_store(
        values=[value], dataset=dataset, source_name=f"{object_id}.fits"
    )
    return result.created[0]
