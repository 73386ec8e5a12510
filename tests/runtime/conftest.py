"""Tiny checkpoints WITH a vocabulary (the built-in task's), exported once per case.

The export fixture of `tests/export/conftest.py` saves checkpoints without a tokenizer; text
inference needs one, so these are saved with the `sparse_evidence` task's vocabulary (74 words)
and exported with `export_checkpoint` (about 3 s a case on 2 cores). GA-Net checkpoints get their
gate network's final bias shifted so that about half of the real tokens of `TEXTS` are closed:
at random init nearly every gate is open, and `attended` would then test nothing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from attndeploy.checkpoint import save_checkpoint
from attndeploy.data import example_texts, get_task
from attndeploy.export.exporter import ExportOptions, export_checkpoint
from attndeploy.models import build_model
from tests.cases import CASES, CASES_BY_ID, VariantCase
from tests.helpers import threshold_below_median

LABELS = ("neg", "neu", "pos")
MAX_SEQ = 24
TASK = "sparse_evidence"

# Texts of every length from 1 to MAX_SEQ, unknown words, punctuation and capitals among them.
TEXTS = [
    *example_texts(TASK, 20, seed=7, max_seq=MAX_SEQ),
    "alpha", "Amber, W3!", "zebra w1 w2", "w5 (bronze) w6 w7 -- quagga", "DELTA denim w9 w10 w11",
    " ".join(f"w{i}" for i in range(MAX_SEQ)),
    *(" ".join(f"w{j}" for j in range(i, 2 * i)) for i in range(2, 14)),
]

# Cases run by default: every registered variant, the tagging head, the BiLSTM family and
# GA-Net with the BiLSTM gate network (what `train --data` trains).
CORE_CASES = ("standard", "qvi_pooled", "qvi_pairwise", "ganet_mlp", "ganet_bilstm_aux",
              "ganet_tagging", "evolving", "bilstm_standard")


def case_ids() -> list:
    """Every case of tests/cases.py; those outside CORE_CASES are marked slow."""
    return [pytest.param(case.id, id=case.id,
                         marks=() if case.id in CORE_CASES else (pytest.mark.slow,))
            for case in CASES]


@dataclass(frozen=True)
class TextExport:
    case: VariantCase
    checkpoint: Path
    path: Path


@torch.no_grad()
def close_half_of_the_gates(model: torch.nn.Module, tokenizer) -> None:
    """Shift the gate network's final bias to just under the median gate logit of TEXTS' real
    tokens (`threshold_below_median`)."""
    seen: list[torch.Tensor] = []
    # the final Linear's output: the gate logits, whichever method of the network ran
    hook = model.gates.network.score.register_forward_hook(lambda _m, _i, out: seen.append(out))
    ids, mask = tokenizer.encode_batch(TEXTS, max_seq=MAX_SEQ)
    model(ids, mask)
    hook.remove()
    logits = seen[0].reshape(mask.shape)[mask.bool()]
    model.gates.network.score.bias -= threshold_below_median(logits)


class TextExports:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[str, TextExport] = {}
        self.tokenizer = get_task(TASK).tokenizer()

    def get(self, case_id: str) -> TextExport:
        if case_id not in self._done:
            case = CASES_BY_ID[case_id]
            config = case.config(vocab_size=len(self.tokenizer), n_layers=2, max_seq=MAX_SEQ)
            torch.manual_seed(zlib.crc32(case_id.encode()))
            model = build_model(config).eval()
            if case.is_gated:
                close_half_of_the_gates(model, self.tokenizer)
            checkpoint = save_checkpoint(model, self.root / f"ckpt_{case_id}",
                                         label_names=LABELS, tokenizer=self.tokenizer)
            path = self.root / f"{case_id}.onnx"
            export_checkpoint(checkpoint, path, ExportOptions())
            self._done[case_id] = TextExport(case, checkpoint, path)
        return self._done[case_id]


@pytest.fixture(scope="session")
def text_exports(tmp_path_factory: pytest.TempPathFactory) -> TextExports:
    return TextExports(tmp_path_factory.mktemp("runtime_exports"))


def gate_fraction(gates: np.ndarray, mask: np.ndarray) -> float:
    return float(gates[mask.astype(bool)].mean())
