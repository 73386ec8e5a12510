"""The in-process reference: onnxruntime run directly in this process on the same inputs, at the
batch sizes the server formed, with the compute the candidate gives the server.

`workers` threads (the candidate's instance count) each own a session of `threads` intra-op
threads and one inter-op thread (as the generated model.py builds it) and run batches of
`batch_size` rows back to back for `seconds`. An id model runs `InferenceModel.run` (the served
model's input checks included) on random ids of `seq` tokens; a text model runs
`InferenceModel.predict` on the texts the load tester sends (tokenizing and decoding included,
as the text model does). What the server adds on top (gRPC, the batcher, the python backend's
shared memory, and BLS for a text model that calls its id model) is the gap between this and the
served throughput: the server's overhead ceiling.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.serving.loadtest.config import FIRST_TOKEN_ID, LoadTestConfig
from attndeploy.serving.loadtest.inputs import (
    random_texts,
    read_text_file,
    text_source,
    vocab_from_onnx,
)

WARMUP_CALLS = 3


@dataclass(frozen=True)
class InProcessPoint:
    """In-process throughput (rows/s) and per-call p50 at one batch size."""

    batch_size: int
    throughput: float
    p50_ms: float
    calls: int
    workers: int
    threads: int
    cores: float | None = None  # this process's CPU seconds per second of the timed part

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _inputs(onnx_path: Path, *, text: bool, seq: int, seed: int, text_file: Path | None,
            count: int) -> list[Any]:
    """`count` rows: texts for a text model, else id rows `[seq]` (the load tester's kind)."""
    if text:
        if text_file is not None:
            return read_text_file(text_file)
        config = LoadTestConfig(model="in_process", seq_lengths=(seq,), pool_size=count,
                                seed=seed)
        return random_texts(config, text_source(onnx_path))[0]
    vocab = vocab_from_onnx(onnx_path) or FIRST_TOKEN_ID + 30
    rng = np.random.default_rng(seed)
    return list(rng.integers(FIRST_TOKEN_ID, vocab, (count, seq), dtype=np.int64))


def _worker(onnx_path: Path, threads: int, text: bool, batches: list[Any],
            barrier: threading.Barrier, deadline: list[float], out: list[Any]) -> None:
    from attndeploy.runtime import InferenceModel

    try:
        model = InferenceModel(onnx_path, threads=threads)

        def call(batch: Any) -> None:
            if text:
                model.predict(batch, batch_size=len(batch), truncate=True)
            else:
                model.run(batch, np.ones_like(batch))

        for batch in batches[:WARMUP_CALLS]:
            call(batch)
        barrier.wait()  # every worker warm: the timed part starts together
        rows, latencies, index = 0, [], 0
        while time.perf_counter() < deadline[0]:
            batch = batches[index % len(batches)]
            t0 = time.perf_counter()
            call(batch)
            latencies.append((time.perf_counter() - t0) * 1e3)
            rows += len(batch)
            index += 1
        out.append((rows, latencies))
    except threading.BrokenBarrierError:
        pass  # another worker failed; its error is reported
    except Exception as exc:  # reported by the caller, in this thread's place
        out.append(exc)
        barrier.abort()


def measure_in_process(onnx_path: Path, *, text: bool, batch_size: int, seq: int, threads: int,
                       workers: int, seconds: float, seed: int = 0,
                       text_file: Path | None = None) -> InProcessPoint:
    """One batch size: `workers` threads for `seconds` (after a few untimed calls each)."""
    rows = _inputs(onnx_path, text=text, seq=seq, seed=seed, text_file=text_file,
                   count=max(64, 4 * batch_size))
    if len(rows) < batch_size:  # a short text file: its lines again
        rows = list(rows) * (batch_size // len(rows) + 1)
    batches = [rows[begin:begin + batch_size] if text else np.stack(rows[begin:begin + batch_size])
               for begin in range(0, len(rows) - batch_size + 1, batch_size)]  # ids: [b, seq]
    deadline = [0.0]
    barrier = threading.Barrier(
        workers + 1, action=lambda: deadline.__setitem__(0, time.perf_counter() + seconds))
    results: list[Any] = []
    pool = [threading.Thread(target=_worker, args=(onnx_path, threads, text, batches, barrier,
                                                   deadline, results), daemon=True)
            for _ in range(workers)]
    for thread in pool:
        thread.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    t0, cpu0 = time.perf_counter(), time.process_time()  # every thread of this process
    for thread in pool:
        thread.join()
    elapsed = max(time.perf_counter() - t0, 1e-9)
    cores = (time.process_time() - cpu0) / elapsed
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        raise errors[0]
    total = sum(r for r, _ in results)
    latencies = [x for _, lat in results for x in lat]
    return InProcessPoint(batch_size, total / elapsed,
                          float(np.median(latencies)) if latencies else float("nan"),
                          len(latencies), workers, threads, cores)
