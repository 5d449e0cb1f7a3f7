"""Pairwise relevance teachers that rescore (query, document) candidates (LGAI 4.1; NV-Retriever rerankers).

- `cross_encoder`: a sentence-transformers CrossEncoder folder; the score is its raw output.
- `llm_pointwise`: an instruction-tuned causal LLM asked whether the document answers the query; the score is
  P("yes") / (P("yes") + P("no")) over the next token (pointwise relevance as in paper 004), which works with
  the bundled SmolLM2-135M-Instruct.
- `llm_query_likelihood`: the mean log-probability of the query's tokens given the document (UPR, Sachan et al.,
  EMNLP 2022: "Improving Passage Retrieval with Zero-Shot Question Generation"), a reranker that needs no
  relevance labels. Only the query positions go through the LM head, so a batch costs one forward pass of the body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from embedforge.config.mine import TeacherConfig
from embedforge.mine.teachers.precision import teacher_dtype
from embedforge.models.bundled import resolve_model


class PairScorer(Protocol):
    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


class CrossEncoderScorer:
    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        import torch
        from sentence_transformers import CrossEncoder

        self.batch_size = teacher.batch_size
        self.model = CrossEncoder(
            str(resolve_model(teacher.model or "")),
            device=device,
            max_length=teacher.max_length,
            model_kwargs={"dtype": getattr(torch, teacher_dtype(teacher, device))},
        )

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        out = self.model.predict(list(pairs), batch_size=self.batch_size, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32).reshape(len(pairs))


class _CausalLMScorer:
    """A causal LM teacher loaded once on `device`, with its prompt, length limit and batch size."""

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
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = getattr(torch, teacher_dtype(teacher, device))
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()


class LLMPointwiseScorer(_CausalLMScorer):
    YES = ("yes", "Yes", " yes", " Yes")
    NO = ("no", "No", " no", " No")

    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        super().__init__(teacher, device)
        self.tokenizer.padding_side = "left"
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


class QueryLikelihoodScorer(_CausalLMScorer):
    """UPR: score(q, d) = (1/|q|) sum_t log P(q_t | prompt(d), q_<t). The prompt ends with `{query}`; the document
    is cut (never the query) so that a whole sequence fits `max_length` tokens."""

    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        super().__init__(teacher, device)
        head, rest = self.prompt.split("{document}")
        self.head = self._ids(head)
        self.middle = self._ids(rest.removesuffix("{query}"))
        self.bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _sequence(self, query: str, document: str) -> tuple[list[int], int]:
        """The token ids of one (document, query) prompt and how many of them, at the end, are the query's."""
        query_ids = self._ids(query)
        if not query_ids:
            raise ValueError("llm_query_likelihood: an empty query has no likelihood")
        room = self.max_length - len(self.bos) - len(self.head) - len(self.middle) - len(query_ids)
        if room < 1:
            raise ValueError(
                f"llm_query_likelihood: the prompt and a {len(query_ids)}-token query leave no room for the document "
                f"within max_length {self.max_length}"
            )
        return self.bos + self.head + self._ids(document)[:room] + self.middle + query_ids, len(query_ids)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        torch = self.torch
        out = np.zeros(len(pairs), dtype=np.float32)
        for start in range(0, len(pairs), self.batch_size):
            sequences = [self._sequence(q, d) for q, d in pairs[start : start + self.batch_size]]
            width = max(len(ids) for ids, _ in sequences)
            input_ids = torch.full((len(sequences), width), self.tokenizer.pad_token_id, dtype=torch.long)
            attention = torch.zeros_like(input_ids)
            rows, positions, targets = [], [], []
            for row, (ids, query_len) in enumerate(sequences):
                input_ids[row, : len(ids)] = torch.tensor(ids)
                attention[row, : len(ids)] = 1
                rows += [row] * query_len
                positions += range(len(ids) - query_len - 1, len(ids) - 1)  # each position predicts the next token
                targets += ids[len(ids) - query_len :]
            rows_t, device = torch.tensor(rows), self.device
            with torch.inference_mode():
                hidden = self.model.get_decoder()(
                    input_ids=input_ids.to(device), attention_mask=attention.to(device)
                ).last_hidden_state
                picked = hidden[rows_t.to(device), torch.tensor(positions, device=device)]
                logprobs = self.model.get_output_embeddings()(picked).float().log_softmax(-1)
                token_lp = logprobs[torch.arange(len(targets), device=device), torch.tensor(targets, device=device)]
            per_row = torch.zeros(len(sequences), dtype=torch.float32).index_add_(0, rows_t, token_lp.cpu())
            lengths = torch.tensor([query_len for _, query_len in sequences], dtype=torch.float32)
            out[start : start + len(sequences)] = (per_row / lengths).numpy()
        return out


def load_pair_scorer(teacher: TeacherConfig, device: str = "cpu") -> PairScorer:
    if teacher.kind == "cross_encoder":
        return CrossEncoderScorer(teacher, device)
    if teacher.kind == "llm_pointwise":
        return LLMPointwiseScorer(teacher, device)
    if teacher.kind == "llm_query_likelihood":
        return QueryLikelihoodScorer(teacher, device)
    raise ValueError(f"teacher kind {teacher.kind!r} is not a pairwise scorer")
