"""A generated model card (README.md) for exported embedders: what it is, how to call it, what it was trained on.

`info` may carry `training_run` ({what: value}: the run dir, config, settings hash, steps), `training_data` (list of
source names or {name: count}) with `data_origin` ({name: "mine" | "source"}), `evaluation` ({task: {metric:
value}}) and `notes`; unknown parts are stated as unknown rather than invented. Training writes the card with its
run and data; the pipeline adds the run's evaluation once it has scored the model (`with_evaluation`).
"""

from __future__ import annotations

from typing import Any

from embedforge.config.model import InstructionConfig
from embedforge.model.embedder import Embedder
from embedforge.model.instructions import render_prefix

EVALUATION = "## Evaluation\n\n"
ORIGINS = {"mine": "with the negatives and teacher scores mining gave them", "source": "as the source gives them"}


def _training_run(info: dict[str, Any]) -> str:
    run = info.get("training_run")
    if not run:
        return ""
    return "## Training run\n\n" + "".join(f"- {what}: {value}\n" for what, value in run.items()) + "\n"


def _training_data(info: dict[str, Any]) -> str:
    data = info.get("training_data")
    if not data:
        return "- not recorded (no training run attached to this export)\n"
    if isinstance(data, dict):
        origin = info.get("data_origin") or {}
        return "".join(
            f"- {name}: {count} examples" + (f", {ORIGINS[origin[name]]}" if origin.get(name) in ORIGINS else "") + "\n"
            for name, count in data.items()
        )
    return "".join(f"- {name}\n" for name in data)


def with_evaluation(card: str, evaluation: dict[str, dict[str, float]], source: str) -> str:
    """The card with its evaluation section replaced by `evaluation` ({task: {metric: value}}), scored by
    `source` (e.g. the run's evaluation report)."""
    start = card.index(EVALUATION) + len(EVALUATION)
    end = card.find("\n## ", start)
    section = f"From {source}:\n\n" + _evaluation({"evaluation": evaluation})
    return card[:start] + section + (card[end:] if end != -1 else "")


def _evaluation(info: dict[str, Any]) -> str:
    results = info.get("evaluation")
    if not results:
        return "Not evaluated yet (run `embedforge eval` and export again to include results).\n"
    lines = ["| task | metric | value |", "|---|---|---|"]
    for task, metrics in results.items():
        for metric, value in metrics.items() if isinstance(metrics, dict) else [("score", metrics)]:
            shown = f"{value:.4f}" if isinstance(value, float) else str(value)
            lines.append(f"| {task} | {metric} | {shown} |")
    return "\n".join(lines) + "\n"


def render_card(
    embedder: Embedder, format: str, info: dict[str, Any] | None = None, custom_reason: str | None = None
) -> str:
    """The card for `format`; a sentence-transformers export with `custom_reason` uses embedforge's own module."""
    info = info or {}
    cfg = embedder.config
    instr = cfg.instructions
    if format == "sentence_transformers":
        loading = (
            "# sentence-transformers' own modules (Transformer, Pooling): no remote code needed\n"
            "model = SentenceTransformer(PATH)\n"
            if custom_reason is None
            else "# custom module from the embedforge package (must be installed); ST 6 needs trust_remote_code for\n"
            f"# it, needed here because of {custom_reason}\n"
            "model = SentenceTransformer(PATH, trust_remote_code=True)\n"
        )
        usage = (
            "```python\nfrom sentence_transformers import SentenceTransformer\n\n"
            f"{loading}"
            'queries = model.encode_query(["how do I reset my card PIN?"])  # default instruction\n'
            f'custom = model.encode(["..."], prompt={instr.query_template.format(task="<your task>")!r})\n'
            'documents = model.encode_document(["To reset your PIN, ..."])\n```\n'
        )
    else:
        usage = (
            "```python\nfrom embedforge import load_embedder\n\n"
            "model = load_embedder(PATH)\n"
            'queries = model.encode_queries(["how do I reset my card PIN?"], task="<your task>")\n'
            'documents = model.encode_documents(["To reset your PIN, ..."])\n```\n'
        )
    la = cfg.latent_attention
    pooling = cfg.pooling + (
        f" ({la.num_latents} latents, {la.num_heads} heads)" if cfg.pooling == "latent_attention" else ""
    )
    return (
        f"# {info.get('title', embedder.name)}\n\n"
        "A text-embedding model built with embedforge from a decoder-only LLM (NV-Embed recipe).\n\n"
        "## Model\n\n"
        f"- base model: `{embedder.backbone_ref}`\n"
        f"- attention: {'bidirectional (causal mask removed, NV-Embed 3.1)' if cfg.bidirectional else 'causal'}\n"
        f"- pooling: {pooling}\n"
        f"- embedding dimension: {embedder.dimension}, L2-normalised, cosine similarity\n"
        f"- max length: queries {cfg.max_query_length} tokens, documents {cfg.max_doc_length} tokens\n"
        f"- LoRA: r={cfg.lora.r}, alpha={cfg.lora.alpha:g}, merged into the weights\n\n"
        "## Instructions\n\n"
        f'Queries are prefixed with `{instr.query_template!r}` (default task: "{instr.default_task}"); documents '
        "are encoded bare, except for symmetric tasks (STS, classification, clustering) where both sides get the "
        "instruction. Instruction tokens are attended to but not pooled.\n\n"
        "In-context demonstrations (LGAI-Embedding 4.2) go before the instruction, each rendered as "
        f"`{instr.example_template!r}`: the served API's `demonstrations` field and embedforge's `examples` argument "
        "build exactly this prompt; with sentence-transformers pass the same text as `prompt`, e.g. "
        f"`prompt={_demonstration_prompt(instr)!r}`.\n\n"
        f"## Usage\n\n{usage}\n"
        f"{_training_run(info)}"
        f"## Training data\n\n{_training_data(info)}\n"
        f"{EVALUATION}{_evaluation(info)}" + (f"\n## Notes\n\n{info['notes']}\n" if info.get("notes") else "")
    )


def _demonstration_prompt(instr: InstructionConfig) -> str:
    """The prompt a query gets with one demonstration, as the served API and training render it."""
    return render_prefix(instr, "<your task>", [("<example query>", "<example document>")])
