"""Causal GA-Net with a key/value cache that keeps open tokens only (docs/variants.md §5).

Letters: b batch, h heads, n new tokens, p cached (open) tokens, e embedding features.

`CausalGateNetwork` scores each token from the tokens up to it only: `mlp` reads the token itself,
`conv` a causal 3-wide window (the two tokens before it and itself; no padding after), `lstm` a
unidirectional LSTM. Its state travels like a layer's (model-level, once per model):

    gate_conv_inputs [B, 2, E]   conv: the last two (pad-zeroed) embeddings
    gate_lstm_h, gate_lstm_c [B, h]   lstm: the recurrent state after the last real token

`CausalGatedAttention` applies hard gates (eval) under the causal rule: query i reads the open keys
before it and always its own key (the per-row rescue). A closed token is never read by a later
one, so it never enters the cache: its state is

    key, value [B, H, P, d]   the open tokens' keys and values (P grows by the batch's largest
                              open count per step, so cache memory follows the density)
    key_mask   [B, P] bool    which slots hold an open real token (False: filler of a row that
                              opened fewer tokens than the batch's largest count)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.variants._causal import (
    CausalResult,
    LayerState,
    Rotary,
    causal_allowed,
    empty_kv_of,
    expand_kv,
    project_new,
    with_past,
)
from attndeploy.variants._common import LayerContext, LayerResult, call_op
from attndeploy.variants._reference import _scores, masked_softmax
from attndeploy.variants.ganet import reference
from attndeploy.variants.ganet.config import GANetConfig
from attndeploy.variants.ganet.layer import (
    OPEN_GATE_LOGIT,
    GatedAttention,
    logistic_noise,
    relax_gates,
)

CAUSAL_AUX_NETWORKS = ("mlp", "conv", "lstm")


def new_token_mask(key_padding_mask: Tensor | None, x: Tensor) -> Tensor:
    """bool [B, n] for new tokens x [B, n, D]: the last n columns of a mask over every token
    seen (a Hugging Face `attention_mask`), or of a mask over the new tokens alone."""
    batch, new = x.shape[:2]
    if key_padding_mask is None:
        return torch.ones(batch, new, dtype=torch.bool, device=x.device)  # [B, n]
    if key_padding_mask.dim() != 2 or key_padding_mask.shape[0] != batch or (
        key_padding_mask.shape[1] < new
    ):
        raise ConfigError(
            f"key_padding_mask must be [batch, tokens seen] with at least the {new} new tokens "
            f"(True = real token), got {list(key_padding_mask.shape)}"
        )
    mask = key_padding_mask[:, -new:]  # [B, n]
    return mask if mask.dtype == torch.bool else mask != 0


class CausalGateNetwork(nn.Module):
    """GA-Net's auxiliary network for a decoder: `forward(x [B,n,E], key_padding_mask, past)
    -> (gate logits [B,n], present state)`; `kind` is `mlp`, `conv` or `lstm`. In training
    the logits carry logistic noise (one draw per token), as `GateNetwork`'s do."""

    def __init__(
        self, embed_dim: int, *, kind: str = "mlp", hidden: int = 128, bias_init: float = 0.0,
        lstm_hidden: int = 100,
    ) -> None:
        super().__init__()
        if kind not in CAUSAL_AUX_NETWORKS:
            raise ConfigError(
                f"a causal GA-Net gate network reads only the tokens up to its own: kind must "
                f"be one of {', '.join(CAUSAL_AUX_NETWORKS)}, got {kind!r}"
            )
        GANetConfig(aux_hidden=hidden, aux_bias_init=float(bias_init))  # validates
        self.kind = kind
        self.generator: torch.Generator | None = None
        if kind == "mlp":
            self.body = nn.Sequential(nn.Linear(embed_dim, hidden), nn.GELU())
        elif kind == "conv":
            self.body = nn.Conv1d(embed_dim, hidden, kernel_size=3, padding=0)
        else:
            self.body = nn.LSTM(embed_dim, lstm_hidden, batch_first=True)
            hidden = lstm_hidden
        self.score = nn.Linear(hidden, 1)
        nn.init.constant_(self.score.bias, bias_init)

    @property
    def STATE_NAMES(self) -> tuple[str, ...]:  # noqa: N802
        return {"mlp": (), "conv": ("gate_conv_inputs",),
                "lstm": ("gate_lstm_h", "gate_lstm_c")}[self.kind]

    def scores(
        self, x: Tensor, key_padding_mask: Tensor | None = None, past: LayerState | None = None
    ) -> tuple[Tensor, LayerState]:
        """The network's logits s [B, n] (no noise) and its state after these tokens."""
        mask = new_token_mask(key_padding_mask, x)  # [B, n]
        if self.kind == "mlp":
            return self.score(self.body(x)).squeeze(-1), {}
        if self.kind == "conv":
            zeroed = torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype))  # [B, n, E]
            before = x.new_zeros(x.shape[0], 2, x.shape[2]) if past is None else (
                past["gate_conv_inputs"]
            )  # [B, 2, E]: the causal padding at the start
            window = torch.cat([before, zeroed], dim=1)  # [B, 2+n, E]
            features = F.gelu(self.body(window.transpose(1, 2)).transpose(1, 2))  # [B, n, a]
            return self.score(features).squeeze(-1), {"gate_conv_inputs": window[:, -2:]}
        return self._lstm_scores(x, mask, past)

    def _lstm_scores(
        self, x: Tensor, mask: Tensor, past: LayerState | None
    ) -> tuple[Tensor, LayerState]:
        """A unidirectional LSTM whose state skips padded tokens (left padding leaves it as
        it was), one step at a time where the chunk has padding."""
        batch = x.shape[0]
        width = self.body.hidden_size
        h = x.new_zeros(batch, width) if past is None else past["gate_lstm_h"]  # [B, h]
        c = x.new_zeros(batch, width) if past is None else past["gate_lstm_c"]  # [B, h]
        if bool(mask.all()):
            out, (h_n, c_n) = self.body(x, (h[None], c[None]))  # [B, n, h], [1, B, h]
            return self.score(out).squeeze(-1), {"gate_lstm_h": h_n[0], "gate_lstm_c": c_n[0]}
        outputs = []
        for t in range(x.shape[1]):
            out, (h_t, c_t) = self.body(x[:, t:t + 1], (h[None], c[None]))  # [B, 1, h]
            keep = mask[:, t:t + 1]  # [B, 1]
            h = torch.where(keep, h_t[0], h)  # [B, h]
            c = torch.where(keep, c_t[0], c)  # [B, h]
            outputs.append(out)
        features = torch.cat(outputs, dim=1)  # [B, n, h]
        return self.score(features).squeeze(-1), {"gate_lstm_h": h, "gate_lstm_c": c}

    @torch.no_grad()
    def start_open(self, logit: float = OPEN_GATE_LOGIT) -> None:
        """Every gate open (the warm start of a converted model), as `GateNetwork.start_open`:
        s = `logit` > 0 for every token."""
        if not logit > 0:
            raise ConfigError(f"an open gate needs a logit > 0, got {logit}")
        self.score.weight.zero_()
        self.score.bias.fill_(logit)

    def empty_state(self, batch: int, like: Tensor) -> LayerState:
        """The state before any token, `like`'s dtype and device."""
        if self.kind == "conv":
            return {"gate_conv_inputs": like.new_zeros(batch, 2, self.body.in_channels)}
        if self.kind == "lstm":
            zeros = like.new_zeros(batch, self.body.hidden_size)  # [B, h]
            return {"gate_lstm_h": zeros, "gate_lstm_c": zeros.clone()}
        return {}

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, past: LayerState | None = None
    ) -> tuple[Tensor, LayerState]:
        s, present = self.scores(x, key_padding_mask, past)  # [B, n]
        if self.training:
            s = s + logistic_noise(s.shape, like=s, generator=self.generator)
        return s, present


class CausalGatedAttention(GatedAttention):
    """Decoder self-attention whose keys are gated (GA-Net).

    Arguments as `GatedAttention` (its parameters; `straight_through` is not supported).
    `forward(x [B,n,D], key_padding_mask, gate_logits [B,n], past | None) -> CausalResult`
    with `gates` bool [B,n] (the new tokens' hard gates). The mask may cover every token seen
    (only its last n columns are read: the cache knows which of its slots are real).
    Eval: hard gates, the cache keeps open tokens only. Training: relaxed gates (log g_soft
    added to the scores; the diagonal always weighs fully), with no past (no cache).
    """

    STATE_NAMES = ("key", "value", "key_mask")

    def __init__(self, embed_dim: int, num_heads: int, **kwargs) -> None:
        if kwargs.get("straight_through"):
            raise ConfigError("causal GA-Net layers train with relaxed gates: set "
                              "straight_through to False")
        super().__init__(embed_dim, num_heads, **kwargs)

    def forward(  # type: ignore[override]
        self, x: Tensor, key_padding_mask: Tensor | None, gate_logits: Tensor,
        past: LayerState | None = None, rotary: Rotary | None = None,
    ) -> CausalResult:
        new_mask = new_token_mask(key_padding_mask, x)  # [B, n]
        q, k_new, v_new = project_new(self, x, rotary)  # [B, H, n, d], [B, H_kv, n, d] x2
        k = with_past(past, "key", k_new)  # [B, H_kv, P+n, d]
        v = with_past(past, "value", v_new)  # [B, H_kv, P+n, d]
        mask = with_past(past, "key_mask", new_mask, dim=1)  # [B, P+n]
        n = x.shape[1]
        if self.training:
            if past is not None:
                raise ConfigError("a causal GA-Net layer caches hard gates only: decode with "
                                  "the layer in eval mode (model.eval())")
            heads, gates = self._relaxed(q, expand_kv(self, k), expand_kv(self, v), mask,
                                         gate_logits, new_mask)
            present = {"key": k, "value": v, "key_mask": mask}  # soft gates: every token
            return CausalResult(self.merge(heads), present, gates=gates)
        cached = gate_logits.new_ones(mask.shape[0], mask.shape[1] - n)  # [B, P]: all open
        logits = torch.cat([cached, gate_logits], dim=1)  # [B, P+n]
        heads, gates, open_keys, open_values, open_slots = call_op(
            reference.causal_gated_attention, q, expand_kv(self, k), expand_kv(self, v), mask,
            logits, scale=self.scale
        )  # [B, H, n, d], [B, P+n], the open new tokens: [B, H, N, d] x2, [B, N]
        groups = self.n_heads // self.n_kv_heads
        if groups > 1:  # back to the kv heads: head g·j is kv head j (`expand_kv`)
            open_keys, open_values = open_keys[:, ::groups], open_values[:, ::groups]
        present = {
            "key": with_past(past, "key", open_keys),  # [B, H, P+N, d]
            "value": with_past(past, "value", open_values),  # [B, H, P+N, d]
            "key_mask": with_past(past, "key_mask", open_slots, dim=1),  # [B, P+N]
        }
        return CausalResult(self.merge(heads), present, gates=gates[:, -n:])

    def empty_state(self, batch: int, like: Tensor) -> LayerState:
        """The state before any token (P = 0), `like`'s dtype and device."""
        state = empty_kv_of(self, batch, like)
        state["key_mask"] = torch.zeros(batch, 0, dtype=torch.bool, device=like.device)
        return state

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        """A whole sequence in a built-in model's pass (no cache); the context's gate logits
        must come from a `CausalGateNetwork`."""
        result = self(x, context.key_padding_mask, context.gate_logits)
        return LayerResult(result.output, gates=result.gates)

    def _relaxed(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, gate_logits: Tensor,
        new_mask: Tensor,
    ) -> tuple[Tensor, Tensor]:
        n = q.shape[2]
        context = relax_gates(gate_logits, new_mask, self.temperature, False, self.relaxation)
        log_gates = torch.cat(
            [gate_logits.new_zeros(mask.shape[0], mask.shape[1] - n), context.log_gates], dim=1
        )  # [B, P+n]
        allowed = causal_allowed(mask, n)  # [B, 1, n, P+n]
        offset = mask.shape[1] - n
        diagonal = (torch.arange(mask.shape[1], device=q.device)[None, :]
                    == torch.arange(n, device=q.device)[:, None] + offset)  # [n, P+n]
        log_weights = torch.where(diagonal, torch.zeros(()), log_gates[:, None, :])  # [B, n, P+n]
        scores = _scores(q, k, self.scale) + log_weights[:, None].to(q.dtype)  # [B, H, n, P+n]
        with torch.no_grad():
            gates = (gate_logits > 0) & new_mask  # [B, n]
        return masked_softmax(scores, allowed) @ v, gates

