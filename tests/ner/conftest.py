"""A tiny character-level BMES set (MSRA's shape): names before places, seconds to learn."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

NAMES = ("张三", "李四", "王五", "赵六", "钱七", "孙八", "周九", "吴十")
PLACES = ("北京", "上海", "广州", "深圳", "南京", "天津")


def toy_bmes(count: int = 240, seed: int = 0) -> str:
    """`count` sentences "<name>在<place>工作" or "我去<place>", one char and tag a line."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        name, place = rng.choice(NAMES), rng.choice(PLACES)
        rows = [(place[0], "B-LOC"), (place[1], "E-LOC")]
        if rng.random() < 0.5:
            rows = [(name[0], "B-PER"), (name[1], "E-PER"), ("在", "O"), *rows,
                    ("工", "O"), ("作", "O")]
        else:
            rows = [("我", "O"), ("去", "O"), *rows]
        sentences.append("\n".join(f"{char} {tag}" for char, tag in rows))
    return "\n\n".join(sentences) + "\n"


@pytest.fixture
def bmes_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy.txt"
    path.write_text(toy_bmes(), encoding="utf-8")
    return path
