"""The load-test report's picture (`LoadTestReport.write_plot`) and the point labels it shares
with the quickstart's: labels that neither cover each other nor leave the axes, checked on the
drawn matplotlib objects."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import matplotlib
import pytest

matplotlib.use("Agg")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attndeploy.serving.loadtest import report as report_module  # noqa: E402
from attndeploy.serving.loadtest.report import (  # noqa: E402
    CheckSummary,
    LevelResult,
    LoadTestReport,
    place_point_labels,
)


def level(concurrency: int, throughput: float, p50: float, p95: float) -> LevelResult:
    return LevelResult(
        label=f"concurrency {concurrency}", mode="concurrency", concurrency=concurrency,
        request_rate=None, distribution=None, batch=1, seq_lengths=[32], stable=True,
        stop_reason="stable", windows=[], measured_windows=3, measured_s=3.0, request_count=300,
        throughput_infer_per_s=throughput, throughput_requests_per_s=throughput,
        latency_ms={"count": 300, "avg": p50, "min": 1.0, "p50": p50, "p90": p95, "p95": p95,
                    "p99": p95, "max": p95},
        error_count=0, errors={}, error_samples={}, server=None, client_inference_count=300,
        count_rel_diff=None, checks=CheckSummary(3, 0, 0.0), delayed_requests=0,
        max_schedule_lag_ms=0.0, warmup_requests=20, duration_s=3.5,
    )


# throughput saturates: the last levels crowd together at the right edge of the plot
SATURATING = [level(1, 410.0, 2.4, 3.1), level(4, 980.0, 4.0, 5.2), level(8, 1010.0, 7.8, 9.9),
              level(16, 1050.0, 15.0, 19.0), level(32, 1060.0, 30.1, 38.0)]


def boxes(ax: Any) -> list[tuple[str, Any]]:
    renderer = ax.figure.canvas.get_renderer()
    return [(text.get_text(), text.get_window_extent(renderer)) for text in ax.texts]


def assert_apart_and_inside(ax: Any) -> None:
    frame = ax.get_window_extent(ax.figure.canvas.get_renderer())
    placed = boxes(ax)
    for text, box in placed:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, f"{text} leaves the axes sideways"
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1, f"{text} leaves the axes vertically"
    for (one, a), (other, b) in itertools.combinations(placed, 2):
        assert not a.overlaps(b), f"{one} overlaps {other}"


def test_every_level_is_labelled_inside_the_axes_without_overlap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    written: list[Any] = []

    def keep(figure: Any, path: Path, **savefig: Any) -> Path:
        figure.canvas.draw()
        written.append((figure, savefig))
        return path

    monkeypatch.setattr(report_module, "atomic_write_png", keep)
    report = LoadTestReport("127.0.0.1:8001", "m", "2024-01-01T00:00:00+00:00", 1.0, {},
                            SATURATING)
    report.write_plot(tmp_path / "r.png")
    ((figure, savefig),) = written
    ax = figure.axes[0]
    assert sorted(text for text, _ in boxes(ax)) == sorted(lv.label for lv in SATURATING)
    assert_apart_and_inside(ax)
    assert savefig.get("bbox_inches") == "tight"  # the outside legend is kept in the picture


def test_the_written_png_is_an_image(tmp_path: Path) -> None:
    from matplotlib.image import imread

    report = LoadTestReport("127.0.0.1:8001", "m", "2024-01-01T00:00:00+00:00", 1.0, {},
                            SATURATING)
    image = imread(report.write_plot(tmp_path / "r.png"))
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_a_report_without_levels_still_writes_its_picture(tmp_path: Path) -> None:
    report = LoadTestReport("127.0.0.1:8001", "m", "2024-01-01T00:00:00+00:00", 1.0, {}, [])
    assert report.write_plot(tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def axes_with_points(points: list[tuple[float, float]]) -> Any:
    figure = Figure(figsize=(5, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 1, 1)
    ax.plot([x for x, _ in points], [y for _, y in points], "o")
    return ax


def test_labels_of_a_tight_cluster_are_spread_around_it() -> None:
    points = [(100.0 + 3 * i, 50.0 + 0.5 * (i % 3)) for i in range(8)] + [(0.0, 0.0), (200, 90)]
    ax = axes_with_points(points)
    place_point_labels(ax, [(x, y, f"label {i}") for i, (x, y) in enumerate(points)])
    ax.figure.canvas.draw()
    assert len(ax.texts) == len(points)
    assert_apart_and_inside(ax)


def test_points_at_the_corners_are_labelled_inwards() -> None:
    corners = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
    ax = axes_with_points(corners)
    ax.margins(0)
    place_point_labels(ax, [(x, y, "a rather long label") for x, y in corners])
    ax.figure.canvas.draw()
    assert_apart_and_inside(ax)


def test_equal_labels_of_nearby_points_merge_and_distant_ones_do_not() -> None:
    points = [(10.0, 10.0), (10.2, 10.1), (10.4, 10.0), (90.0, 90.0)]
    ax = axes_with_points(points)
    annotations = place_point_labels(ax, [(x, y, "c=1") for x, y in points])
    assert [a.get_text() for a in annotations] == ["c=1", "c=1"]
    assert len(ax.texts) == 2


def test_labels_keep_clear_of_the_markers_to_avoid() -> None:
    def label_over(avoid: list[tuple[float, float]]) -> Any:
        ax = axes_with_points([(50.0, 50.0), blocker])
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        (annotation,) = place_point_labels(ax, [(50.0, 50.0, "here")], avoid=avoid)
        box = annotation.get_window_extent(ax.figure.canvas.get_renderer())
        return box.contains(*ax.transData.transform(blocker))

    blocker = (53.0, 54.0)  # a marker where the first spot's text (up and right) would be
    assert label_over([])
    assert not label_over([blocker])
