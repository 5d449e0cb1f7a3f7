"""Synthetic training data: a vLLM-hosted LLM in Ray Data writes examples, a judge scores them, cleaning keeps the
good ones (NV-Embed 4.3, MGH 2.1, WildBench 3). `run.run_synth(config, run_dir)` is the entry point."""
