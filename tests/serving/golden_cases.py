"""The golden config cases: (golden file name, ModelInfo, PackageOptions, model name, flavor).

Shared by `test_model_config.py` and by `python -m tests.serving.golden_cases`, which rewrites
the golden files after an intended change (review the diff before committing it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from attndeploy.serving.packaging.model_config import build_config, serialize_config
from attndeploy.serving.packaging.onnx_info import ModelInfo
from attndeploy.serving.packaging.options import Flavor, PackageOptions

GOLDEN_DIR = Path(__file__).parent / "golden"
HEADER = "# Golden config, reviewed by eye. Regenerate: python -m tests.serving.golden_cases\n"


def info(variant: str, head: str, num_labels: int) -> ModelInfo:
    """A ModelInfo as `read_model_info` returns it, without an ONNX file."""
    return ModelInfo(
        variant=variant,
        head=head,
        labels=tuple(f"label_{i}" for i in range(num_labels)),
        max_seq=32,
        vocab_size=100,
        tokenizer=None,
        exporter_version="0.1.0",
        weights_sha256="0" * 64,
        config={"variant": variant, "head": head, "num_labels": num_labels, "max_seq": 32},
        outputs=("logits", "gates") if variant == "ganet" else ("logits",),  # the graph's
    )


CASES: dict[str, tuple[ModelInfo, PackageOptions, str, Flavor]] = {
    "classifier_python.pbtxt": (
        info("qvi", "classification", 3),
        PackageOptions(),
        "qvi",
        Flavor.PYTHON,
    ),
    "ganet_onnxruntime_gpu.pbtxt": (
        info("ganet", "classification", 2),
        PackageOptions(
            flavor="both", kind="gpu", instances=2, max_batch_size=16, threads=4,
            max_queue_delay_us=100,
        ),
        "ganet_onnxruntime",
        Flavor.ONNXRUNTIME,
    ),
    "tagging_python_unbatched.pbtxt": (
        info("evolving", "tagging", 5),
        PackageOptions(
            version=3, dynamic_batching=False, warmup=False, max_seq=16,
            execution_env=Path("/opt/envs/attndeploy"),
        ),
        "tagger",
        Flavor.PYTHON,
    ),
}


def render(name: str) -> str:
    model_info, options, model_name, flavor = CASES[name]
    return serialize_config(build_config(model_info, options, name=model_name, flavor=flavor))


if __name__ == "__main__":
    for file_name in CASES if len(sys.argv) < 2 else sys.argv[1:]:
        (GOLDEN_DIR / file_name).write_text(HEADER + render(file_name))
        print(f"wrote {GOLDEN_DIR / file_name}")
