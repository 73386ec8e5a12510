"""A linear-chain CRF over per-token emissions: the forward-algorithm loss and Viterbi decoding.

Letters: b batch, t position, i the previous tag, j the current tag, C tags. Sequences are
right-padded (docs/variants.md §1.2): `mask` [b, t] is True on real tokens, 1…1 0…0 per row,
and every row holds at least one real token.

The score of tags y over emissions e is
    start[y_0] + sum_t e[t, y_t] + sum_{t>0} transitions[y_{t-1}, y_t] + end[y_last];
the loss is log Z - score(gold), Z summing exp(score) over every tag sequence (the forward
algorithm, in log space); decoding returns the sequence of highest score (Viterbi, exportable:
see `viterbi`). Positions past a row's end carry its last real tag forward (an identity step),
so one loop over the batch's width serves every row; `viterbi` then writes `pad_tag` there.

Equivalent reference (pytorch-crf's `CRF`, batch_first=True, reduction="mean"): its `forward`
is -`nll` here, its `decode` `viterbi` without the padding.

`forbid` constrains the chain to a tagging scheme's sequences (allennlp's
`ConditionalRandomField(constraints=...)`): the forbidden transitions, first and last tags get
FORBIDDEN added to their scores in the loss and in Viterbi, so no decoded sequence holds one.
The constraint lives in non-persistent buffers (zero: none), made again from the label names
when a model is built (`attndeploy.models.build_model`), so the state dict is unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

FORBIDDEN = -10000.0  # added to a forbidden score: finite, so no NaN in the forward algorithm


class LinearChainCRF(nn.Module):
    """Transition scores between C tags (`transitions[i, j]`: tag i then tag j) and the scores
    of starting and ending on each tag; all start at zero (a softmax tagger's decisions)."""

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [i, j]
        self.start = nn.Parameter(torch.zeros(num_tags))  # [C]
        self.end = nn.Parameter(torch.zeros(num_tags))  # [C]
        # the constraint (`forbid`): 0 where allowed, FORBIDDEN where not; not saved
        self.register_buffer("transition_bias", torch.zeros(num_tags, num_tags), persistent=False)
        self.register_buffer("start_bias", torch.zeros(num_tags), persistent=False)
        self.register_buffer("end_bias", torch.zeros(num_tags), persistent=False)

    @torch.no_grad()
    def forbid(self, pairs, may_start, may_end) -> None:
        """Constrain to the allowed transitions pairs [C][C] (tag i then tag j), first tags
        may_start [C] and last tags may_end [C] (booleans, nested lists or tensors)."""
        for bias, allowed in ((self.transition_bias, pairs), (self.start_bias, may_start),
                              (self.end_bias, may_end)):
            allowed = torch.as_tensor(allowed, dtype=torch.bool, device=bias.device)
            if allowed.shape != bias.shape:
                raise ValueError(f"a constraint of shape {tuple(allowed.shape)} for "
                                 f"{tuple(bias.shape)} scores")
            bias.copy_(torch.where(allowed, 0.0, FORBIDDEN))

    @property
    def is_constrained(self) -> bool:
        return bool((self.transition_bias != 0).any() or (self.start_bias != 0).any()
                    or (self.end_bias != 0).any())

    def _scores(self) -> tuple[Tensor, Tensor, Tensor]:
        """(transitions [C, C], start [C], end [C]) with the constraint added."""
        return (self.transitions + self.transition_bias, self.start + self.start_bias,
                self.end + self.end_bias)

    def nll(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """Mean over rows of log Z - score(tags): emissions [b, t, C], tags int64 [b, t] (any
        value at pads), mask bool [b, t]."""
        tags = tags.masked_fill(~mask, 0)  # [b, t]: pads index tag 0, then count for nothing
        return (self.log_partition(emissions, mask) - self.score(emissions, tags, mask)).mean()

    def score(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """score(tags) per row [b] (the module docstring)."""
        transitions, start, end = self._scores()
        weight = mask.to(emissions.dtype)  # [b, t]
        emitted = emissions.gather(-1, tags.unsqueeze(-1)).squeeze(-1)  # [b, t]
        moved = transitions[tags[:, :-1], tags[:, 1:]]  # [b, t-1]
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)  # [b]
        return (start[tags[:, 0]] + (emitted * weight).sum(1)
                + (moved * weight[:, 1:]).sum(1) + end[last])

    def log_partition(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """log Z per row [b]: the forward algorithm over positions."""
        transitions, start, end = self._scores()
        alpha = start + emissions[:, 0]  # [b, j]
        for t in range(1, emissions.shape[1]):
            step = alpha.unsqueeze(2) + transitions  # [b, i, j]
            following = torch.logsumexp(step, dim=1) + emissions[:, t]  # [b, j]
            alpha = torch.where(mask[:, t, None], following, alpha)  # pads: unchanged
        return torch.logsumexp(alpha + end, dim=1)  # [b]

    def viterbi(self, emissions: Tensor, mask: Tensor, pad_tag: int = 0) -> Tensor:
        """The best tags int64 [b, t], `pad_tag` past each row's end.

        Written as two `torch.ops.higher_order.scan`s over positions (forward: best scores and
        back-pointers; backward: the path), which torch.onnx exports as ONNX `Scan` nodes with
        the transition matrix inside: every runtime then returns the same best tag ids, at any
        sequence length. One padded step is appended to the scanned positions (a scan needs at
        least one, and a one-token row has none after its first), then dropped. Decoding has no
        loss, so it runs without autograd (scan's autograd refuses integer back-pointers).
        """
        with torch.no_grad():
            return self._viterbi(emissions, mask.bool(), pad_tag)

    def _viterbi(self, emissions: Tensor, mask: Tensor, pad_tag: int) -> Tensor:
        from torch._higher_order_ops.scan import scan

        # detached: scan's autograd refuses the integer back-pointers, even where a decomposing
        # exporter re-traces the graph with gradients on
        emissions = emissions.detach()
        transitions, start, end = (score.detach() for score in self._scores())
        batch, width, num_tags = emissions.shape
        # positions 1..t-1 then one padded step (position 0 again, marked padding): [b, t, C]
        # and [b, t]; gathered, not sliced, so that no size t-1 makes the exporter guard t != 2
        # (tensor arithmetic only: the ONNX translation takes no symbolic size as a scalar)
        positions = torch.arange(width, device=emissions.device)  # [t]
        before_last = positions < positions.max()  # [t]
        shifted = torch.where(before_last, positions + 1, torch.zeros_like(positions))  # [t]
        following = emissions.index_select(1, shifted)  # [b, t, C]
        real = mask.index_select(1, shifted) & before_last  # [b, t]
        identity = torch.arange(num_tags, device=emissions.device).expand(batch, num_tags)

        def forward_step(score: Tensor, step: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
            emitted, real = step  # [b, j], [b]
            candidates = score.unsqueeze(2) + transitions  # [b, i, j]
            best, previous = candidates.max(dim=1)  # [b, j] each
            real = real.unsqueeze(1)  # [b, 1]
            return (torch.where(real, best + emitted, score),  # pads: unchanged
                    torch.where(real, previous, identity))  # pads: an identity step

        score, history = scan(  # history [t, b, j]: the best previous tag of each tag
            forward_step, start + emissions[:, 0],
            (following.transpose(0, 1), real.transpose(0, 1)))
        last = (score + end).argmax(dim=1)  # [b]: the last real token's tag

        def backward_step(tag: Tensor, previous: Tensor) -> tuple[Tensor, Tensor]:
            return previous.gather(1, tag.unsqueeze(1)).squeeze(1), tag.clone()  # [b] each

        first, rest = scan(backward_step, last, history, reverse=True)  # [b], [t, b]
        tags = torch.cat([first.unsqueeze(0), rest]).transpose(0, 1)[:, :width]  # [b, t]
        return tags.masked_fill(~mask, pad_tag)
