"""OpenAICompatiblePolicy against a local stdlib HTTP server that checks what it receives."""

from __future__ import annotations

import base64
import io
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from PIL import Image

from agent.policies.base import EndpointUnavailable, PolicyError, SamplingParams
from agent.policies.openai_compatible import OpenAICompatiblePolicy

MODEL = "spec-o3-tiny"
SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=64, seed=11)
ANSWER = "<think>Balmer emission.</think><answer>\\boxed{YES} strong H-alpha</answer>"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_URL_PREFIX = "data:image/png;base64,"


def png(colour: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (28, 28), colour).save(buffer, format="PNG")
    return buffer.getvalue()


FULL_PNG, ZOOM_PNG = png("red"), png("blue")


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": [{"type": "text", "text": "You inspect spectra."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "png": FULL_PNG},
                {"type": "text", "text": "Is it a CV?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "<tool_call>{}</tool_call>"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<tool_response>\n"},
                {"type": "image", "png": ZOOM_PNG},
                {"type": "text", "text": "H-alpha 6500-6620\n</tool_response>"},
            ],
        },
    ]


def completion(content: Any = ANSWER, usage: dict | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def request_problems(body: dict[str, Any]) -> list[str]:
    """What a strict server would reject in a chat completion request for ``conversation()``."""
    problems = []
    if body.get("model") != MODEL:
        problems.append(f"model {body.get('model')!r}")
    for key, expected in (("temperature", 0.7), ("top_p", 0.9), ("max_tokens", 64), ("seed", 11)):
        if body.get(key) != expected:
            problems.append(f"{key} {body.get(key)!r} != {expected!r}")
    if "tools" in body:
        problems.append("a tools parameter was sent")
    messages = body.get("messages", [])
    roles = [message.get("role") for message in messages]
    if roles != ["system", "user", "assistant", "user"]:
        problems.append(f"roles {roles}")
    images = []
    for message in messages:
        for part in message.get("content", []):
            if part.get("type") == "image_url":
                url = part["image_url"]["url"]
                if not url.startswith(DATA_URL_PREFIX):
                    problems.append(f"image url {url[:30]!r} is not a PNG data URL")
                    continue
                images.append(base64.b64decode(url.removeprefix(DATA_URL_PREFIX), validate=True))
            elif part.get("type") != "text" or not isinstance(part.get("text"), str):
                problems.append(f"bad part {part}")
    if images != [FULL_PNG, ZOOM_PNG]:
        problems.append("images do not decode to the PNGs sent")
    if len(messages) == 4:
        tool_text = "".join(p["text"] for p in messages[3]["content"] if p["type"] == "text")
        if not (
            tool_text.startswith("<tool_response>\n") and tool_text.endswith("</tool_response>")
        ):
            problems.append(f"tool result not wrapped in <tool_response>: {tool_text!r}")
    return problems


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=completion)  # dict -> JSON, bytes -> raw
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class FakeChatServer:
    """Serves scripted replies on /v1/chat/completions; rejects (400) requests that fail checks."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, raw_body: bytes, path: str) -> Reply:
        if path != "/v1/chat/completions":
            return Reply(404, {"error": f"no route {path}"})
        problems = request_problems(json.loads(raw_body))
        if problems:
            return Reply(400, {"error": {"message": "; ".join(problems)}})
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out hangs up before the delayed reply: expected, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    fake = FakeChatServer(replies=[Reply()])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            fake.requests.append(json.loads(raw))
            fake.headers.append(dict(self.headers))
            reply = fake.reply(raw, self.path)
            time.sleep(reply.delay)
            payload = (
                reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            )
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    http_server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    fake.port = http_server.server_address[1]
    thread = threading.Thread(target=http_server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield fake
    http_server.shutdown()
    http_server.server_close()


def make_policy(
    base_url: str, sleeps: list[float] | None = None, **kwargs: Any
) -> OpenAICompatiblePolicy:
    options: dict[str, Any] = {"timeout": 2.0, "backoff": 0.25, "sampling": SAMPLING, **kwargs}
    return OpenAICompatiblePolicy(
        base_url, MODEL, sleep=(sleeps.append if sleeps is not None else time.sleep), **options
    )


def test_it_returns_the_completion_text(server: FakeChatServer) -> None:
    assert make_policy(server.base_url).generate(conversation()) == ANSWER


def test_it_sends_a_request_the_strict_server_accepts(server: FakeChatServer) -> None:
    make_policy(server.base_url).generate(conversation())
    assert request_problems(server.requests[0]) == []


def test_it_sends_images_as_data_urls_of_the_original_pngs(server: FakeChatServer) -> None:
    make_policy(server.base_url).generate(conversation())
    urls = [
        part["image_url"]["url"]
        for message in server.requests[0]["messages"]
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    decoded = [base64.b64decode(url.removeprefix(DATA_URL_PREFIX)) for url in urls]
    assert decoded == [FULL_PNG, ZOOM_PNG]
    assert all(image.startswith(PNG_SIGNATURE) for image in decoded)


def test_it_keeps_the_tool_result_a_user_turn_with_the_wrapper(server: FakeChatServer) -> None:
    make_policy(server.base_url).generate(conversation())
    tool_turn = server.requests[0]["messages"][3]
    assert tool_turn["role"] == "user"
    assert [part["type"] for part in tool_turn["content"]] == ["text", "image_url", "text"]
    assert tool_turn["content"][0]["text"] == "<tool_response>\n"
    assert tool_turn["content"][2]["text"] == "H-alpha 6500-6620\n</tool_response>"


def test_it_records_usage_when_the_server_reports_it(server: FakeChatServer) -> None:
    server.replies = [Reply(body=completion(usage={"prompt_tokens": 321, "completion_tokens": 17}))]
    policy = make_policy(server.base_url)
    policy.generate(conversation())
    assert policy.last_usage == {"prompt_tokens": 321, "completion_tokens": 17}
    assert policy.last_finish_reason == "stop"


def test_it_records_unknown_usage_as_none(server: FakeChatServer) -> None:
    policy = make_policy(server.base_url)
    policy.generate(conversation())
    assert policy.last_usage == {"prompt_tokens": None, "completion_tokens": None}


def test_it_retries_503_with_exponential_backoff_then_succeeds(server: FakeChatServer) -> None:
    server.replies = [Reply(503, {"error": "loading"}), Reply(503, {"error": "loading"}), Reply()]
    sleeps: list[float] = []
    assert make_policy(server.base_url, sleeps).generate(conversation()) == ANSWER
    assert len(server.requests) == 3
    assert sleeps == [0.25, 0.5]


def test_it_waits_as_long_as_retry_after_asks_on_429(server: FakeChatServer) -> None:
    server.replies = [Reply(429, {"error": "slow down"}, {"Retry-After": "2"}), Reply()]
    sleeps: list[float] = []
    assert make_policy(server.base_url, sleeps).generate(conversation()) == ANSWER
    assert sleeps == [2.0]


def test_it_gives_up_after_max_retries_of_5xx(server: FakeChatServer) -> None:
    server.replies = [Reply(500, {"error": "boom"})]
    policy = make_policy(server.base_url, [], max_retries=3)
    with pytest.raises(PolicyError, match=r"failing after 3 attempts: HTTP 500"):
        policy.generate(conversation())
    assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_it_does_not_retry_client_errors(server: FakeChatServer, status: int) -> None:
    server.replies = [Reply(status, {"error": {"message": "bad request"}})]
    sleeps: list[float] = []
    with pytest.raises(PolicyError, match=rf"rejected the request: HTTP {status}: .*bad request"):
        make_policy(server.base_url, sleeps).generate(conversation())
    assert len(server.requests) == 1
    assert sleeps == []


def test_it_names_the_url_when_the_port_is_closed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    sleeps: list[float] = []
    with pytest.raises(PolicyError) as raised:
        make_policy(base_url, sleeps, max_retries=3, backoff=0.01, timeout=1.0).generate(
            conversation()
        )
    assert str(raised.value) == (
        f"endpoint {base_url} unreachable after 3 attempts: connection refused"
    )
    assert len(sleeps) == 2


def test_it_tells_an_outage_worth_retrying_later_from_a_rejected_request(
    server: FakeChatServer,
) -> None:
    server.replies = [Reply(503, {"error": "loading"})]
    with pytest.raises(EndpointUnavailable, match="failing after 2 attempts: HTTP 503"):
        make_policy(server.base_url, [], max_retries=2).generate(conversation())
    server.replies = [Reply(400, {"error": "bad"})]
    with pytest.raises(PolicyError) as rejected:
        make_policy(server.base_url, []).generate(conversation())
    assert not isinstance(rejected.value, EndpointUnavailable)


def test_it_tells_a_full_server_from_one_that_is_down(server: FakeChatServer) -> None:
    # A 429 after every retry is back-pressure (EndpointBusy: send the turn again later);
    # a 503 is an outage (the candidate waits), though both are worth trying again.
    from agent.policies.base import EndpointBusy

    server.replies = [Reply(429, {"error": "all slots busy"})]
    with pytest.raises(EndpointBusy, match="failing after 2 attempts: HTTP 429"):
        make_policy(server.base_url, [], max_retries=2).generate(conversation())
    server.replies = [Reply(429, {"error": "full"}), Reply(503, {"error": "loading"})]
    with pytest.raises(EndpointUnavailable) as down:
        make_policy(server.base_url, [], max_retries=2).generate(conversation())
    assert not isinstance(down.value, EndpointBusy)


def test_it_keeps_a_connection_open_per_episode_in_flight(server: FakeChatServer) -> None:
    from agent.policies.openai_compatible import MAX_CONNECTIONS

    pool = make_policy(server.base_url)._client._transport._pool  # type: ignore[attr-defined]
    assert pool._max_keepalive_connections == MAX_CONNECTIONS >= 256


def test_it_retries_a_timeout_then_reports_it(server: FakeChatServer) -> None:
    server.replies = [Reply(delay=0.5)]
    policy = make_policy(server.base_url, [], max_retries=2, timeout=0.1)
    with pytest.raises(PolicyError, match=r"unreachable after 2 attempts: timed out"):
        policy.generate(conversation())
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            b"<html>502 Bad Gateway</html>",
            "returned a non-JSON body: '<html>502 Bad Gateway</html>'",
        ),
        ({"object": "error", "message": "model not found"}, "returned no choices"),
        ({"choices": []}, "returned no choices"),
        ({"choices": [{"finish_reason": "stop"}]}, "returned no message content"),
        (completion(content=None), "returned no message content"),
        (completion(content=["not", "a", "string"]), "returned no message content"),
    ],
)
def test_it_raises_on_a_nonsense_answer(server: FakeChatServer, body: Any, reason: str) -> None:
    server.replies = [Reply(200, body)]
    with pytest.raises(
        PolicyError, match=f"endpoint {server.base_url} {reason}".replace("(", r"\(")
    ):
        make_policy(server.base_url).generate(conversation())
    assert len(server.requests) == 1


def test_it_hints_at_the_tool_parser_when_the_server_parsed_tool_calls(
    server: FakeChatServer,
) -> None:
    body = completion(content=None)
    body["choices"][0]["message"]["tool_calls"] = [{"type": "function", "function": {"name": "x"}}]
    server.replies = [Reply(200, body)]
    with pytest.raises(PolicyError, match="serve without --enable-auto-tool-choice"):
        make_policy(server.base_url).generate(conversation())


def test_it_sends_the_api_key_as_a_bearer_token_but_never_reports_it(
    server: FakeChatServer,
) -> None:
    policy = make_policy(server.base_url, api_key="sk-test-123")
    policy.generate(conversation())
    assert server.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert "sk-test-123" not in json.dumps(policy.info())


def test_it_rejects_malformed_messages_before_sending(server: FakeChatServer) -> None:
    messages = conversation()
    messages[3]["role"] = "tool"
    with pytest.raises(ValueError, match=r"message 3 has role 'tool'"):
        make_policy(server.base_url).generate(messages)
    assert server.requests == []


def test_it_describes_itself(server: FakeChatServer) -> None:
    info = make_policy(server.base_url + "/").info()
    assert info["policy"] == "openai"
    assert info["base_url"] == server.base_url
    assert info["model"] == MODEL
    assert info["sampling"] == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 64, "seed": 11}


def test_it_retries_other_transport_errors_through_an_injected_transport() -> None:
    attempts: list[httpx.Request] = []

    def drop_connection(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.RemoteProtocolError("server closed the connection", request=request)

    policy = OpenAICompatiblePolicy(
        "http://model.test/v1",
        MODEL,
        max_retries=2,
        transport=httpx.MockTransport(drop_connection),
        sleep=lambda seconds: None,
    )
    with pytest.raises(
        PolicyError, match="unreachable after 2 attempts: RemoteProtocolError: server closed"
    ):
        policy.generate(conversation())
    assert [str(request.url) for request in attempts] == [
        "http://model.test/v1/chat/completions"
    ] * 2
