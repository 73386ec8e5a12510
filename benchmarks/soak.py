"""Soak and fault run: the quickstart model under the local Triton server for minutes, then killed.

What it answers: does a served model hold up under steady load (throughput per window flat, p99
flat, no errors, no memory growth in the server or its python-backend stubs), and does a crash
end cleanly (the load tester reports the dead server quickly; `attndeploy stop` leaves no stub
process and no shared-memory region behind)?

Phases, in one run:
1. soak: one closed-loop load level at `--concurrency` (default 16) for `--minutes` (default 10),
   in windows of `--window-s` seconds, every window measured (no early stop on stability);
   the RSS of the server and of every process of its process group (the stubs) is sampled every
   `--rss-every-s` seconds;
2. fault: a second load test starts, the server is killed with SIGKILL after `--kill-after-s`;
   recorded are the seconds from the kill until the load tester raised, and its error;
3. cleanup: `stop_background` on the killed server's record; recorded are the processes of the
   server's group and the /dev/shm entries that remain (both should be none).

Model: the `standard` variant trained and exported as `benchmarks/serving.py` does (cached in
`--workdir`), packaged with the package defaults (python flavour).

Run: `.venv/bin/python benchmarks/soak.py [--minutes 10] [--quick]`. Writes DIR/soak.json and
DIR/soak.png (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/soak.py` from a checkout
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving import SEQ, prepare_model  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402

MODEL = "soak_standard"


# --------------------------------------------------------------------------- processes


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is `pgid` (the server and its stubs; zombies left out)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the fields after the command's closing parenthesis: state ppid pgrp ...
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return sorted(members)


def shm_entries() -> set[str]:
    try:
        return {p.name for p in Path("/dev/shm").iterdir()}
    except OSError:
        return set()


class RssSampler(threading.Thread):
    """Samples the RSS of the server and of the rest of its process group every `every_s`."""

    def __init__(self, pid: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s = pid, every_s
        self.samples: list[dict[str, float]] = []
        self._done = threading.Event()
        self._t0 = time.monotonic()

    def sample(self) -> dict[str, float]:
        others = [p for p in group_members(self.pid) if p != self.pid]
        row = {
            "t_s": round(time.monotonic() - self._t0, 1),
            "server_mb": _rss_mb(self.pid) or 0.0,
            "stubs_mb": sum(_rss_mb(p) or 0.0 for p in others),
            "stubs": float(len(others)),
        }
        self.samples.append(row)
        return row

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.every_s)

    def stop(self) -> None:
        self._done.set()
        self.join()
        self.sample()


# --------------------------------------------------------------------------- phases


def soak(url: str, onnx_path: Path, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """Back-to-back load tests of one window each, so every window has its own p99 and errors."""
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test

    windows = max(1, round(args.minutes * 60 / args.window_s))
    sampler = RssSampler(pid, args.rss_every_s)
    sampler.start()
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    try:
        for index in range(windows):
            config = LoadTestConfig(
                model=MODEL, url=url, concurrency=(args.concurrency,), seq_lengths=(SEQ,),
                window_s=args.window_s, max_windows=1, stable_windows=1,
                warmup_requests=20 if index == 0 else 0, check_fraction=0.01,
                onnx_path=onnx_path, seed=args.seed + index, max_level_s=args.window_s + 60,
            )
            level = run_load_test(config, progress=False).to_dict()["levels"][0]
            rows.append({
                "window": index, "t_end_s": round(time.monotonic() - started, 1),
                "throughput_rps": level["throughput_infer_per_s"],
                "p50_ms": level["latency_ms"]["p50"], "p99_ms": level["latency_ms"]["p99"],
                "requests": level["client_inference_count"], "errors": level["error_count"],
                "checks_done": level["checks"]["done"],
                "checks_failed": level["checks"]["failed"],
            })
            print(f"window {index + 1}/{windows}: {rows[-1]['throughput_rps']:.0f} infer/s, "
                  f"p99 {rows[-1]['p99_ms']:.2f} ms, errors {rows[-1]['errors']}, "
                  f"server {sampler.samples[-1]['server_mb']:.0f} MB, "
                  f"stubs {sampler.samples[-1]['stubs_mb']:.0f} MB", flush=True)
    finally:
        sampler.stop()
    rss = sampler.samples
    requests = sum(r["requests"] for r in rows)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "concurrency": args.concurrency,
        "requests": requests,
        "throughput_infer_per_s": requests / max(1e-9, sum(args.window_s for _ in rows)),
        "errors": sum(r["errors"] for r in rows),
        "checks_done": sum(r["checks_done"] for r in rows),
        "checks_failed": sum(r["checks_failed"] for r in rows),
        "p99_ms_max": max(r["p99_ms"] for r in rows),
        "windows": rows,
        "rss": rss,
        "rss_start": rss[0] if rss else None,
        "rss_end": rss[-1] if rss else None,
    }


def fault(url: str, state: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from attndeploy.errors import AttnDeployError
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test

    config = LoadTestConfig(
        model=MODEL, url=url, concurrency=(args.concurrency,), seq_lengths=(SEQ,),
        window_s=2.0, max_windows=60, stable_windows=60, warmup_requests=10,
        check_fraction=0.0, max_level_s=150.0,
    )
    outcome: dict[str, Any] = {}

    def load() -> None:
        try:
            run_load_test(config, progress=False)
            outcome["error"] = None
        except AttnDeployError as exc:
            outcome["error"] = f"{exc.stage}: {exc}"
        outcome["ended"] = time.monotonic()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(args.kill_after_s)
    pid = int(state["pid"])
    stubs_before = [p for p in group_members(pid) if p != pid]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    worker.join(timeout=120)
    survivors = [p for p in group_members(pid) if p != pid]
    return {
        "killed_after_s": args.kill_after_s,
        "loadtest_error": outcome.get("error", "did not end within 120 s"),
        "loadtest_exit_after_kill_s": (round(outcome["ended"] - killed, 3)
                                       if "ended" in outcome else None),
        "stubs_before_kill": len(stubs_before),
        "stubs_alive_after_kill": len(survivors),
    }


def cleanup(state_path: Path, pid: int, shm_before: set[str]) -> dict[str, Any]:
    from attndeploy.errors import AttnDeployError
    from attndeploy.serving.server import stop_background

    try:
        stopped: Any = stop_background(state_path)
        message = None
    except AttnDeployError as exc:
        stopped, message = None, f"{exc.stage}: {exc}"
    deadline = time.monotonic() + 5.0  # a SIGKILLed stub takes a moment to be gone
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        "stop_result": stopped,
        "stop_message": message,
        "group_processes_left": group_members(pid),
        "shm_entries_left": sorted(shm_entries() - shm_before),
    }


# --------------------------------------------------------------------------- report


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = report["soak"]["windows"]
    rss = report["soak"]["rss"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    t = [w["t_end_s"] / 60 for w in windows]
    axes[0].plot(t, [w["throughput_rps"] for w in windows], marker="o")
    axes[0].set(title="throughput per window", xlabel="minutes", ylabel="infer/s")
    axes[0].set_ylim(bottom=0)
    axes[1].plot(t, [w["p99_ms"] for w in windows], marker="o", label="p99")
    axes[1].plot(t, [w["p50_ms"] for w in windows], marker=".", label="p50")
    axes[1].set(title="latency per window", xlabel="minutes", ylabel="ms")
    axes[1].set_ylim(bottom=0)
    axes[1].legend()
    minutes = [r["t_s"] / 60 for r in rss]
    axes[2].plot(minutes, [r["server_mb"] for r in rss], label="tritonserver")
    axes[2].plot(minutes, [r["stubs_mb"] for r in rss], label="python stubs")
    axes[2].set(title="resident memory", xlabel="minutes", ylabel="MB")
    axes[2].set_ylim(bottom=0)
    axes[2].legend()
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from attndeploy.serving.server import free_ports, start_background

    model = prepare_model(args.workdir, args.train_steps, 60.0, print)
    repo = args.workdir / "soak_repository"
    if repo.exists():
        shutil.rmtree(repo)
    package_model(Path(model["onnx"]), repo, PackageOptions(flavor="python", name=MODEL))
    grpc, http, metrics = free_ports(3)
    state_path = args.workdir / "soak-server.json"
    shm_before = shm_entries()
    state = start_background(repo, state_path=state_path, grpc_port=grpc, http_port=http,
                             metrics_port=metrics)
    url, pid = state["grpc_url"], int(state["pid"])
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "loadavg_start": os.getloadavg()},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "model": {k: model[k] for k in ("variant", "onnx", "train_steps")},
    }
    try:
        report["soak"] = soak(url, Path(model["onnx"]), pid, args)
        report["fault"] = fault(url, state, args)
    finally:
        report["cleanup"] = cleanup(state_path, pid, shm_before)
    report["machine"]["loadavg_end"] = os.getloadavg()
    return report


def summary(report: dict[str, Any]) -> str:
    s, f, c = report["soak"], report["fault"], report["cleanup"]
    tps = [w["throughput_rps"] for w in s["windows"]]
    p99 = [w["p99_ms"] for w in s["windows"]]
    return "\n".join([
        f"soak {s['seconds']:.0f} s at concurrency {s['concurrency']}: "
        f"{s['throughput_infer_per_s']:.0f} infer/s, errors {s['errors']}, "
        f"checks {s['checks_done']} ({s['checks_failed']} failed)",
        f"  per window: throughput {min(tps):.0f}..{max(tps):.0f} infer/s, "
        f"p99 {min(p99):.2f}..{max(p99):.2f} ms",
        f"  RSS start {s['rss_start']}, end {s['rss_end']}",
        f"fault: loadtest ended {f['loadtest_exit_after_kill_s']} s after SIGKILL "
        f"({f['loadtest_error']}); stubs before kill {f['stubs_before_kill']}, "
        f"alive after kill {f['stubs_alive_after_kill']}",
        f"cleanup: stop -> {c['stop_message'] or 'stopped'}; processes left "
        f"{c['group_processes_left']}; shm entries left {c['shm_entries_left']}",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="checkpoint, ONNX, repository (default OUT/serving_work)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rss-every-s", type=float, default=5.0)
    parser.add_argument("--kill-after-s", type=float, default=5.0)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1 minute in 10 s windows")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.window_s, args.train_steps = 1.0, 10.0, 30
    args.workdir = args.workdir or args.out / "serving_work"
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args)
    json_path = args.out / "soak.json"
    atomic_write_text(json_path, json.dumps(report, indent=2, default=str) + "\n")
    plot(report, args.out / "soak.png")
    print(summary(report))
    print(f"wrote {json_path} and {args.out / 'soak.png'}")


if __name__ == "__main__":
    main()
