"""Stage 4: distributed LoRA contrastive training on Ray Train (NV-Embed 3.3, MGH 2.1, paper 004, LGAI 4.1-4.2).

`losses/` holds the objectives over embeddings, `batching` / `curriculum` / `schedule` the pure training logic,
`gradcache` the memory-bounded step, `worker` the Ray Train loop and `run` the stage entry point.
"""
