"""A Hugging Face LLaMA-family causal LM -> an attndeploy decoder with any variant (issue #49).

`load_hf_causal_lm(PATH)` reads a `save_pretrained` folder or a `.gguf` file (transformers
dequantizes it to float32 through the `gguf` package: those fp32 weights are the reference),
from local files only. `convert_causal_lm(hf_model, variant)` builds a `CausalLM` whose config
has the LLaMA block (rotary positions, grouped-query attention, RMSNorm, SwiGLU, no biases) and
copies every weight; the variant then starts at the pretrained model's own function:

    qvi       start_as_vanilla: Ṽ = V whatever the gate says
    ganet     the gate network starts open (every token kept, in the cache too)
    evolving  evolving_mix 0: the maps' mixing weights α and β start at 0 (A = the layer's own
              logits) and the row-causal conv is the identity, so fine-tuning can bring them in

so the converted model computes what the pretrained one did (to float rounding;
`attndeploy.models.decoder.warm_start`, which also holds how fine-tuning brings the variant
in). The tokenizer becomes an `HFTokenizer` record (its tokenizer.json, special ids and chat
template), which the checkpoint and the export carry: generation needs no Hugging Face code.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attndeploy.errors import ConfigError, DataError
from attndeploy.generation.hf_tokenizer import HFTokenizer
from attndeploy.models.decoder.config import DecoderConfig
from attndeploy.models.decoder.model import CausalLM
from attndeploy.models.decoder.warm_start import start_warm

ARCHITECTURES = ("LlamaForCausalLM",)
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM"}  # general.architecture -> transformers class
DEFAULT_MAX_SEQ = 2048  # the exported context unless asked (the model's own may be far longer)


@dataclass
class LoadedCausalLM:
    model: Any  # transformers' LlamaForCausalLM, float32, eval mode
    tokenizer: Any | None  # its fast tokenizer, or None
    source: str


def _gguf_architecture(path: Path) -> str:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConfigError("reading a .gguf file needs the `gguf` package: pip install "
                          "'attndeploy[hf]'") from None
    try:
        field = GGUFReader(str(path)).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except (KeyError, ValueError, OSError, IndexError) as exc:
        raise DataError(f"{path}: not a readable GGUF file ({exc})") from None


@contextlib.contextmanager
def _quiet_gguf_reader() -> Iterator[None]:
    """transformers de-quantizes a GGUF's tensors under a bare `tqdm` bar that its
    `disable_progress_bar` does not reach: it would print one more bar to stderr, inside the
    command's own progress and on a `--json` run. The bar is turned off for the load (where
    transformers has no such module, nothing is changed)."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_reader
    except ImportError:
        gguf_reader = None
    bar = getattr(gguf_reader, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_reader.tqdm = bar


def load_hf_causal_lm(path: Path | str) -> LoadedCausalLM:
    """The model and tokenizer at `path` (a folder with config.json, or a .gguf file)."""
    path = Path(path)
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ConfigError("converting a Hugging Face model needs transformers: pip install "
                          "'attndeploy[hf]'") from None
    if path.is_file() and path.suffix == ".gguf":
        arch = _gguf_architecture(path)
        if arch not in GGUF_ARCHITECTURES:
            raise ConfigError(f"{path}: a GGUF of architecture {arch!r}; attndeploy converts "
                              f"{', '.join(GGUF_ARCHITECTURES)} (LlamaForCausalLM) decoders")
        folder, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        folder, kwargs = path, {}
        try:
            architectures = AutoConfig.from_pretrained(folder,
                                                       local_files_only=True).architectures
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: not a Hugging Face model folder "
                            f"({str(exc).splitlines()[0][:200]})") from None
        if not set(architectures or ()) & set(ARCHITECTURES):
            raise ConfigError(f"{path}: a {', '.join(architectures or ['?'])} model; attndeploy "
                              f"converts {', '.join(ARCHITECTURES)} decoders")
    else:
        raise DataError(f"{path}: give a save_pretrained folder (with config.json) or a .gguf "
                        "file")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the command shows its own progress
    try:
        with _quiet_gguf_reader():
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                         local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: transformers cannot load it "
                        f"({str(exc).splitlines()[0][:200]})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        tokenizer = None
    if type(model).__name__ not in ARCHITECTURES:
        raise ConfigError(f"{path}: a {type(model).__name__}; attndeploy converts "
                          f"{', '.join(ARCHITECTURES)} decoders")
    return LoadedCausalLM(model.eval(), tokenizer, str(path))


