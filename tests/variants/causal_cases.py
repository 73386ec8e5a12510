"""THE table of causal variant cases (issue #49): it drives tests/variants/test_causal.py and
test_causal_ops.py.

One `CausalCase` per variant and per causal configuration of interest (QVI form, GA-Net gate
network, Evolving Attention's mixing weights). Each case builds a tiny decoder stack of causal
layers (`CausalStack`: the layers one after another, a GA-Net gate network once per stack, the
Evolving chain handed on) and names the op references of its causal form with inputs for them
(`RefCase`), so that the same table drives
- causality, at the layer and at the reference level;
- incremental decoding with the cache against full recomputation;
- the op bodies (onnxscript, run by onnxruntime and onnx.reference) against the references;
- the warm start (every variant computes causal vanilla attention);
- the export of the stack with its cache (tests/variants/test_causal_export.py; `no_export`
  gives a case's reason it cannot, a strict xfail).

Every registered variant has a case here, or an entry in `NO_CAUSAL_FORM` saying why it has no
causal form: test_causal.py's guard fails otherwise (docs/adding-a-variant.md).

To be merged into tests/cases.py (not this helper's file) once decoders are a model family.
Letters: b batch, h heads, i/j query/key positions, d head dim, n new tokens, D model dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.variants.api import state_names
from attndeploy.variants.evolving import reference as evolving_ref
from attndeploy.variants.evolving.causal import CausalEvolvingAttention
from attndeploy.variants.ganet import reference as ganet_ref
from attndeploy.variants.ganet.causal import CausalGatedAttention, CausalGateNetwork
from attndeploy.variants.qvi import reference as qvi_ref
from attndeploy.variants.qvi.causal import CausalQVIAttention
from attndeploy.variants.standard import reference as standard_ref
from attndeploy.variants.standard.causal import CausalStandardAttention

D_MODEL, HEADS, HEAD_DIM, LAYERS = 16, 2, 8, 3
SCALE = 0.4  # not 1/sqrt(d), so a lost attribute shows
FP32_TOLERANCE = 1e-5  # issue #49: incremental decoding equals full recomputation to 1e-5


# ----------------------------------------------------------------------------- the stack


class CausalStack(nn.Module):
    """Causal layers one after another, for tests: `forward(x [B,n,D], mask [B,seen+n] | None,
    past: {name: tensor} | None) -> (y [B,n,D], present {name: tensor})`.

    The state is flat and named as an exporter names it: `past_key_values.{i}.{entry}` per layer
    (`_causal.state_names`), `gates.{entry}` for a GA-Net gate network's own state.
    """

    def __init__(self, layers: list[nn.Module], gate_network: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.gate_network = gate_network

    def empty_state(self, batch: int, like: Tensor) -> dict[str, Tensor]:
        """The flat state before any token (every layer's `empty_state`)."""
        state: dict[str, Tensor] = {}
        if self.gate_network is not None:
            gates = self.gate_network.empty_state(batch, like)
            state.update({f"gates.{k}": v for k, v in gates.items()})
        for index, layer in enumerate(self.layers):
            layer_state = layer.empty_state(batch, like)
            names = state_names(index, layer_state)
            state.update({names[k][0]: v for k, v in layer_state.items()})
        return state

    def forward(
        self, x: Tensor, mask: Tensor | None = None, past: dict[str, Tensor] | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        past = past or {}
        present: dict[str, Tensor] = {}
        gate_logits = None
        if self.gate_network is not None:
            gate_past = {k[len("gates."):]: v for k, v in past.items() if k.startswith("gates.")}
            gate_logits, gate_present = self.gate_network(x, mask, gate_past or None)
            present.update({f"gates.{k}": v for k, v in gate_present.items()})
        prev_logits = None
        h = x
        for index, layer in enumerate(self.layers):
            prefix = f"past_key_values.{index}."
            layer_past = {k[len(prefix):]: v for k, v in past.items() if k.startswith(prefix)}
            layer_past = layer_past or None
            if isinstance(layer, CausalGatedAttention):
                result = layer(h, mask, gate_logits, layer_past)
            elif isinstance(layer, CausalEvolvingAttention):
                result = layer(h, mask, prev_logits, layer_past)
                prev_logits = result.logits
            else:
                result = layer(h, mask, layer_past)
            names = state_names(index, result.present)
            present.update({names[k][0]: v for k, v in result.present.items()})
            h = h + result.output  # a residual, so every layer's output reaches the top
        return h, present


def _standard() -> CausalStack:
    return CausalStack([CausalStandardAttention(D_MODEL, HEADS) for _ in range(LAYERS)])


def _qvi(form: str) -> Callable[[], CausalStack]:
    def build() -> CausalStack:
        layers = [CausalQVIAttention(D_MODEL, HEADS, form=form, pairwise_chunk=3)
                  for _ in range(LAYERS)]
        with torch.no_grad():  # a pool that is not uniform, gates away from vanilla
            for layer in layers:
                if form == "prefix":
                    layer.pool_weight.normal_(0.0, 1.0)
                layer.gate_bias.normal_(0.0, 1.0)
        return CausalStack(layers)
    return build


def _ganet(kind: str) -> Callable[[], CausalStack]:
    def build() -> CausalStack:
        network = CausalGateNetwork(D_MODEL, kind=kind, hidden=8, lstm_hidden=8)
        return CausalStack([CausalGatedAttention(D_MODEL, HEADS) for _ in range(LAYERS)],
                           network)
    return build


def _evolving(alpha: float, beta: float, slope: float) -> Callable[[], CausalStack]:
    def build() -> CausalStack:
        layers = [
            CausalEvolvingAttention(D_MODEL, HEADS, alpha=alpha, beta=beta,
                                    negative_slope=slope, chain_start=index == 0)
            for index in range(LAYERS)
        ]
        return CausalStack(layers)
    return build


# ----------------------------------------------------------------------------- reference cases


@dataclass(frozen=True)
class RefCase:
    """One causal op reference with random inputs.

    inputs(rng, batch, t_q, t_k) -> {name: tensor} in the op's input order (plus the attributes
    in `attributes`); `positions` gives, per input, the axes that index token positions, so the
    causality test can perturb every entry after a position; `causal_outputs`: the outputs
    whose rows (axis 2: query or value position) must ignore every later token. Every op takes
    fewer queries than keys (a cached decode step) as well as a whole sequence.
    """

    op: str
    reference: Callable[..., Any]
    inputs: Callable[[torch.Generator, int, int, int], dict[str, Tensor]]
    positions: dict[str, tuple[int, ...]]
    attributes: dict[str, float] = field(default_factory=lambda: {"scale": SCALE})
    causal_outputs: tuple[int, ...] = (0,)
    discrete: tuple[str, ...] = ()


def _attention(g: torch.Generator, batch: int, t_q: int, t_k: int) -> dict[str, Tensor]:
    return {
        "query": torch.randn(batch, HEADS, t_q, HEAD_DIM, generator=g),
        "key": torch.randn(batch, HEADS, t_k, HEAD_DIM, generator=g),
        "value": torch.randn(batch, HEADS, t_k, HEAD_DIM, generator=g),
        "key_padding_mask": left_padded(batch, t_k),
    }


def left_padded(batch: int, t: int) -> Tensor:
    """bool [B, T]: example b has b % 3 pads on the left (a decoder batch's padding)."""
    pads = torch.tensor([b % 3 for b in range(batch)])
    return torch.arange(t)[None, :] >= pads[:, None]  # [B, T]


def _qvi_weights(g: torch.Generator, pooled: bool) -> dict[str, Tensor]:
    square, row = (HEADS, HEAD_DIM, HEAD_DIM), (HEADS, HEAD_DIM)
    names = ["u_weight", "u_bias", "w_weight", "w_bias", "gate_value_weight",
             "gate_interaction_weight", "gate_bias"] + (["pool_weight"] if pooled else [])
    shapes = [square, row, square, row, square, square, row, row]
    return {n: 0.5 * torch.randn(*s, generator=g) for n, s in zip(names, shapes, strict=False)}


def _qvi_prefix_inputs(g, batch, t_q, t_k):
    """A whole sequence starts from the empty state; a decode step from a random one."""
    attention = _attention(g, batch, t_q, t_k)
    attention["value"] = attention["value"][:, :, t_k - t_q:]  # the new tokens' values only
    past = t_k - t_q
    if past == 0:
        state = dict(zip(("past_values", "prefix_max", "prefix_den", "prefix_num"),
                         qvi_ref.empty_prefix_state(attention["query"]), strict=True))
    else:
        state = {
            "past_values": torch.randn(batch, HEADS, past, HEAD_DIM, generator=g),
            "prefix_max": torch.randn(batch, HEADS, generator=g),
            "prefix_den": 1.0 + torch.rand(batch, HEADS, generator=g) * past,
            "prefix_num": torch.randn(batch, HEADS, HEAD_DIM, generator=g),
        }
    return {**attention, **state, **_qvi_weights(g, pooled=True)}


def _qvi_pairwise_inputs(g, batch, t_q, t_k):
    return {**_attention(g, batch, t_q, t_k), **_qvi_weights(g, pooled=False)}


def _gated_inputs(g, batch, t_q, t_k):
    logits = 2.0 * torch.randn(batch, t_k, generator=g)
    logits[:, ::4] = 0.0  # exactly 0 is closed
    logits[0, t_k - t_q:] = -1.0  # example 0 opens no new token (a cache step adding nothing)
    logits[:, : t_k - t_q] = 1.0  # cached slots are open ones (their mask says if filled)
    return {**_attention(g, batch, t_q, t_k), "gate_logits": logits}


def _evolving_inputs(g, batch, t_q, t_k):
    return {
        **_attention(g, batch, t_q, t_k),
        "prev_logits": torch.randn(batch, HEADS, t_q, t_k, generator=g),
        "past_rows": _past_rows(g, batch, t_q, t_k),
        "conv_weight": 0.3 * torch.randn(HEADS, HEADS, 3, 3, generator=g),
        "conv_bias": 0.1 * torch.randn(HEADS, generator=g),
    }


def _past_rows(g: torch.Generator, batch: int, t_q: int, t_k: int) -> Tensor:
    """[B, H, 2, Tk]: zeros for a whole sequence; for a decode step, rows of the two positions
    before the queries, zero after each row's own position (as a causal mixed map's are)."""
    rows = torch.randn(batch, HEADS, 2, t_k, generator=g)
    first = t_k - t_q  # position of the first query; the rows are positions first-2, first-1
    own = torch.tensor([first - 2, first - 1])[:, None]  # [2, 1]
    return torch.where(torch.arange(t_k)[None, :] <= own, rows, torch.zeros(()))


_ATTENTION_POSITIONS = {"query": (2,), "key": (2,), "value": (2,), "key_padding_mask": (1,)}

REF_CASES = {
    "standard": RefCase("CausalAttention", standard_ref.causal_attention, _attention,
                        _ATTENTION_POSITIONS),
    "qvi-prefix": RefCase("QVIPrefixAttention", qvi_ref.qvi_prefix_attention,
                          _qvi_prefix_inputs, _ATTENTION_POSITIONS, causal_outputs=(0, 1)),
    "qvi-pairwise": RefCase("QVICausalPairwiseAttention", qvi_ref.qvi_causal_pairwise_attention,
                            _qvi_pairwise_inputs, _ATTENTION_POSITIONS),
    "ganet": RefCase("CausalGatedAttention", ganet_ref.causal_gated_attention, _gated_inputs,
                     {**_ATTENTION_POSITIONS, "gate_logits": (1,)},
                     discrete=("gates", "open_slots")),
    "evolving-start": RefCase("CausalEvolvingAttentionStart",
                              evolving_ref.causal_evolving_attention_start, _attention,
                              _ATTENTION_POSITIONS, causal_outputs=(0, 1)),
    "evolving": RefCase(
        "CausalEvolvingAttention", evolving_ref.causal_evolving_attention, _evolving_inputs,
        {**_ATTENTION_POSITIONS, "prev_logits": (2, 3)},
        {"scale": SCALE, "alpha": 0.3, "beta": 0.7, "negative_slope": 0.01},
        causal_outputs=(0, 1),
    ),
    "evolving-relu": RefCase(
        "CausalEvolvingAttention", evolving_ref.causal_evolving_attention, _evolving_inputs,
        {**_ATTENTION_POSITIONS, "prev_logits": (2, 3)},
        {"scale": SCALE, "alpha": 0.5, "beta": 1.0, "negative_slope": 0.0},
        causal_outputs=(0, 1),
    ),
}


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class CausalCase:
    """One row: a variant's causal configuration, its tiny stack and its op references."""

    id: str
    variant: str
    build: Callable[[], CausalStack]
    references: tuple[str, ...]  # keys of REF_CASES
    description: str = ""
    no_export: str = ""  # why the stack cannot export yet (a strict xfail), or ""

    def stack(self, seed: int = 0) -> CausalStack:
        torch.manual_seed(seed)
        return self.build().eval()

    def __str__(self) -> str:
        return self.id


CAUSAL_CASES = (
    CausalCase("standard", "standard", _standard, ("standard",), "a causal mask"),
    CausalCase("qvi-prefix", "qvi", _qvi("prefix"), ("qvi-prefix",),
               "causal prefix pooling; cache: K, Ṽ and the running pooling sums"),
    CausalCase("qvi-pairwise", "qvi", _qvi("pairwise"), ("qvi-pairwise",),
               "causal as it is; Ṽ recomputed against the cached V"),
    CausalCase("ganet-mlp", "ganet", _ganet("mlp"), ("ganet",), "per-token gates"),
    CausalCase("ganet-conv", "ganet", _ganet("conv"), ("ganet",),
               "causal conv gates; cache: the last two embeddings"),
    CausalCase("ganet-lstm", "ganet", _ganet("lstm"), ("ganet",),
               "unidirectional LSTM gates; cache: its state",
               no_export="the LSTM gate network branches on the mask's padding and steps in a "
                         "Python loop (data-dependent), which torch.export cannot trace"),
    CausalCase("evolving", "evolving", _evolving(0.3, 0.7, 0.01),
               ("evolving-start", "evolving"), "every branch of the mixing"),
    CausalCase("evolving-defaults", "evolving", _evolving(0.5, 1.0, 0.0),
               ("evolving-start", "evolving-relu"), "alpha 0.5, beta 1, ReLU"),
)

# Registered variants without a causal form: {variant: why}. Every built-in variant has one, so
# this is empty; a plug-in variant that cannot decode lists itself here with its reason (the
# guard in test_causal.py then accepts it, and refuses a name that is not registered).
NO_CAUSAL_FORM: dict[str, str] = {}
