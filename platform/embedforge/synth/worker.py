"""The Ray Data actor: one vLLM engine per actor turns a batch of prompts into checked, judged examples.

Generation (NV-Embed, seed 000, 4.3), validation (`validate.py`) and the checklist judge (WildBench, seed 001,
3.3) run in the same actor so one engine serves both calls; a separate judge model gets its own engine.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from embedforge.cluster.device import assigned_device, device_memory_in_use_mb, record_usage
from embedforge.synth.engine import EngineSettings, Generation, build_engine, complete, generate
from embedforge.synth.plan import QUERY_KIND
from embedforge.synth.query_prompts import STOP
from embedforge.synth.schemas import Limits, judge_schema
from embedforge.synth.templates import load_template, render_judge
from embedforge.synth.validate import Rejected, parse_example, parse_judge, parse_query

log = logging.getLogger(__name__)

OUTPUT_COLUMNS = (
    "status",
    "reason",
    "detail",
    "text",
    "query",
    "positive",
    "negatives",
    "judge_score",
    "judge_notes",
    "prompt_tokens",
    "output_tokens",
    "judge_tokens",
    "finish_reason",
)


@dataclass(frozen=True)
class JudgeSettings:
    enabled: bool
    model: str | None
    max_tokens: int
    note_chars: int


def example_fields(kind: str, query: str, positive: str, negatives: list[str]) -> dict[str, Any]:
    """An example laid out for the judge with the names the generator used."""
    if kind == "classification":
        return {"input_text": query, "label": positive, "misleading_label": negatives[0]}
    if kind == QUERY_KIND:
        return {"user_query": query, "document": positive}
    if kind == "sts":
        return {"sentence": query, "similar_sentence": positive, "hard_negative_sentences": negatives}
    return {"user_query": query, "positive_document": positive, "hard_negative_documents": negatives}


class SynthWorker:
    """Callable class for `Dataset.map_batches`: rows carry `phase` (brainstorm | example), prompt, schema, ..."""

    def __init__(
        self, engine: EngineSettings, judge: JudgeSettings, limits: Limits, usage_dir: str | None = None
    ) -> None:
        self.settings = engine
        self.usage_dir = usage_dir
        self.judge = judge
        self.limits = limits
        self.llm = build_engine(engine)
        same = judge.model is None or judge.model == engine.model
        # the judge decodes greedily and unpenalised: its rubric's own words and digits are what it should repeat
        model = engine.model if same else judge.model
        self.judge_settings = replace(engine, model=model, temperature=0.0, repetition_penalty=1.0)
        self.judge_llm = self.llm if same or not judge.enabled else build_engine(self.judge_settings)
        self._started = time.time()
        self._prompts = 0
        self._tokens = 0

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
        gens = self._generate(rows)
        out = [self._check(r, g) for r, g in zip(rows, gens, strict=True)]
        if self.judge.enabled:
            self._judge(rows, out)
        self._prompts += len(rows)
        self._tokens += sum(o["output_tokens"] + o["judge_tokens"] for o in out)
        if self.usage_dir is not None:
            self._record_usage()
        elapsed = max(time.time() - self._started, 1e-9)
        log.info(
            "worker total: %d prompts, %.2f prompts/s, %.1f tokens/s (generation + judge)",
            self._prompts,
            self._prompts / elapsed,
            self._tokens / elapsed,
        )
        return {name: [r[name] for r in rows] for name in batch} | {
            name: [o[name] for o in out] for name in OUTPUT_COLUMNS
        }

    def _record_usage(self) -> None:
        """Where the engine runs: its KV cache and weights live in vLLM's engine process on a GPU, so the memory in
        use on the device counts, not only this process's torch allocations."""
        device = assigned_device()
        dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")
        record_usage(self.usage_dir, device, dtype, device_memory_in_use_mb(device))

    def _generate(self, rows: list[dict[str, Any]]) -> list[Generation]:
        """Few-shot query rows are raw completions ending at a newline; every other row is a guided chat turn."""
        raw = [i for i, r in enumerate(rows) if r["kind"] == QUERY_KIND]
        chat = [i for i, r in enumerate(rows) if r["kind"] != QUERY_KIND]
        done = complete(
            self.llm,
            self.settings,
            [str(rows[i]["prompt"]) for i in raw],
            [int(rows[i]["max_tokens"]) for i in raw],
            [str(rows[i]["row_id"]) for i in raw],
            stop=STOP,
        ) + generate(
            self.llm,
            self.settings,
            prompts=[str(rows[i]["prompt"]) for i in chat],
            schemas=[json.loads(rows[i]["schema"]) for i in chat],
            max_tokens=[int(rows[i]["max_tokens"]) for i in chat],
            keys=[str(rows[i]["row_id"]) for i in chat],
        )
        order = {row: k for k, row in enumerate(raw + chat)}
        return [done[order[i]] for i in range(len(rows))]

    def _check(self, row: dict[str, Any], gen: Generation) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "generated",
            "reason": "",
            "detail": "",
            "text": gen.text,
            "query": "",
            "positive": "",
            "negatives": "[]",
            "judge_score": 0,
            "judge_notes": "",
            "prompt_tokens": gen.prompt_tokens,
            "output_tokens": gen.output_tokens,
            "judge_tokens": 0,
            "finish_reason": gen.finish_reason,
        }
        if row["phase"] != "example":
            return out
        try:
            if row["kind"] == QUERY_KIND:
                cand = parse_query(gen.text, str(row["document"]), self.limits)
            else:
                document = str(row["document"]) if row["kind"] == "grounded" else None
                cand = parse_example(str(row["kind"]), gen.text, self.limits, document=document)
        except Rejected as err:
            reason = "truncated" if gen.finish_reason == "length" and err.reason == "invalid_json" else err.reason
            return out | {"status": "dropped", "reason": reason, "detail": err.detail}
        return out | {
            "status": "valid",
            "query": cand.query,
            "positive": cand.positive,
            "negatives": json.dumps(list(cand.negatives), ensure_ascii=False),
        }

    def _judge(self, rows: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
        todo = [i for i, o in enumerate(out) if o["status"] == "valid"]
        if not todo:
            return
        prompts, keys = [], []
        for i in todo:
            row, o = rows[i], out[i]
            fields = example_fields(str(row["kind"]), o["query"], o["positive"], json.loads(o["negatives"]))
            prompts.append(render_judge(str(row["task"]), fields, load_template(str(row["family"])).checklist))
            keys.append(f"judge:{row['row_id']}")
        schema = judge_schema(self.judge.note_chars)
        verdicts = generate(
            self.judge_llm,
            self.judge_settings,
            prompts,
            [schema] * len(todo),
            [self.judge.max_tokens] * len(todo),
            keys,
        )
        for i, gen in zip(todo, verdicts, strict=True):
            out[i]["judge_tokens"] = gen.output_tokens
            try:
                verdict = parse_judge(gen.text)
            except Rejected as err:
                out[i] |= {"status": "dropped", "reason": err.reason, "detail": err.detail}
                continue
            notes = json.dumps({"strengths": verdict.strengths, "weaknesses": verdict.weaknesses}, ensure_ascii=False)
            out[i] |= {"judge_score": verdict.score, "judge_notes": notes}
