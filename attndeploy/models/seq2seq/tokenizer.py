"""The translation model's subword vocabulary: one BPE learnt on the training pairs' sources
and targets together (shared, so the output layer can be the tied embedding), trained and run
by the `tokenizers` package and stored as an `hf-tokenizer` record
(`attndeploy.generation.hf_tokenizer`), so the export and the torch-free runtime read it alike.

Metaspace pre-tokenization (SentencePiece's `▁` word marker) decodes back to the text's own
spacing. Special tokens: `<pad>` 0, `<s>` 1 (the decoder's start), `</s>` 2 (end), `<unk>` 3.
"""

from __future__ import annotations

from collections.abc import Iterable

from attndeploy.errors import DataError
from attndeploy.generation.hf_tokenizer import HFTokenizer

SPECIAL = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def train_bpe(texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2
              ) -> HFTokenizer:
    """A BPE of at most `vocab_size` entries learnt on `texts`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if vocab_size < len(SPECIAL) + 2:
        raise DataError(f"a vocabulary needs more than {len(SPECIAL) + 1} entries, got "
                        f"{vocab_size}")
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL), show_progress=False)
    backend.train_from_iterator(texts, trainer)
    return HFTokenizer(backend.to_str(), bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                       pad_token_id=PAD_ID)


def encode_source(tokenizer: HFTokenizer, text: str, max_source: int) -> list[int]:
    """A source's ids with `</s>`, cut to `max_source` (the end token kept)."""
    ids = tokenizer.encode(text, bos=False)[:max_source - 1]
    return ids + [tokenizer.EOS_ID]


def encode_target(tokenizer: HFTokenizer, text: str, max_target: int) -> list[int]:
    """`<s>` + a target's ids + `</s>`, cut so that at most `max_target` tokens are predicted."""
    ids = tokenizer.encode(text, bos=False)[:max_target - 1]
    return [tokenizer.BOS_ID, *ids, tokenizer.EOS_ID]
