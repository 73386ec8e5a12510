"""`attndeploy check-repo`: lint a Triton model repository offline (no server needed)."""

from __future__ import annotations

from attndeploy.cli.options import JsonFlag, RepoOption
from attndeploy.cli.output import console, print_json
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY


def command(
    repo: RepoOption = DEFAULT_REPOSITORY,
    json_output: JsonFlag = False,
) -> None:
    """Check configs, I/O against the ONNX graphs, functions, files, versions and model.py."""
    from attndeploy.serving.packaging.check_repo import check_repository

    report = check_repository(repo)
    if json_output:
        print_json(report.to_dict())
    else:
        console.print(report.summary(), highlight=False)
    report.raise_for_errors()
