"""The model-server stand-in the scale benchmark measures against: slots, latency, answers in
the project's turn format, and its own occupancy record."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agent import parsing
from annotation.bench.standin import (
    LatencyModel,
    Record,
    StandIn,
    answer_for_png,
    reply_text,
)
from tests.factories import make_spectrum_value

PNG = b"\x89PNG\r\n\x1a\n" + b"stand-in test image"


def body(png: bytes = PNG, assistant_turns: int = 0) -> dict:
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]
    for _ in range(assistant_turns):
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": "zoom"}]},
            {"role": "user", "content": [{"type": "text", "text": "<tool_response>"}]},
        ]
    return {"model": "stand-in", "messages": messages}


@pytest.fixture
def serve() -> Iterator:
    started: list[StandIn] = []

    def start(**kwargs) -> tuple[StandIn, str]:
        server = StandIn(**kwargs)
        started.append(server)
        return server, server.start()

    yield start
    for server in started:
        server.stop()


def post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: client.post(f"{url}/chat/completions", json=b), bodies))


def test_it_serves_at_most_its_slots_at_once_and_queues_the_rest(serve) -> None:
    server, url = serve(slots=2, latency=LatencyModel(0.05))
    responses = post_all(url, [body()] * 6)
    assert [r.status_code for r in responses] == [200] * 6
    busy = [count for _, count in server.record.changes]
    assert max(busy) == 2 and busy[-1] == 0
    assert server.record.served == 6 and server.record.rejected == 0
    assert server.record.queued_max >= 1
    # Six turns held a slot for at least 0.05 s each.
    end = server.record.changes[-1][0]
    assert server.record.busy_seconds(0.0, end) >= 6 * 0.05


def test_it_answers_429_when_full_if_asked_to_reject(serve) -> None:
    server, url = serve(slots=1, latency=LatencyModel(0.3), reject=True)
    responses = post_all(url, [body()] * 4)
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 1 and 429 in codes
    assert server.record.rejected == codes.count(429)
    assert max(count for _, count in server.record.changes) == 1


def test_it_zooms_then_answers_with_the_verdict_of_the_spectrum_it_is_shown(serve) -> None:
    from agent.tool import SpectralVisualizationTool

    _, url = serve(slots=4, latency=LatencyModel(0.01), turns=3)
    pngs = [
        SpectralVisualizationTool(make_spectrum_value(seed=seed, line_amplitude=a))
        .render_full()
        .png
        for seed, a in ((1, 3.0), (2, 0.0), (3, 1.0), (4, 0.5))
    ]
    verdicts = set()
    for png in pngs:
        texts = [
            r.json()["choices"][0]["message"]["content"]
            for r in post_all(url, [body(png, turn) for turn in range(3)])
        ]
        first, second, last = (parsing.parse_turn(text) for text in texts)
        assert first.kind == second.kind == "tool_call" and not first.errors
        assert first.tool_call.executable and second.tool_call.executable
        assert last.kind == "answer" and not last.errors
        assert last.answer.prediction == answer_for_png(png)
        verdicts.add(last.answer.prediction)
    assert verdicts == {"YES", "NO"}  # the answer follows the spectrum, not a constant


def test_it_refuses_a_conversation_without_an_image(serve) -> None:
    _, url = serve(slots=1, latency=LatencyModel(0.01))
    response = httpx.post(f"{url}/chat/completions", json={"messages": []})
    assert response.status_code == 400 and "no image" in response.json()["error"]


def test_it_draws_seeded_latencies_of_the_stated_mean() -> None:
    first = [LatencyModel(2.0, cv=0.5, seed=9).draw() for _ in range(1)]
    again = LatencyModel(2.0, cv=0.5, seed=9)
    draws = [again.draw() for _ in range(4000)]
    assert draws[0] == first[0]
    assert len(set(draws)) > 3000
    mean = sum(draws) / len(draws)
    assert 1.9 < mean < 2.1
    assert LatencyModel(0.2).draw() == 0.2
    assert "log-normal" in again.describe()
    with pytest.raises(ValueError, match="latency must be > 0"):
        LatencyModel(0.0)


def test_it_measures_occupancy_as_the_busy_share_of_slot_seconds() -> None:
    record = Record(slots=4, started=0.0, changes=[(1.0, 2), (3.0, 4), (5.0, 0)])
    assert record.busy_seconds(0.0, 6.0) == 2 * 2 + 4 * 2
    assert record.occupancy(0.0, 6.0) == pytest.approx(12 / 24)
    assert record.occupancy(3.0, 5.0) == 1.0
    assert record.busy_seconds(2.0, 4.0) == 2 * 1 + 4 * 1


def test_it_writes_turns_the_project_s_parser_accepts() -> None:
    text = reply_text(turn=0, turns=1, image_b64=b"abc")
    assert parsing.parse_turn(text).kind == "answer"
    assert json.loads(json.dumps(text)) == text
