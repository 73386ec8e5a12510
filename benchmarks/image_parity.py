"""Image parity (issue #53, "Parity"): PyTorch, onnxruntime in process and the Triton server
(encoded bytes in) label the same test images; are the labels identical?

Three labelings of every PNG or JPEG below `--data DIR/test` (Fashion-MNIST's 10,000 test
images from `make fashion-mnist`, by default), one model:

- `pytorch`: the checkpoint's model (`load_image_model`), in eval mode, on the pixels decoded
  and normalised by the checkpoint's preprocessing (`pixels.model_inputs`), argmax of the logits;
- `onnxruntime`: `ImageClassifier` on the export (`attndeploy predict --image-file`'s code);
- `triton`: each file's bytes, unread by the client, sent to `NAME_image` on a real tritonserver
  (`attndeploy package` of the same export), `--batch` images a request over gRPC.

The checkpoint is `--checkpoint CKPT`, or a small ViT (`--variant`, default standard) trained
here on `DIR` for `--train-seconds` (default 150; the plan is the steps that fit) into
`--workdir`. Reported: each labeling's accuracy against the folder names, the images on which
each pair agrees, the images where all three agree, and up to 20 disagreements (file, the three
labels, the top-two logit gap of PyTorch's logits: a disagreement at a near tie is float noise,
elsewhere a bug). Writes OUT/image_parity.json and OUT/image_parity.png (accuracies and
disagreement counts) atomically; exit 1 when the labels are not identical.

Run: `.venv/bin/python benchmarks/image_parity.py [--data runs/fashion-mnist]
[--checkpoint CKPT] [--variant standard] [--train-seconds 150] [--limit N] [--batch 8]
[--workdir runs/image-parity] [--out benchmarks/results]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from attndeploy.errors import AttnDeployError  # noqa: E402
from attndeploy.families.image_classification.pixels import IMAGE_SUFFIXES  # noqa: E402

CONTENDERS = ("pytorch", "onnxruntime", "triton")
MAX_LISTED = 20  # disagreements listed in the report


def test_images(data: Path, limit: int | None) -> tuple[list[Path], list[str]]:
    """Every image below `data/test` (sorted) and its class (its folder's name)."""
    folder = data / "test"
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise SystemExit(f"error: no PNG or JPEG below {folder}; run `make fashion-mnist`")
    paths = paths[:limit] if limit else paths
    return paths, [p.parent.name for p in paths]


def train(data: Path, out: Path, variant: str, seconds: float) -> Path:
    from attndeploy.families.image_classification.training import train_folder

    if (out / "config.json").is_file():
        print(f"reusing {out}", file=sys.stderr)
        return out
    started = time.perf_counter()
    result = train_folder(data, model={"variant": variant, "architecture": "vit",
                                       "d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128},
                          training={"max_seconds": seconds, "batch_size": 128,
                                    "warmup_steps": 50},
                          eval_fraction=0.1, out=out, progress=True)
    print(f"trained {out} in {time.perf_counter() - started:.0f} s: {result.metrics}",
          file=sys.stderr)
    return out


def pytorch_labels(checkpoint: Path, paths: list[Path], batch: int
                   ) -> tuple[list[int], np.ndarray]:
    """Label ids and the top-two logit gap per image, from the checkpoint's own model."""
    import torch

    from attndeploy.families.image_classification.pixels import model_inputs
    from attndeploy.models.vision.checkpoint import load_image_model

    loaded = load_image_model(checkpoint)
    ids, gaps = [], []
    with torch.no_grad():
        for start in range(0, len(paths), batch):
            values = model_inputs(paths[start:start + batch], loaded.preprocessing)  # [b,C,H,W]
            output = loaded.model(torch.from_numpy(values))
            logits = output["logits"].numpy()  # [b, C]
            ids.extend(logits.argmax(axis=-1).tolist())
            top = np.sort(logits, axis=-1)[:, -2:]  # [b, 2]
            gaps.extend((top[:, 1] - top[:, 0]).tolist())
    return ids, np.asarray(gaps)


def onnxruntime_labels(onnx_path: Path, paths: list[Path], batch: int) -> list[int]:
    from attndeploy.families.image_classification.predict import ImageClassifier

    records = ImageClassifier(onnx_path, threads=1).predict(paths, batch_size=batch)
    return [record["label_id"] for record in records]


def triton_labels(onnx_path: Path, workdir: Path, paths: list[Path], batch: int) -> list[int]:
    """Package the export, start tritonserver, send each file's bytes to NAME_image."""
    from rich.progress import Progress

    from attndeploy.serving.client.image import (
        decode_image_answer,
        image_feed,
        read_image_bytes,
        served_image_family,
    )
    from attndeploy.serving.client.triton import TritonRunner
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from attndeploy.serving.server import TritonServer, free_ports

    repo = workdir / "repo"
    package_model(onnx_path, repo, PackageOptions(name="parity", max_batch_size=batch,
                                                  force=True))
    grpc, http, metrics = free_ports()
    ids: list[int] = []
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=workdir / "server.log") as server, \
            TritonRunner(server.grpc_url, "parity_image", timeout_s=60) as runner, \
            Progress(transient=True) as progress:
        family, names = served_image_family(runner.model_config(), "parity_image")
        task = progress.add_task("triton", total=len(paths))
        for start in range(0, len(paths), batch):
            chunk = paths[start:start + batch]
            outputs = runner.infer(image_feed([read_image_bytes(path) for path in chunk]))
            ids.extend(record["label_id"] for record in decode_image_answer(outputs, family,
                                                                            names))
            progress.advance(task, len(chunk))
    return ids


def summarise(paths: list[Path], truth: list[str], labels: dict[str, list[int]],
              names: tuple[str, ...], gaps: np.ndarray) -> dict:
    truth_ids = np.asarray([names.index(name) for name in truth])
    arrays = {name: np.asarray(ids) for name, ids in labels.items()}
    pairs = {f"{a}={b}": int((arrays[a] == arrays[b]).sum())
             for i, a in enumerate(CONTENDERS) for b in CONTENDERS[i + 1:]}
    all_agree = (arrays["pytorch"] == arrays["onnxruntime"]) & \
        (arrays["onnxruntime"] == arrays["triton"])
    listed = [{"image": str(paths[i]), **{name: names[int(arrays[name][i])]
                                          for name in CONTENDERS},
               "pytorch_top2_gap": float(gaps[i])}
              for i in np.flatnonzero(~all_agree)[:MAX_LISTED]]
    return {"images": len(paths),
            "accuracy": {name: float((arrays[name] == truth_ids).mean()) for name in CONTENDERS},
            "agree": pairs, "all_three_agree": int(all_agree.sum()),
            "identical": bool(all_agree.all()), "disagreements": listed}


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attndeploy.fsutil import atomic_write_bytes

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    accuracy = [summary["accuracy"][name] for name in CONTENDERS]
    left.bar(CONTENDERS, accuracy, color=["#4c72b0", "#55a868", "#c44e52"])
    left.set_ylim(min(accuracy) - 0.05, 1.0)
    left.set_title(f"test accuracy ({summary['images']} images)")
    for x, value in enumerate(accuracy):
        left.text(x, value, f"{value:.4f}", ha="center", va="bottom")
    pairs = list(summary["agree"])
    differ = [summary["images"] - summary["agree"][pair] for pair in pairs]
    right.bar(pairs, differ, color="#8172b2")
    right.set_title("images labelled differently (0 = identical)")
    right.set_ylim(0, max(1, max(differ)) * 1.2)
    for x, value in enumerate(differ):
        right.text(x, value, str(value), ha="center", va="bottom")
    figure.suptitle(f"image parity: {summary['checkpoint']} ({summary['variant']})")
    figure.tight_layout()
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("runs/fashion-mnist"))
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--variant", default="standard")
    parser.add_argument("--train-seconds", type=float, default=150.0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=Path("runs/image-parity"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    try:
        import torch

        from attndeploy.families.image_classification.checks import export_checkpoint
        from attndeploy.fsutil import atomic_write_text
        from attndeploy.models.vision.checkpoint import load_image_model

        torch.set_num_threads(1)
        args.workdir.mkdir(parents=True, exist_ok=True)
        checkpoint = args.checkpoint or train(args.data, args.workdir / "ckpt", args.variant,
                                              args.train_seconds)
        onnx_path = args.workdir / "model.onnx"
        export_checkpoint(checkpoint, onnx_path)
        paths, truth = test_images(args.data, args.limit)
        names = tuple(load_image_model(checkpoint).labels)
        seconds, labels = {}, {}
        started = time.perf_counter()
        labels["pytorch"], gaps = pytorch_labels(checkpoint, paths, 256)
        seconds["pytorch"] = time.perf_counter() - started
        started = time.perf_counter()
        labels["onnxruntime"] = onnxruntime_labels(onnx_path, paths, 256)
        seconds["onnxruntime"] = time.perf_counter() - started
        started = time.perf_counter()
        labels["triton"] = triton_labels(onnx_path, args.workdir, paths, args.batch)
        seconds["triton"] = time.perf_counter() - started
    except AttnDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = {"checkpoint": str(checkpoint), "variant": args.variant if args.checkpoint is None
               else json.loads((checkpoint / "config.json").read_text())["model"]["variant"],
               "data": str(args.data / "test"),
               **summarise(paths, truth, labels, names, gaps),
               "seconds": seconds, "triton_batch": args.batch,
               "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "load_average": os.getloadavg()}}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "image_parity.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, args.out / "image_parity.png")
    print(json.dumps({k: summary[k] for k in ("images", "accuracy", "agree", "all_three_agree",
                                              "identical")}, indent=2))
    return 0 if summary["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
