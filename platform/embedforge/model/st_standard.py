"""A sentence-transformers folder of ST's own modules (Transformer, Pooling, Normalize) that encodes like embedforge.

Plain `SentenceTransformer(path)` loads it (no `trust_remote_code`). That needs an embedder ST's modules can
express: an encoder backbone, or a decoder with causal attention (ST's Transformer loads the decoder with its
causal mask, so NV-Embed 3.1's bidirectional attention cannot be written), and `mean`, `weighted_mean`, `cls` or
`last` pooling (ST Pooling `mean` / `weightedmean` / `cls` / `lasttoken`; NV-Embed 3.2's latent attention and MGH
2.2's ATA have no ST mode).
`export.py` falls back to the custom module otherwise. What must also agree with `tokenization.py`, and how it is
made to:

- token ids. embedforge tokenizes (instruction, text) apart and appends EOS; ST tokenizes `prompt + text` as one
  string with the tokenizer's own special tokens. The exported tokenizer appends EOS (post-processor) and, when
  one-string tokenization would merge the instruction's trailing space into the text's first word (byte-level BPE:
  `Query: ` + `how` gives `Ġhow`, not `Ġ` `how`), its pre-tokenizer first splits off a leading instruction (a
  regex built from `query_template`, anchored at the start of the input), so both sides are tokenized apart as in
  embedforge. A document that itself begins with a rendered instruction is split the same way (accepted).
- pooled tokens. `pooled_tokens: all` is Pooling `include_prompt=True` (every token). Otherwise instruction tokens
  are attended to but not pooled (NV-Embed 4): Pooling `include_prompt=False` leaves out the prompt, whose length
  ST measures by tokenizing it alone (with the split above that is embedforge's prefix length, leading BOS
  included). ST cannot leave out a BOS on bare documents, so mean pooling with a BOS-adding tokenizer is not
  expressible.
- right padding and positions from 0, as embedforge; per-kind maximum lengths (Transformer `query_length` /
  `document_length`, used by `encode_query` / `encode_document`).

Each point is checked on probe texts against `tokenize_pairs` before anything is written; a mismatch is returned as
the reason the custom module is needed.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from embedforge.config.model import InstructionConfig, ModelConfig
from embedforge.model.embedder import Embedder
from embedforge.model.instructions import render_prefix
from embedforge.model.lora import merged_copy
from embedforge.model.tokenization import special_frame, tokenize_pairs

ST_POOLING = {"mean": "mean", "weighted_mean": "weightedmean", "cls": "cls", "last": "lasttoken"}
TEXT_ONLY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}  # no chat-template path
PROBES = ("how do I reset my PIN?", " leading space", "Hello, World! 123", "naïve café, 東京", "two\nlines", "")
_TASK = "\x00task\x00"


def config_blocker(config: ModelConfig, is_decoder: bool) -> str | None:
    """Why ST's own modules cannot express `config` (None when they can, pending the tokenizer probes)."""
    if config.bidirectional and is_decoder:
        return (
            "bidirectional attention (NV-Embed 3.1): ST's Transformer module loads the decoder with its causal mask, "
            "and the embedforge module switches it to bidirectional"
        )
    if config.frozen_documents:
        return (
            "frozen documents (query-side adaptation): documents are encoded by the starting model, queries by the "
            "trained one, and ST's Transformer module holds one model"
        )
    if config.pooling not in ST_POOLING:
        modes = ", ".join(ST_POOLING.values())
        return f"{config.pooling} pooling: ST's Pooling module has no such mode (it has {modes})"
    return None


def st_prompts(instructions: InstructionConfig) -> dict[str, str]:
    """ST `prompts`: queries get the default instruction, documents `document_prefix` (as `Embedder.encode_*`)."""
    return {"query": render_prefix(instructions, None), "document": instructions.document_prefix}


def _onig_literal(text: str) -> str:
    return "".join(ch if ch.isalnum() and ch.isascii() else f"\\x{{{ord(ch):x}}}" for ch in text)


def instruction_pattern(template: str) -> str | None:
    """A regex (tokenizers/Oniguruma syntax) for a rendered `template` at the start of the input, any task."""
    parts = template.format(task=_TASK).split(_TASK)
    if not parts[-1]:
        return None  # nothing after the task to end the match on
    return r"\A" + r"[\s\S]*?".join(_onig_literal(p) for p in parts)


