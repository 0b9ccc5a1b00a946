"""Model endpoints: what staff may register, and how a call to one is made.

A model call goes only to a registered ``ModelEndpoint``; its API key is read at call time from
the endpoint's own credential reference (an environment variable or a secret file), so a key
is only ever sent to the endpoint that names it. Nothing a user sends carries a URL or a key:
runs, jobs and judges name an endpoint. Writes live in services.py.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from annotation.core.models import ModelEndpoint

DEFAULT_ENDPOINT = "default"  # registered from the OPENAI_* settings
# Names the forms use for other teachers and policy kinds; an endpoint may not take them.
RESERVED_NAMES = frozenset({"rule-based", "openai", "transformers", "vllm", "checkpoint"})
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,59}$")
# Only variables meant as model keys: never SECRET_KEY, DATABASE_URL or another server secret.
CREDENTIAL_ENV_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]{0,90}_API_KEY$")
MAX_CREDENTIAL_BYTES = 4096
MAX_BASE_URL_CHARS = 500
TIMEOUT_RANGE = (1.0, 600.0)
# What a run or job may choose for itself: how patiently to call an endpoint, never where.
CALL_OPTIONS: dict[str, tuple[type, float, float]] = {
    "max_retries": (int, 1, 10),
    "backoff": (float, 0.0, 60.0),
    "timeout": (float, 0.1, TIMEOUT_RANGE[1]),
}


class EndpointError(ValueError):
    """An endpoint that cannot be registered or called, with the reason."""


# --- validating what staff register ---------------------------------------------------------------


def check_name(name: str) -> str:
    name = (name or "").strip()
    if not NAME_PATTERN.match(name):
        raise EndpointError(
            f"endpoint name {name!r} must be 1-60 characters of a-z, 0-9, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise EndpointError(f"endpoint name {name!r} is reserved; choose another")
    return name


def check_base_url(url: str) -> str:
    url = (url or "").strip().rstrip("/")
    if len(url) > MAX_BASE_URL_CHARS:
        raise EndpointError(f"base URL is {len(url)} characters; the limit is {MAX_BASE_URL_CHARS}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"base URL {url!r} must be http:// or https:// with a host name")
    if parts.username or parts.password:
        raise EndpointError(
            "base URL must not hold a user name or password; name the credential instead"
        )
    if parts.query or parts.fragment:
        raise EndpointError(f"base URL {url!r} must not have a query or fragment")
    return url


def check_model(model: str) -> str:
    model = (model or "").strip()
    if not model or len(model) > 200:
        raise EndpointError("model must name the served model (1-200 characters)")
    return model


def check_timeout(timeout: float) -> float:
    low, high = TIMEOUT_RANGE
    if not low <= float(timeout) <= high:
        raise EndpointError(f"timeout must be {low:g}-{high:g} seconds; got {timeout}")
    return float(timeout)


def secret_dirs() -> list[Path]:
    return [Path(folder).resolve() for folder in settings.MODEL_ENDPOINT_SECRET_DIRS]


def _inside_secret_dirs(path: Path) -> bool:
    return any(path == folder or folder in path.parents for folder in secret_dirs())


def check_credential(*, env: str = "", file: str = "") -> tuple[str, str]:
    """The credential reference ``(env, file)``: at most one of them, both may be empty."""
    env, file = (env or "").strip(), (file or "").strip()
    if env and file:
        raise EndpointError("name the credential by an environment variable or a file, not both")
    if env and not CREDENTIAL_ENV_PATTERN.match(env):
        raise EndpointError(
            f"credential variable {env!r} must be upper-case and end in _API_KEY "
            "(so no other server secret can be named)"
        )
    if file:
        path = Path(file)
        folders = ", ".join(str(folder) for folder in secret_dirs()) or "none configured"
        if not path.is_absolute() or not _inside_secret_dirs(path.resolve()):
            raise EndpointError(
                f"credential file {file!r} must be an absolute path inside a secret folder "
                f"({folders}; set MODEL_ENDPOINT_SECRET_DIRS to change them)"
            )
    return env, file


# --- finding and calling an endpoint -------------------------------------------------------------


def choices_text() -> str:
    """The enabled endpoints, for error messages that ask the user to choose one."""
    rows = ModelEndpoint.objects.filter(enabled=True).order_by("name")
    names = [f"{row.name} ({row.model})" for row in rows[:20]]
    if not names:
        return "none is registered yet; staff register them on the Model endpoints page"
    return ", ".join(names)


def find_usable(reference: Any) -> ModelEndpoint:
    """The enabled endpoint named (or numbered) ``reference``; EndpointError says why not."""
    endpoint = None
    if isinstance(reference, int) and not isinstance(reference, bool):
        endpoint = ModelEndpoint.objects.filter(pk=reference).first()
    elif isinstance(reference, str) and reference.strip():
        endpoint = ModelEndpoint.objects.filter(name=reference.strip()).first()
    if endpoint is None:
        raise EndpointError(
            f"no model endpoint {reference!r} is registered; choose one of: {choices_text()}"
        )
    check_usable(endpoint)
    return endpoint


def check_usable(endpoint: ModelEndpoint) -> None:
    if not endpoint.enabled:
        raise EndpointError(
            f"model endpoint {endpoint.name!r} is disabled; choose one of: {choices_text()}"
        )


def api_key(endpoint: ModelEndpoint) -> str | None:
    """The endpoint's key, read now from its own credential reference; None when it has none."""
    value = ""
    if endpoint.credential_env:
        value = os.environ.get(endpoint.credential_env, "")
        secret_file = os.environ.get(f"{endpoint.credential_env}_FILE", "")
        if not value and secret_file:  # container secrets, as settings.envsecret reads them
            value = _read_secret(Path(secret_file), endpoint=endpoint, check_folder=False)
    elif endpoint.credential_file:
        value = _read_secret(Path(endpoint.credential_file), endpoint=endpoint, check_folder=True)
    value = value.strip()
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise EndpointError(
            f"the credential of endpoint {endpoint.name!r} holds control characters"
        )
    return value or None


