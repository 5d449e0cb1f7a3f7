"""Synthetic-data generation: embedforge's vLLM engine against transformers `generate`, measured in one run.

The same chat prompts (step-2 prompts of the real templates for fixed tasks, configs/local.yaml bounds) go
through (1) the engine the synth stage's Ray Data actors use (`embedforge.synth.engine`, vLLM) with JSON-schema
guided decoding, (2) the same engine without guidance, (3) with --bf16, an unguided engine in bf16, vLLM's own CPU
choice and embedforge's before it ran float32 on CPUs without native bf16, and (4)
transformers `generate`, all prompts in one batch (or --hf-batch at a time), same model, same sampling and the
same max-new-token budget. Reported: generated tokens/s of each (engine start-up excluded) and the share of outputs
that are well-formed (schema level) and that pass every validator check. Goals: vLLM >= 5x the tokens/s of
transformers on CPU, >= 99 % well-formed with guided decoding.
Writes benchmarks/results/synth.json and synth.png.

    .venv/bin/python benchmarks/synth.py [--prompts 64] [--hf-batch N] [--threads 2] [--bf16] [--config local.yaml]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine_info, write_result

from embedforge.config import load_config
from embedforge.models.bundled import prepare, resolve_model
from embedforge.synth.engine import EngineSettings, build_engine, engine_dtype, generate
from embedforge.synth.plan import example_rows, limits_of
from embedforge.synth.validate import Rejected, extract_json, parse_example

log = logging.getLogger("bench.synth")
REPO = Path(__file__).resolve().parents[1]
TASKS = {
    "short-long": [
        "Given a web search query, retrieve relevant passages that answer the query",
        "Given a symptom described in a few words, find medical articles that explain it",
    ],
    "long-short": ["Given a news article, retrieve its headline"],
    "short-short": ["Given a question from a forum, find questions that ask the same thing"],
    "long-long": ["Given a bug report, find earlier reports that describe the same failure"],
    "sts": ["Given a sentence from a product review, find sentences with the same meaning"],
    "classification": [
        "Classify a customer e-mail by the department that should answer it",
        "Classify a movie review as positive, neutral or negative",
    ],
}


def _prompts(config: Any, n: int) -> list[dict[str, Any]]:
    """`n` distinct step-2 prompts spread over the families. Distinct texts: vLLM would take a repeated prompt's
    prefill from its prefix cache, while `generate` computes it again."""
    per_task = 4
    while True:
        synth = config.synth.model_copy(update={"families": list(TASKS), "examples_per_task": per_task})
        rows = list({r["prompt"]: r for r in example_rows(synth, config.seed, TASKS)}.values())
        if len(rows) >= n:
            return [rows[i * len(rows) // n] for i in range(n)]
        if per_task >= 64:
            raise SystemExit(f"the templates give {len(rows)} distinct prompts, fewer than --prompts {n}")
        per_task *= 2


def schema_valid(text: str, schema: dict[str, Any]) -> bool:
    """Whether the output holds a JSON value that meets the schema the decoder was given: what guided decoding
    controls. The validator's cleaning comes after (a raw " + " meets minLength 3, and is "+" once stripped)."""
    import jsonschema

    try:
        jsonschema.validate(extract_json(text), schema)
    except (Rejected, jsonschema.ValidationError):
        return False
    return True


def _valid_rates(rows: list[dict[str, Any]], texts: list[str], finished: list[bool], limits: Any) -> dict[str, Any]:
    """Share of outputs that meet their JSON schema and that pass every validator check, with rejection reasons;
    the schema-valid share is also given among outputs that ended before the token budget (`finished`), which
    separates what guided decoding controls from generations cut by max_tokens."""
    reasons: dict[str, int] = {}
    valid = [schema_valid(text, json.loads(row["schema"])) for row, text in zip(rows, texts, strict=True)]
    for row, text in zip(rows, texts, strict=True):
        try:
            parse_example(row["kind"], text, limits)
        except Rejected as err:
            reasons[err.reason] = reasons.get(err.reason, 0) + 1
    valid_finished = [ok for ok, done in zip(valid, finished, strict=True) if done]
    return {
        "schema_valid_rate": sum(valid) / len(rows),
        "valid_rate": 1 - sum(reasons.values()) / len(rows),
        "truncated_rate": 1 - sum(finished) / len(rows),
        "schema_valid_rate_finished": sum(valid_finished) / max(len(valid_finished), 1),
        "rejections": reasons,
    }


