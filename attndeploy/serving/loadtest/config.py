"""What a load test runs: `LoadTestConfig`, its load levels and the parsing of CLI number lists."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from attndeploy.errors import LoadTestError
from attndeploy.serving.client.protocol import DEFAULT_URLS, Protocol
from attndeploy.serving.loadtest.stats import DISTRIBUTIONS

DEFAULT_CONCURRENCY = (1, 4, 16)
FIRST_TOKEN_ID = 2  # ids 0 and 1 are reserved (padding, unknown) by the built-in tokenizer
SEQ_ORDERS = ("round_robin", "random")


def parse_number_list(text: str, what: str, kind: type = int) -> tuple[Any, ...]:
    """"1,4,16" -> (1, 4, 16) (or floats), for CLI options; LoadTestError names `what`."""
    try:
        values = tuple(kind(part) for part in str(text).replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise LoadTestError(
            f"{what} must be a comma-separated list of numbers like '1,4,16', got {text!r}."
        ) from exc
    if not values:
        raise LoadTestError(f"{what} is empty; give at least one value, e.g. '1,4,16'.")
    return values


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (int, float, str)):
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class LoadLevel:
    """One load level: a concurrency (closed loop) or a request rate (open loop)."""

    mode: str  # "concurrency" | "request_rate"
    value: float
    distribution: str | None = None

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return f"concurrency {int(self.value)}"
        return f"rate {self.value:g}/s {self.distribution}"


@dataclass(frozen=True)
class LoadTestConfig:
    """What to load, how hard and how long; validated on construction (LoadTestError).

    Give `concurrency` levels (closed loop, default 1,4,16) or `request_rates` (requests per
    second, open loop with `distribution` constant or poisson), not both. Each request carries
    `batch` rows of one length from `seq_lengths` (round-robin or random with `seed`), random
    token ids in [2, vocab) and an all-ones attention mask. A text model (input `text`) gets
    `batch` texts of that many random vocabulary words instead.

    `text_file`: send real texts, its non-blank lines in order, `batch` per request (then
    `seq_lengths` is not used). A text model gets the lines as they are; an id model gets them
    tokenized here with the vocabulary in its ONNX file's metadata (`onnx_path`), so both
    kinds can be measured on the same texts.

    An image model (input `image`) gets `batch` encoded images per request: the PNG and JPEG
    files below `image_folder`, in sorted order, or random-pixel PNGs of its recorded size
    (`loadtest.images`); `seq_lengths` is not used.

    `protocol`: `grpc` or `http`; `url` defaults to the protocol's loopback endpoint.
    """

    model: str
    url: str | None = None
    protocol: str = Protocol.GRPC.value
    concurrency: tuple[int, ...] = ()
    request_rates: tuple[float, ...] = ()
    distribution: str = "constant"
    max_in_flight: int = 256  # request-rate mode: at most this many outstanding requests
    batch: int = 1
    seq_lengths: tuple[int, ...] = (32,)
    seq_order: str = "round_robin"
    window_s: float = 5.0
    window_requests: int | None = None  # windows of N responses instead of window_s seconds
    stability_threshold: float = 0.10
    stable_windows: int = 3
    max_windows: int = 10
    warmup_requests: int = 20
    check_fraction: float = 0.02
    onnx_path: Path | None = None  # the model's ONNX file, for the correctness checks
    atol: float = 1e-5
    rtol: float = 1e-4
    vocab_size: int | None = None  # default: from onnx_path's embedding, else 32
    pool_size: int = 64  # distinct inputs per sequence length
    seed: int = 0
    request_timeout_s: float = 10.0
    max_level_s: float = 300.0  # hard bound on one level, warm-up and drain included
    text_file: Path | None = None
    image_folder: Path | None = None  # an image model's images (default: random pixels)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        protocol = self.protocol.value if isinstance(self.protocol, Protocol) else self.protocol
        put("protocol", protocol)
        if self.url is None and protocol in {p.value for p in Protocol}:
            put("url", DEFAULT_URLS[Protocol(protocol)])
        if self.text_file is not None:
            put("text_file", Path(self.text_file))
        if self.image_folder is not None:
            put("image_folder", Path(self.image_folder))

        put("concurrency", _as_tuple(self.concurrency))
        put("request_rates", _as_tuple(self.request_rates))
        put("seq_lengths", _as_tuple(self.seq_lengths))
        if self.onnx_path is not None:
            put("onnx_path", Path(self.onnx_path))
        if self.concurrency and self.request_rates:
            raise LoadTestError(
                "Give concurrency levels or request rates, not both (they are two load modes)."
            )
        if not self.concurrency and not self.request_rates:
            put("concurrency", DEFAULT_CONCURRENCY)
        problems = self._problems()
        if problems:
            raise LoadTestError("Invalid load test configuration: " + "; ".join(problems) + ".")

    def _problems(self) -> list[str]:
        out = []
        if not self.model:
            out.append("model is empty; pass the served model's name")
        if self.protocol not in {p.value for p in Protocol}:
            out.append(f"protocol must be grpc or http, got {self.protocol!r}")
        if not self.url:
            out.append("url is empty; pass host:port of the endpoint, e.g. 127.0.0.1:8001 "
                       "(gRPC) or 127.0.0.1:8000 (HTTP)")
        if any(int(c) != c or c < 1 for c in self.concurrency):
            out.append(f"concurrency levels must be integers >= 1, got {self.concurrency}")
        if any(not r > 0 for r in self.request_rates):
            out.append(f"request rates must be > 0 per second, got {self.request_rates}")
        if self.distribution not in DISTRIBUTIONS:
            out.append(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
        if self.seq_order not in SEQ_ORDERS:
            out.append(f"seq_order must be one of {', '.join(SEQ_ORDERS)}")
        if not self.seq_lengths or any(int(s) != s or s < 1 for s in self.seq_lengths):
            out.append(f"seq_lengths must be integers >= 1, got {self.seq_lengths}")
        for name in ("batch", "max_in_flight", "stable_windows", "max_windows", "pool_size"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_windows < self.stable_windows:
            out.append(
                f"max_windows ({self.max_windows}) must be >= stable_windows "
                f"({self.stable_windows})"
            )
        if self.window_requests is None and not self.window_s > 0:
            out.append(f"window_s must be > 0, got {self.window_s}")
        if self.window_requests is not None and self.window_requests < 1:
            out.append(f"window_requests must be >= 1, got {self.window_requests}")
        if not 0 < self.stability_threshold < 1:
            out.append(f"stability_threshold must lie in (0, 1), got {self.stability_threshold}")
        if self.warmup_requests < 0:
            out.append(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        if not 0 <= self.check_fraction <= 1:
            out.append(f"check_fraction must lie in [0, 1], got {self.check_fraction}")
        if self.onnx_path is not None and not self.onnx_path.is_file():
            out.append(f"onnx_path {self.onnx_path} is not a file")
        if self.text_file is not None and (not self.text_file.exists()
                                           or self.text_file.is_dir()):
            # a pipe (`--text-file <(...)`, /dev/stdin) is read like a file: only once
            what = "is a folder" if self.text_file.is_dir() else "does not exist"
            out.append(f"text_file {self.text_file} {what}")
        if self.image_folder is not None and not self.image_folder.is_dir():
            out.append(f"image_folder {self.image_folder} is not a folder")
        if self.image_folder is not None and self.text_file is not None:
            out.append("give text_file or image_folder, not both")
        if self.atol < 0 or self.rtol < 0:
            out.append("atol and rtol must be >= 0")
        if self.vocab_size is not None and self.vocab_size <= FIRST_TOKEN_ID:
            out.append(f"vocab_size must be > {FIRST_TOKEN_ID}, got {self.vocab_size}")
        if not self.request_timeout_s > 0 or not self.max_level_s > 0:
            out.append("request_timeout_s and max_level_s must be > 0")
        return out

    @property
    def levels(self) -> tuple[LoadLevel, ...]:
        if self.request_rates:
            return tuple(
                LoadLevel("request_rate", float(r), self.distribution) for r in self.request_rates
            )
        return tuple(LoadLevel("concurrency", int(c)) for c in self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["onnx_path"] = str(self.onnx_path) if self.onnx_path is not None else None
        out["text_file"] = str(self.text_file) if self.text_file is not None else None
        out["image_folder"] = str(self.image_folder) if self.image_folder is not None else None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
