"""Export to ONNX: the `attndeploy` custom-domain ops, their function bodies, and the exporter."""