def generate_rows(llm: Any, settings: EngineSettings, rows: list[dict[str, Any]]) -> tuple[list[Any], float]:
    """The engine's generations for prompt rows (prompt, schema, max_tokens, row_id) and the seconds they took."""
    t0 = time.time()
    gens = generate(
        llm,
        settings,
        [r["prompt"] for r in rows],
        [json.loads(r["schema"]) for r in rows],
        [int(r["max_tokens"]) for r in rows],
        [r["row_id"] for r in rows],
    )
    return gens, time.time() - t0


def run_vllm(
    settings: EngineSettings, rows: list[dict[str, Any]], limits: Any, modes: dict[str, bool]
) -> dict[str, dict[str, Any]]:
    """One engine for the settings, then each mode (result name -> guided) on the same rows."""
    started = time.time()
    llm = build_engine(settings)
    start_s = time.time() - started
    out = {}
    for name, guided in modes.items():
        gens, seconds = generate_rows(llm, replace(settings, guided=guided), rows)
        tokens = sum(g.output_tokens for g in gens)
        rates = _valid_rates(rows, [g.text for g in gens], [g.finish_reason != "length" for g in gens], limits)
        out[name] = {
            "seconds": round(seconds, 2),
            "tokens": tokens,
            "tokens_per_s": tokens / seconds,
            **rates,
            "engine_start_s": round(start_s, 1),
            "dtype": engine_dtype(settings),
        }
        log.info("%s: %d tokens in %.1fs = %.1f tokens/s, %s", name, tokens, seconds, tokens / seconds, rates)
    del llm
    gc.collect()
    return out


