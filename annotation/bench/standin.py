"""A stand-in for a model server, for measuring the inspection path (issue 34).

An OpenAI-compatible ``POST /v1/chat/completions`` on loopback with ``slots`` sequences served at
once, like a vLLM server with ``--max-num-seqs``. Each turn holds a slot for a latency drawn
from a seeded log-normal distribution of the given mean and coefficient of variation (cv 0: a
fixed latency). A request that finds every slot taken waits for one (``reject=False``, as vLLM
queues) or is answered HTTP 429 at once (``reject=True``, as a gateway with a concurrency cap).

It answers in the project's turn format (``agent.editing``): ``turns - 1`` zooms, then an
answer whose verdict is a function of the spectrum alone: the picture of the first image of the
conversation (I0, the full spectrum as the renderer draws it) hashed (``answer_for_png``). So a stored
verdict can be checked against what the stand-in said for that candidate's own spectrum, with
no record kept by the server.

It records its slot occupancy: every change of the number of busy slots, with its time, so
``occupancy`` gives the busy share of slot-seconds over any window. Plain Python (asyncio), no
Django: the benchmark starts it in a thread of its own process.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import functools
import hashlib
import json
import math
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agent.editing import answer_text, step_text
from agent.render import picture_digest

_ASSISTANT = re.compile(rb'"role"\s*:\s*"assistant"')
_FIRST_IMAGE = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/=]+)")
MAX_BODY_BYTES = 64 * 1024 * 1024
ZOOM_WINDOWS = ((6500.0, 6630.0, "H-alpha"), (4800.0, 4920.0, "H-beta"), (4640.0, 4720.0, "He II"))


@functools.lru_cache(maxsize=4096)
def picture_of(image_b64: bytes) -> str:
    """What the first image shows, as ``agent.render.picture_digest`` (the same pixels deflated
    otherwise are the same picture); the bytes' own hash when it is no PNG. Cached: every turn
    of an episode sends the same I0."""
    try:
        png = base64.b64decode(image_b64, validate=True)
    except ValueError:
        png = b""
    return picture_digest(png) or hashlib.sha256(image_b64).hexdigest()


def answer_for_image_b64(image_b64: bytes) -> str:
    """The stand-in's verdict for a conversation whose first image is ``image_b64``."""
    return "YES" if int(picture_of(image_b64)[:2], 16) % 2 else "NO"


def answer_for_png(png: bytes) -> str:
    """The verdict the stand-in gives a spectrum whose I0 renders to ``png``."""
    return answer_for_image_b64(base64.b64encode(png))


def reply_text(*, turn: int, turns: int, image_b64: bytes) -> str:
    """The assistant text of ``turn`` (0-based) of an episode of ``turns`` model turns."""
    digest = picture_of(image_b64)[:12]
    if turn < turns - 1:
        lo, hi, label = ZOOM_WINDOWS[turn % len(ZOOM_WINDOWS)]
        return step_text(f"I0 {digest}: zoom {turn + 1}.", (lo, hi), label)
    return answer_text(
        f"I0 {digest}: decided.", answer_for_image_b64(image_b64), "Stand-in verdict."
    )


@dataclass
class LatencyModel:
    """Seconds a turn holds its slot: log-normal with this mean and coefficient of variation
    (cv 0 is a fixed latency), drawn from ``random.Random(seed)``."""

    mean: float
    cv: float = 0.0
    seed: int = 34
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.mean > 0.0:
            raise ValueError(f"latency must be > 0 seconds, got {self.mean}")
        if not 0.0 <= self.cv <= 5.0:
            raise ValueError(f"latency cv must be in [0, 5], got {self.cv}")
        self._random = random.Random(self.seed)

    def draw(self) -> float:
        if self.cv == 0.0:
            return self.mean
        sigma = math.sqrt(math.log1p(self.cv**2))
        return self._random.lognormvariate(math.log(self.mean) - sigma**2 / 2, sigma)

    def describe(self) -> str:
        if self.cv == 0.0:
            return f"fixed {self.mean:g} s"
        return f"log-normal, mean {self.mean:g} s, cv {self.cv:g}, seed {self.seed}"