def _read_secret(path: Path, *, endpoint: ModelEndpoint, check_folder: bool) -> str:
    resolved = path.resolve()
    if check_folder and not _inside_secret_dirs(resolved):
        raise EndpointError(
            f"credential file of endpoint {endpoint.name!r} is outside the secret folders"
        )
    try:
        with resolved.open("rb") as handle:
            data = handle.read(MAX_CREDENTIAL_BYTES + 1)
    except OSError as error:
        raise EndpointError(
            f"credential file of endpoint {endpoint.name!r} cannot be read: {error.strerror}"
        ) from None
    if len(data) > MAX_CREDENTIAL_BYTES:
        raise EndpointError(
            f"credential file of endpoint {endpoint.name!r} is over {MAX_CREDENTIAL_BYTES} bytes"
        )
    return data.decode("utf-8", errors="replace")


def call_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The call options (retries, backoff, timeout) a spec sets, checked against their ranges."""
    options: dict[str, Any] = {}
    for key, (kind, low, high) in CALL_OPTIONS.items():
        if key not in spec:
            continue
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise EndpointError(f"{key} must be a number; got {value!r}")
        if not low <= value <= high or (kind is int and value != int(value)):
            raise EndpointError(
                f"{key} must be {kind.__name__} in [{low:g}, {high:g}]; got {value}"
            )
        options[key] = kind(value)
    return options


def fingerprint(endpoint: ModelEndpoint, key: str | None) -> list[Any]:
    """What a cached policy for this endpoint depends on (the key only as a digest)."""
    digest = hashlib.sha256(key.encode()).hexdigest() if key else ""
    return [endpoint.pk, endpoint.base_url, endpoint.model, endpoint.timeout, digest]


def endpoint_policy(
    endpoint: ModelEndpoint,
    *,
    options: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
    key: str | None = None,
) -> Any:
    """An OpenAI-compatible policy calling ``endpoint`` with its own key, and nothing else."""
    from agent.policies import build_policy

    check_usable(endpoint)
    chosen = call_options(options or {})
    chosen["timeout"] = min(chosen.get("timeout", endpoint.timeout), endpoint.timeout)
    spec: dict[str, Any] = {
        **chosen,
        "kind": "openai",
        "base_url": endpoint.base_url,
        "model": endpoint.model,
        "api_key": key if key is not None else api_key(endpoint),
        "label": endpoint.name,
    }
    if sampling:
        spec["sampling"] = sampling
    return build_policy(spec)


# --- what a policy spec shows to whom -----------------------------------------------------------

_ADDRESS_KEYS = frozenset({"base_url", "url", "host", "endpoint_url"})
_SECRET_KEY_PARTS = ("key", "token", "secret", "password", "authorization", "credential")


def public_policy_spec(spec: Any, *, addresses: bool = False) -> Any:
    """The policy spec (or info, or sampling) without credentials (api keys, tokens, passwords)
    at any depth, and without the addresses of model servers unless ``addresses`` (staff only:
    internal host names; the endpoint's name says which model)."""
    if isinstance(spec, dict):
        return {
            key: public_policy_spec(value, addresses=addresses)
            for key, value in spec.items()
            if not any(part in str(key).lower() for part in _SECRET_KEY_PARTS)
            and (addresses or str(key).lower() not in _ADDRESS_KEYS)
        }
    if isinstance(spec, list):
        return [public_policy_spec(item, addresses=addresses) for item in spec]
    return spec
