"""Episodes in flight: a batch of candidates on a model endpoint, many episodes at once.

A model server answers best with dozens to hundreds of sequences in flight (issue 34). Here one
thread (the Celery task's) drives every episode of its batch (``agent.rollout.episode``
generators: rendering, parsing, the tool) and a pool of request threads, one per episode in
flight, only waits on the server. At most K episodes of one endpoint are in flight per worker
process, however many pool threads run batches (``in_flight_limit``: INSPECTION_IN_FLIGHT, or
INSPECTION_IN_FLIGHT_BY_ENDPOINT for that endpoint).

What is written, and when: live steps of every episode of the batch together, at most every
LIVE_WRITE_SECONDS (three statements, however many), so the live view is at most that far behind
a model (a step due is written before its episode's next turn is sent); finished rollouts, verdicts and catalog
entries together at most BATCH_WRITE_SECONDS after the oldest is ready (the batch's write, five
statements). A killed worker loses at most that much work; its batch is redelivered and
resumes: finished rollouts are kept, an unfinished one starts over with its live steps cleared.

Back-pressure: a turn the server refuses because it is full (HTTP 429 or a timeout, after the
policy's own retries: ``EndpointBusy``) is sent again, the same turn of the same episode, after
a growing pause, up to BUSY_TRIES times; nothing is restarted or stored twice. A server that is
down (``EndpointUnavailable``) stops the batch as before: no new episode starts, the ones in
flight end, and the candidates it reached wait for a later retry while the ones never started
are released unclaimed (their attempt did not happen).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agent.policies.base import EndpointBusy, EndpointUnavailable
from agent.rollout import Generated
from annotation.core.jobs import retry_delay, waiting_reason
from annotation.inspections import recording
from annotation.inspections.run_policies import policy_for
from annotation.inspections.verdicts import rollout_meta

logger = logging.getLogger(__name__)

LIVE_WRITE_SECONDS = 1.0
BUSY_TRIES = 12
BUSY_PAUSE_SECONDS = (0.5, 30.0)  # the first pause after a full server, and the longest


def applies(run: Any) -> bool:
    """Whether a run's candidates go through here: runs on a model endpoint."""
    return bool(run.policy_spec.get("kind") == "openai")


def in_flight_limit(endpoint: str) -> int:
    """K: episodes of this endpoint in flight at once in one worker process."""
    by_name = settings.INSPECTION_IN_FLIGHT_BY_ENDPOINT
    return max(1, int(by_name.get(endpoint, settings.INSPECTION_IN_FLIGHT)))


