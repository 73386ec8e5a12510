"""Pictures for the quickstart report (matplotlib, Agg backend, written atomically as PNG).

- GA-Net: the tokens of a few examples, open gates highlighted.
- Evolving attention: attention maps of one example, layer by layer and head by head.
- Serving: latency-throughput curves per model from load-test reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402

from attndeploy.fsutil import atomic_write_png  # noqa: E402
from attndeploy.serving.loadtest.report import place_point_labels  # noqa: E402
from attndeploy.variants.functional import masked_softmax  # noqa: E402


def save_figure(fig: Any, path: Path) -> Path:
    written = atomic_write_png(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return written


def plot_gates(
    examples: Sequence[tuple[Sequence[str], Sequence[bool], str]], path: Path, *, title: str
) -> Path:
    """One row per example: its words, open gates on a coloured background, then the label."""
    per_line = 16
    lines: list[tuple[list[tuple[str, bool]], str]] = []
    for words, gates, label in examples:
        pairs = list(zip(words, gates, strict=True))
        for start in range(0, len(pairs), per_line):
            lines.append((pairs[start:start + per_line], label if start == 0 else ""))
    fig, ax = plt.subplots(figsize=(13, 0.42 * len(lines) + 0.8))
    ax.set_axis_off()
    ax.set_xlim(0, per_line + 3)
    ax.set_ylim(len(lines), -0.5)
    for row, (pairs, label) in enumerate(lines):
        for col, (word, is_open) in enumerate(pairs):
            style = {"facecolor": "#f4a261", "edgecolor": "#e76f51", "boxstyle": "round,pad=0.2"}
            ax.text(col + 0.5, row, word, ha="center", va="center", fontsize=8,
                    bbox=style if is_open else None, color="black" if is_open else "#888888")
        if label:
            ax.text(per_line + 0.6, row, f"→ {label}", va="center", fontsize=9, weight="bold")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


@torch.no_grad()
def evolving_attention_maps(model: Any, input_ids: torch.Tensor, mask: torch.Tensor) -> list:
    """Attention probabilities [H, T, T] of example 0, for every layer of an evolving model."""
    captured: list[torch.Tensor] = []
    hooks = [
        block.attention.register_forward_hook(
            lambda _m, _i, result: captured.append(result[1])  # (y, logits [B, H, T, T])
        )
        for block in model.blocks
    ]
    try:
        model(input_ids, mask)
    finally:
        for hook in hooks:
            hook.remove()
    valid = mask != 0
    maps = []
    for logits in captured:  # [B, H, T, T]
        probs = masked_softmax(logits, valid[:, None, None, :])  # [B, H, T, T]
        length = int(valid[0].sum())
        maps.append(probs[0, :, :length, :length])  # [H, t, t]
    return maps


MAX_TOKEN_TICKS = 20  # per axis of an attention map; more tokens are labelled every k-th


def token_ticks(tokens: Sequence[str], length: int) -> tuple[list[int], list[str]]:
    """Tick positions and labels along an axis of `length` tokens: the tokens when `tokens` has
    that many, their positions otherwise; every k-th one, so that at most MAX_TOKEN_TICKS."""
    names = list(tokens) if len(tokens) == length else [str(i) for i in range(length)]
    step = max(1, math.ceil(length / MAX_TOKEN_TICKS))
    positions = list(range(0, length, step))
    return positions, [names[i] for i in positions]


def plot_evolving_maps(
    maps: Sequence[torch.Tensor], words: Sequence[str], path: Path, *, title: str
) -> Path:
    """A grid of attention maps (rows: layers, columns: heads) on one colour scale, with its
    colour bar; keys labelled under the bottom row, queries left of the first column."""
    layers, heads = len(maps), maps[0].shape[0]
    length = maps[0].shape[-1]
    positions, names = token_ticks(words, length)
    scale = Normalize(0.0, max(float(probs.max()) for probs in maps) or 1.0)  # one for all
    fig, axes = plt.subplots(layers, heads, figsize=(2.6 * heads + 0.9, 2.6 * layers + 1.0),
                             squeeze=False, layout="constrained")
    for layer, probs in enumerate(maps):
        for head in range(heads):
            ax = axes[layer][head]
            image = ax.imshow(probs[head].numpy(), cmap="viridis", norm=scale)
            ax.set_xticks(positions, names, rotation=90, fontsize=6)
            ax.set_yticks(positions, names, fontsize=6)
            ax.tick_params(length=2, labelbottom=layer == layers - 1, labelleft=head == 0)
            if head == 0:
                ax.set_ylabel(f"layer {layer}")
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention probability")
    known = "tokens" if len(words) == length else "token positions"
    fig.suptitle(f"{title}\n({length} {known}: rows = queries, columns = keys)", fontsize=10)
    return save_figure(fig, path)


def plot_latency_throughput(curves: dict[str, list[dict[str, float]]], path: Path) -> Path:
    """curves: model -> [{throughput, p50_ms, p95_ms, concurrency}, ...] in load order.

    Each p50 point is labelled with its concurrency, beside it and inside the axes; points of
    the same concurrency that lie together share one label, and no label covers another or a
    marker. The legend sits outside the axes, clear of the points."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels, p95s = [], []
    for name, points in curves.items():
        xs = [p["throughput"] for p in points]
        (line,) = ax.plot(xs, [p["p50_ms"] for p in points], marker="o", label=f"{name} p50")
        ax.plot(xs, [p["p95_ms"] for p in points], marker="x", linestyle="--", alpha=0.6,
                color=line.get_color(), label=f"{name} p95")
        labels += [(p["throughput"], p["p50_ms"], f"c={p['concurrency']}") for p in points]
        p95s += [(p["throughput"], p["p95_ms"]) for p in points]
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Triton python flavour, gRPC: latency vs throughput per model")
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    place_point_labels(ax, labels, avoid=p95s, fontsize=7)
    return save_figure(fig, path)
