"""The tests' one comparison of prediction-contract records (`attndeploy.runtime.contract`)."""

from __future__ import annotations

from typing import Any

import pytest

from attndeploy.runtime.contract import CONTRACT_VERSION, FIELDS

# what a command adds around the record (`contract_version`: the contract it follows)
ENVELOPE = ("model", "text", "index", "contract_version")


def contract_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the command's envelope; fails on a field the contract lacks, and on
    a record that says it follows another contract version."""
    assert record.get("contract_version", CONTRACT_VERSION) == CONTRACT_VERSION, record
    fields = {key: value for key, value in record.items() if key not in ENVELOPE}
    assert set(fields) <= set(FIELDS), sorted(set(fields) - set(FIELDS))
    return fields


def assert_same_record(got: dict[str, Any], want: dict[str, Any], *, atol: float) -> None:
    """The same contract fields; strings equal, logits and probabilities within `atol`."""
    got, want = contract_fields(got), contract_fields(want)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for key in ("logits", "probabilities"):  # {label: value}, or one such mapping per token
        rows_got, rows_want = (got[key], want[key]) if isinstance(want[key], list) else (
            [got[key]], [want[key]])
        assert len(rows_got) == len(rows_want), key
        for row_got, row_want in zip(rows_got, rows_want, strict=True):
            assert row_got == pytest.approx(row_want, abs=atol), key
    for key in set(got) - {"logits", "probabilities"}:
        assert got[key] == want[key], key
