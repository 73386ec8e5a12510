"""A repository whose text model tokenizes with WordPiece (a converted Hugging Face model's),
which needs the `tokenizers` package in the server's Python.

Shared by the deploy tests and check-repo's (tests/serving/test_check_repo_image.py). Building it
trains a tiny WordPiece vocabulary, so it needs `tokenizers` here (the `hf` extra).
"""

from __future__ import annotations

import json
from pathlib import Path

from attndeploy.runtime.names import META_TOKENIZER
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.serving.onnx_fixtures import build_model, save_model

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "the bird sang on a tree",
         "cats and dogs play", "birds fly over the park"]
MODEL_VOCAB = 64  # rows of the fixture model's embedding: more than the WordPiece vocabulary


def wordpiece_record() -> dict:
    """The tokenizer record of a WordPiece vocabulary trained on `TEXTS` (at most 40 pieces)."""
    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.train(TEXTS, vocab_size=40).to_dict()


def package_wordpiece_model(root: Path, repo: Path, *, name: str = "words",
                            flavor: str = "python") -> Path:
    """Package `name` (and `name`_text, its WordPiece text model) into `repo`; return `repo`."""
    model = build_model(vocab_size=MODEL_VOCAB, vocab=["<pad>", "<unk>"])
    (entry,) = [p for p in model.metadata_props if p.key == META_TOKENIZER]
    entry.value = json.dumps(wordpiece_record())
    source = save_model(model, root / "src" / f"{name}.onnx")
    package_model(source, repo, PackageOptions(name=name, flavor=flavor))
    return repo
