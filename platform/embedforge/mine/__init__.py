"""Hard-negative mining (issue 5, recipe section 5): teachers, RRF, faiss, positive-aware selection.

Pure core: `pools` (corpus and positives per query), `teachers/` (dense, BM25, pairwise), `index` (faiss),
`fusion` (RRF), `selection` (TopK-PercPos and friends), `miner` (one pool's queries), `stats` (the table).
Ray layer: `embed_stage` (Ray Data actor pool into the embedding cache), `rerank_stage` (pairwise actor pool),
`run` (`run_mine(config, run_dir)`).
"""
