"""The building blocks of the `attndeploy` ONNX op set (docs/ops.md), below the variants.

    spec.py     `OpSpec`: one op (its PyTorch reference, torch custom op and onnxscript body) and
                what export derives from it (the opaque node, the FunctionProto, the traced call);
                the supported opsets
    bodies.py   the domain and version of the set, and the onnxscript helpers the op bodies share

Each variant declares its ops with these beside its layer (`attndeploy/variants/<name>/op_*.py`,
listed in its `ops.py`); `attndeploy.variants.op_registry` collects them, and the exporter
reads them there. Importing this package is light; its modules import torch and onnxscript.
"""
