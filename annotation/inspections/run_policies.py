"""The policy an inspection run's candidates are answered with, built from the run's spec and
sampling. Jobs cache one per worker process (``policy_for``); the reproduction check builds a
fresh one (``build_run_policy``) so the reference shares nothing with what it checks."""

from __future__ import annotations

import re
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


# What a user's rule-based or local-checkpoint spec may hold besides its kind: each key, and
# what it must be (refused at creation, naming the key, rather than stored and failing every
# candidate when the policy is built). An endpoint's spec is checked by endpoint_spec_check.
MAX_WINDOWS = 16  # a run makes at most 16 tool calls, so more windows change nothing
MAX_NAME = 120
DTYPES = ("float32", "float16", "bfloat16")
DEVICE_PATTERN = re.compile(r"cpu|mps|cuda(:[0-9]{1,2})?")
MAX_PIXELS = (28 * 28, 16_384 * 28 * 28)  # Qwen2.5-VL's patch area, and its default ceiling


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rule_based_key(key: str, value: Any) -> str | None:
    """Why ``value`` is refused for ``key`` of a rule-based spec, or None."""
    if key == "threshold":
        number = _is_int(value) or isinstance(value, float)
        if not number or not 0.0 < value < 1.0:
            return f"must be a number between 0 and 1 (exclusive); got {value!r}"
    elif key == "max_windows":
        if value is not None and (not _is_int(value) or not 0 <= value <= MAX_WINDOWS):
            return f"must be an integer from 0 to {MAX_WINDOWS}, or null; got {value!r}"
    elif key == "name":
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
            return f"must be a non-empty text of at most {MAX_NAME} characters; got {value!r}"
    elif key == "calibration" and value not in ("default", None):
        return f'must be "default" (the fit on the development spectra) or null; got {value!r}'
    return None


def _transformers_key(key: str, value: Any) -> str | None:
    """Why ``value`` is refused for ``key`` of a local-checkpoint spec, or None."""
    if key == "device":
        if not isinstance(value, str) or not DEVICE_PATTERN.fullmatch(value):
            return f'must be "cpu", "cuda", "cuda:N" or "mps"; got {value!r}'
    elif key == "dtype":
        if value is not None and value not in DTYPES:
            return f"must be one of {', '.join(DTYPES)}, or null (the checkpoint's); got {value!r}"
    elif key == "max_pixels":
        low, high = MAX_PIXELS
        if value is not None and (not _is_int(value) or not low <= value <= high):
            return f"must be an integer from {low} to {high}, or null; got {value!r}"
    elif key == "reuse_cache" and not isinstance(value, bool):
        return f"must be true or false; got {value!r}"
    return None


SPEC_KEYS: dict[str, tuple[tuple[str, ...], Any]] = {
    "rule-based": (("threshold", "max_windows", "name", "calibration"), _rule_based_key),
    "transformers": (
        ("model_path", "device", "dtype", "max_pixels", "reuse_cache"),
        _transformers_key,
    ),
}


def _spec_keys_check(kind: str, spec: dict[str, Any]) -> None:
    """Refuse a key the kind does not take, or a value it cannot use, naming the key."""
    allowed, reason_for = SPEC_KEYS[kind]
    for key, value in spec.items():
        if key == "kind":
            continue
        if key in ("base_url", "api_key"):
            raise WorkflowError(f"a {kind} policy takes no base_url or api_key")
        if key == "sampling":
            raise WorkflowError(
                "policy spec key 'sampling' is not accepted: give sampling beside the policy "
                "(the run's own sampling field)"
            )
        if key not in allowed:
            raise WorkflowError(
                f"policy spec key {key!r} is not accepted for a {kind} policy; "
                f"allowed: kind, {', '.join(allowed)}"
            )
        reason = reason_for(key, value)
        if reason is not None:
            raise WorkflowError(f"policy spec key {key!r} {reason}")


def policy_spec_check(
    spec: dict[str, Any], *, user: User | None
) -> tuple[dict[str, Any], ModelEndpoint | None]:
    """The stored form of a user's policy spec, every key checked for its kind (and the
    endpoint it names, for an ``openai`` spec); WorkflowError names the key refused."""
    if not isinstance(spec, dict):
        raise WorkflowError(f"policy spec must be an object; got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise WorkflowError(f"policy kind must be one of {', '.join(POLICY_KINDS)}; got {kind!r}")
    if kind == "openai":
        return endpoint_spec_check(spec, user=user)
    _spec_keys_check(kind, spec)
    if kind == "transformers":
        spec = {**spec, "model_path": _checked_model_path(spec.get("model_path"))}
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
