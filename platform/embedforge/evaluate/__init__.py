"""MTEB-style evaluation of any embedder on local tasks (issue 7; NV-Embed 5, LGAI-Embedding 5.1).

Entry point: `embedforge.evaluate.run.run_evaluate(config, run_dir, models)`; CLI `embedforge eval`.
"""
