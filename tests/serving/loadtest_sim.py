"""A simulated clock and server for the load-test engine: its schedule, windows and limits are
checked in simulated time, so the results do not depend on the speed of the machine.

`SimClock` implements the engine's `Clock` (`now_ns`, `sleep`, `acquire`): time stands still
until the engine sleeps or waits for a slot, then jumps to the next scheduled event (a response)
or the end of the wait. `SimClient` answers each request exactly `latency_s` after it was sent,
on that clock, with Triton-like statistics.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from typing import Any

from tritonclient.utils import InferenceServerException

UNAVAILABLE = "StatusCode.UNAVAILABLE"


def served_statistics(model: str, served: int) -> dict[str, Any]:
    """Triton's inference statistics of `model` after `served` requests of 1 µs each, one
    request per execution."""
    return {"model_stats": [{"name": model, "inference_count": str(served),
                             "execution_count": str(served), "inference_stats": {
                                 "success": {"count": str(served), "ns": str(served * 1000)}}}]}


class SimClock:
    """Simulated nanoseconds; events fire in time order as the engine sleeps or waits."""

    def __init__(self) -> None:
        self.now = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []  # (due ns, order, action)
        self._order = 0

    def call_at(self, due_ns: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (due_ns, self._order, action))
        self._order += 1

    def _fire_next(self) -> None:
        due, _, action = heapq.heappop(self._events)
        self.now = max(self.now, due)
        action()

    def _next_due(self) -> int | None:
        return self._events[0][0] if self._events else None

    # ---- the engine's Clock
    def now_ns(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        until = self.now + round(seconds * 1e9)
        while (due := self._next_due()) is not None and due <= until:
            self._fire_next()
        self.now = max(self.now, until)

    def acquire(self, slots: threading.Semaphore, timeout_s: float) -> bool:
        deadline = self.now + round(timeout_s * 1e9)
        while not slots.acquire(blocking=False):
            due = self._next_due()
            if due is None or due > deadline:
                self.now = max(self.now, deadline)
                return slots.acquire(blocking=False)
            self._fire_next()
        return True


class _Result:
    """A successful response (the engine's checks are off in these tests)."""


class SimClient:
    """A server answering every request `latency_s` after it was sent, on `clock`.

    `answer=False`: requests are never answered (a hung server). `fail_with`: every answer is an
    error of that gRPC status. `dead_after`: after that many answers every answer (and liveness
    probe) is a refused connection.
    """

    def __init__(self, clock: SimClock, latency_s: float = 0.001, *, answer: bool = True,
                 fail_with: str | None = None, dead_after: int | None = None) -> None:
        self.clock, self.latency_ns = clock, round(latency_s * 1e9)
        self.answer, self.fail_with, self.dead_after = answer, fail_with, dead_after
        self.issued_ns: list[int] = []  # when each request was sent
        self.served = 0

    @property
    def dead(self) -> bool:
        return self.dead_after is not None and self.served >= self.dead_after

    def async_infer(self, model: str, inputs: Any, callback: Callable[..., None],
                    **kwargs: Any) -> None:
        self.issued_ns.append(self.clock.now)
        if self.answer:
            self.clock.call_at(self.clock.now + self.latency_ns, lambda: self._respond(callback))

    def _respond(self, callback: Callable[..., None]) -> None:
        if self.dead:
            callback(result=None, error=InferenceServerException("Connection refused",
                                                                 status=UNAVAILABLE))
            return
        self.served += 1
        if self.fail_with:
            callback(result=None, error=InferenceServerException("bad", status=self.fail_with))
        else:
            callback(result=_Result(), error=None)

    def is_server_live(self, client_timeout: float | None = None) -> bool:
        if self.dead:
            raise InferenceServerException("Connection refused", status=UNAVAILABLE)
        return True

    def get_inference_statistics(self, model: str, **kwargs: Any) -> dict[str, Any]:
        return served_statistics(model, self.served)
