"""Run directories: one folder per stage with Parquet shards and a manifest."""
