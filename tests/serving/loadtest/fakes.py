"""Fake clients and a fake `TritonRunner` (`fake_server`) for `run_load_test` and the command."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
from tritonclient.utils import InferenceServerException

from attndeploy.serving.client.triton import ServedModelMetadata, TensorSpec
from attndeploy.serving.loadtest import run as loadtest_run  # where TritonRunner is looked up
from tests.serving.loadtest_sim import served_statistics


class _FakeResult:
    pass


class FakeClient:
    """Answers `async_infer` from a worker thread after `latency_s`, with Triton-like stats."""

    def __init__(self, latency_s: float = 0.001, fail_with: str | None = None) -> None:
        self.latency_s, self.fail_with = latency_s, fail_with
        self.served = 0
        self.live = True
        self.dead_after: int | None = None  # after this many requests: connection refused
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, daemon=True)
        self._worker.start()

    def _serve(self) -> None:
        while True:
            callback = self._jobs.get()
            if callback is None:
                return
            time.sleep(self.latency_s)
            if self.dead_after is not None and self.served >= self.dead_after:
                self.live = False
                callback(result=None, error=InferenceServerException(
                    "Connection refused", status="StatusCode.UNAVAILABLE"))
            elif self.fail_with:
                self.served += 1
                callback(result=None, error=InferenceServerException("bad", status=self.fail_with))
            else:
                self.served += 1
                callback(result=_FakeResult(), error=None)

    def close(self) -> None:
        self._jobs.put(None)

    def async_infer(self, model: str, inputs: Any, callback: Any, **kwargs: Any) -> None:
        self._jobs.put(callback)

    def is_server_live(self, client_timeout: float | None = None) -> bool:
        if not self.live:
            raise InferenceServerException("Connection refused", status="StatusCode.UNAVAILABLE")
        return True

    def get_inference_statistics(self, model: str, **kwargs: Any) -> dict[str, Any]:
        return served_statistics(model, self.served)


class CountingClient(FakeClient):
    """A FakeClient that counts the requests it was sent."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.issued = 0

    def async_infer(self, model: str, inputs: Any, callback: Any, **kwargs: Any) -> None:
        self.issued += 1
        super().async_infer(model, inputs, callback, **kwargs)


class FakeRunner:
    """Stands in for TritonRunner in `run_load_test`: a fake client and a served config."""

    def __init__(self, client: FakeClient, served: dict[str, Any] | None = None) -> None:
        self.client, self.served = client, served or {"max_batch_size": 8}

    def __enter__(self) -> FakeRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def metadata(self) -> ServedModelMetadata:
        inputs = tuple(TensorSpec(n, "INT64", (-1, -1)) for n in ("input_ids", "attention_mask"))
        outputs = (TensorSpec("logits", "FP32", (-1, 3)),)
        return ServedModelMetadata("m", ("1",), "python", inputs, outputs)

    def model_config(self) -> dict[str, Any]:
        return self.served


def fake_server(monkeypatch: pytest.MonkeyPatch, client: FakeClient | None,
                served: dict[str, Any] | None = None) -> None:
    """`run_load_test` talks to `client` (None: connecting at all fails the test)."""
    def connect(url: str, model: str, **kwargs: Any) -> FakeRunner:
        if client is None:
            raise AssertionError("the load test connected to the server; it should have stopped")
        return FakeRunner(client, served)

    monkeypatch.setattr(loadtest_run, "TritonRunner", connect)
