"""WordTokenizer: vocabulary order, specials, round trips, batches and errors."""

from __future__ import annotations

import json

import pytest
import torch

from attndeploy.data import WordTokenizer
from attndeploy.data.tokenizer import MAX_TOKEN_CHARS
from attndeploy.errors import DataError


@pytest.fixture
def tokenizer() -> WordTokenizer:
    return WordTokenizer.build(["the cat sat.", "The dog sat, the end!"])


def test_tokenize_lowercases_and_splits_punctuation():
    assert WordTokenizer.tokenize("Hello, World!  it's w12") == [
        "hello", ",", "world", "!", "it", "'", "s", "w12",
    ]


def test_specials_have_ids_0_and_1(tokenizer):
    assert tokenizer.decode([0, 1]) == ["<pad>", "<unk>"]
    assert tokenizer.encode("zebra") == [WordTokenizer.UNK_ID]


def test_build_orders_by_frequency_then_alphabetically(tokenizer):
    # the: 3, sat: 2; then ! , . cat dog end once each, in sorted order.
    assert tokenizer.vocab == (
        "<pad>", "<unk>", "the", "sat", "!", ",", ".", "cat", "dog", "end",
    )


def test_build_is_deterministic_whatever_the_text_order():
    texts = ["b a c", "c c b", "a d"]
    assert WordTokenizer.build(texts) == WordTokenizer.build(list(reversed(texts)))


def test_build_respects_max_vocab_and_min_freq():
    tok = WordTokenizer.build(["a a a b b c"], max_vocab=3)
    assert tok.vocab == ("<pad>", "<unk>", "a")
    tok = WordTokenizer.build(["a a a b b c"], min_freq=2)
    assert tok.vocab == ("<pad>", "<unk>", "a", "b")


def test_encode_decode_round_trip(tokenizer):
    text = "the dog sat, the cat!"
    assert tokenizer.decode(tokenizer.encode(text)) == WordTokenizer.tokenize(text)


def test_encode_batch_right_pads_to_the_longest(tokenizer):
    ids, mask = tokenizer.encode_batch(["the cat", "the dog sat .", "end"], max_seq=8)
    assert ids.dtype == mask.dtype == torch.long
    assert ids.shape == mask.shape == (3, 4)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert (ids[mask == 0] == 0).all()
    assert ids[0, :2].tolist() == tokenizer.encode("the cat")


def test_encode_batch_refuses_a_text_longer_than_max_seq_naming_it(tokenizer):
    with pytest.raises(DataError, match=r"text 1 has 5 tokens, more than max_seq=4"):
        tokenizer.encode_batch(["the cat", "the dog sat , end"], max_seq=4)


def test_encode_batch_refuses_an_empty_text_naming_it(tokenizer):
    with pytest.raises(DataError, match=r"text 1 has no tokens"):
        tokenizer.encode_batch(["the cat", "   "], max_seq=4)


def test_dict_round_trip_through_json(tokenizer):
    raw = json.loads(json.dumps(tokenizer.to_dict()))
    assert raw["type"] == "word"
    assert WordTokenizer.from_dict(raw) == tokenizer


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"type": "bpe", "vocab": ["<pad>", "<unk>"]}, "unknown tokenizer type"),
        ({"type": "word"}, "'vocab' list"),
        ({"type": "word", "vocab": ["<unk>", "<pad>", "a"]}, "must start with"),
        ({"type": "word", "vocab": ["<pad>", "<unk>", "a", "a"]}, "duplicate words: \\['a'\\]"),
        ({"type": "word", "vocab": ["<pad>", "<unk>", 3]}, "non-empty strings"),
        (["<pad>", "<unk>"], "JSON object"),
    ],
)
def test_from_dict_rejects_bad_content(raw, message):
    with pytest.raises(DataError, match=message):
        WordTokenizer.from_dict(raw)


def test_decode_rejects_an_id_outside_the_vocabulary(tokenizer):
    with pytest.raises(DataError, match="outside the vocabulary"):
        tokenizer.decode([len(tokenizer)])


# ----------------------------------------------------------------------------- over-long tokens


def test_a_token_longer_than_the_limit_stays_out_of_the_vocabulary():
    blob = "x" * (MAX_TOKEN_CHARS + 1)
    tok = WordTokenizer.build([f"the {blob} cat", blob, blob])  # the most frequent "word"
    assert tok.vocab == ("<pad>", "<unk>", "cat", "the")
    assert len(json.dumps(tok.to_dict())) < 100


def test_a_token_at_the_limit_is_still_a_word():
    word = "y" * MAX_TOKEN_CHARS
    tok = WordTokenizer.build([word])
    assert word in tok.vocab and tok.encode(word) == [2]


def test_an_over_long_token_encodes_as_unk_in_training_and_inference_alike():
    blob = "z" * 10_000_000  # a 10 MB single-token training text
    tok = WordTokenizer.build([blob, "short words"])
    assert len(json.dumps(tok.to_dict())) < 100
    assert tok.encode(f"short {blob} words") == [2, WordTokenizer.UNK_ID, 3]
    reloaded = WordTokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))  # a checkpoint's
    assert reloaded.encode(f"short {blob} words") == [2, WordTokenizer.UNK_ID, 3]
    ids, mask = reloaded.encode_batch([blob], max_seq=4)
    assert ids.tolist() == [[WordTokenizer.UNK_ID]] and mask.tolist() == [[1]]


def test_a_vocabulary_holding_an_over_long_token_is_refused():
    vocab = ["<pad>", "<unk>", "ok", "w" * (MAX_TOKEN_CHARS + 1)]
    with pytest.raises(DataError, match=rf"vocabulary word 3 is 101 characters long; a token may "
                                        rf"have at most {MAX_TOKEN_CHARS}"):
        WordTokenizer.from_dict({"type": "word", "vocab": vocab})
