"""Pictures for the quickstart report (matplotlib, Agg backend, written atomically as PNG).

- GA-Net: the tokens of a few examples, open gates highlighted.
- Evolving attention: attention maps of one example, layer by layer and head by head.
- Serving: latency-throughput curves per model from load-test reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attndeploy.fsutil import atomic_write_png  # noqa: E402
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


def plot_evolving_maps(
    maps: Sequence[torch.Tensor], words: Sequence[str], path: Path, *, title: str
) -> Path:
    layers, heads = len(maps), maps[0].shape[0]
    fig, axes = plt.subplots(layers, heads, figsize=(2.6 * heads, 2.6 * layers), squeeze=False)
    for layer, probs in enumerate(maps):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(probs[head].numpy(), cmap="viridis", vmin=0.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0:
                ax.set_ylabel(f"layer {layer}")
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
    fig.suptitle(f"{title}\n({len(words)} tokens: rows = queries, columns = keys)", fontsize=10)
    return save_figure(fig, path)


def plot_latency_throughput(curves: dict[str, list[dict[str, float]]], path: Path) -> Path:
    """curves: model -> [{throughput, p50_ms, p95_ms, concurrency}, ...] in load order."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in curves.items():
        xs = [p["throughput"] for p in points]
        (line,) = ax.plot(xs, [p["p50_ms"] for p in points], marker="o", label=f"{name} p50")
        ax.plot(xs, [p["p95_ms"] for p in points], marker="x", linestyle="--", alpha=0.6,
                color=line.get_color(), label=f"{name} p95")
        for p in points:
            ax.annotate(f"c={p['concurrency']}", (p["throughput"], p["p50_ms"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Triton python flavour, gRPC: latency vs throughput per model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)
