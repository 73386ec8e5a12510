"""`standard`: vanilla scaled dot-product attention, the baseline (exports as standard ONNX)."""

from attndeploy.variants.registry import VariantSpec, register_variant

SPEC = register_variant(VariantSpec(
    name="standard",
    order=0,
    summary="vanilla scaled dot-product attention (the baseline)",
    layer="attndeploy.variants.standard.layer:StandardAttention",
    families=("transformer", "bilstm"),
))
