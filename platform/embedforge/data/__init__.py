"""The shared data format and everything that produces it.

- `schema`: the record types and their Arrow schemas; `io`: Parquet / JSONL readers and writers.
- `shared`: readers for every dataset in the shared data folder (`SHARED_DATASETS`); `beir`: BEIR folders;
  `documents`: a user's own document collection; `delimited`: line readers that name the file and line of a bad row.
- `converters`: the papers' recipes from evaluation records to training examples; `sources`: `load_source`, one
  configured data source -> training examples.
"""
