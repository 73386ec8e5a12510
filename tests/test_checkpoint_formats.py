"""The registry of checkpoint formats: core reads and exports a tagged checkpoint through the
plug-in registered for its tag (the installed entry points, or `register`), never by name."""

from __future__ import annotations

import pytest

from attndeploy import checkpoint_formats
from attndeploy.checkpoint_formats import EXPORTERS, READERS, plugin, register, tag_of


def test_the_installed_hugging_face_plug_ins_are_found_by_their_tag() -> None:
    from attndeploy.integrations.hf_checkpoint import read_hf_checkpoint
    from attndeploy.integrations.hf_export import export_hf_checkpoint

    assert plugin(READERS, "hf") is read_hf_checkpoint
    assert plugin(EXPORTERS, "hf") is export_hf_checkpoint
    assert tag_of({"format": "attndeploy-checkpoint", "hf": {}}) == "hf"
    assert tag_of({"format": "attndeploy-checkpoint", "model": {}}) is None


def test_a_registered_format_is_read_through_its_plug_in(monkeypatch, tmp_path) -> None:
    """A checkpoint tagged with a registered format reaches that format's reader from
    `read_checkpoint` (after the weights' digest is verified)."""
    import json

    from attndeploy.checkpoint import (
        CONFIG_FILE,
        FORMAT,
        FORMAT_VERSION,
        WEIGHTS_FILE,
        read_checkpoint,
    )
    from attndeploy.fsutil import file_sha256

    monkeypatch.setattr(checkpoint_formats, "_registered", {})
    calls = []

    def reader(path, raw, digest):
        calls.append((path, raw["toy"], digest))
        raise RuntimeError("read by the toy plug-in")

    register(READERS, "toy", reader)
    (tmp_path / WEIGHTS_FILE).write_bytes(b"weights")
    raw = {"format": FORMAT, "format_version": FORMAT_VERSION, "toy": {"v": 1},
           "weights_sha256": file_sha256(tmp_path / WEIGHTS_FILE)}
    (tmp_path / CONFIG_FILE).write_text(json.dumps(raw))
    with pytest.raises(RuntimeError, match="toy plug-in"):
        read_checkpoint(tmp_path)
    assert calls == [(tmp_path, {"v": 1}, raw["weights_sha256"])]


def test_a_tag_without_a_plug_in_is_a_lookup_error_naming_it() -> None:
    with pytest.raises(LookupError, match="no exporter is installed for checkpoints tagged 'x'"):
        plugin(EXPORTERS, "x")
    with pytest.raises(ValueError, match="unknown plug-in group"):
        register("attndeploy.nothing", "x", print)