@dataclass
class Record:
    """What the stand-in saw: busy-slot changes ``(seconds since start, busy)`` and counts."""

    slots: int
    started: float
    changes: list[tuple[float, int]] = field(default_factory=list)
    served: int = 0
    rejected: int = 0
    queued_max: int = 0
    first_request: float | None = None
    last_reply: float | None = None
    # (the first image's digest, the turn) of every answered request: a turn asked twice shows
    answered: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)

    def asked_twice(self) -> dict[tuple[str, int], int]:
        return {key: count for key, count in self.answered.items() if count > 1}

    def busy_seconds(self, start: float, end: float) -> float:
        """Slot-seconds busy between ``start`` and ``end`` (seconds since the server started)."""
        total, busy, at = 0.0, 0, start
        for moment, now_busy in self.changes:
            if moment > start:
                total += busy * (min(moment, end) - at)
                at = min(moment, end)
            if moment >= end:
                break
            busy = now_busy
        if at < end:
            total += busy * (end - at)
        return total

    def occupancy(self, start: float, end: float) -> float:
        """Mean share of the slots busy between ``start`` and ``end``."""
        if end <= start:
            return 0.0
        return self.busy_seconds(start, end) / (self.slots * (end - start))

    def mean_busy(self, start: float, end: float) -> float:
        return self.occupancy(start, end) * self.slots


class StandIn:
    """The server; ``start()`` serves it from a thread and returns its base URL."""

    def __init__(
        self,
        *,
        slots: int,
        latency: LatencyModel,
        turns: int = 2,
        reject: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if not 1 <= turns <= 9:
            raise ValueError(f"turns must be 1-9 (eight zooms, then the answer), got {turns}")
        self.slots, self.latency, self.turns, self.reject = slots, latency, turns, reject
        self.host = host
        self.record = Record(slots=slots, started=time.monotonic())
        self._busy = 0
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._ready = threading.Event()
        self.port = 0

    # --- running ----------------------------------------------------------------------------

    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="standin", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stand-in model server did not start within 10 s")
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        if self._loop is not None and self._server is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, self.host, 0, backlog=1024)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.record.started = time.monotonic()
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _now(self) -> float:
        return time.monotonic() - self.record.started

    async def _acquire(self) -> None:
        """A slot, or a place in the first-come queue for one (a freed slot is handed to the
        oldest waiter directly, so none is overtaken or forgotten)."""
        if self._busy < self.slots and not self._queue:
            self._set_busy(+1)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(waiter)
        self.record.queued_max = max(self.record.queued_max, len(self._queue))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot while being cancelled: pass it on
            raise

    def _release(self) -> None:
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to the waiter: still busy
                return
        self._set_busy(-1)

    def _set_busy(self, delta: int) -> None:
        self._busy += delta
        self.record.changes.append((self._now(), self._busy))

    # --- HTTP ---------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:] if line)
                }
                length = int(headers.get("content-length", "0"))
                if length > MAX_BODY_BYTES:
                    await self._send(writer, 413, {"error": "request body too large"})
                    break
                body = await reader.readexactly(length) if length else b""
                status, payload = await self._answer(method, path, body)
                await self._send(writer, status, payload)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
            pass  # the client left, sent nonsense, or the server is stopping
        finally:
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Too Large"}.get(
            status, "Too Many Requests"
        )
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return 404, {"error": f"{method} {path}: only POST /v1/chat/completions is served"}
        image = _FIRST_IMAGE.search(body)
        if image is None:
            return 400, {"error": "the conversation shows no image (I0)"}
        if self.record.first_request is None:
            self.record.first_request = self._now()
        if self.reject and self._busy >= self.slots:
            self.record.rejected += 1
            return 429, {"error": "all slots are busy"}
        await self._acquire()
        try:
            await asyncio.sleep(self.latency.draw())
        finally:
            self._release()
        turn = len(_ASSISTANT.findall(body))
        text = reply_text(turn=turn, turns=self.turns, image_b64=image.group(1))
        self.record.served += 1
        self.record.answered[(hashlib.sha256(image.group(1)).hexdigest()[:12], turn)] += 1
        self.record.last_reply = self._now()
        return 200, {
            "choices": [
                {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1000 + 300 * turn, "completion_tokens": 60},
        }


class StandInPolicy:
    """The stand-in's answers without the server: the same turns, in this process (the
    benchmark's reference for what an episode itself costs: rendering, parsing, the tool)."""

    name = "stand-in (in-process)"

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns

    def info(self) -> dict[str, Any]:
        return {"policy": "stand-in", "name": self.name, "turns": self.turns}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        image = next(
            part["png"]
            for message in messages
            for part in message["content"]
            if part.get("type") == "image"
        )
        turn = sum(1 for message in messages if message["role"] == "assistant")
        return reply_text(turn=turn, turns=self.turns, image_b64=base64.b64encode(image))
