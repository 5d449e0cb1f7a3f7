"""Reading the shared data: embedforge's readers vs pandas, on every tab-separated file, in one run.

MANIFEST.md warns that several TSV files use no quoting but contain `"`: pandas' default quoting silently merges
or splits rows there. This measures, per file, the rows each reader returns against the MANIFEST counts and the
time it takes (best of many rounds), like for like:

- the read: embedforge's checked `read_tsv` (pyarrow.csv with quoting off, header, field-count and blank-line
  checks) to Arrow string columns, against pandas' C parser with QUOTE_NONE to its default columns (pandas >= 3
  stores strings in Arrow too: its `str` dtype);
- the read to Python strings: the same read with every column turned into Python `str` values, against pandas
  with `dtype=object`;
- apart, the dataset reader that also builds the records.

Then the conversion of every shared dataset into training examples.
Writes benchmarks/results/shared_data.json and shared_data.png.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine_info, write_result

from embedforge.config.data import DataSource
from embedforge.data.delimited import read_tsv
from embedforge.data.shared import SHARED_DATASETS
from embedforge.data.sources import convert_source
from embedforge.paths import data_dir

# (shared dataset, split, file, MANIFEST rows, pandas header row or None, accepted field counts)
FILES = [
    ("stsb", "train", "stsb/sts-train.csv", 5749, None, (7, 9)),
    ("sick", "all", "sick/sick_train_trial.tsv", 5000, 0, (6,)),
    ("snli", "dev", "snli/dev.tsv", 9842, 0, (3,)),
    ("mrpc", "train", "mrpc/train.tsv", 4076, 0, (5,)),
    ("twitter_semeval2015", "dev", "twitter_semeval2015/dev_binary.tsv", 4142, 0, (4,)),
    ("wikiqa", "train", "wikiqa/train.tsv", 8672, 0, (4,)),
    ("amazon_counterfactual", "ext_train", "amazon_counterfactual/EN-ext_train.tsv", 8000, 0, (2,)),
]
ROUNDS = 30  # files of a few MB read in milliseconds: the best of many rounds


def _best(fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(ROUNDS):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def _rows(records) -> int:
    return (
        sum(len(g.positives) + len(g.negatives) for g in records)
        if records and hasattr(records[0], "positives")
        else len(records)
    )


def _checked_read(path: Path, header: int | None, widths: tuple[int, ...], python_strings: bool = False) -> int:
    rows = read_tsv(path, widths, skip_header=header is not None)
    if python_strings:
        for index in range(min(widths)):
            rows.column(index)
    return len(rows)


def _pandas(path: Path, header: int | None, quoting: int, dtype: type | None = None) -> int:
    try:
        return len(
            pd.read_csv(
                path,
                sep="\t",
                header=header,
                quoting=quoting,
                on_bad_lines="skip",
                engine="python" if quoting == csv.QUOTE_MINIMAL else "c",
                dtype=dtype,
            )
        )
    except (pd.errors.ParserError, ValueError):
        return -1


def main() -> int:
    root = data_dir()
    files = {}
    _checked_read(root / FILES[0][2], FILES[0][4], FILES[0][5])  # first use of pyarrow.csv loads its modules
    for name, split, rel, expected, header, widths in FILES:
        read_s, read_rows = _best(lambda r=rel, h=header, w=widths: _checked_read(root / r, h, w))
        strings_s, _ = _best(lambda r=rel, h=header, w=widths: _checked_read(root / r, h, w, python_strings=True))
        ours_s, records = _best(lambda n=name, s=split: SHARED_DATASETS[n].read(s, root))
        default_s, default_rows = _best(lambda r=rel, h=header: _pandas(root / r, h, csv.QUOTE_MINIMAL))
        none_s, none_rows = _best(lambda r=rel, h=header: _pandas(root / r, h, csv.QUOTE_NONE))
        object_s, _ = _best(lambda r=rel, h=header: _pandas(root / r, h, csv.QUOTE_NONE, dtype=object))
        files[rel] = {
            "manifest_rows": expected,
            "embedforge": {"rows": read_rows, "seconds": round(read_s, 4)},
            "embedforge_python_strings": {"seconds": round(strings_s, 4)},
            "embedforge_records": {"records": _rows(records), "seconds": round(ours_s, 4)},
            "pandas_default_quoting": {"rows": default_rows, "seconds": round(default_s, 4)},
            "pandas_quote_none": {"rows": none_rows, "seconds": round(none_s, 4)},
            "pandas_quote_none_object": {"seconds": round(object_s, 4)},
        }
        print(
            f"{rel:40s} manifest {expected:5d}  embedforge {read_rows:5d} in {read_s:.4f}s "
            f"(Python str {strings_s:.4f}s, records {ours_s:.4f}s)  pandas default {default_rows:5d}  "
            f"pandas QUOTE_NONE {none_rows:5d} in {none_s:.4f}s (object {object_s:.4f}s)",
            flush=True,
        )

    conversion = {}
    for name in SHARED_DATASETS:
        started = time.perf_counter()
        converted = convert_source(DataSource(name=name, kind="shared", path=name))
        seconds = time.perf_counter() - started
        conversion[name] = {
            "examples": len(converted.examples),
            "seconds": round(seconds, 3),
            "examples_per_s": round(len(converted.examples) / seconds),
            "drops": dict(converted.drops),
        }
        print(f"convert {name:28s} {len(converted.examples):6d} examples in {seconds:.2f}s", flush=True)

    exact = lambda key: sum(f[key]["rows"] == f["manifest_rows"] for f in files.values()) / len(files)  # noqa: E731
    seconds = lambda key: sum(f[key]["seconds"] for f in files.values())  # noqa: E731
    ratios = {
        "files_with_exact_rows_embedforge": exact("embedforge"),
        "files_with_exact_rows_pandas_default": exact("pandas_default_quoting"),
        "files_with_exact_rows_pandas_quote_none": exact("pandas_quote_none"),
        "read_time_embedforge_vs_pandas_quote_none": seconds("embedforge") / seconds("pandas_quote_none"),
        "python_strings_time_embedforge_vs_pandas_object": seconds("embedforge_python_strings")
        / seconds("pandas_quote_none_object"),
        "records_time_embedforge_vs_pandas_quote_none": seconds("embedforge_records") / seconds("pandas_quote_none"),
    }
    goals = {
        "files_with_exact_rows_embedforge": {
            "target": "== 1.0",
            "met": ratios["files_with_exact_rows_embedforge"] == 1,
        },
        "read_time_embedforge_vs_pandas_quote_none": {
            "target": "<= 1.5 (checked pyarrow.csv read vs pandas' C parser, both to Arrow string columns)",
            "met": ratios["read_time_embedforge_vs_pandas_quote_none"] <= 1.5,
        },
        "python_strings_time_embedforge_vs_pandas_object": {
            "target": "<= 1.5 (the same reads to Python str values: column() vs pandas dtype=object)",
            "met": ratios["python_strings_time_embedforge_vs_pandas_object"] <= 1.5,
        },
    }
    _plot(files, RESULTS / "shared_data.png")
    path = write_result(
        "shared_data",
        {
            "benchmark": "shared_data",
            "machine": machine_info(),
            "settings": {"rounds": ROUNDS, "data_dir": str(root), "pandas": pd.__version__, "pyarrow": pa.__version__},
            "raw": {"files": files, "conversion": conversion},
            "ratios": ratios,
            "goals": goals,
        },
    )
    print(f"ratios: {ratios}\nwritten: {path}")
    return 0


def _plot(files: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [Path(rel).parent.name for rel in files]
    keys = [
        ("embedforge", "embedforge"),
        ("pandas_default_quoting", "pandas default"),
        ("pandas_quote_none", "pandas QUOTE_NONE"),
    ]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.27
    for i, (key, label) in enumerate(keys):
        values = [f[key]["rows"] / f["manifest_rows"] for f in files.values()]
        ax.bar([x + (i - 1) * width for x in range(len(names))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set_ylabel("rows read / MANIFEST rows")
    ax.set_title("Shared TSV files: rows read per reader (1.0 = exact)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
