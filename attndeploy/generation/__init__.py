"""Generating text in process with an exported decoder, numpy + onnxruntime only (issue #49):

    from attndeploy.generation import DecoderModel
    model = DecoderModel("model.onnx")
    [result] = model.generate("the cat", max_new_tokens=20, temperature=0.8, seed=1)
    result.text, result.token_ids

`loop.py` the loop (`DecoderModel`), `sampling.py` the choice of each token, `metadata.py` what
the export records, `tokenizer.py` the language model's word tokenizer. The same loop is meant
to run inside a served model (issue #49, part 2), so it imports no torch.
"""

from attndeploy.generation.loop import DecoderModel, Generation
from attndeploy.generation.sampling import Sampling

__all__ = ["DecoderModel", "Generation", "Sampling"]
