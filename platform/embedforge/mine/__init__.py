"""Hard-negative mining (issue 5, recipe section 5): teachers, RRF, faiss, positive-aware selection.

Pure core: `selection`, `fusion`, `index`, `stats`, `teachers/`, `scoring`. Ray layer: `embed_stage`,
`rerank_stage`, `run` (`run_mine(config, run_dir)`).
"""
