"""Evaluation throughput against an OpenAI-compatible endpoint, by concurrency.

    python -m agent.bench eval-concurrency [--spectra 32] [--latency-ms 300] [--levels 1 8 32]

A fake OpenAI-compatible server on 127.0.0.1 answers each chat completion after an injected
latency (a zoom into H-alpha on the first turn, an answer on the second), so what is measured is
how well ``agent.evaluation.evaluate(concurrency=N)`` hides model latency; rendering the tool's
plots on this machine's CPU is the part that does not overlap. Spectra/s at each level is
printed with its ratio to concurrency 1 measured in the same run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CALL = (
    '<think>Check H-alpha.</think><tool_call>{"name": "spectral_visualization_tool", '
    '"arguments": {"wavelength_range": [6500, 6630], "label": "H-alpha"}}</tool_call>'
)
ANSWER = "<think>Seen enough.</think><answer>\\boxed{NO} no emission.</answer>"


def _keep_trajectory(kept: list[Any], done: int, total: int, result: Any, trajectory: Any) -> None:
    kept.append(trajectory)


def first_image_digest(body: dict[str, Any]) -> str:
    """SHA-256 of the first image a chat request shows (I0, the whole spectrum)."""
    for message in body.get("messages", []):
        for part in message.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                return hashlib.sha256(str(part["image_url"]["url"]).encode()).hexdigest()
    return "no-image"


def reply_for(body: dict[str, Any], turn: int) -> str:
    """The fake model answers from the spectrum it is shown: its reasoning quotes I0's digest and
    the answer follows from it, so an answer stored on another spectrum shows in a check."""
    digest = first_image_digest(body)
    if turn == 0:
        return CALL.replace("Check H-alpha.", f"I0 {digest[:16]}: check H-alpha.")
    verdict = "YES" if int(digest[0], 16) % 2 else "NO"
    return ANSWER.replace("Seen enough.", f"I0 {digest[:16]}: seen enough.").replace(
        "\\boxed{NO}", f"\\boxed{{{verdict}}}"
    )


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


@contextmanager
def fake_openai_server(latency_s: float) -> Iterator[str]:
    """An OpenAI-compatible chat endpoint on 127.0.0.1; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
            time.sleep(latency_s)
            content = reply_for(body, turn)
            payload = json.dumps(
                {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 40},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = _QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def run_eval_concurrency(
    n_spectra: int, latency_ms: float, levels: Sequence[int], seed: int = 3
) -> dict[str, Any]:
    """Spectra per second of ``evaluate`` at each concurrency level, on one fake endpoint."""
    import httpx

    from agent.evaluation import evaluate, specvi_mini_samples
    from agent.policies.openai_compatible import OpenAICompatiblePolicy

    samples = specvi_mini_samples(split="test", tasks=["CV"], seed=seed, scale=0.2)
    samples = (samples * (n_spectra // max(len(samples), 1) + 1))[:n_spectra]
    rows = []
    reference_answers: list[Any] | None = None
    reference_thoughts: list[Any] = []
    with fake_openai_server(latency_ms / 1000) as base_url:
        for level in levels:
            limits = httpx.Limits(
                max_connections=max(levels), max_keepalive_connections=max(levels)
            )
            client = httpx.Client(timeout=60.0, limits=limits)
            policy = OpenAICompatiblePolicy(base_url, "fake", client=client)
            started = time.perf_counter()
            trajectories: list[Any] = []
            report = evaluate(
                samples,
                policy,
                benchmark="specvi-mini",
                split="test",
                concurrency=level,
                on_result=functools.partial(_keep_trajectory, trajectories),
            )
            seconds = time.perf_counter() - started
            client.close()
            answers = [
                (r.sample_id, r.prediction, r.n_tool_calls, r.stop_reason) for r in report.samples
            ]
            thoughts = [[step.think for step in trajectory.steps] for trajectory in trajectories]
            if reference_answers is None:
                reference_answers, reference_thoughts = answers, thoughts
            wrong = sum(
                1
                for mine, theirs, my_thoughts, their_thoughts in zip(
                    answers, reference_answers, thoughts, reference_thoughts, strict=True
                )
                if mine != theirs or my_thoughts != their_thoughts
            )
            if wrong:
                raise RuntimeError(
                    f"concurrency {level}: {wrong} of {len(answers)} spectra got another answer "
                    "than at concurrency 1 (the fake model answers from the spectrum it is "
                    "shown); no speed is reported"
                )
            rows.append(
                {
                    "concurrency": level,
                    "spectra": len(report.samples),
                    "seconds": seconds,
                    "spectra_per_s": len(report.samples) / seconds,
                    "answered": sum(1 for r in report.samples if r.prediction is not None),
                }
            )
    # Reached only when every level gave every spectrum the answer it got at concurrency 1.
    reference = rows[0]["spectra_per_s"]
    for row in rows:
        row["ratio"] = row["spectra_per_s"] / reference
    return {"latency_ms": latency_ms, "rows": rows}


def format_eval_concurrency_report(summary: dict[str, Any]) -> str:
    lines = [
        f"evaluation against a fake OpenAI-compatible server, {summary['latency_ms']:.0f} ms per "
        "request, 2 requests per spectrum",
        "answers checked before any speed: at every level each spectrum got the answer and the "
        "reasoning it got at concurrency 1 (the fake model answers from the spectrum it is shown)",
        "concurrency  spectra  seconds  spectra/s  vs concurrency 1  answered",
    ]
    for row in summary["rows"]:
        lines.append(
            f"{row['concurrency']:11d}  {row['spectra']:7d}  {row['seconds']:7.2f}  "
            f"{row['spectra_per_s']:9.2f}  {row['ratio']:15.1f}x  {row['answered']:8d}"
        )
    return "\n".join(lines)
