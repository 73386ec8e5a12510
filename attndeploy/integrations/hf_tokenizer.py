"""The WordPiece tokenizer of converted Hugging Face checkpoints: the training side.

The tokenizer itself (its record, encoding, decoding) is `attndeploy.runtime.wordpiece`, which
in-process inference and served text models use without torch. This module adds the two ways
`attndeploy train --hf-model DIR` makes one, and nothing else:

- `WordPieceTokenizer.from_directory(DIR)`: the model directory's `tokenizer.json` (a WordPiece
  model) or `vocab.txt` (+ `tokenizer_config.json`'s `do_lower_case`); nothing is downloaded;
- `WordPieceTokenizer.train(texts)`: a vocabulary learned from the training texts, when the
  directory has neither (specials `[PAD] [UNK] [CLS] [SEP] [MASK]` are ids 0..4).

The class is the runtime's, subclassed only for those constructors, so a tokenizer made here and
the one an exported model's metadata rebuilds encode alike and compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from attndeploy.errors import DataError
from attndeploy.jsonread import read_json_file
from attndeploy.runtime import wordpiece
from attndeploy.runtime.wordpiece import (  # noqa: F401  (re-exported: the public names)
    CLS,
    MASK,
    PAD,
    SEP,
    TYPE,
    UNK,
    cls_sep_template,
    tokenizers_module,
)

SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0..4 in a trained vocabulary
DEFAULT_VOCAB_SIZE = 30522  # BERT's


class WordPieceTokenizer(wordpiece.WordPieceTokenizer):
    """The runtime's WordPiece tokenizer, plus training a vocabulary and reading a model folder."""

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = DEFAULT_VOCAB_SIZE,
        lowercase: bool = True, min_frequency: int = 1,
    ) -> WordPieceTokenizer:
        """A WordPiece vocabulary of at most `vocab_size` pieces learned from `texts`."""
        if vocab_size < len(SPECIAL_TOKENS) + 1:
            raise DataError(f"vocab_size must be > {len(SPECIAL_TOKENS)}; got {vocab_size}")
        tk = tokenizers_module()
        tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token=UNK))
        tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
        tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = tk.decoders.WordPiece()
        trainer = tk.trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        tokenizer.post_processor = cls_sep_template(tokenizer.token_to_id(CLS),
                                                    tokenizer.token_to_id(SEP))
        return cls(tokenizer)

    @classmethod
    def from_directory(cls, directory: Path) -> WordPieceTokenizer | None:
        """The tokenizer saved in a model directory (`tokenizer.json`, else `vocab.txt`), or None
        when it has neither."""
        directory = Path(directory)
        tk = tokenizers_module()
        if (directory / "tokenizer.json").is_file():
            try:
                return cls(tk.Tokenizer.from_file(str(directory / "tokenizer.json")))
            except Exception as exc:  # tokenizers raises plain Exception subclasses
                raise DataError(f"{directory / 'tokenizer.json'}: {exc}") from exc
        if (directory / "vocab.txt").is_file():
            lowercase = True
            config = directory / "tokenizer_config.json"
            if config.is_file():
                settings = read_json_file(config, error=DataError)
                if not isinstance(settings, dict):
                    raise DataError(f"{config} must be a JSON object")
                lowercase = bool(settings.get("do_lower_case", True))
            tokenizer = tk.Tokenizer(tk.models.WordPiece.from_file(
                str(directory / "vocab.txt"), unk_token=UNK))
            tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
            tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
            tokenizer.decoder = tk.decoders.WordPiece()
            return cls(tokenizer)
        return None
