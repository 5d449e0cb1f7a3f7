"""Corpus-grounded query writing (queries mode): few-shot prompts, one row per document and style, and the checks
a completion must pass before it becomes a training query."""

from __future__ import annotations

import pytest

from embedforge.config.synth import SynthConfig
from embedforge.data.delimited import DataFormatError
from embedforge.data.schema import CorpusDocument
from embedforge.synth.example_queries import EXAMPLES_STYLE, example_demonstrations, read_example_queries
from embedforge.synth.plan import QUERY_KIND, limits_of, query_rows
from embedforge.synth.query_prompts import query_prompts
from embedforge.synth.validate import Rejected, parse_query

DOCS = [
    CorpusDocument("a", "Paris is the capital and largest city of France.", title="Paris"),
    CorpusDocument("b", "The cheetah is the fastest land animal."),
]


def test_prompt_ends_at_the_query_of_the_document_in_the_style_asked() -> None:
    prompts = query_prompts()
    prompt = prompts.render("keywords", "Some   text\nover two lines")
    assert prompt.endswith("Document: Some text over two lines\nQuery:")
    for demo in prompts.demonstrations:
        assert f"Query: {demo['keywords']}\n" in prompt and demo["question"] not in prompt
    with pytest.raises(ValueError, match="unknown query style 'haiku'"):
        prompts.render("haiku", "text")


def test_every_configurable_style_has_a_description_and_a_demonstration_each() -> None:
    from typing import get_args

    from embedforge.config.synth import QueryStyle

    prompts = query_prompts()
    assert set(prompts.styles) | {EXAMPLES_STYLE} == set(get_args(QueryStyle))
    assert set(prompts.styles) == {"question", "keywords", "category"}  # examples come from the user's queries
    category = prompts.render("category", "Keith Urban. An Australian country music singer.")
    assert "Query: women scientists who won a nobel prize\n" in category and "marie curie radioactivity" not in category


def test_one_unguided_row_per_document_and_style() -> None:
    config = SynthConfig(documents="docs.jsonl", query_styles=["question", "keywords"], max_query_tokens=20)
    rows = query_rows(config, 0, DOCS, query_prompts())
    assert [r["row_id"] for r in rows] == ["doc:a:question", "doc:a:keywords", "doc:b:question", "doc:b:keywords"]
    assert {r["kind"] for r in rows} == {QUERY_KIND} and {r["max_tokens"] for r in rows} == {20}
    assert rows[0]["document"] == "Paris Paris is the capital and largest city of France."  # title text, as evaluated
    assert rows[0]["prompt"].endswith(f"Document: {rows[0]['document']}\nQuery:")


def test_a_completion_is_cleaned_and_checked() -> None:
    limits = limits_of(SynthConfig(max_query_chars=50))
    doc = "Paris is the capital and largest city of France, on the Seine."
    kept = parse_query('  "what is the capital\tof france"  ', doc, limits)
    assert (kept.query, kept.positive, kept.negatives) == ("what is the capital of france", doc, ())
    for text, reason in [
        ("", "empty_text"),
        ("x" * 51, "too_long"),
        ("Paris is the capital and largest city of France", "query_copied"),
    ]:
        with pytest.raises(Rejected) as err:
            parse_query(text, doc, limits)
        assert err.value.reason == reason


def test_a_run_of_the_passages_words_is_a_copy_when_asked() -> None:
    doc = "After his early years in Rome, much of his work was self-designed, but executed by the workshop."
    copied = "after his early years in rome . much of his work"  # punctuation changed: no verbatim 30 characters
    assert parse_query(copied, doc, limits_of(SynthConfig())).query == copied  # kept unless asked
    limits = limits_of(SynthConfig(max_copied_words=6))
    with pytest.raises(Rejected) as err:
        parse_query(copied, doc, limits)
    assert err.value.reason == "query_copied_run" and "repeats 10 of the passage's words" in str(err.value)
    assert parse_query("what was the workshop in rome for", doc, limits).query == "what was the workshop in rome for"
    assert parse_query("early years in rome his work", doc, limits)  # five in a row
    with pytest.raises(ValueError, match="max_copied_words"):
        SynthConfig(max_copied_words=1)


COLLECTION = [
    *DOCS,
    CorpusDocument("c", "Lynchburg is an independent city in the Commonwealth of Virginia, on the James River."),
    CorpusDocument("d", "Hugh Downs was an American broadcaster, television host and author."),
]


def test_example_queries_demonstrate_their_own_style_each_beside_the_passage_bm25_ranks_first() -> None:
    demos = example_demonstrations(["hugh downs", "lynchburg virginia", "fastest animal"], COLLECTION, 2, "0")
    assert len(demos) == 2 and demos == example_demonstrations(
        ["hugh downs", "lynchburg virginia", "fastest animal"], COLLECTION, 2, "0"
    )
    pairs = {d[EXAMPLES_STYLE]: d["doc_id"] for d in demos}
    expected = {"hugh downs": "d", "lynchburg virginia": "c", "fastest animal": "b"}
    assert pairs == {q: expected[q] for q in pairs}
    prompts = query_prompts().with_examples(demos)
    prompt = prompts.render(EXAMPLES_STYLE, "Keith Urban. An Australian country music singer.")
    for demo in demos:
        assert f"Document: {demo['document']}\nQuery: {demo[EXAMPLES_STYLE]}\n\n" in prompt
    assert "marie curie" not in prompt.lower()  # the bundled demonstrations show the bundled styles only
    assert demos[0][EXAMPLES_STYLE] not in prompts.render("question", "text")
    assert prompts.id.endswith("+examples") and len(example_demonstrations(["x"] * 3, COLLECTION, 8, "0")) == 3


def test_a_demonstration_document_is_cut_at_a_word_boundary() -> None:
    long = CorpusDocument("long", "word " * 200)
    (demo,) = example_demonstrations(["word"], [long], 1, "0")
    assert len(demo["document"]) <= 300 and demo["document"].endswith("word")


def test_example_queries_are_read_from_lines_or_a_beir_queries_file(tmp_path) -> None:
    lines = tmp_path / "queries.txt"
    lines.write_text("hugh downs\n\n  lynchburg virginia \n", encoding="utf-8")
    assert read_example_queries(lines) == ["hugh downs", "lynchburg virginia"]
    beir = tmp_path / "queries.jsonl"
    beir.write_text('{"_id": "1", "text": "guitar classical bach"}\n', encoding="utf-8")
    assert read_example_queries(beir) == ["guitar classical bach"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no example queries"):
        read_example_queries(empty)
    with pytest.raises(FileNotFoundError, match=r"synth\.example_queries: .*missing\.txt does not exist"):
        read_example_queries(tmp_path / "missing.txt")


def test_the_examples_style_and_the_example_queries_come_together() -> None:
    with pytest.raises(ValueError, match=r"the style 'examples' needs synth\.example_queries"):
        SynthConfig(documents="docs.jsonl", query_styles=["examples"])
    with pytest.raises(ValueError, match="add it to query_styles"):
        SynthConfig(documents="docs.jsonl", example_queries="queries.txt")
    config = SynthConfig(documents="docs.jsonl", query_styles=["examples"], example_queries="queries.txt")
    assert "example_queries" not in SynthConfig().model_dump()  # unset, the stage hashes stay as they were
    assert config.model_dump()["example_queries"] == "queries.txt"
