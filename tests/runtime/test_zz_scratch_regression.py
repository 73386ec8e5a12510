import importlib.util
import json
import sys

import numpy as np

from attndeploy.runtime.contract import decode_wire, encode_wire, wire_fields, wire_outputs
from attndeploy.runtime.shipping import family_runtime_shipment
from attndeploy.runtime.text import decode_batch


def _load():
    spec = importlib.util.spec_from_file_location("scratch_regression_runtime",
                                                  "/tmp/regr/runtime.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_regression_runtime(capsys):
    fam = _load()
    logits = np.array([[0.3], [-1.5], [2.25]], np.float32)  # [B, 1]
    gates = np.array([[1, 0, 1], [1, 0, 0], [0, 1, 0]], bool)
    tokens = [["a", "b", "c"], ["d"], ["e", "f"]]
    preds = decode_batch(logits, gates, tokens, ("value",), family=fam)
    records = [p.to_dict() for p in preds]
    print(records)
    assert list(records[0]) == ["tokens", "value", "attended"]
    assert records[1]["value"] == -1.5 and records[2]["attended"] == ["f"]
    json.dumps(records)
    wire = encode_wire(preds, gated=True)
    assert tuple(wire) == wire_outputs(gated=True, family=fam) == ("tokens", "value", "attended")
    assert wire["value"].shape == (3, 1) and wire["value"].dtype == np.float32
    for row, p in enumerate(preds):
        assert decode_wire(wire, ("value",), row=row, family=fam) == p.to_dict()
    assert [(f.name, f.datatype, f.dims) for f in wire_fields(fam, num_labels=1, gated=True)] == [
        ("tokens", "BYTES", (-1,)), ("value", "FP32", (1,)), ("attended", "BYTES", (1,))]
    from attndeploy.cli.predict import TablePrinter
    printer = TablePrinter(gated=True, family=fam)
    assert printer.headers() == ["#", "value", "attended", "text"]
    assert printer.rows(0, ["a b c", "d", "e f"], preds)[1] == ["1", "-1.5000", "d", "d"]
    printer(0, ["a b c", "d", "e f"], preds)
    shipped = family_runtime_shipment(fam)
    assert shipped.relative == "runtime.py"
    # the loadtest oracle's path
    from attndeploy.serving.loadtest.inputs import TextSource
    source = TextSource(None, 8, ("value",), fam, True)
    assert not source.tagging
