"""The runtime's WordPiece tokenizer (`attndeploy.runtime.wordpiece`) against the `tokenizers`
library itself: the record round trip encodes every text as `tokenizers` does, `encode_text`
frames with [CLS]/[SEP], refuses a text without pieces and truncates keeping [SEP];
`parse_metadata` builds tokenizers by their record's type; the module is shipped to served
text models. Tokenizers are built here from a vocabulary list, without torch or transformers."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

tokenizers = pytest.importorskip("tokenizers")

from attndeploy.errors import DataError, ExportError  # noqa: E402
from attndeploy.runtime.metadata import parse_metadata  # noqa: E402
from attndeploy.runtime.shipping import (  # noqa: E402
    SHIPPED_MODULES,
    TOKENIZER_TYPES,
    runtime_sources,
)
from attndeploy.runtime.text import TextError, encode_text  # noqa: E402
from attndeploy.runtime.tokenizer import WordTokenizer  # noqa: E402
from attndeploy.runtime.wordpiece import WordPieceTokenizer  # noqa: E402

# BERT's layout: [PAD] 0, the specials elsewhere ([UNK] is 100 in bert-base-uncased; here 7).
VOCAB = ["[PAD]", "the", "quick", "brown", "fox", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "jump",
         "##s", "##ed", "over", "lazy", "dog", "un", "##believ", "##able", ",", ".", "!", "a",
         "naive", "cafe", "北", "京"]
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "unbelievable, jumped!",
    "Naïve CAFÉ",  # accents stripped, lowercased
    "北京 fox",  # CJK characters are split one by one
    "zebra € fox",  # words WordPiece cannot cover
    "  fox\tdog \n",
]


def library_tokenizer() -> tokenizers.Tokenizer:
    """A BERT tokenizer built directly with `tokenizers` (what a tokenizer.json holds)."""
    tk = tokenizers
    vocab = {piece: index for index, piece in enumerate(VOCAB)}
    tokenizer = tk.Tokenizer(tk.models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = tk.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 5), ("[SEP]", 6)])
    return tokenizer


def record() -> dict:
    """The record as a checkpoint and the ONNX metadata carry it (through JSON)."""
    return json.loads(json.dumps(WordPieceTokenizer(library_tokenizer()).to_dict()))


def test_the_record_round_trip_encodes_as_the_tokenizers_library():
    library = library_tokenizer()
    ours = WordPieceTokenizer.from_dict(record())
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id) == (0, 7, 5, 6)
    assert len(ours) == len(VOCAB) and ours.lowercase
    for text in TEXTS:
        expected = library.encode(text)
        assert ours.tokenize(text) == expected.tokens
        assert ours.encode(text) == expected.ids
        encoded = encode_text(ours, text, max_seq=64)
        assert (encoded.tokens, encoded.ids) == (expected.tokens, expected.ids)
        assert not encoded.truncated
    assert ours.tokenize(TEXTS[1]) == ["[CLS]", "un", "##believ", "##able", ",", "jump", "##ed",
                                       "!", "[SEP]"]
    assert ours.tokenize("zebra € fox") == ["[CLS]", "[UNK]", "[UNK]", "fox", "[SEP]"]
    assert ours.decode([0, 5, 4, 6]) == ["[PAD]", "[CLS]", "fox", "[SEP]"]
    assert WordPieceTokenizer.from_dict(ours.to_dict()) == ours


def test_batches_are_right_padded_with_pad_id_0():
    ours = WordPieceTokenizer.from_dict(record())
    ids, mask = ours.encode_batch(["fox", "the lazy dog"], max_seq=8)
    assert ids.tolist() == [[5, 4, 6, 0, 0], [5, 1, 13, 14, 6]]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]


def test_truncation_keeps_cls_the_first_pieces_and_the_final_sep():
    ours = WordPieceTokenizer.from_dict(record())
    text = TEXTS[0]  # [CLS] + 11 pieces ("jump", "##s", the "." included) + [SEP]
    full = library_tokenizer().encode(text)
    with pytest.raises(TextError, match=r"text 3 has 13 tokens \(special tokens included\), "
                                        r"more than the model's max_seq=6") as info:
        encode_text(ours, text, max_seq=6, index=3)
    assert info.value.too_long
    cut = encode_text(ours, text, max_seq=6, truncate=True)
    assert cut.truncated
    assert cut.tokens == ["[CLS]", "the", "quick", "brown", "fox", "[SEP]"]
    assert cut.ids == [*full.ids[:5], 6]
    exact = encode_text(ours, text, max_seq=13, truncate=True)  # fits: nothing cut
    assert (exact.ids, exact.truncated) == (full.ids, False)
    with pytest.raises(TextError, match="more than the model's max_seq=2"):
        encode_text(ours, text, max_seq=2, truncate=True)  # no room for a piece


@pytest.mark.parametrize("text", ["", "   \n\t", "\u200b", "\x00\x01"])
def test_a_text_with_no_piece_of_its_own_has_no_tokens(text: str):
    ours = WordPieceTokenizer.from_dict(record())
    assert ours.tokenize(text) == ["[CLS]", "[SEP]"]  # the framing alone
    with pytest.raises(TextError, match="text 4 has no tokens"):
        encode_text(ours, text, max_seq=8, index=4)
    with pytest.raises(DataError, match="text 0 has no tokens"):
        ours.encode_batch([text], max_seq=8)


def test_the_word_tokenizer_has_no_framing_and_is_unchanged():
    word = WordTokenizer(["<pad>", "<unk>", "fox", "dog"])
    assert word.framing == (0, 0)
    cut = encode_text(word, "fox dog fox", max_seq=2, truncate=True)
    assert (cut.tokens, cut.ids) == (["fox", "dog"], [2, 3])
    with pytest.raises(TextError, match=r"has 3 tokens, more than the model's max_seq=2; "):
        encode_text(word, "fox dog fox", max_seq=2)


def test_bad_records_say_what_is_wrong():
    good = record()
    with pytest.raises(DataError, match="expected a 'wordpiece' tokenizer, got 'word'"):
        WordPieceTokenizer.from_dict({"type": "word", "vocab": []})
    with pytest.raises(DataError, match="needs its 'tokenizer' JSON object"):
        WordPieceTokenizer.from_dict({"type": "wordpiece"})
    with pytest.raises(DataError, match="corrupt wordpiece tokenizer"):
        WordPieceTokenizer.from_dict({"type": "wordpiece", "tokenizer": {"model": 3}})
    with pytest.raises(DataError, match=r"disagrees with its vocabulary: sep_id 9 \(the "
                                        r"vocabulary says 6\)"):
        WordPieceTokenizer.from_dict({**good, "sep_id": 9})
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE({"[PAD]": 0, "a": 1}, []))
    with pytest.raises(DataError, match="BPE tokenizer is not WordPiece"):
        WordPieceTokenizer(bpe)


# --------------------------------------------------------------------------- metadata


OUTPUTS = ("logits",)  # an ungated model's graph outputs


def metadata(tokenizer_record: dict | str, *, vocab_size: int = 64) -> dict[str, str]:
    config = {"variant": "evolving", "head": "classification", "num_labels": 2,
              "max_seq": 16, "vocab_size": vocab_size}
    return {
        "attndeploy.variant": "evolving", "attndeploy.version": "0.1.0",
        "attndeploy.config": json.dumps(config), "attndeploy.weights_sha256": "0" * 64,
        "attndeploy.labels": json.dumps(["neg", "pos"]),
        "attndeploy.tokenizer": tokenizer_record if isinstance(tokenizer_record, str)
        else json.dumps(tokenizer_record),
    }


def test_parse_metadata_builds_the_tokenizer_its_record_names():
    meta = parse_metadata(metadata(record()), outputs=OUTPUTS)
    assert isinstance(meta.tokenizer, WordPieceTokenizer)
    assert meta.tokenizer == WordPieceTokenizer(library_tokenizer())
    word = parse_metadata(metadata({"type": "word", "vocab": ["<pad>", "<unk>", "fox"]}),
                          outputs=OUTPUTS)
    assert isinstance(word.tokenizer, WordTokenizer)
    assert parse_metadata(metadata(""), outputs=OUTPUTS).tokenizer is None


def test_parse_metadata_refuses_unknown_oversized_and_unreadable_records(monkeypatch):
    from attndeploy.runtime.shipping import TOKENIZER_TYPES

    known = ", ".join(sorted(TOKENIZER_TYPES))  # word, wordpiece, and the taggers' char, space
    with pytest.raises(ExportError, match=r"m\.onnx: attndeploy\.tokenizer: unknown tokenizer "
                                          r"type 'sentencepiece'; this attndeploy reads "
                                          + re.escape(known)):
        parse_metadata(metadata({"type": "sentencepiece"}), "m.onnx", outputs=OUTPUTS)
    with pytest.raises(ExportError, match="unknown tokenizer a list"):
        parse_metadata(metadata("[1, 2]"), outputs=OUTPUTS)
    with pytest.raises(ExportError, match=f"has {len(VOCAB)} tokens but the model embeds 10"):
        parse_metadata(metadata(record(), vocab_size=10), outputs=OUTPUTS)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
    with pytest.raises(ExportError, match="'wordpiece' tokenizer needs the Python package "
                                          "'tokenizers': pip install tokenizers"):
        parse_metadata(metadata(record()), outputs=OUTPUTS)


def test_tokenizer_types_and_shipped_modules_agree():
    shipped = [name for name, _ in SHIPPED_MODULES]
    assert TOKENIZER_TYPES["wordpiece"].requires == "tokenizers"
    for kind, entry in TOKENIZER_TYPES.items():
        assert entry.module in shipped, kind
        assert callable(getattr(sys.modules.get(entry.module) or __import__(
            entry.module, fromlist=[entry.cls]), entry.cls).from_dict)
    # every shipped module's attndeploy imports come before it
    assert shipped.index("attndeploy.runtime.tokenizer") < shipped.index(
        "attndeploy.runtime.wordpiece") < shipped.index("attndeploy.runtime.text")
    source = runtime_sources()["attndeploy/runtime/wordpiece.py"].decode()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert all(not line.startswith(("import torch", "from torch", "import transformers"))
               and "integrations" not in line for line in imports), imports


def test_the_shipped_copy_works_without_torch_or_an_installed_attndeploy(tmp_path):
    """As a served text model loads it: files copied out of the package, loaded by path."""
    for relative, content in runtime_sources().items():
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    (tmp_path / "record.json").write_text(json.dumps(record()))
    script = f"""
