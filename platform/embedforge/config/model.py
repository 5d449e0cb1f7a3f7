"""Model section: backbone, pooling, attention direction, LoRA, lengths and instructions.

Defaults follow NV-Embed (seed 000) sections 3.1-3.2 and appendix C; ATA pooling is MGH (seed 002) 2.2;
in-context examples are LGAI-Embedding (seed 003) 4.2.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import Section

PoolingName = Literal["mean", "last", "latent_attention", "ata"]
DType = Literal["float32", "bfloat16", "float16"]


class LatentAttentionConfig(Section):
    """NV-Embed 3.2: r trainable latents used as keys and values, multi-head cross-attention, MLP, mean pool."""

    num_latents: PositiveInt = 512
    num_heads: PositiveInt = 8
    mlp_ratio: float = Field(1.0, gt=0)


class LoraConfig(Section):
    """NV-Embed appendix C: rank 16, alpha 32, dropout 0.1. The pooling head is trained fully."""

    enabled: bool = True
    r: PositiveInt = 16
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
    )


class InstructionConfig(Section):
    """NV-Embed 4 / Tables 12-13: queries get `Instruct: {task}\\nQuery: {text}`, documents are bare.

    `in_context_examples` > 0 prepends k (query, positive) demonstrations before the instruction (LGAI 4.2).
    """

    query_template: str = "Instruct: {task}\nQuery: "
    default_task: str = "Given a web search query, retrieve relevant passages that answer the query"
    example_template: str = "Query: {query}\nResponse: {positive}\n\n"
    in_context_examples: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _template_has_task(self) -> InstructionConfig:
        if "{task}" not in self.query_template:
            raise ValueError(f"query_template must contain '{{task}}', got {self.query_template!r}")
        try:
            self.query_template.format(task="t")
            self.example_template.format(query="q", positive="p")
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"query_template may only use {{task}} and example_template only {{query}} and {{positive}}: {err!r}"
            ) from err
        return self


class ModelConfig(Section):
    """The embedder. `int8_inference` quantizes Linear weights to int8 when loaded for inference (NV-Embed A.3)."""

    backbone: str = "bundled:smollm2-135m-instruct"
    pooling: PoolingName = "mean"
    bidirectional: bool = True
    dtype: DType = "float32"
    max_query_length: PositiveInt = 128
    max_doc_length: PositiveInt = 256
    normalize: bool = True
    int8_inference: bool = False
    latent_attention: LatentAttentionConfig = Field(default_factory=LatentAttentionConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    instructions: InstructionConfig = Field(default_factory=InstructionConfig)