class _Gate:
    """The K episodes in flight of one endpoint in this process, and their request threads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.slots = threading.BoundedSemaphore(limit)
        self.pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="in-flight")


_gates: dict[tuple[int, str, int], _Gate] = {}
_gates_lock = threading.Lock()


def _gate(endpoint: str) -> _Gate:
    # Keyed by process too: a gate made before a fork is not the child's.
    key = (os.getpid(), endpoint, in_flight_limit(endpoint))
    with _gates_lock:
        if key not in _gates:
            _gates[key] = _Gate(key[2])
        return _gates[key]


def _turn(policy: Any, messages: list[dict[str, Any]], pause: float) -> Generated:
    """One model turn in a request thread; its usage is read in that thread (per-thread)."""
    if pause:
        time.sleep(pause)
    started = time.perf_counter()
    try:
        text = policy.generate(messages)
    except Exception as error:  # the driver decides: retry, wait or record
        return Generated(None, time.perf_counter() - started, error=error)
    usage = getattr(policy, "last_usage", None)
    return Generated(text, time.perf_counter() - started, usage if isinstance(usage, dict) else {})


@dataclass
class _Work:
    """The rollouts one candidate still needs, and what became of them."""

    candidate: Any
    to_run: list[int]
    done: list[Any]
    started: int = 0
    finished: int = 0
    failed: bool = False
    outage: bool = False
    answers: int = 0
    release: bool = False


@dataclass
class _Episode:
    """One rollout in flight: its generator, the conversation of its next turn, and the live
    steps not written yet."""

    work: _Work
    index: int
    turns: Any
    started: float
    generator: Any = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Any] = field(default_factory=list)
    busy: int = 0

    @property
    def candidate(self) -> Any:
        return self.work.candidate


class _Driver:
    def __init__(self, batch: Any, *, can_wait: bool) -> None:
        from annotation.spectra.selectors import spectrum_value, task_value

        self.batch, self.can_wait = batch, can_wait
        self.works: list[_Work] = []
        self.policies: dict[int, Any] = {}
        self.tasks: dict[int, Any] = {}
        self._spectrum_value = spectrum_value
        for candidate in batch.candidates:
            run = candidate.run
            if run.pk not in self.policies:
                self.policies[run.pk] = policy_for(run.policy_spec, run.sampling)
                if not run.policy_info:
                    recording.inspection_run_set_policy_info(
                        run=run, info=dict(self.policies[run.pk].info())
                    )
                self.tasks[run.pk] = task_value(run.task)
            done = [] if candidate.attempts <= 1 else list(candidate.rollouts.order_by("index"))
            have = {rollout.index for rollout in done}
            to_run = [index for index in range(run.rollouts) if index not in have]
            self.works.append(_Work(candidate=candidate, to_run=to_run, done=done))
        endpoints = {c.run.policy_spec.get("endpoint") or "" for c in batch.candidates}
        self.gate = _gate(sorted(endpoints)[0] if endpoints else "")
        self.flying: dict[Future[Generated], _Episode] = {}
        self.held: list[tuple[_Episode, float]] = []
        self.live_written = time.monotonic()
        self.stopping = False
        self.outage: EndpointUnavailable | None = None

    # --- starting episodes ------------------------------------------------------------------

    def _next_rollout(self) -> tuple[_Work, int] | None:
        for work in self.works:
            if not work.failed and not work.outage and work.started < len(work.to_run):
                return work, work.to_run[work.started]
        return None

    def _start_more(self) -> None:
        while not self.stopping:
            found = self._next_rollout()
            if found is None:
                return
            work, index = found
            if self.batch.cancelled(work.candidate.run):
                self.stopping = True
                return
            # With nothing in flight, wait (a while) for a slot another batch holds.
            if self.flying or self.held:
                if not self.gate.slots.acquire(blocking=False):
                    return
            elif not self.gate.slots.acquire(timeout=LIVE_WRITE_SECONDS):
                return
            work.started += 1
            try:
                self._start(work, index)
            except Exception as error:
                self.gate.slots.release()
                self._fail(work, error)

    def _start(self, work: _Work, index: int) -> None:
        from agent.rollout import episode, start_episode

        candidate, run = work.candidate, work.candidate.run
        if candidate.attempts > 1:
            recording.live_steps_reset(candidate=candidate, rollout_index=index)
        policy = self.policies[run.pk]
        spectrum = self._spectrum_value(candidate.spectrum)
        task = self.tasks[run.pk]
        turns = start_episode(
            policy, spectrum=spectrum, task=task, max_tool_calls=run.max_tool_calls
        )
        item = _Episode(work=work, index=index, turns=turns, started=time.perf_counter())
        item.generator = episode(
            spectrum,
            task,
            policy,
            max_tool_calls=run.max_tool_calls,
            on_step=lambda step, _trajectory: item.steps.append(step),
            meta=rollout_meta(candidate=candidate, index=index),
            decision=getattr(turns, "decision", None),
        )
        item.messages = next(item.generator)
        self._send(item, pause=0.0)

    def _send(self, item: _Episode, *, pause: float) -> None:
        """Hold the episode's next turn until the live steps due are written (``_dispatch``)."""
        self.held.append((item, pause))

    def _dispatch(self) -> None:
        for item, pause in self.held:
            self.flying[self.gate.pool.submit(_turn, item.turns, item.messages, pause)] = item
        self.held = []

    # --- answers ------------------------------------------------------------------------------

    def _answered(self, item: _Episode, generated: Generated) -> None:
        work = item.work
        error = generated.error
        if isinstance(error, EndpointBusy) and item.busy < BUSY_TRIES:
            item.busy += 1
            low, high = BUSY_PAUSE_SECONDS
            self._send(item, pause=min(high, low * 2 ** (item.busy - 1)))
            return
        if isinstance(error, EndpointUnavailable):
            self._end(item)
            # The first candidate to meet the outage spends an attempt, as one run alone would;
            # the others caught in flight before any answer are put back unspent.
            work.release = self.outage is not None and not work.answers and not work.finished
            self.outage = self.outage or error
            work.outage = True
            if self.can_wait:
                self.stopping = True
            return
        work.answers += 1
        try:
            item.messages = item.generator.send(generated)
        except StopIteration as finished:
            self._end(item)
            self._finished(work, item, finished.value)
            return
        except Exception as error:
            self._end(item)
            self._fail(work, error)
            return
        self._send(item, pause=0.0)

    def _end(self, item: _Episode) -> None:
        self.gate.slots.release()

    def _finished(self, work: _Work, item: _Episode, trajectory: Any) -> None:
        from agent.rollout import trajectory_confidence

        if work.failed:
            return
        if trajectory.stop_reason == "policy_error":
            self._fail(work, RuntimeError("; ".join(trajectory.errors)))
            return
        work.finished += 1
        last = work.finished == len(work.to_run)
        try:
            result = recording.rollout_result(
                candidate=work.candidate,
                index=item.index,
                trajectory=trajectory,
                confidence=trajectory_confidence(trajectory),
                seconds=time.perf_counter() - item.started,
                steps=item.steps,
                finish_with=list(work.done) if last else None,
            )
        except Exception as error:
            self._fail(work, error)
            return
        item.steps = []
        work.done.append(result.rollout)
        self.batch.add(result)

    def _fail(self, work: _Work, error: Exception) -> None:
        if work.failed:
            return
        work.failed = True
        logger.warning("candidate %s failed: %s", work.candidate.pk, error)
        recording.candidate_fail(
            candidate_id=work.candidate.pk, error=f"{type(error).__name__}: {error}"
        )

    def _write_live(self, *, now: bool = False) -> None:
        if not now and time.monotonic() - self.live_written < LIVE_WRITE_SECONDS:
            return
        episodes = [*self.flying.values(), *(item for item, _ in self.held)]
        steps = [(item.candidate, item.index, item.steps) for item in episodes if item.steps]
        if steps:
            recording.live_steps_write_many(steps=steps)
            for item in episodes:
                item.steps = []
        self.live_written = time.monotonic()

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> tuple[list[int], int] | None:
        for work in self.works:  # a redelivered candidate with every rollout stored
            if not work.to_run:
                recording.candidate_finish(candidate=work.candidate, rollouts=work.done)
        self._start_more()
        self._dispatch()
        while self.flying or (not self.stopping and self._next_rollout() is not None):
            if self.flying:
                ready, _ = wait(
                    list(self.flying), timeout=LIVE_WRITE_SECONDS, return_when=FIRST_COMPLETED
                )
                for future in ready:
                    self._answered(self.flying.pop(future), future.result())
            # A step due on the live view is written before its episode's next turn is sent.
            self._write_live()
            self._dispatch()
            self.batch.write_due()
            self._start_more()
            self._dispatch()
        self.batch.write()
        return self._leftovers()

    def _leftovers(self) -> tuple[list[int], int] | None:
        """Candidates not finished when the batch stops: cancelled, waiting or released."""
        unstarted = [
            w.candidate.pk
            for w in self.works
            if not w.failed
            and w.to_run
            and ((not w.outage and w.started == 0) or (w.release and not w.finished))
        ]
        if self.stopping and self.outage is None:  # the run was cancelled
            cut = [
                w.candidate.pk for w in self.works if not w.failed and w.finished < len(w.to_run)
            ]
            recording.candidates_cancel(candidate_ids=cut)
            return None
        if self.outage is None:
            self.batch.recheck()
            return None
        reached = [
            w
            for w in self.works
            if not w.failed
            and w.finished < len(w.to_run)
            and w.started > 0
            and w.candidate.pk not in unstarted
        ]
        attempts = min((w.candidate.attempts for w in reached), default=1)
        delay = retry_delay(attempts) if self.can_wait else None
        waiting: list[int] = []
        for work in reached:
            error = self.outage
            if delay is not None and recording.candidate_wait(
                candidate_id=work.candidate.pk,
                error=waiting_reason(error, delay=delay, attempt=work.candidate.attempts),
                delay=delay,
            ):
                waiting.append(work.candidate.pk)
            elif delay is None:
                recording.candidate_fail(
                    candidate_id=work.candidate.pk, error=f"{type(error).__name__}: {error}"
                )
        if delay is None:
            for pk in unstarted:
                recording.candidate_fail(
                    candidate_id=pk, error=f"{type(self.outage).__name__}: {self.outage}"
                )
            return None
        recording.candidates_release(
            candidate_ids=unstarted,
            error=waiting_reason(self.outage, delay=delay, attempt=attempts),
            delay=delay,
        )
        self.batch.recheck()
        return [*waiting, *unstarted], delay


def run_batch(batch: Any, *, can_wait: bool) -> tuple[list[int], int] | None:
    """Run a claimed batch of a model endpoint's candidates with their episodes in flight;
    returns the candidates to try again and after how many seconds (an endpoint outage)."""
    try:
        driver = _Driver(batch, can_wait=can_wait)
    except Exception as error:  # no policy (an endpoint disabled since the run started, a bad
        # spec): each candidate fails with the reason, as on the one-at-a-time path
        for candidate in batch.candidates:
            recording.candidate_fail(
                candidate_id=candidate.pk, error=f"{type(error).__name__}: {error}"
            )
        return None
    return driver.run()
