"""The NGC Triton releases whose facts are known here: the server version each runs, the
onnxruntime its onnxruntime backend bundles and the opsets that runs, and the single requests
that end it. `check-repo` checks opsets against the default release, and `deploy kubernetes`
pins its image and reads the release of any other image from this table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TritonRelease:
    """One NGC Triton release: its server version and the onnxruntime its backend bundles."""

    ngc: str  # the NGC container release, e.g. "24.10" (image tag "24.10-py3")
    server: str  # the tritonserver version inside it
    onnxruntime: str  # major.minor of the onnxruntime its onnxruntime backend bundles
    max_opset: int  # the highest default-domain opset that onnxruntime runs
    # single requests that end this server (docs/architecture.md, "Requests that end the server")
    ended_by: tuple[str, ...] = ()


# Releases whose facts are known here, by NGC release. Where each column comes from:
# - ngc -> server -> onnxruntime: the server repository's build.py, whose TRITON_VERSION_MAP
#   maps a server version to its container release and the onnxruntime its onnxruntime backend
#   is built with: "2.51.0" -> ("24.10", ..., onnxruntime "1.19.2"); "2.69.0" -> ("26.05", ...,
#   onnxruntime "1.24.4") (the NGC release notes name the same server versions).
# - onnxruntime -> max_opset: the runtime itself: onnxruntime 1.19.2 refuses an opset-22 model
#   with "Current official support for domain ai.onnx is till opset 21", 1.24.4 an opset-26 one
#   "... till opset 25".
# tests/interop runs every exported model in the default release's onnxruntime (the
# `.venv/ort-triton` that `make venv` builds, TRITON_ORT in the Makefile) and checks that
# refusal against max_opset. A new row needs the same sources.
#
# The default is 26.05, the first release without either single request that ends 2.51
# (docs/architecture.md, "Requests that end the server"): classification of a BYTES output is
# refused since 2.60 (25.08, server PR #8267), and JSON is parsed iteratively since 2.69 (26.05,
# common PR #156, tested by server PR #8745). 24.10 stays known for `--image ...:24.10-py3`
# (clusters whose NVIDIA driver predates 26.05's CUDA 13.2), with both crashes.
TRITON_RELEASES = {
    "24.10": TritonRelease("24.10", "2.51", "1.19", 21, ended_by=(
        "JSON nested more than 64 levels deep over HTTP",
        "the classification extension on a BYTES output (a text model's `label`, `tokens`, "
        "`attended`) over gRPC or HTTP")),
    "26.05": TritonRelease("26.05", "2.69", "1.24", 25),
}
TRITON_RELEASE = TRITON_RELEASES["26.05"]  # deploy's default image; check-repo's opset check
TRITON_ORT_MAX_OPSET = TRITON_RELEASE.max_opset
