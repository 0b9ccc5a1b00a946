"""A policy behind an OpenAI-compatible ``/chat/completions`` endpoint (vLLM serve, TGI, ...).

Serve a checkpoint with the project template, no tool parser (the agent parses ``<tool_call>``
itself, ml_path.md section 3)::

    vllm serve <ckpt> --chat-template agent/chat_template.jinja \
        --chat-template-content-format openai --limit-mm-per-prompt '{"image": 9}'

Images travel as base64 PNG data URLs; tool results are user turns with the
``<tool_response>`` wrapper; no ``tools`` parameter is sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from agent.parsing import strip_special_tokens
from agent.policies.base import (
    EndpointBusy,
    EndpointUnavailable,
    PolicyError,
    SamplingParams,
    code_version,
    to_openai_messages,
)

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# Connections kept open per process: episodes in flight (``annotation.inspections.in_flight``)
# each hold one while their turn is served; httpx's default keeps 20 and reconnects the rest.
MAX_CONNECTIONS = 512
MAX_RETRY_AFTER_SECONDS = 60.0
BODY_EXCERPT_CHARS = 300


class OpenAICompatiblePolicy:
    """POST the conversation to ``{base_url}/chat/completions`` and return the message content.

    ``max_retries`` is the number of attempts in all (at least 1). Connection errors, timeouts,
    HTTP 429 and 5xx are retried with exponential backoff (``backoff * 2**k`` seconds, or the
    server's ``Retry-After`` when longer), then raise EndpointUnavailable (EndpointBusy when
    the last try was a 429 or a timeout: the server is full, not down); other 4xx raise
    PolicyError at once. ``client`` (a ready ``httpx.Client``, whose own timeout then applies)
    or ``transport`` can be injected, and ``sleep`` replaced, for tests.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        sampling: SamplingParams | dict[str, Any] | None = None,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        label: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} must start with http:// or https://")
        if not model:
            raise ValueError("model must name the served model")
        if max_retries < 1:
            raise ValueError(
                f"max_retries is the number of attempts and must be >= 1, got {max_retries}"
            )
        if timeout <= 0 or backoff < 0:
            raise ValueError(f"timeout must be > 0 and backoff >= 0, got {timeout}, {backoff}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        # What errors call the endpoint: its registered name, so that the stored error text
        # (shown to everyone who reads the candidate) never holds the server's address.
        self.label = label or self.base_url
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.sampling = SamplingParams.coerce(sampling)
        self.name = f"openai:{model}"
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(
            max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
        )
        self._client = client or httpx.Client(
            timeout=timeout, transport=transport, headers=headers, limits=limits
        )
        if client is not None and api_key:
            self._client.headers.update(headers)
        self._local = threading.local()

    # Episodes may run in threads (agent.evaluation concurrency): the one httpx client is
    # thread-safe, and what describes the last request is kept per thread.
    concurrent_safe = True

    @property
    def last_usage(self) -> dict[str, int | None]:
        return getattr(self._local, "usage", {})

    @last_usage.setter
    def last_usage(self, value: dict[str, int | None]) -> None:
        self._local.usage = value

    @property
    def last_finish_reason(self) -> str | None:
        return getattr(self._local, "finish_reason", None)

    @last_finish_reason.setter
    def last_finish_reason(self, value: str | None) -> None:
        self._local.finish_reason = value

    def info(self) -> dict[str, Any]:
        return {
            "policy": "openai",
            "name": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "sampling": self.sampling.as_dict(),
            "code_version": code_version(),
        }

    def request_body(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": self.sampling.max_new_tokens,
        }
        if self.sampling.seed is not None:
            body["seed"] = self.sampling.seed
        return body

    def generate(self, messages: list[dict[str, Any]]) -> str:
        response = self._post_with_retries(self.request_body(messages))
        return self._parse(response)

    def close(self) -> None:
        self._client.close()

    def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        last_reason = ""
        outcome = "unreachable"
        busy = False
        for attempt in range(1, self.max_retries + 1):
            retry_after = 0.0
            try:
                response = self._client.post(self.url, json=body)
            except httpx.TransportError as error:
                last_reason = _describe_transport_error(error)
                outcome = "unreachable"
                busy = isinstance(error, httpx.TimeoutException)
            else:
                if response.status_code < 400:
                    return response
                last_reason = f"HTTP {response.status_code}: {_excerpt(response.text)}"
                outcome = "failing"
                busy = response.status_code == 429
                if response.status_code not in RETRYABLE_STATUS:
                    raise PolicyError(f"endpoint {self.label} rejected the request: {last_reason}")
                retry_after = _retry_after_seconds(response)
            if attempt < self.max_retries:
                self._sleep(max(self.backoff * 2 ** (attempt - 1), retry_after))
        reason = last_reason.replace(self.base_url, self.label)
        raise (EndpointBusy if busy else EndpointUnavailable)(
            f"endpoint {self.label} {outcome} after {self.max_retries} attempts: {reason}"
        )

    def _parse(self, response: httpx.Response) -> str:
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise PolicyError(
                f"endpoint {self.label} returned a non-JSON body: {_excerpt(response.text)}"
            ) from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise PolicyError(
                f"endpoint {self.label} returned no choices: {_excerpt(response.text)}"
            )
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            hint = ""
            if isinstance(message, dict) and message.get("tool_calls"):
                hint = " (it parsed tool calls itself: serve without --enable-auto-tool-choice)"
            raise PolicyError(
                f"endpoint {self.label} returned no message content{hint}: {_excerpt(response.text)}"
            )
        self.last_finish_reason = choices[0].get("finish_reason")
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        self.last_usage = {
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": _int_or_none(usage.get("completion_tokens")),
        }
        return strip_special_tokens(content)


def _describe_transport_error(error: httpx.TransportError) -> str:
    if isinstance(error, httpx.ConnectError):
        text = str(error).lower()
        if "refused" in text:
            return "connection refused"
        return f"cannot connect ({error})"
    if isinstance(error, httpx.TimeoutException):
        return f"timed out ({type(error).__name__})"
    return f"{type(error).__name__}: {error}"


def _retry_after_seconds(response: httpx.Response) -> float:
    try:
        seconds = float(response.headers.get("Retry-After", "0"))
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _excerpt(text: str) -> str:
    text = text.strip()
    if len(text) <= BODY_EXCERPT_CHARS:
        return repr(text)
    return repr(text[:BODY_EXCERPT_CHARS]) + f" (+{len(text) - BODY_EXCERPT_CHARS} chars)"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
