"""`quantize_model`: the exported model to int8 by its kind. A text-generation export (a decoder,
by its metadata) is quantized and judged by `quantize.decoder` (greedy tokens, perplexity); an
export whose family makes its own inputs (an image model: its checks part's `random_feeds` and
`example_feeds`) by `quantize.family_inputs` (logits on random images, labels on an image
folder); anything else by `quantize.quantizer` (logits on a shape grid, labels on texts). Each
refuses the options of the other kind in one line, before any work."""

from __future__ import annotations

from pathlib import Path

from attndeploy.errors import ModelError
from attndeploy.quantize.decoder import (
    DecoderQuantizeResult,
    is_decoder_file,
    quantize_decoder,
    refuse_options,
)
from attndeploy.quantize.family_inputs import family_hooks, quantize_with_family_inputs
from attndeploy.quantize.options import QuantizeOptions
from attndeploy.quantize.quantizer import QuantizeResult
from attndeploy.quantize.quantizer import quantize_model as quantize_encoder


def quantize_model(
    source: Path | str, out: Path | str, options: QuantizeOptions | None = None, *,
    data: Path | str | None = None,
) -> QuantizeResult | DecoderQuantizeResult:
    """Quantize `source` to int8 at `out`, written only within the tolerances of `options`
    (`quantizer.quantize_model`, or for a decoder `decoder.quantize_decoder`); returns the
    comparison either way (`raise_for_failure` turns a miss into a QuantizeError)."""
    options = options or QuantizeOptions()
    source = Path(source)
    data_path = Path(data) if data is not None else None
    if not source.is_file():  # before its kind is read: a missing file is neither kind
        raise ModelError(f"no ONNX model at {source}")
    if is_decoder_file(source):
        return quantize_decoder(source, Path(out), options, data_path)
    refuse_options(options, decoder=False, source=source)
    if family_hooks(source) is not None:  # its family makes its inputs: images
        return quantize_with_family_inputs(source, Path(out), options, data_path)
    return quantize_encoder(source, out, options, data=data_path)
