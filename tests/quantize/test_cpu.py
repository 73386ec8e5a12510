"""`attndeploy.quantize.cpu`: the CPU's fields and whether it has VNNI, from /proc/cpuinfo."""

from __future__ import annotations

from pathlib import Path

import pytest

from attndeploy.quantize.cpu import cpu_fields, has_vnni

PROCESSOR = "processor\t: {index}\nmodel name\t: Some CPU {index}\nflags\t\t: {flags}\n"


def cpuinfo(tmp_path: Path, *flag_sets: str) -> Path:
    """A /proc/cpuinfo with one processor block per flag set, blank lines between them."""
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(PROCESSOR.format(index=i, flags=flags)
                              for i, flags in enumerate(flag_sets)))
    return path


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu sse2 avx avx2 fma", False),
    ("fpu avx2 avx512f avx512_vnni", True),
    ("fpu avx2 avx_vnni", True),
    ("fpu avx2 avx512f amx_int8", True),
    ("fpu avx2 avx512_vnnix", False),  # whole flags only
])
def test_vnni_is_read_from_the_flags(tmp_path: Path, flags: str, expected: bool):
    assert has_vnni(cpuinfo(tmp_path, flags)) is expected


def test_the_first_processor_s_block_is_read(tmp_path: Path):
    path = cpuinfo(tmp_path, "avx2", "avx2 avx512_vnni")
    assert cpu_fields(path)["model name"] == "Some CPU 0"
    assert has_vnni(path) is False


def test_no_cpuinfo_is_unknown_not_an_error(tmp_path: Path):
    assert cpu_fields(tmp_path / "missing") == {}
    assert has_vnni(tmp_path / "missing") is None