import importlib.util, json, sys
from pathlib import Path
sys.path = [p for p in sys.path if p not in ("", ".")]
root = Path({str(tmp_path)!r})
for name, relative in {[list(e) for e in SHIPPED_MODULES]!r}:
    path = root / relative
    search = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
wordpiece = sys.modules["attndeploy.runtime.wordpiece"]
text = sys.modules["attndeploy.runtime.text"]
tokenizer = wordpiece.WordPieceTokenizer.from_dict(json.loads((root / "record.json").read_text()))
print(text.encode_text(tokenizer, {TEXTS[1]!r}, max_seq=5, truncate=True).ids)
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ids, loaded = result.stdout.strip().splitlines()
    assert json.loads(ids) == [5, 15, 16, 17, 6]
    assert loaded == "[]"


def test_a_model_is_gated_by_its_gates_output_not_by_its_variant_s_name():
    """Any registered gated variant is one to the runtime: the graph's outputs decide."""
    meta = metadata({"type": "word", "vocab": ["<pad>", "<unk>", "fox"]})
    assert parse_metadata(meta, outputs=["logits", "gates"]).gated is True  # an "evolving"
    assert parse_metadata(meta, outputs=["logits"]).gated is False
    with pytest.raises(TypeError, match="outputs"):  # no list of gated names to fall back on
        parse_metadata(meta)  # type: ignore[call-arg]
