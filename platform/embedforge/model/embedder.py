"""The embedder: one code path for training (differentiable `forward`) and inference (`encode_*`).

A backbone (a decoder-only LLM made bidirectional, NV-Embed 3.1, or an encoder / existing embedding model), a
pooling head (mean, CLS, last, latent attention NV-Embed 3.2, or ATA MGH 2.2), and instruction rendering (NV-Embed
4; in-context examples LGAI 4.2) whose tokens are attended to and, unless `pooled_tokens: all`, not pooled.
Implements `embedforge.model.protocol.TextEncoder`.
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from embedforge.config.model import ModelConfig
from embedforge.model.attention_capture import LastLayerAttention
from embedforge.model.backbone_spec import DECODER_TYPES
from embedforge.model.batching import budget_batches, length_sorted_batches, prefetched
from embedforge.model.instructions import Demonstration, render_prefix
from embedforge.model.packed import HALF, packed_last_hidden_state
from embedforge.model.pooling import Pooling, build_pooling
from embedforge.model.tokenization import EncodedBatch, framing_tokens, tokenize_pairs
from embedforge.model.unpadded import UnpaddedBertModel

log = logging.getLogger(__name__)
Kind = Literal["query", "document"]
Packing = Literal["auto", "always", "never"]
# batches tokenized ahead of a GPU on this many threads (the Rust tokenizer releases the GIL; on an H200 host a small
# encoder's forward pass outruns one core's tokenizer ~8-fold: benchmarks/results/gpu.json)
TOKENIZER_THREADS = max(2, min(8, (os.cpu_count() or 2) // 2))


class Embedder(nn.Module):
    """Backbone + pooling + tokenizer + the model config that produced them.

    `backbone_ref` names the base checkpoint (a `bundled:` ref or a path) LoRA adapters apply to. `config` has its
    `auto` values resolved for this backbone (`backbone_spec.resolve_model_config`). With `model.frozen_documents`,
    `document_backbone` is the starting model's backbone, frozen: it encodes documents of asymmetric tasks, so their
    vectors are the starting model's (query-side adaptation).
    """

    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: ModelConfig,
        pooling: Pooling | None = None,
        name: str | None = None,
        backbone_ref: str | None = None,
        document_backbone: PreTrainedModel | None = None,
    ) -> None:
        super().__init__()
        if config.frozen_documents != (document_backbone is not None):
            raise ValueError("model.frozen_documents needs the starting model's backbone for documents, and only it")
        self.backbone = backbone
        self.document_backbone = document_backbone
        if document_backbone is not None:
            document_backbone.requires_grad_(False)
        self.tokenizer = tokenizer
        self.config = config
        self.pooling = pooling if pooling is not None else build_pooling(config, backbone.config.hidden_size)
        self.pooling.to(torch.float32)
        if "auto" in (config.pooling, config.pooled_tokens) or config.bidirectional is None:
            raise ValueError("the embedder needs a resolved model config (backbone_spec.resolve_model_config)")
        self.name = name or config.backbone
        self.backbone_ref = backbone_ref or config.backbone
        # decoders get positions restarting at each text (left or right padding); encoders number their own
        # positions (RoBERTa-family offsets included) and are therefore always padded on the right
        self.is_decoder = backbone.config.model_type in DECODER_TYPES
        self._padding_side = "right"
        self.attention_capture = LastLayerAttention.attach(backbone) if self.pooling.needs_attentions else None
        self.texts_encoded = 0
        self.texts_truncated = 0
        self.unpadded_inference = True  # False: the model's own padded forward everywhere (a benchmark baseline)
        # decoders on real tokens only (`packed.py`): auto = on a GPU in half precision; always (tests); never
        self.packing: Packing = "auto"
        self._compiled: set[int] = set()  # the backbones whose blocks `model.compile` compiled
        self._spare_tokenizers: queue.SimpleQueue | None = None
        self._unpadded: dict[int, UnpaddedBertModel] = {}  # one per backbone object: it keeps the stacked weights

    @property
    def padding_side(self) -> str:
        return self._padding_side

    @padding_side.setter
    def padding_side(self, side: str) -> None:
        if side != "right" and not self.is_decoder:
            raise ValueError(f"an encoder backbone ({self.backbone.config.model_type}) is padded on the right only")
        self._padding_side = side

    @property
    def dimension(self) -> int:
        return self.pooling.output_dim(self.backbone.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def prefixes(
        self,
        n: int,
        kind: Kind,
        task: str | Sequence[str | None] | None = None,
        examples: Sequence[Sequence[Demonstration]] | None = None,
    ) -> list[str]:
        """The instruction prefix of each of `n` texts: queries always get one, documents only with a task."""
        if kind not in ("query", "document"):
            raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")
        tasks = [task] * n if task is None or isinstance(task, str) else list(task)
        demos = [()] * n if examples is None else list(examples)
        if len(tasks) != n or len(demos) != n:
            raise ValueError(f"got {len(tasks)} tasks and {len(demos)} example lists for {n} texts")
        instr = self.config.instructions
        return [
            render_prefix(instr, t, d) if kind == "query" or t is not None else instr.document_prefix
            for t, d in zip(tasks, demos, strict=True)
        ]

    def tokenize(
        self,
        texts: Sequence[str],
        task: str | Sequence[str | None] | None = None,
        kind: Kind = "query",
        examples: Sequence[Sequence[Demonstration]] | None = None,
    ) -> EncodedBatch:
        """Model inputs for `texts` as queries or documents; `task` may be one instruction or one per text."""
        batch = self._tokenize(texts, task, kind, examples)
        self._count(len(texts), batch)
        return batch

    def _tokenize(
        self,
        texts: Sequence[str],
        task: str | Sequence[str | None] | None,
        kind: Kind,
        examples: Sequence[Sequence[Demonstration]] | None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> EncodedBatch:
        max_length = self.config.max_query_length if kind == "query" else self.config.max_doc_length
        prefixes = self.prefixes(len(texts), kind, task, examples)
        pool_all = self.config.pooled_tokens == "all"
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        return tokenize_pairs(tokenizer, prefixes, texts, max_length, self.padding_side, pool_all)

    def _thread_tokenizers(self) -> queue.SimpleQueue:
        """Copies of the tokenizer for the threads that tokenize ahead: a Rust tokenizer object fails when another
        thread changes its settings (truncation, padding) while it encodes, so threads never share the model's."""
        if self._spare_tokenizers is None:
            self._spare_tokenizers = queue.SimpleQueue()
            for _ in range(TOKENIZER_THREADS):
                self._spare_tokenizers.put(copy.deepcopy(self.tokenizer))
        return self._spare_tokenizers

    def _count(self, n: int, batch: EncodedBatch) -> None:
        self.texts_encoded += n
        self.texts_truncated += batch.num_truncated

    def forward(self, batch: EncodedBatch, normalize: bool | None = None, frozen: bool = False) -> torch.Tensor:
        """Differentiable embeddings (B, dimension), float32; L2-normalised when `normalize` (default: config).
        `frozen`: through the frozen document backbone (documents with `model.frozen_documents`), without
        gradients."""
        batch = batch.to(self.device)
        if frozen and self.document_backbone is None:
            raise ValueError("a frozen forward pass needs model.frozen_documents")
        backbone = self.document_backbone if frozen else self.backbone
        if (
            self.config.compile
            and self.is_decoder
            and self.device.type == "cuda"
            and id(backbone) not in self._compiled
        ):
            from embedforge.model.compile import compile_blocks

            compile_blocks(backbone)
            self._compiled.add(id(backbone))
        with torch.no_grad() if frozen else nullcontext():
            if self._runs_unpadded(backbone):
                unpadded = self._unpadded.get(id(backbone))
                if unpadded is None or unpadded.bert is not backbone:
                    unpadded = self._unpadded[id(backbone)] = UnpaddedBertModel(backbone)
                hidden = unpadded.last_hidden_state(batch.input_ids, batch.attention_mask)
            elif self._runs_packed(backbone):
                hidden = packed_last_hidden_state(backbone, batch.input_ids, batch.attention_mask, batch.position_ids)
            else:
                positions = {"position_ids": batch.position_ids} if self.is_decoder else {}
                out = backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **positions)
                hidden = out.last_hidden_state
        attentions = self.attention_capture.pop() if self.attention_capture is not None and not frozen else None
        pooled = self.pooling(hidden.float(), batch.attention_mask, batch.pool_mask, attentions)
        normalize = self.config.normalize if normalize is None else normalize
        return F.normalize(pooled, dim=-1) if normalize else pooled

    def _runs_unpadded(self, backbone: nn.Module | None = None) -> bool:
        """Inference with a plain BERT-family backbone computes only the real tokens (`unpadded.py`): the same
        vectors up to float rounding, faster (`benchmarks/results/unpadded.json`, `gpu.json`). Training (gradients,
        or train mode: GradCache's no-grad pass must draw the dropout masks its replay draws), LoRA-wrapped or
        quantized layers and attention-reading poolings keep the model's own forward."""
        return (
            self.unpadded_inference
            and not self.training  # dropout draws masks per padded position (GradCache replays them)
            and not torch.is_grad_enabled()
            and self.attention_capture is None
            and UnpaddedBertModel.supports(self.backbone if backbone is None else backbone)
        )

    def _runs_packed(self, backbone: nn.Module) -> bool:
        """Whether a decoder computes only its real tokens (`packed.py`), in training and inference: on a GPU when
        it computes in half precision (its weights, or autocast), where FlashAttention's varlen kernel runs; never
        with an attention-reading pooling, which needs the padded attention maps."""
        if not self.is_decoder or self.attention_capture is not None or self.packing == "never":
            return False
        if self.packing == "always":
            return True
        device = self.device
        if device.type != "cuda":
            return False
        weights = next(backbone.parameters()).dtype
        autocast = torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") in HALF
        return weights in HALF or autocast

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        task: str | None = None,
        kind: Kind = "query",
        batch_size: int = 32,
        examples: Sequence[Sequence[Demonstration]] | None = None,
    ) -> np.ndarray:
        """L2-normalised float32 (len(texts), dimension), encoded in length-sorted batches, input order kept."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        was_training = self.training
        self.eval()
        result = np.zeros((len(texts), self.dimension), dtype=np.float32)
        started, truncated_before = time.perf_counter(), self.texts_truncated
        frozen = self.frozen_side(kind, task)
        batches, workers = self.batch_plan(texts, task, kind, batch_size, examples)

        spares = self._thread_tokenizers() if workers else None

        def tokenized(idx: list[int]) -> EncodedBatch:
            chunk_examples = None if examples is None else [examples[i] for i in idx]
            if spares is None:
                return self._tokenize([texts[i] for i in idx], task, kind, chunk_examples)
            tokenizer = spares.get()
            try:
                return self._tokenize([texts[i] for i in idx], task, kind, chunk_examples, tokenizer)
            finally:
                spares.put(tokenizer)

        try:
            inputs = prefetched(tokenized, batches, workers)
            bar = tqdm(batches, desc=f"encode ({kind})", unit="batch", disable=len(batches) < 20, leave=False)
            for idx, batch in zip(bar, inputs, strict=True):
                self._count(len(idx), batch)
                result[idx] = F.normalize(self.forward(batch, normalize=False, frozen=frozen), dim=-1).cpu().numpy()
        finally:
            self.train(was_training)
        elapsed = time.perf_counter() - started
        if texts:
            log.info(
                "encoded %d texts as %s in %.2fs (%.1f texts/s), %d truncated at the configured maximum length",
                len(texts),
                kind,
                elapsed,
                len(texts) / max(elapsed, 1e-9),
                self.texts_truncated - truncated_before,
            )
        return result

    def batch_plan(
        self,
        texts: Sequence[str],
        task: str | None,
        kind: Kind,
        batch_size: int,
        examples: Sequence[Sequence[Demonstration]] | None = None,
    ) -> tuple[list[list[int]], int]:
        """The batches `encode` runs and how many threads tokenize ahead. On a CPU: `batch_size` texts of similar
        length, tokenized inline. On a GPU, where the model computes the real tokens only (packed decoders,
        unpadded BERT), a batch holds as many texts as fit the tokens of `batch_size` texts at the maximum length,
        so short texts fill the matrix products too; a text's tokens are bounded by its UTF-8 bytes plus its
        instruction and special tokens (a token spans at least one byte), and batches are tokenized on threads
        while the GPU works."""
        backbone = self.document_backbone if self.frozen_side(kind, task) else self.backbone
        with torch.inference_mode():  # what encode runs in (the unpadded path is for inference only)
            fast = self._runs_packed(backbone) or self._runs_unpadded(backbone)
        if self.device.type != "cuda" or not fast:
            return length_sorted_batches(texts, batch_size), 0
        max_length = self.config.max_query_length if kind == "query" else self.config.max_doc_length
        prefixes = self.prefixes(len(texts), kind, task, examples)
        framing = {p: framing_tokens(self.tokenizer, p) for p in set(prefixes)}
        bounds = [min(len(t.encode()) + framing[p], max_length) for t, p in zip(texts, prefixes, strict=True)]
        return budget_batches(bounds, None, batch_size * max_length), TOKENIZER_THREADS

    def frozen_side(self, kind: Kind, task: str | None) -> bool:
        """Whether texts of this kind and task go through the frozen document backbone: documents of asymmetric
        tasks (no task) with `model.frozen_documents`; symmetric tasks give both sides the trained one."""
        return self.document_backbone is not None and kind == "document" and task is None

    def cache_identity(self, fingerprint: str, side: str, task: str | None) -> str | None:
        """The frozen document side's vectors are the starting model's, named as the starting model's own encoder
        names them, so a collection encoded with it (mining's teacher, evaluation of the starting model) is read
        back. None otherwise: the embedder's settings name its vectors."""
        return self.frozen_document_identity() if side == "document" and self.frozen_side("document", task) else None

    def frozen_document_identity(self) -> str:
        """The cache identity of the frozen document side's vectors (`frozen_documents.starting_identity`)."""
        from embedforge.model.frozen_documents import starting_identity

        if self.document_backbone is None:
            raise ValueError("the embedder has no frozen document side (model.frozen_documents is off)")
        weights = {p.dtype for p in self.document_backbone.parameters()}
        return starting_identity(self.config, self.backbone_ref, weights)

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        """Queries get the instruction for `task` (default: config's), after optional shared demonstrations."""
        demos = [list(examples)] * len(texts) if examples else None
        return self.encode(texts, task, "query", batch_size, demos)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        """Documents get `document_prefix` (none by default); with `task` (symmetric tasks) they get the instruction
        too (NV-Embed 4)."""
        return self.encode(texts, task, "document", batch_size)

    def enable_lora(self) -> None:
        """Wrap the backbone with fresh LoRA adapters from `config.lora` (NV-Embed App. C); pooling stays full."""
        from embedforge.model.lora import add_lora

        self.backbone = add_lora(self.backbone, self.config.lora)

    def merge_lora(self) -> Embedder:
        """Fold LoRA adapters into the backbone weights, in place, for inference: every projection is then one
        matmul instead of three (base, A, B). The encodings stay the same; training can no longer resume from it."""
        from embedforge.model.lora import is_peft

        if is_peft(self.backbone):
            self.backbone = self.backbone.merge_and_unload()
        return self
