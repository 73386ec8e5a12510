"""The report writers (JSON, Markdown, PNG) go through fsutil: an output that cannot be written
is one OutputError naming it, never an OSError with a traceback, and nothing is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from attndeploy.errors import OutputError
from attndeploy.validate.compare import Tolerance
from attndeploy.validate.report import OracleResult, ValidationReport


@pytest.fixture
def report() -> ValidationReport:
    """The smallest report: one oracle with no shapes, every writer can render it."""
    return ValidationReport(
        model={"variant": "standard"}, tolerance=Tolerance(1e-5, 1e-4), per_output={},
        gate_flip_tolerance=0.0, shapes=[], oracles={"onnxruntime[all]": OracleResult("x")},
        padding=None, padding_runner="onnxruntime[all]", gated=False, timings={},
        environment={},
    )


WRITERS = ["write_json", "write_markdown", "write_histogram"]


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("where, fragment", [
    ("/proc/attndeploy-report", "/proc is not writable"),
    ("folder", "it is a folder"),
    ("blocker/report", "blocker is not a folder"),
    ("r" * 300, "characters; keep it under"),
])
def test_every_writer_turns_an_unwritable_path_into_an_output_error(
    report: ValidationReport, tmp_path: Path, writer: str, where: str, fragment: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "blocker").write_text("a file")
    target = Path(where) if where.startswith("/") else tmp_path / where
    with pytest.raises(OutputError, match="cannot write") as info:
        getattr(report, writer)(target)
    assert fragment in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "folder"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_write_into_a_file_is_an_output_error(report: ValidationReport, tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file")
    with pytest.raises(OutputError, match="blocker is not a folder"):
        report.write(tmp_path / "blocker")


def test_every_writer_writes_where_it_can(report: ValidationReport, tmp_path: Path) -> None:
    written = report.write(tmp_path / "new")
    assert sorted(p.name for p in written.values()) == [
        "validation.json", "validation.md", "validation_errors.png"]
    assert all(p.stat().st_size > 0 for p in written.values())
