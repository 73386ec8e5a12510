"""One error tree for the whole pipeline.

Library code raises these; the CLI turns them into a message and exit code 1 in exactly one place
(`attndeploy.cli.app.main`). Each stage has its own subclass so callers can catch one stage.
"""

from __future__ import annotations


class AttnDeployError(Exception):
    """Base of every error attndeploy raises on purpose (bad input, failed checks)."""

    stage = "attndeploy"


class OutputError(AttnDeployError):
    """An output path that cannot be written (read-only, a folder where a file goes, too long)."""

    stage = "output"


class ConcurrentWriteError(OutputError):
    """An output that another process wrote while this one was writing it: this one kept
    nothing (`path` names the output)."""

    def __init__(self, message: str, path: object) -> None:
        super().__init__(message)
        self.path = path


class ConfigError(AttnDeployError):
    """A configuration or hyperparameter that cannot work (says what to change)."""

    stage = "config"


class DataError(AttnDeployError):
    """A data file, task name or example the pipeline cannot use."""

    stage = "data"


class CheckpointError(AttnDeployError):
    """A checkpoint directory that is missing, corrupt or does not match its config."""

    stage = "checkpoint"


class ExportError(AttnDeployError):
    """Export to ONNX failed or produced a graph that breaks the op contract."""

    stage = "export"


class ModelError(ExportError):
    """An exported model that cannot be loaded to run in process (`attndeploy predict`): missing,
    not ONNX, or not an attndeploy export. An ExportError, so code that catches those from
    `InferenceModel` keeps working; its stage names what failed, not the export step."""

    stage = "model"


class ValidationError(AttnDeployError):
    """Parity validation could not run, or ran and failed."""

    stage = "validation"


class RepositoryError(AttnDeployError):
    """A Triton model repository that cannot be built or does not pass its checks."""

    stage = "repository"


class ServerError(AttnDeployError):
    """The inference server could not be found, started, reached or stopped."""

    stage = "server"


class LoadTestError(AttnDeployError):
    """A load test that could not run or finish."""

    stage = "loadtest"


class DeployError(AttnDeployError):
    """Deployment manifests that cannot be made from these options or this repository."""

    stage = "deploy"


class QuantizeError(AttnDeployError):
    """A model that cannot be quantized, or whose int8 version is outside the tolerances."""

    stage = "quantize"