def adapted_tokenizer(
    tokenizer: PreTrainedTokenizerBase, split_pattern: str | None, max_length: int
) -> PreTrainedTokenizerBase:
    """A copy that appends EOS itself (after its leading specials, as `tokenize_pairs`) and, given
    `split_pattern`, tokenizes a leading instruction apart from the text."""
    from tokenizers import Regex, pre_tokenizers, processors

    tok = copy.deepcopy(tokenizer)
    backend = tok.backend_tokenizer
    if split_pattern is not None:
        rest = [backend.pre_tokenizer] if backend.pre_tokenizer is not None else []
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split_pattern), "isolated"), *rest])
    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    if eos_id is not None and tokenizer("x")["input_ids"][-1:] != [eos_id]:
        # one template (chained templates do not compose): the same leading specials, then the text, then EOS
        lead_ids = special_frame(tokenizer)[0]
        lead = tokenizer.convert_ids_to_tokens(lead_ids)
        head = "".join(f"{token} " for token in lead)
        backend.post_processor = processors.TemplateProcessing(
            single=f"{head}$A {eos}",
            pair=f"{head}$A {eos} $B:1 {eos}:1",
            special_tokens=list(dict(zip([*lead, eos], [*lead_ids, eos_id], strict=True)).items()),
        )
    tok.padding_side = "right"
    tok.model_max_length = max_length
    return tok


def _st_view(
    tokenizer: PreTrainedTokenizerBase, prompt: str, text: str, include_prompt: bool
) -> tuple[list[int], list[int]]:
    """Token ids and pooling mask as ST's Transformer (prompt + text) and Pooling(include_prompt) make them."""
    ids = tokenizer(prompt + text)["input_ids"]
    prompt_length = 0
    if prompt and not include_prompt:  # ST: the prompt tokenized alone, less a trailing special token
        alone = tokenizer(prompt)["input_ids"]
        prompt_length = len(alone) - (1 if alone and alone[-1] in tokenizer.all_special_ids else 0)
    return ids, [0] * prompt_length + [1] * (len(ids) - prompt_length)


def probe_mismatch(embedder: Embedder, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str] = PROBES) -> str | None:
    """How ST with `tokenizer` would differ from embedforge on `texts` as queries and documents (None: no way)."""
    prompts = st_prompts(embedder.config.instructions)
    suffix = embedder.config.instructions.query_template.format(task=_TASK).split(_TASK)[-1]
    docs = [*texts, f"see{suffix}above"]  # a document holding the template's tail must not be split
    pool_all = embedder.config.pooled_tokens == "all"
    for kind, items in (("query", texts), ("document", docs)):
        prompt = prompts[kind]
        ref = tokenize_pairs(embedder.tokenizer, [prompt] * len(items), items, 1 << 20, "right", pool_all)
        for i, text in enumerate(items):
            real = ref.attention_mask[i].bool()
            ids, pool = _st_view(tokenizer, prompt, text, pool_all)
            if ids != ref.input_ids[i][real].tolist():
                return f"ST's one-string tokenization gives other token ids than embedforge for the {kind} {text!r}"
            if embedder.config.pooling in ("mean", "weighted_mean") and pool != ref.pool_mask[i][real].tolist():
                return (
                    f"ST's Pooling would average other tokens than embedforge for the {kind} {text!r} (it can leave "
                    "out only a prompt, not e.g. a leading BOS)"
                )
    return None


def save_matching_tokenizer(embedder: Embedder, directory: Path) -> str | None:
    """Save into `directory` a tokenizer ST tokenizes like embedforge (as saved and reloaded); else why not."""
    cfg = embedder.config
    if not hasattr(embedder.tokenizer, "backend_tokenizer"):
        return f"the tokenizer ({type(embedder.tokenizer).__name__}) has no tokenizers backend to adapt"
    max_length = max(cfg.max_query_length, cfg.max_doc_length)
    candidates = [None, instruction_pattern(cfg.instructions.query_template)]
    reason = None
    for pattern in dict.fromkeys(candidates):  # unique, in order: the split only when plain tokenization differs
        adapted_tokenizer(embedder.tokenizer, pattern, max_length).save_pretrained(directory)
        reason = probe_mismatch(embedder, AutoTokenizer.from_pretrained(directory))
        if reason is None:
            return None
    return reason


def write_standard_modules(embedder: Embedder, directory: Path) -> str | None:
    """Write the standard-modules folder into `directory`; returns why it cannot (then nothing is written)."""
    reason = config_blocker(embedder.config, embedder.is_decoder)
    if reason is not None:
        return reason
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    cfg = embedder.config
    with tempfile.TemporaryDirectory(dir=directory, prefix=".st-") as tmp:
        reason = save_matching_tokenizer(embedder, Path(tmp))
        if reason is not None:
            return reason
        merged_copy(embedder.backbone).save_pretrained(tmp, safe_serialization=True)  # LoRA folded in
        transformer = Transformer(
            tmp,
            modality_config=TEXT_ONLY,
            module_output_name="token_embeddings",
            query_length=cfg.max_query_length,
            document_length=cfg.max_doc_length,
        )
        pooling = Pooling(
            transformer.get_embedding_dimension(), ST_POOLING[cfg.pooling], include_prompt=cfg.pooled_tokens == "all"
        )
        modules = [transformer, pooling, *([Normalize()] if cfg.normalize else [])]
        model = SentenceTransformer(
            modules=modules, prompts=st_prompts(cfg.instructions), similarity_fn_name="cosine", device="cpu"
        )
        model.save(str(directory))
    return None
