"""The quickstart report's pictures (attndeploy/quickstart/figures.py), checked on the matplotlib
objects before they are written: concurrency labels that neither pile up nor leave the axes, and
attention maps with a colour bar and token ticks."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
import torch

from attndeploy.quickstart import figures


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures the plotting functions would save, drawn (so that text has its extent)."""
    captured: list[Any] = []

    def keep(fig: Any, path: Path) -> Path:
        fig.canvas.draw()
        captured.append(fig)
        return path

    monkeypatch.setattr(figures, "save_figure", keep)
    yield captured
    for fig in captured:
        plt.close(fig)


def crowded_curves(models: int = 4) -> dict[str, list[dict[str, float]]]:
    """Models whose points at each concurrency lie a few pixels apart, as on a real run."""
    levels = ((1, 410.0, 2.4), (4, 980.0, 4.0), (16, 1050.0, 15.0))
    return {
        f"model{m}": [{"throughput": thr + 12 * m, "p50_ms": p50 + 0.1 * m,
                       "p95_ms": 1.4 * p50 + 0.2 * m, "concurrency": c} for c, thr, p50 in levels]
        for m in range(models)
    }


def label_boxes(ax: Any) -> list[tuple[str, Any]]:
    renderer = ax.figure.canvas.get_renderer()
    return [(a.get_text(), a.get_window_extent(renderer)) for a in ax.texts]


def test_concurrency_labels_do_not_overlap_and_stay_inside_the_axes(drawn: list[Any]) -> None:
    figures.plot_latency_throughput(crowded_curves(), Path("unused.png"))
    (fig,) = drawn
    ax = fig.axes[0]
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    boxes = label_boxes(ax)
    assert {text for text, _ in boxes} == {"c=1", "c=4", "c=16"}
    for _, box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1
    for (one, a), (other, b) in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), f"{one} overlaps {other}"


def test_points_of_one_concurrency_lying_together_share_one_label(drawn: list[Any]) -> None:
    figures.plot_latency_throughput(crowded_curves(), Path("unused.png"))
    texts = sorted(text for text, _ in label_boxes(drawn[0].axes[0]))
    assert texts == ["c=1", "c=16", "c=4"]


def test_points_far_apart_keep_a_label_each(drawn: list[Any]) -> None:
    curves = {"fast": [{"throughput": 2000.0, "p50_ms": 1.0, "p95_ms": 1.5, "concurrency": 1}],
              "slow": [{"throughput": 100.0, "p50_ms": 20.0, "p95_ms": 30.0, "concurrency": 1}]}
    figures.plot_latency_throughput(curves, Path("unused.png"))
    assert [text for text, _ in label_boxes(drawn[0].axes[0])] == ["c=1", "c=1"]


def test_the_legend_is_outside_the_axes(drawn: list[Any]) -> None:
    figures.plot_latency_throughput(crowded_curves(), Path("unused.png"))
    ax = drawn[0].axes[0]
    renderer = drawn[0].canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 > ax.get_window_extent(renderer).x1


def attention(layers: int, heads: int, tokens: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.softmax(torch.randn(heads, tokens, tokens, generator=generator), -1)
            for _ in range(layers)]


def tick_texts(labels: list[Any]) -> list[str]:
    return [label.get_text() for label in labels]


def test_attention_maps_have_a_colour_bar_and_the_tokens_as_ticks(drawn: list[Any]) -> None:
    words = ["the", "cat", "sat", "on", "bronze", "mat"]
    figures.plot_evolving_maps(attention(2, 3, 6), words, Path("unused.png"), title="t")
    (fig,) = drawn
    maps = [ax for ax in fig.axes if ax.images]
    assert len(maps) == 6
    bar = maps[-1].images[0].colorbar
    assert bar is not None and bar.ax.get_ylabel() == "attention probability"
    for ax in maps:
        assert ax.images[0].norm is bar.norm  # one colour scale, the bar's, for every map
    grid = [maps[:3], maps[3:]]  # layers x heads
    for layer, row in enumerate(grid):
        for head, ax in enumerate(row):
            bottom, left = layer == 1, head == 0
            assert tick_texts(ax.get_xticklabels()) == (words if bottom else [])  # keys
            assert tick_texts(ax.get_yticklabels()) == (words if left else [])  # queries
            assert list(ax.get_xticks()) == list(ax.get_yticks()) == list(range(6))


def test_many_tokens_are_labelled_every_k_th(drawn: list[Any]) -> None:
    words = [f"w{i}" for i in range(60)]
    figures.plot_evolving_maps(attention(1, 1, 60), words, Path("unused.png"), title="t")
    ax = drawn[0].axes[0]
    assert list(ax.get_xticks()) == list(range(0, 60, 3))
    assert tick_texts(ax.get_xticklabels()) == words[::3]


def test_unknown_tokens_are_labelled_by_position() -> None:
    assert figures.token_ticks(["only", "two"], 5) == ([0, 1, 2, 3, 4], ["0", "1", "2", "3", "4"])
    positions, names = figures.token_ticks([], 41)
    assert len(positions) <= figures.MAX_TOKEN_TICKS
    assert positions == list(range(0, 41, 3)) and names == [str(p) for p in positions]
