"""The encoder-decoder: incremental decoding equals full recomputation for every variant, the
decoder is causal, the cross state is what the docstring names, beams reorder the cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.generation.seq2seq import beam_search, greedy
from attndeploy.models.seq2seq.backend import TorchSeq2Seq
from attndeploy.models.seq2seq.config import Seq2SeqConfig
from tests.models.seq2seq.cases import PARAMS, tiny_model

SOURCE = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 12, 2, 0, 0]])
SOURCE_MASK = (SOURCE != 0).long()
TARGET = torch.tensor([[1, 13, 14, 15, 16], [1, 17, 18, 19, 20]])


def _incremental(model, target):
    with torch.no_grad():
        memory = model.encode(SOURCE, SOURCE_MASK)
        state = model.cross_state(memory)
        steps = []
        for t in range(target.shape[1]):
            logits, present = model.decode(target[:, t:t + 1], memory, state,
                                           torch.full((target.shape[0], 1), t))
            state.update(present)
            steps.append(logits)
    return torch.cat(steps, dim=1), state


@pytest.mark.parametrize("name", PARAMS)
def test_incremental_decoding_equals_full_recomputation(name):
    model = tiny_model(name)
    with torch.no_grad():
        memory = model.encode(SOURCE, SOURCE_MASK)
        full, _ = model.decode(TARGET, memory, model.cross_state(memory))
    incremental, state = _incremental(model, TARGET)
    torch.testing.assert_close(incremental, full, atol=1e-5, rtol=1e-4)
    assert state["past_key_values.0.encoder.key"].shape == (2, 2, 6, 8)  # [B, H, S, d]
    if model.config.variant == "evolving":  # cross rows from layer 1 on: [B, H, 2, S]
        assert state["past_key_values.1.encoder.evolving_rows"].shape == (2, 2, 2, 6)
        assert "past_key_values.0.encoder.evolving_rows" not in state


@pytest.mark.parametrize("name", PARAMS)
def test_a_later_target_token_changes_no_earlier_output(name):
    model = tiny_model(name)
    changed = TARGET.clone()
    changed[:, 3] = 25
    with torch.no_grad():
        memory = model.encode(SOURCE, SOURCE_MASK)
        before, _ = model.decode(TARGET, memory, model.cross_state(memory))
        after, _ = model.decode(changed, memory, model.cross_state(memory))
    torch.testing.assert_close(before[:, :3], after[:, :3])
    assert not torch.allclose(before[:, 3:], after[:, 3:])


@pytest.mark.parametrize("name", PARAMS)
def test_source_padding_changes_nothing(name):
    model = tiny_model(name)
    with torch.no_grad():
        alone = model(SOURCE[1:, :4], SOURCE_MASK[1:, :4], TARGET[1:])
        padded = model(SOURCE, SOURCE_MASK, TARGET)[1:]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", PARAMS)
def test_training_pass_reaches_every_parameter(name):
    model = tiny_model(name).train()
    model(SOURCE, SOURCE_MASK, TARGET).sum().backward()
    silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not silent


@pytest.mark.parametrize("name", PARAMS)
def test_beam_reorder_gives_each_beam_its_own_cache(name):
    """Beam search with the cache equals scoring each final hypothesis from scratch."""
    model = tiny_model(name)
    backend = TorchSeq2Seq(model)
    source = SOURCE[0].tolist()
    result = beam_search(backend, source, num_beams=3, length_penalty=1.0, max_new_tokens=6)
    finished = len(result.ids) < 6  # else it ran out of length: no </s> scored
    follow = [*result.ids, 2] if finished else result.ids  # the tokens each step chose
    with torch.no_grad():
        logits = model(SOURCE[:1], SOURCE_MASK[:1], torch.tensor([[1, *follow[:-1]]]))
    logprobs = torch.log_softmax(logits[0].double(), dim=-1)
    total = float(sum(logprobs[i, t] for i, t in enumerate(follow)))
    assert result.score == pytest.approx(total / len(follow), abs=1e-4)


def test_beam_one_is_greedy():
    model = tiny_model("evolving")
    backend = TorchSeq2Seq(model)
    source = SOURCE[0].tolist()
    assert beam_search(backend, source, num_beams=1, max_new_tokens=8).ids == greedy(
        backend, [source], max_new_tokens=8)[0].ids


def test_greedy_batches_like_one_at_a_time():
    backend = TorchSeq2Seq(tiny_model("ganet"))
    sources = [SOURCE[0].tolist(), SOURCE[1, :4].tolist()]
    together = greedy(backend, sources, max_new_tokens=6)
    alone = [greedy(backend, [s], max_new_tokens=6)[0] for s in sources]
    assert [t.ids for t in together] == [t.ids for t in alone]
    assert np.allclose([t.score for t in together], [t.score for t in alone], atol=1e-4)


def test_bad_configs_and_inputs_say_what_is_wrong():
    with pytest.raises(ConfigError, match="unknown variant"):
        Seq2SeqConfig(vocab_size=10, variant="nope")
    with pytest.raises(ConfigError, match="divisible"):
        Seq2SeqConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ConfigError, match="longer than"):
        tiny_model("standard").encode(torch.ones(1, 17, dtype=torch.long))


def test_qvi_cross_attention_is_the_pairwise_reference_on_a_rectangle():
    from attndeploy.models.seq2seq.cross import QVICross
    from attndeploy.variants.qvi.reference import qvi_pairwise_attention

    torch.manual_seed(0)
    layer = QVICross(16, 2, form="pairwise")
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_()
    q, k, v = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    want = qvi_pairwise_attention(q, k, v, mask, layer.q_map_weight, layer.q_map_bias,
                                  layer.v_map_weight, layer.v_map_bias, layer.gate_v_weight,
                                  layer.gate_qv_weight, layer.gate_bias, scale=layer.scale)
    torch.testing.assert_close(layer.attend(q, k, v, mask), want)


def test_qvi_pooled_cross_attends_to_the_sources_own_query_aware_values():
    """`pooled`: the cached cross value is Ṽ of the source (its queries pooled, pads left out),
    and the decoder's queries attend to it with plain softmax attention."""
    from attndeploy.models.seq2seq import cross
    from attndeploy.variants.functional import masked_softmax
    from attndeploy.variants.qvi.reference import qvi_pooled_values

    torch.manual_seed(0)
    layer = cross.QVICross(16, 2, form="pooled")
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_()
    memory = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    k, v = cross.memory_kv(layer, memory, mask)  # [B, H, S, d] each
    q_source = cross.cross_query(layer, memory)
    want_v = qvi_pooled_values(q_source, _plain_values(layer, memory), mask,
                               layer.q_map_weight, layer.q_map_bias, layer.v_map_weight,
                               layer.v_map_bias, layer.gate_v_weight, layer.gate_qv_weight,
                               layer.gate_bias, layer.pool_weight, scale=layer.scale)
    torch.testing.assert_close(v, want_v)
    # a padded source token's memory changes no real token's value
    shifted = memory.clone()
    shifted[1, 3:] += 10.0
    torch.testing.assert_close(cross.memory_kv(layer, shifted, mask)[1][1, :, :3], v[1, :, :3])
    q = torch.randn(2, 2, 3, 8)
    probs = masked_softmax(layer.scale * (q @ k.transpose(-2, -1)), mask[:, None, None, :])
    torch.testing.assert_close(layer.attend(q, k, v, mask), probs @ v)


def _plain_values(layer, memory: torch.Tensor) -> torch.Tensor:
    """The layer's plain value projection of the memory [B, H, S, d]."""
    from attndeploy.variants.api import split_heads

    d = layer.embed_dim
    value = torch.nn.functional.linear(memory, layer.qkv.weight[2 * d:], layer.qkv.bias[2 * d:])
    return split_heads(value, layer.n_heads)


def test_a_stored_config_without_the_qvi_cross_form_reads_as_pairwise():
    """Models saved before `qvi_cross_form` existed had pairwise cross-attention; new ones
    default to pooled."""
    stored = {key: value for key, value in
              Seq2SeqConfig(vocab_size=10, variant="qvi").to_dict().items()
              if key != "qvi_cross_form"}
    assert Seq2SeqConfig.from_dict(stored).qvi_cross_form == "pairwise"
    assert Seq2SeqConfig(vocab_size=10, variant="qvi").qvi_cross_form == "pooled"
    with pytest.raises(ConfigError, match="qvi_cross_form"):
        Seq2SeqConfig(vocab_size=10, variant="qvi", qvi_cross_form="prefix")
