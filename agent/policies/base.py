"""What every policy offers, and the message format policies receive.

A policy turns a conversation into the next assistant text. Messages follow common.md: a list
of ``{"role": "system"|"user"|"assistant", "content": [part, ...]}`` where a part is
``{"type": "text", "text": str}`` or ``{"type": "image", "png": bytes}``. Tool results are user
turns wrapped in ``<tool_response>`` ... ``</tool_response>`` (ml_path.md section 1).
"""

from __future__ import annotations

import base64
import subprocess
import threading
import tomllib
from dataclasses import asdict, dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ROLES = ("system", "user", "assistant")
REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_NAME = "specvet"


class PolicyError(RuntimeError):
    """A policy could not produce an answer: endpoint down, model missing, nonsense response."""


class EndpointUnavailable(PolicyError):
    """The model server was unreachable or kept failing (5xx, 429) through every retry.

    Unlike a rejected request or a nonsense reply, this is worth trying again later (a vLLM
    server restarting takes minutes): jobs wait and retry on it.
    """


class EndpointBusy(EndpointUnavailable):
    """The model server answered, but was full: its last answer was HTTP 429 or the request
    timed out waiting. Back-pressure, not an outage: the same turn is worth sending again
    after a pause (``annotation.inspections.in_flight``), without giving the episode up.
    """


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings shared by every model-backed policy.

    ``temperature == 0`` means greedy decoding. ``seed`` makes sampling reproducible where the
    backend supports it; None leaves it to the backend.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be an int, got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def coerce(cls, value: SamplingParams | dict[str, Any] | None) -> SamplingParams:
        """Accept a SamplingParams, a dict of its fields (from a JSON spec) or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(cls.__dataclass_fields__))
            if unknown:
                raise ValueError(f"unknown sampling parameters {unknown}")
            return cls(**value)
        raise ValueError(
            f"sampling must be SamplingParams, a dict or None, got {type(value).__name__}"
        )


@runtime_checkable
class Policy(Protocol):
    """Produces the next assistant message for a conversation."""

    name: str

    def info(self) -> dict[str, Any]:
        """What produced the answers: policy kind, model/checkpoint, sampling, code version."""
        ...

    def generate(self, messages: list[dict[str, Any]]) -> str:
        """The next assistant text. Raises PolicyError when the backend cannot answer."""
        ...


@runtime_checkable
class EpisodeTurns(Protocol):
    """Writes the turns of one episode. A policy that plans from the spectrum (the rule-based
    inspector) returns one from ``begin`` for that episode alone, so several episodes may run at
    once on one policy; ``decision``, when not None, is the episode's own verdict and confidence.
    """

    decision: dict[str, Any] | None

    def generate(self, messages: list[dict[str, Any]]) -> str: ...


_USAGE_SLOT_LOCK = threading.Lock()


class PerThreadUsage:
    """``last_usage`` and ``last_batch_usage`` kept per thread.

    One policy object serves every thread of a worker; what describes a request must be read by
    the thread that made it, never another thread's "last" one.
    """

    _usage_local: threading.local

    def _usage_slot(self) -> threading.local:
        try:
            return self._usage_local
        except AttributeError:
            with _USAGE_SLOT_LOCK:
                if "_usage_local" not in self.__dict__:
                    self._usage_local = threading.local()
            return self._usage_local

    @property
    def last_usage(self) -> dict[str, Any]:
        return getattr(self._usage_slot(), "usage", {})

    @last_usage.setter
    def last_usage(self, value: dict[str, Any]) -> None:
        self._usage_slot().usage = value

    @property
    def last_batch_usage(self) -> list[dict[str, Any]]:
        return getattr(self._usage_slot(), "batch_usage", [])

    @last_batch_usage.setter
    def last_batch_usage(self, value: list[dict[str, Any]]) -> None:
        self._usage_slot().batch_usage = value


def validate_messages(messages: list[dict[str, Any]]) -> None:
    """Raise ValueError naming the message and part when ``messages`` break the agreed format."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for index, message in enumerate(messages):
        where = f"message {index}"
        if not isinstance(message, dict):
            raise ValueError(f"{where} must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"{where} has role {role!r}; expected one of {ROLES}")
        content = message.get("content")
        if not isinstance(content, list):
            raise ValueError(f"{where} ({role}) content must be a list of parts")
        for part_index, part in enumerate(content):
            _validate_part(part, f"{where} ({role}) part {part_index}")
    if messages[-1]["role"] == "assistant":
        raise ValueError("the last message is an assistant turn; there is nothing to answer")


def _validate_part(part: Any, where: str) -> None:
    if not isinstance(part, dict):
        raise ValueError(f"{where} must be a dict, got {type(part).__name__}")
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise ValueError(f"{where} is a text part without a str 'text'")
    elif kind == "image":
        png = part.get("png")
        if not isinstance(png, bytes | bytearray):
            raise ValueError(f"{where} is an image part without 'png' bytes")
        if not bytes(png[:8]) == PNG_SIGNATURE:
            raise ValueError(f"{where} image bytes are not a PNG (bad signature)")
    else:
        raise ValueError(f"{where} has type {kind!r}; expected 'text' or 'image'")


def png_data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Policy messages as OpenAI chat messages with text and ``image_url`` (data URL) parts.

    Tool results stay user turns carrying the ``<tool_response>`` wrapper text: the project
    chat template renders them exactly like a ``tool`` role (ml_path.md section 3).
    """
    validate_messages(messages)
    converted = []
    for message in messages:
        parts = []
        for part in message["content"]:
            if part["type"] == "text":
                parts.append({"type": "text", "text": part["text"]})
            else:
                parts.append({"type": "image_url", "image_url": {"url": png_data_url(part["png"])}})
        converted.append({"role": message["role"], "content": parts})
    return converted


@cache
def code_version() -> str:
    """``git describe`` of the repository when it is a git checkout, else the package version."""
    described = _git_describe(REPO_ROOT)
    if described:
        return described
    try:
        return metadata.version(PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        return _pyproject_version(REPO_ROOT / "pyproject.toml")


def _git_describe(root: Path) -> str | None:
    try:
        completed = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    described = completed.stdout.strip()
    return described if completed.returncode == 0 and described else None


def _pyproject_version(pyproject: Path) -> str:
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return "unknown"
    return str(project.get("version", "unknown"))
