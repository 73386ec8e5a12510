"""A `Seq2Seq` in PyTorch as a `Seq2SeqBackend` of the torch-free decoding loop
(`attndeploy.generation.seq2seq`): numpy in, numpy out, eval mode, no gradients."""

from __future__ import annotations

import numpy as np
import torch

from attndeploy.generation.seq2seq import State
from attndeploy.models.seq2seq.model import Memory, Seq2Seq
from attndeploy.models.seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID


class TorchSeq2Seq:
    """`encode` and `step` of the backend protocol, run by `model` (put in eval mode)."""

    def __init__(self, model: Seq2Seq) -> None:
        self.model = model.eval()
        self.bos_id, self.eos_id, self.pad_id = BOS_ID, EOS_ID, PAD_ID
        self.max_target = model.config.max_target

    @torch.no_grad()
    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray
               ) -> tuple[np.ndarray, State]:
        memory = self.model.encode(torch.from_numpy(input_ids), torch.from_numpy(attention_mask))
        state = {**self.model.cross_state(memory),
                 **self.model.empty_self_state(input_ids.shape[0])}
        return memory.mask.numpy(), {name: t.numpy() for name, t in state.items()}

    @torch.no_grad()
    def step(self, input_ids: np.ndarray, position_ids: np.ndarray, memory_mask: np.ndarray,
             state: State) -> tuple[np.ndarray, State]:
        tensors = {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in state.items()}
        memory = Memory(torch.empty(0), torch.from_numpy(np.ascontiguousarray(memory_mask)))
        logits, present = self.model.decode(torch.from_numpy(input_ids), memory, tensors,
                                            torch.from_numpy(position_ids))
        return logits[:, -1].numpy(), {**state, **{k: v.numpy() for k, v in present.items()}}
