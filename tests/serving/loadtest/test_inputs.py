"""The load test's inputs: `--text-file <(...)` is a text file like any other (read once), and
the ONNX file's graph says whether its answers can be checked inside a batch."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from attndeploy.errors import LoadTestError
from attndeploy.serving.loadtest import LoadTestConfig
from attndeploy.serving.loadtest.inputs import read_text_file


def test_a_pipe_is_accepted_and_read_as_a_text_file(tmp_path: Path) -> None:
    fifo = tmp_path / "texts"
    os.mkfifo(fifo)
    LoadTestConfig(model="m", text_file=fifo)  # validation does not open it

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as out:
            out.write("w1 alpha\n\n  \nw2 bravo\n")

    writer = threading.Thread(target=write)
    writer.start()
    assert read_text_file(fifo) == ["w1 alpha", "w2 bravo"]
    writer.join(timeout=10)


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "missing.txt", "does not exist"),
    (lambda tmp: tmp, "is a folder"),
])
def test_a_missing_text_file_or_a_folder_is_refused(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(LoadTestError, match=f"text_file .* {message}"):
        LoadTestConfig(model="m", text_file=make(tmp_path))


def test_a_graph_that_quantizes_activations_per_batch_is_known_by_its_ops(tmp_path: Path
                                                                         ) -> None:
    """Whoever quantized it (no attndeploy record here): onnxruntime's dynamic int8 scales per
    batch; the same file rewritten per row, and fp32, do not."""
    import onnx

    from attndeploy.quantize.per_row import per_row_activations
    from attndeploy.serving.loadtest.inputs import scales_per_batch
    from tests.serving.loadtest_fixtures import build_tiny_onnx
    from tests.serving.tune.fixtures import int8_copy

    fp32 = build_tiny_onnx(tmp_path / "fp32.onnx")
    int8 = onnx.load(str(int8_copy(fp32, tmp_path / "int8.onnx", record=False)))
    assert not any(p.key == "attndeploy.quantization" for p in int8.metadata_props)
    assert scales_per_batch(int8)
    assert not scales_per_batch(onnx.load(str(fp32)))
    per_row_activations(int8)
    assert not scales_per_batch(int8)



def _wordpiece_source(max_seq: int = 16):
    """A TextSource over a small BERT-style WordPiece vocabulary (built with `tokenizers`)."""
    tokenizers = pytest.importorskip("tokenizers")
    from attndeploy.runtime.families import runtime_part
    from attndeploy.runtime.wordpiece import WordPieceTokenizer
    from attndeploy.serving.loadtest.inputs import TextSource

    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
             "quick", "fox", "##s", "##ed", "jump", ",", "!", "Café", "北京", "dog"]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(
        {piece: index for index, piece in enumerate(vocab)}, unk_token="[UNK]"))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return TextSource(WordPieceTokenizer(tokenizer), max_seq=max_seq, labels=("a", "b"),
                      family=runtime_part("classification"), gated=False)


def test_random_texts_of_a_wordpiece_model_are_its_whole_words_and_fill_each_length() -> None:
    """A converted Hugging Face model's texts: words of its vocabulary that encode as
    themselves (no `##` piece, special token, punctuation, or word the normalizer changes), as
    many as make each sequence length with [CLS] and [SEP]."""
    from attndeploy.runtime.text import encode_text
    from attndeploy.serving.loadtest.inputs import random_texts

    source = _wordpiece_source()
    config = LoadTestConfig(model="m", seq_lengths=(3, 16), pool_size=4, batch=2)
    groups = random_texts(config, source)
    assert [len(group) for group in groups] == [8, 8]
    for seq, group in zip(config.seq_lengths, groups, strict=True):
        for text in group:
            assert set(text.split()) <= {"the", "quick", "fox", "jump", "dog"}
            encoded = encode_text(source.tokenizer, text, max_seq=source.max_seq)
            assert len(encoded.ids) == seq
            assert source.tokenizer.unk_id not in encoded.ids


def test_an_over_long_line_of_the_text_file_is_refused_without_being_read(tmp_path: Path
                                                                          ) -> None:
    """`loadtest --text-file` and `tune --text-file` read through `runtime.lines`: a 20 MB line is
    one LoadTestError naming the file and line, having read a line limit of it."""
    import re

    from attndeploy.runtime.lines import MAX_TEXT_BYTES
    from tests.long_lines import long_line_file, refused_within_memory

    path = long_line_file(tmp_path / "texts.txt", before=b"w1 alpha\n\n")
    refused_within_memory(lambda: read_text_file(path), LoadTestError,
                          rf"^line 3 of {re.escape(str(path))} has more than {MAX_TEXT_BYTES} "
                          "bytes, the limit per text$")


def test_metadata_nested_deep_is_not_read_as_a_config(tmp_path: Path) -> None:
    """`vocab_from_onnx` skips a metadata value that nests too deep (as one that is not JSON) and
    finds the vocabulary in the graph."""
    import onnx

    from attndeploy.serving.loadtest.inputs import vocab_from_onnx
    from tests.serving.loadtest_fixtures import build_tiny_onnx

    model = onnx.load(str(build_tiny_onnx(tmp_path / "m.onnx")))
    expected = vocab_from_onnx(model)
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, {"attndeploy.config": "[" * 100_000 + "]" * 100_000,
                                        "other": "[" * 200 + "]" * 200})
    assert vocab_from_onnx(model) == expected
