"""A Hugging Face LLaMA-family decoder -> attndeploy (`attndeploy.integrations.hf_decoder`): a
tiny random `LlamaForCausalLM` (grouped-query, rotary, RMSNorm, SwiGLU) saved as a
`save_pretrained` folder with a byte-level BPE tokenizer, converted to every variant at its warm
start, which must compute what transformers computes; then exported and generated from without
torch, greedy tokens identical to transformers' `generate`. Bad sources get one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attndeploy.errors import ConfigError, DataError

transformers = pytest.importorskip("transformers")  # the [hf] extra; the test extra installs it

VARIANTS = ("standard", "qvi", "ganet", "evolving")
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "über naïve café déjà vu",
         "the bird sang a song", "my friend reads books"]


def _tokenizer(folder: Path):
    """A byte-level BPE trained on TEXTS, as a transformers fast tokenizer saved in `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>",
                                                eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return fast


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = _tokenizer(folder)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rope_theta=500.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights of a trained model's scale, so greedy choices are clear
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def loaded(llama_folder: Path):
    from attndeploy.integrations.hf_decoder import load_hf_causal_lm

    return load_hf_causal_lm(llama_folder)


def _hf_greedy(loaded, ids: list[int], new: int) -> list[int]:
    x = torch.tensor([ids])
    with torch.no_grad():
        out = loaded.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                                    min_new_tokens=new, do_sample=False,
                                    pad_token_id=loaded.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_starts_as_the_pretrained_model(loaded, variant):
    from attndeploy.integrations.hf_decoder import convert_causal_lm

    model = convert_causal_lm(loaded.model, variant)
    ids = torch.tensor([loaded.tokenizer("the cat sat on the mat")["input_ids"]])  # [1, T]
    with torch.no_grad():
        expected = loaded.model(ids).logits  # [1, T, V]
        logits, _ = model(ids)
        head, past = model(ids[:, :3])  # the prefix, then the rest through the cache
        mask = torch.ones_like(ids)
        tail, _ = model(ids[:, 3:], mask, past=past)
    assert model.config.kv_heads == 2 and model.config.positions == "rope"
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat([head, tail], dim=1), expected, atol=1e-4, rtol=1e-4)


def test_the_cache_holds_the_key_value_heads_not_the_query_heads(loaded):
    from attndeploy.integrations.hf_decoder import convert_causal_lm

    model = convert_causal_lm(loaded.model, "standard")
    _, present = model(torch.tensor([[5, 6, 7]]))
    assert present["past_key_values.0.key"].shape == (1, 2, 3, 8)  # 2 kv heads of 4


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_an_export_generates_transformers_greedy_tokens(loaded, variant, tmp_path):
    from attndeploy.export.decoder import export_decoder
    from attndeploy.generation.loop import DecoderModel
    from attndeploy.integrations.hf_decoder import convert_causal_lm, tokenizer_of

    tokenizer = tokenizer_of(loaded)
    export_decoder(convert_causal_lm(loaded.model, variant), tokenizer, tmp_path / "m.onnx")
    decoder = DecoderModel(tmp_path / "m.onnx", threads=1)
    prompts = ["the cat", "a dog ran in"]
    ids = [tokenizer.encode(p) for p in prompts]
    got = decoder.generate_ids(ids, 12)  # one left-padded batch of two
    for prompt_ids, row in zip(ids, got, strict=True):
        expected = _hf_greedy(loaded, prompt_ids, 12)
        assert row == expected[:len(row)] and row  # it may stop early at </s>


def test_the_tokenizer_encodes_and_decodes_as_transformers_does(loaded):
    from attndeploy.generation.tokenizer import tokenizer_from_record
    from attndeploy.integrations.hf_decoder import tokenizer_of

    ours = tokenizer_from_record(json.loads(json.dumps(tokenizer_of(loaded).to_dict())))
    for text in TEXTS:
        ids = loaded.tokenizer(text)["input_ids"]
        assert ours.encode(text) == ids
        assert ours.decode(ids) == loaded.tokenizer.decode(ids, skip_special_tokens=True)
        stream = ours.stream()
        assert "".join(stream.push(i) for i in ids) == text  # é spans two byte tokens
    assert ours.EOS_ID == loaded.tokenizer.eos_token_id


def test_convert_writes_a_checkpoint_that_exports_and_generates(llama_folder, loaded, tmp_path):
    from attndeploy.cli.app import run

    ckpt, onnx_file = tmp_path / "ckpt", tmp_path / "m.onnx"
    assert run(["convert", "--hf-model", str(llama_folder), "--variant", "qvi",
                "--out", str(ckpt), "--json"]) == 0
    assert run(["export", str(ckpt), "--out", str(onnx_file), "--json"]) == 0
    from attndeploy.generation.loop import DecoderModel

    result = DecoderModel(onnx_file).generate("the cat", 6)[0]
    assert result.token_ids == _hf_greedy(loaded, loaded.tokenizer("the cat")["input_ids"],
                                          6)[:len(result.token_ids)]


def test_export_hf_model_writes_the_graph_without_a_checkpoint(llama_folder, tmp_path):
    from attndeploy.cli.app import run

    out = tmp_path / "m.onnx"
    assert run(["export", "--hf-model", str(llama_folder), "--variant", "evolving",
                "--out", str(out), "--json"]) == 0
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    assert meta["attndeploy.variant"] == "evolving"
    assert json.loads(meta["attndeploy.tokenizer"])["type"] == "hf-tokenizer"
    assert not (tmp_path / "ckpt").exists()


def test_an_encoder_folder_is_refused_with_what_is_converted(tmp_path):
    from attndeploy.integrations.hf_decoder import load_hf_causal_lm

    transformers.BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=8, architectures=["BertModel"]).save_pretrained(
        tmp_path)
    with pytest.raises(ConfigError, match="BertModel model; attndeploy converts LlamaForCausalLM"):
        load_hf_causal_lm(tmp_path)


def test_a_gguf_of_another_architecture_is_refused(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from attndeploy.integrations.hf_decoder import load_hf_causal_lm

    with pytest.raises(ConfigError, match="a GGUF of architecture 'gpt2'"):
        load_hf_causal_lm(path)


def test_a_path_that_is_neither_folder_nor_gguf_is_refused(tmp_path):
    from attndeploy.integrations.hf_decoder import load_hf_causal_lm

    (tmp_path / "x.bin").write_bytes(b"\0")
    with pytest.raises(DataError, match="save_pretrained folder"):
        load_hf_causal_lm(tmp_path / "x.bin")


def test_rotary_scaling_is_refused(loaded):
    from attndeploy.integrations.hf_decoder import decoder_config

    config = transformers.LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                       "rope_theta": 1e4})
    with pytest.raises(ConfigError, match="rotary scaling 'linear'"):
        decoder_config(config, "standard")


@pytest.mark.parametrize("variant", ["evolving", "ganet"])  # the two with a warm start to leave
def test_train_hf_model_fine_tunes_the_pretrained_decoder(llama_folder, variant, tmp_path):
    from attndeploy.cli.app import run
    from attndeploy.models.decoder.checkpoint import load_decoder

    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS * 4))
    ckpt = tmp_path / "tuned"
    assert run(["train", "--data", str(data), "--hf-model", str(llama_folder), "--variant",
                variant, "--steps", "12", "--out", str(ckpt), "--json"]) == 0
    raw = json.loads((ckpt / "config.json").read_text())
    assert {"perplexity", "perplexity_before", "baseline_perplexity"} <= set(raw["metrics"])
    assert raw["training"]["fine_tuned_from"] == str(llama_folder)
    assert raw["tokenizer"]["type"] == "hf-tokenizer"
    loaded = load_decoder(ckpt)
    assert loaded.model.config.positions == "rope" and loaded.model.config.kv_heads == 2
    if variant == "evolving":  # α and β brought in over the 10 warm-up steps, to the cap
        assert loaded.model.config.evolving_mix == pytest.approx(0.1)
        assert loaded.model.blocks[1].attention.alpha_in_use == pytest.approx(0.05)


def test_train_hf_model_obeys_a_max_seq_given_even_when_it_is_the_default(llama_folder, tmp_path,
                                                                       capsys):
    """--max-seq 128 is the option's default value, but given it is asked for: on a model whose
    context is 64 it is refused, where leaving it out keeps the model's own 64."""
    from attndeploy.cli.app import run
    from attndeploy.config import ModelConfig

    assert ModelConfig.max_seq == 128
    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS * 4))
    assert run(["train", "--data", str(data), "--hf-model", str(llama_folder), "--max-seq",
                "128", "--steps", "2", "--out", str(tmp_path / "asked")]) != 0
    assert "context 64" in capsys.readouterr().err
    assert not (tmp_path / "asked").exists()
    assert run(["train", "--data", str(data), "--hf-model", str(llama_folder), "--steps", "2",
                "--out", str(tmp_path / "own"), "--json"]) == 0
    assert json.loads((tmp_path / "own" / "config.json").read_text())["model"]["max_seq"] == 64


def test_fine_tuning_trains_the_added_parameters_at_their_own_rate(loaded):
    from attndeploy.integrations.hf_decoder import convert_causal_lm
    from attndeploy.models.decoder.fit import FitOptions, Start, _optimizer, added_parameters

    model = convert_causal_lm(loaded.model, "qvi")
    added = added_parameters(model)
    assert added and all(".attention." in n and "qkv" not in n for n in added)
    optimizer = _optimizer(model, FitOptions(learning_rate=5e-5, new_learning_rate=5e-3),
                           Start(model, None, "x"))
    assert [g["scale"] for g in optimizer.param_groups] == [1.0, 100.0]
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_the_gguf_reader_bar_is_off_during_a_load_and_restored_after():
    """transformers' GGUF reader draws a bare tqdm bar its disable_progress_bar does not reach."""
    import transformers.modeling_gguf_pytorch_utils as gguf_reader

    from attndeploy.integrations.hf_decoder import _quiet_gguf_reader

    original = gguf_reader.tqdm
    with _quiet_gguf_reader():
        assert gguf_reader.tqdm(range(3)).disable
    assert gguf_reader.tqdm is original
