"""The load-test engine's clock: every reading of the time and every wait goes through one object.

`Clock` is the real one (`time.perf_counter_ns`, `time.sleep`, a semaphore's timed acquire) and
the default everywhere. A replacement with the same three methods (a simulated clock that fires
scheduled completions as it advances) makes the engine's schedule checkable without depending on
the speed of the machine that runs it.
"""

from __future__ import annotations

import threading
import time


class Clock:
    """Monotonic nanoseconds, sleeping, and waiting for a free request slot."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def acquire(self, slots: threading.Semaphore, timeout_s: float) -> bool:
        """Take a slot, waiting at most `timeout_s`; False when none was freed in time."""
        return slots.acquire(timeout=timeout_s)


REAL_CLOCK = Clock()