def run_hf(
    model_ref: str, settings: EngineSettings, rows: list[dict[str, Any]], limits: Any, threads: int, batch: int
) -> dict[str, Any]:
    """transformers `generate` over the rows in batches of `batch` prompts (left-padded), one after another."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    path = resolve_model(model_ref)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    torch.manual_seed(settings.seed)
    seconds, tokens, texts, finished = 0.0, 0, [], []
    for start in range(0, len(rows), batch):
        chats = [
            tok.apply_chat_template(
                [{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True
            )
            for r in rows[start : start + batch]
        ]
        inputs = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        t0 = time.time()
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                do_sample=True,
                temperature=settings.temperature,
                top_p=settings.top_p,
                repetition_penalty=settings.repetition_penalty,
                max_new_tokens=int(rows[0]["max_tokens"]),
                pad_token_id=tok.pad_token_id,
            )
        seconds += time.time() - t0
        for seq in out[:, inputs["input_ids"].shape[1] :].tolist():
            finished.append(tok.eos_token_id in seq)
            end = seq.index(tok.eos_token_id) + 1 if finished[-1] else len(seq)
            tokens += end
            texts.append(tok.decode(seq[:end], skip_special_tokens=True))
    rates = _valid_rates(rows, texts, finished, limits)
    log.info("hf_generate: %d tokens in %.1fs = %.1f tokens/s, %s", tokens, seconds, tokens / seconds, rates)
    return {
        "seconds": round(seconds, 2),
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        **rates,
        "threads": threads,
        "batch": batch,
        "dtype": "float32",
    }


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    colors = {"vllm_guided": "tab:blue", "vllm_unguided": "tab:cyan", "vllm_unguided_bf16": "tab:olive"}
    axes[0].bar(names, [results[n]["tokens_per_s"] for n in names], color=[colors.get(n, "tab:gray") for n in names])
    axes[0].set(title="generated tokens/s (CPU)", ylabel="tokens/s")
    width = 0.4
    x = range(len(names))
    axes[1].bar(
        [i - width / 2 for i in x],
        [100 * results[n]["schema_valid_rate"] for n in names],
        width,
        label="well-formed (schema)",
    )
    axes[1].bar(
        [i + width / 2 for i in x], [100 * results[n]["valid_rate"] for n in names], width, label="passes every check"
    )
    axes[1].set_xticks(list(x), names)
    axes[1].legend(loc="lower right")
    axes[1].axhline(99, color="red", linestyle="--", linewidth=1)
    axes[1].set(title="schema-valid outputs", ylabel="%", ylim=(0, 105))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    hf = results["hf_generate"]["tokens_per_s"]
    guided, unguided = results["vllm_guided"], results["vllm_unguided"]
    out = {
        "tokens_per_s_vllm_unguided_vs_hf": unguided["tokens_per_s"] / hf,
        "tokens_per_s_vllm_guided_vs_hf": guided["tokens_per_s"] / hf,
        "schema_valid_rate_guided": guided["schema_valid_rate"],
        "schema_valid_rate_unguided": unguided["schema_valid_rate"],
        "schema_valid_rate_guided_finished": guided["schema_valid_rate_finished"],
        "truncated_rate_guided": guided["truncated_rate"],
        "valid_rate_guided": guided["valid_rate"],
        "valid_rate_unguided": unguided["valid_rate"],
    }
    if "vllm_unguided_bf16" in results:
        bf16 = results["vllm_unguided_bf16"]["tokens_per_s"]
        out["tokens_per_s_vllm_unguided_bf16_vs_hf"] = bf16 / hf
        out["tokens_per_s_vllm_unguided_vs_bf16"] = unguided["tokens_per_s"] / bf16
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    parser.add_argument("--prompts", type=int, default=64, help="prompts in flight at once, in both engines")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for transformers generate")
    parser.add_argument("--hf-batch", type=int, default=0, help="prompts per `generate` call (default: all at once)")
    parser.add_argument("--bf16", action="store_true", help="also run the unguided engine in bf16 (slow on AVX2)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    config = load_config(args.config)
    gen = config.synth.generator
    prepare([gen.model.removeprefix("bundled:")] if gen.model.startswith("bundled:") else [])
    machine = machine_info()
    rows = _prompts(config, args.prompts)
    limits = limits_of(config.synth)
    settings = EngineSettings.from_config(gen, max_num_seqs=max(gen.max_num_seqs, len(rows)))
    results = run_vllm(settings, rows, limits, {"vllm_guided": True, "vllm_unguided": False})
    if args.bf16:  # the engine before float32 on CPUs without native bf16: vLLM's CPU default
        results |= run_vllm(replace(settings, dtype="bfloat16"), rows, limits, {"vllm_unguided_bf16": False})
    results["hf_generate"] = run_hf(gen.model, settings, rows, limits, args.threads, args.hf_batch or len(rows))
    payload = {
        "machine": machine,
        "setup": {
            "model": gen.model,
            "prompts": len(rows),
            "hf_batch": results["hf_generate"]["batch"],
            "max_tokens": int(rows[0]["max_tokens"]),
            "temperature": gen.temperature,
            "top_p": gen.top_p,
            "repetition_penalty": gen.repetition_penalty,
            "config": str(args.config),
            "vllm_dtype": engine_dtype(settings),
            "hf_dtype": "float32",
            "load_average_1m_end": os.getloadavg()[0],
        },
        "results": results,
        "ratios": ratios(results),
        "goals": {"tokens_per_s_vllm_unguided_vs_hf": ">= 5", "schema_valid_rate_guided": ">= 0.99"},
    }
    path = write_result("synth", payload)
    plot(results, RESULTS / "synth.png")
    log.info("wrote %s: ratios %s", path, payload["ratios"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
