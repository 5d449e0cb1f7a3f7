"""Pairwise relevance teachers that rescore (query, document) candidates (LGAI 4.1; NV-Retriever rerankers).

- `cross_encoder`: a sentence-transformers CrossEncoder folder; the score is its raw output.
- `llm_pointwise`: an instruction-tuned causal LLM asked whether the document answers the query; the score is
  P("yes") / (P("yes") + P("no")) over the next token (pointwise relevance as in paper 004), which works with
  the bundled SmolLM2-135M-Instruct.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from embedforge.config.mine import TeacherConfig
from embedforge.models.bundled import resolve_model


class PairScorer(Protocol):
    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


class CrossEncoderScorer:
    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        from sentence_transformers import CrossEncoder

        self.batch_size = teacher.batch_size
        self.model = CrossEncoder(str(resolve_model(teacher.model or "")), device=device, max_length=teacher.max_length)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        out = self.model.predict(list(pairs), batch_size=self.batch_size, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32).reshape(len(pairs))


class LLMPointwiseScorer:
    YES = ("yes", "Yes", " yes", " Yes")
    NO = ("no", "No", " no", " No")

    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model(teacher.model or "")
        self.torch = torch
        self.device = device
        self.prompt = teacher.prompt
        self.max_length = teacher.max_length
        self.batch_size = teacher.batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
        self.yes_ids = self._first_tokens(self.YES)
        self.no_ids = self._first_tokens(self.NO)

    def _first_tokens(self, words: Sequence[str]) -> list[int]:
        ids = {self.tokenizer.encode(w, add_special_tokens=False)[0] for w in words}
        return sorted(ids)

    def _render(self, query: str, document: str) -> str:
        text = self.prompt.format(query=query, document=document)
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        out = np.zeros(len(pairs), dtype=np.float32)
        for start in range(0, len(pairs), self.batch_size):
            batch = [self._render(q, d) for q, d in pairs[start : start + self.batch_size]]
            enc = self.tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=False,
            ).to(self.device)
            with self.torch.inference_mode():
                logits = self.model(**enc).logits[:, -1, :].float()
            probs = self.torch.softmax(logits, dim=-1)
            yes = probs[:, self.yes_ids].sum(-1)
            no = probs[:, self.no_ids].sum(-1)
            out[start : start + len(batch)] = (yes / (yes + no).clamp_min(1e-12)).cpu().numpy()
        return out


def load_pair_scorer(teacher: TeacherConfig, device: str = "cpu") -> PairScorer:
    if teacher.kind == "cross_encoder":
        return CrossEncoderScorer(teacher, device)
    if teacher.kind == "llm_pointwise":
        return LLMPointwiseScorer(teacher, device)
    raise ValueError(f"teacher kind {teacher.kind!r} is not a pairwise scorer")
