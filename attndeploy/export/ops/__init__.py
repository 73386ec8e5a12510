"""The `attndeploy` ONNX ops (docs/ops.md), one module per op.

Each module holds the torch custom op (`torch.ops.attndeploy.<name>`), its fake, and the
onnxscript function body of the ONNX op; `_common` holds the helpers the bodies share.
`attndeploy.export._registry` collects them.
"""
