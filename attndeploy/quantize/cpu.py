"""What this machine's CPU offers int8 kernels: its /proc/cpuinfo fields and VNNI.

onnxruntime's 8-bit kernels on a CPU without VNNI (AVX2, or AVX-512 without VNNI) multiply
u8 x s8 pairs into 16 bits, which can saturate; onnxruntime advises 7-bit weights
(`reduce_range`) there. On such a CPU the variants' MiniLMs kept 99 % of their labels only with
it (benchmarks/README.md, `real_speed.py`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's `key: value` fields of /proc/cpuinfo; {} where there is none."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():  # the first processor's block ends at its blank line
                break
            fields.setdefault(key.strip(), value.strip())
    return fields


def has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """True or False from the CPU's flags; None where they cannot be read (not Linux)."""
    flags = cpu_fields(cpuinfo).get("flags")
    if flags is None:
        return None
    return any(name in flags.split() for name in VNNI_FLAGS)
