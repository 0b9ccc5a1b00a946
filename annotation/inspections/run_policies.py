"""The policy an inspection run's candidates are answered with, built from the run's spec and
sampling. Jobs cache one per worker process (``policy_for``); the reproduction check builds a
fresh one (``build_run_policy``) so the reference shares nothing with what it checks."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from annotation.core import endpoints
from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.roles import Role
from annotation.training_runs.services import _checked_model_path

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from annotation.core.models import ModelEndpoint
    from annotation.inspections.models import InspectionRun

_policies: dict[str, Any] = {}


def policy_for(spec: dict[str, Any], sampling: dict[str, Any] | None = None) -> Any:
    """A policy per worker process and spec (loading a checkpoint once, not per candidate).

    Every thread of the worker shares it, so a policy holds no state of one episode: the
    rule-based inspector's ``begin`` makes an object per episode, model policies keep their
    usage per thread and take turns on one model (``agent.policies.base``).

    An ``openai`` spec names its endpoint; the endpoint is looked up (and must be enabled) on
    every call, and its current URL and key decide which cached policy is used.
    """
    import json

    from annotation.core import endpoints

    if spec["kind"] == "openai":
        endpoint, api_key = _usable_endpoint(spec)
        key = json.dumps(
            [spec, sampling or {}, endpoints.fingerprint(endpoint, api_key)], sort_keys=True
        )
    else:
        key = json.dumps([spec, sampling or {}], sort_keys=True)
    if key not in _policies:
        _policies[key] = build_run_policy(spec, sampling)
    return _policies[key]


def build_run_policy(spec: dict[str, Any], sampling: dict[str, Any] | None = None) -> Any:
    """A new policy for a run's spec and sampling (``policy_for`` caches one per process)."""
    from agent.policies import build_policy
    from annotation.core import endpoints

    if spec["kind"] == "openai":
        endpoint, api_key = _usable_endpoint(spec)
        return endpoints.endpoint_policy(endpoint, options=spec, sampling=sampling, key=api_key)
    full = dict(spec)
    if sampling and full["kind"] != "rule-based":
        full["sampling"] = sampling
    return build_policy(full)


def _usable_endpoint(spec: dict[str, Any]) -> tuple[Any, str | None]:
    from annotation.core import endpoints

    if not spec.get("endpoint"):
        raise endpoints.EndpointError(
            "this run names no registered model endpoint; start a new run with one"
        )
    endpoint = endpoints.find_usable(spec["endpoint"])
    return endpoint, endpoints.api_key(endpoint)


def deterministic(run: InspectionRun) -> tuple[bool, str]:
    """Whether re-running the run's policy must give the stored answers exactly, and why not.

    The rule-based inspector is deterministic. A model is only when its run asked for greedy
    decoding with a seed; otherwise a re-run is a fresh sample and a difference is no alarm."""
    if run.policy_spec.get("kind") == "rule-based":
        return True, ""
    sampling = run.sampling or {}
    temperature = sampling.get("temperature", 0.0)
    if temperature == 0.0 and sampling.get("seed") is not None:
        return True, ""
    return False, (
        f"the run samples its model (temperature {temperature}, seed {sampling.get('seed')}): "
        "a re-run is a new sample, so differences are expected"
    )


def sampled_for_recheck(candidate_id: int, *, first_id: int | None, rate: float) -> bool:
    """Whether a finished candidate is in its run's background re-check sample: the run's first
    candidate always, the rest at ``rate`` by a hash of the id (the same answer on every worker,
    with no query)."""
    if candidate_id == first_id:
        return True
    if rate <= 0.0:
        return False
    if rate >= 1.0:
        return True
    return zlib.crc32(candidate_id.to_bytes(8, "little")) < rate * 2**32


# --- what a run's spec and sampling may be -------------------------------------------------------

POLICY_KINDS = ("rule-based", "transformers", "openai")


# What a user's OpenAI-compatible spec may hold: which endpoint, and how patiently to call it.
OPENAI_SPEC_KEYS = ("kind", "endpoint", "model", *endpoints.CALL_OPTIONS)


def endpoint_spec_check(
    spec: dict[str, Any], *, user: User | None
) -> tuple[dict[str, Any], ModelEndpoint]:
    """The stored form of a user's ``{"kind": "openai", "endpoint": NAME | ID, ...}`` spec and
    its endpoint. No URL or key is accepted: the endpoint's own are used when the call is made.
    """
    from annotation.core.roles import has_role

    for refused in ("base_url", "api_key"):
        if refused in spec:
            raise WorkflowError(
                f"{refused} is not accepted; choose a registered endpoint: "
                f"{endpoints.choices_text()}"
            )
    unknown = sorted(set(spec) - set(OPENAI_SPEC_KEYS))
    if unknown:
        raise WorkflowError(
            f"policy spec keys {unknown} are not accepted for an endpoint; "
            f"allowed: {', '.join(OPENAI_SPEC_KEYS)}"
        )
    if user is not None and not has_role(user, Role.ML_ENGINEER, Role.EXPERT, Role.STAFF):
        raise NotAllowed("calling a model endpoint needs the ml_engineer, expert or staff role")
    try:
        endpoint = endpoints.find_usable(spec.get("endpoint") or endpoints.DEFAULT_ENDPOINT)
        options = endpoints.call_options(spec)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    model = spec.get("model")
    if model not in (None, "", endpoint.model):
        raise WorkflowError(
            f"model {model!r} is not served by endpoint {endpoint.name!r}, which serves "
            f"{endpoint.model!r}; choose the endpoint registered for that model"
        )
    stored = {"kind": "openai", "endpoint": endpoint.name, "model": endpoint.model, **options}
    return stored, endpoint


def policy_spec_check(
    spec: dict[str, Any], *, user: User | None
) -> tuple[dict[str, Any], ModelEndpoint | None]:
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise WorkflowError(f"policy kind must be one of {', '.join(POLICY_KINDS)}; got {kind!r}")
    if kind == "openai":
        return endpoint_spec_check(spec, user=user)
    if kind == "transformers":
        spec = {**spec, "model_path": _checked_model_path(spec.get("model_path"))}
    if "base_url" in spec or "api_key" in spec:
        raise WorkflowError(f"a {kind} policy takes no base_url or api_key")
    return dict(spec), None


def sampling_check(sampling: dict[str, Any] | None) -> None:
    """Refused at creation, not by each candidate later: an unknown key (``base_url``,
    ``api_key``, ``extra_body``...) would otherwise be stored and fail every candidate."""
    from agent.policies.base import SamplingParams

    try:
        SamplingParams.coerce(sampling)
    except (TypeError, ValueError) as error:
        allowed = ", ".join(SamplingParams.__dataclass_fields__)
        raise WorkflowError(f"sampling: {error} (allowed keys: {allowed})") from None