def decoder_config(hf_config: Any, variant: str, *, max_seq: int | None = None,
                   **options: Any) -> DecoderConfig:
    """The DecoderConfig of a LlamaConfig (refusing what the block does not compute)."""
    rope = getattr(hf_config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ConfigError(f"rotary scaling {rope_type!r} is not supported (plain RoPE only)")
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ConfigError(f"a LLaMA MLP with activation {hf_config.hidden_act!r} is not "
                          "supported (silu only)")
    heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    if head_dim * heads != hf_config.hidden_size:
        raise ConfigError(f"head_dim {head_dim} × {heads} heads is not the hidden size "
                          f"{hf_config.hidden_size}: not supported")
    attention_bias = bool(getattr(hf_config, "attention_bias", False))
    if attention_bias != bool(getattr(hf_config, "mlp_bias", False)):
        raise ConfigError("attention and MLP biases differ: not supported")
    context = int(hf_config.max_position_embeddings)
    wanted = min(context, DEFAULT_MAX_SEQ) if max_seq is None else int(max_seq)
    if not 1 <= wanted <= context:
        raise ConfigError(f"max_seq must be between 1 and the model's context {context}, "
                          f"got {wanted}")
    return DecoderConfig(
        vocab_size=hf_config.vocab_size, variant=variant, d_model=hf_config.hidden_size,
        n_heads=heads, n_layers=hf_config.num_hidden_layers, d_ff=hf_config.intermediate_size,
        max_seq=wanted, tie_embeddings=bool(hf_config.tie_word_embeddings),
        n_kv_heads=hf_config.num_key_value_heads, positions="rope", rope_theta=float(theta),
        norm="rms", norm_eps=float(hf_config.rms_norm_eps), ffn="swiglu", bias=attention_bias,
        evolving_mix=0.0, **options)


def _weights(hf_state: dict[str, torch.Tensor], config: DecoderConfig) -> dict[str, torch.Tensor]:
    """attndeploy's names for the LLaMA weights (q, k, v stacked into one qkv)."""
    out = {"token_embedding.weight": hf_state["model.embed_tokens.weight"],
           "final_norm.weight": hf_state["model.norm.weight"]}
    if not config.tie_embeddings:
        out["lm_head.weight"] = hf_state["lm_head.weight"]
    for i in range(config.n_layers):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        for part in ("weight", "bias") if config.bias else ("weight",):
            out[ours + f"attention.qkv.{part}"] = torch.cat(
                [hf_state[hf + f"self_attn.{p}_proj.{part}"] for p in "qkv"], dim=0)
            out[ours + f"attention.out.{part}"] = hf_state[hf + f"self_attn.o_proj.{part}"]
            for name in ("gate", "up", "down"):
                out[ours + f"ffn.{name}.{part}"] = hf_state[hf + f"mlp.{name}_proj.{part}"]
        out[ours + "ln1.weight"] = hf_state[hf + "input_layernorm.weight"]
        out[ours + "ln2.weight"] = hf_state[hf + "post_attention_layernorm.weight"]
    return out


@torch.no_grad()
def convert_causal_lm(hf_model: Any, variant: str = "standard", *, max_seq: int | None = None,
                      **options: Any) -> CausalLM:
    """A `CausalLM` with `variant`'s attention at its warm start, the LLaMA weights copied."""
    config = decoder_config(hf_model.config, variant, max_seq=max_seq, **options)
    model = CausalLM(config)
    state = _weights(hf_model.state_dict(), config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    own = {n for n, _ in model.named_parameters() if not any(
        n.endswith(s) for s in ("qkv.weight", "qkv.bias", "out.weight", "out.bias"))
        and (".attention." in n or n.startswith("gate_network."))}
    left = sorted(set(missing) - own - {"lm_head.weight"})
    if left or unexpected:
        raise ConfigError(f"the converted weights do not fit (missing {left[:5]}, unexpected "
                          f"{sorted(unexpected)[:5]})")
    return start_warm(model).eval()


def tokenizer_of(loaded: LoadedCausalLM) -> HFTokenizer | None:
    """The model's tokenizer as an `HFTokenizer` (None when it has none)."""
    tok = loaded.tokenizer
    if tok is None or not hasattr(tok, "backend_tokenizer"):
        return None
    eos = tok.eos_token_id
    generation = getattr(loaded.model, "generation_config", None)
    eos_ids = getattr(generation, "eos_token_id", None)
    if isinstance(eos_ids, int):
        eos = eos_ids
    elif isinstance(eos_ids, list) and eos_ids:
        eos = eos_ids[0]
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    bos = tok.bos_token_id if tok.bos_token_id is not None else eos
    template = getattr(tok, "chat_template", None)
    return HFTokenizer(tok.backend_tokenizer.to_str(), bos_token_id=int(bos),
                       eos_token_id=int(eos), pad_token_id=int(pad),
                       chat_template=template if isinstance(template, str) else None)


def fine_tune_start(source: Path | str, variant: str, *, max_seq: int | None = None) -> Any:
    """What `train --hf-model` fine-tunes: the model at `source` converted to `variant` at its
    warm start, with its own tokenizer (`attndeploy.models.decoder.fit.Start`)."""
    from attndeploy.models.decoder.fit import Start

    loaded = load_hf_causal_lm(source)
    tokenizer = tokenizer_of(loaded)
    if tokenizer is None:
        raise ConfigError(f"{source} has no tokenizer: a language model is fine-tuned on "
                          "text, tokenized as it was pretrained")
    model = convert_causal_lm(loaded.model, variant, max_seq=max_seq)
    return Start(model, tokenizer, str(source))


def convert_to_checkpoint(source: Path | str, out: Path, *, variant: str = "standard",
                          max_seq: int | None = None, force: bool = False) -> dict[str, Any]:
    """`attndeploy convert`: a pretrained decoder -> an attndeploy decoder checkpoint at `out`
    (written all or none), the variant at its warm start. Returns a summary."""
    from attndeploy.models.decoder.checkpoint import save_decoder

    loaded = load_hf_causal_lm(source)
    model = convert_causal_lm(loaded.model, variant, max_seq=max_seq)
    tokenizer = tokenizer_of(loaded)
    save_decoder(model, tokenizer, Path(out), force=force,
                 training={"converted_from": str(source), "warm_start": True})
    return _summary(model, tokenizer, source, checkpoint=str(out))


def export_pretrained(source: Path | str, out: Path, *, variant: str = "standard",
                      max_seq: int | None = None) -> dict[str, Any]:
    """`attndeploy export --hf-model`: a pretrained decoder, converted to `variant` (standard:
    as it is), exported with its cache to `out` without a checkpoint in between."""
    from attndeploy.export.decoder import export_decoder

    loaded = load_hf_causal_lm(source)
    model = convert_causal_lm(loaded.model, variant, max_seq=max_seq)
    tokenizer = tokenizer_of(loaded)
    result = export_decoder(model, tokenizer, Path(out))
    return {**_summary(model, tokenizer, source), **result.summary()}


def _summary(model: CausalLM, tokenizer: HFTokenizer | None, source: Path | str,
             **extra: Any) -> dict[str, Any]:
    config = model.config
    return {"source": str(source), "variant": config.variant, "layers": config.n_layers,
            "heads": f"{config.n_heads} query / {config.kv_heads} key-value",
            "parameters": sum(p.numel() for p in model.parameters()),
            "max_seq": config.max_seq, "tokenizer": tokenizer is not None, **extra}
