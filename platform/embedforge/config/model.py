"""Model section: backbone, pooling, attention direction, LoRA, lengths and instructions.

Defaults follow NV-Embed (seed 000) sections 3.1-3.2 and appendix C; ATA pooling is MGH (seed 002) 2.2, and
position-weighted mean pooling SGPT's, as MGH 6 recalls it; in-context examples are LGAI-Embedding (seed 003) 4.2.
The backbone may be a decoder LLM or an encoder / existing embedding model (a sentence-transformers folder):
`pooling: auto` and `pooled_tokens: auto` take the backbone's own (`embedforge.model.backbone_spec`), so an
unchanged embedding model encodes exactly as it did.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import Section

PoolingName = Literal["auto", "mean", "weighted_mean", "cls", "last", "latent_attention", "ata"]
POOLING_HEADS: tuple[str, ...] = tuple(p for p in get_args(PoolingName) if p != "auto")  # what `auto` resolves to
PooledTokens = Literal["auto", "text", "all"]
ALL_LINEAR = "all-linear"
DType = Literal["auto", "float32", "bfloat16", "float16"]


class LatentAttentionConfig(Section):
    """NV-Embed 3.2: r trainable latents used as keys and values, multi-head cross-attention, MLP, mean pool."""

    num_latents: PositiveInt = 512
    num_heads: PositiveInt = 8
    mlp_ratio: float = Field(1.0, gt=0)


class LoraConfig(Section):
    """NV-Embed appendix C: rank 16, alpha 32, dropout 0.1. The pooling head is trained fully.

    `target_modules: [all-linear]` adapts every linear layer of the backbone (peft's shorthand; for Llama-family
    decoders that is q/k/v/o and gate/up/down, for BERT-family encoders query/key/value and the dense layers).
    `enabled: false` trains every backbone weight (full fine-tuning, the usual choice for small encoders).
    `top_layers: N` adapts only the last N transformer blocks: the blocks below keep their pretrained weights, and
    the backward pass stops at the lowest adapted block, so a step costs less."""

    enabled: bool = True
    r: PositiveInt = 16
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: [ALL_LINEAR], min_length=1)
    top_layers: PositiveInt | None = Field(
        None, description="adapt only the last N transformer blocks of the backbone; None adapts every block"
    )

    implicit_values: ClassVar[dict[str, Any]] = {"top_layers": None}

    @model_validator(mode="after")
    def _all_linear_alone(self) -> LoraConfig:
        if ALL_LINEAR in self.target_modules and len(self.target_modules) > 1:
            raise ValueError(f"lora.target_modules: {ALL_LINEAR!r} stands alone, got {self.target_modules}")
        return self


class InstructionConfig(Section):
    """NV-Embed 4 / Tables 12-13: queries get `Instruct: {task}\\nQuery: {text}`, documents are bare.

    A template without `{task}` is a fixed prefix (e5's `query: `, with `document_prefix: "passage: "`); an empty
    one gives no prefix at all (all-MiniLM-L6-v2 was trained without). In-context (query, positive) demonstrations
    (LGAI 4.2) are rendered with `example_template` before the instruction: training draws them with `train.in_context`,
    evaluation takes them from `evaluate.demonstrations`, a request sends them as `demonstrations`.
    """

    query_template: str = "Instruct: {task}\nQuery: "
    document_prefix: str = ""
    default_task: str = "Given a web search query, retrieve relevant passages that answer the query"
    example_template: str = "Query: {query}\nResponse: {positive}\n\n"

    @model_validator(mode="after")
    def _templates_format(self) -> InstructionConfig:
        try:
            self.query_template.format(task="t")
            self.example_template.format(query="q", positive="p")
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"query_template may only use {{task}} and example_template only {{query}} and {{positive}}: {err!r}"
            ) from err
        return self


class ModelConfig(Section):
    """The embedder. `int8_inference` quantizes Linear weights to int8 when loaded for inference (NV-Embed A.3).

    `pooling: auto` is the backbone's own (a sentence-transformers folder's Pooling mode; mean for a bare
    checkpoint). `pooled_tokens`: `text` pools the text and the closing EOS, leaving out leading special tokens and
    the instruction (NV-Embed 4); `all` pools every real token, specials and prompt included (sentence-transformers'
    default, how BERT-family embedders were trained); `auto` is `all` for encoders and `text` for decoders.
    `bidirectional` switches a decoder's attention (NV-Embed 3.1); `null` is the backbone's own: a bare decoder
    checkpoint is made bidirectional (the NV-Embed recipe), a decoder embedding model (e5-mistral in a
    sentence-transformers folder) stays causal as it was trained, and encoders always attend both ways.

    `frozen_documents` adapts the query side only: documents (the document side of asymmetric tasks; symmetric
    tasks give both sides the query side) are encoded by the starting model as it was, so a collection indexed with
    the starting model stays valid, and training can score each query against the whole collection's fixed vectors
    (`train.stages[].losses.distill.over: collection`). The pooling must have no weights of its own.
    """

    backbone: str = "bundled:smollm2-135m-instruct"
    pooling: PoolingName = "auto"
    pooled_tokens: PooledTokens = "auto"
    bidirectional: bool | None = None
    dtype: DType = "auto"
    max_query_length: PositiveInt = 128
    max_doc_length: PositiveInt = 256
    normalize: bool = True
    int8_inference: bool = False
    frozen_documents: bool = False
    compile: bool = Field(
        False,
        description="compile each transformer block of a decoder with torch.compile (dynamic shapes) when it runs "
        "on a GPU, in training and inference: norms, activations, rotary embeddings and LoRA's adapters fuse into "
        "fewer kernels; the first batches pay the compilation (benchmarks/results/gpu.json)",
    )
    latent_attention: LatentAttentionConfig = Field(default_factory=LatentAttentionConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    instructions: InstructionConfig = Field(default_factory=InstructionConfig)

    implicit_values: ClassVar[dict[str, Any]] = {"frozen_documents": False, "compile": False}

    @model_validator(mode="after")
    def _frozen_documents_pooling(self) -> ModelConfig:
        if self.frozen_documents and self.pooling == "latent_attention":
            raise ValueError(
                "model.frozen_documents: documents keep the starting model, which has no trained latent-attention "
                "head; use a pooling without weights (auto, mean, weighted_mean, cls, last, ata)"
            )
        return self
