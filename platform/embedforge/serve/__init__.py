"""Serving an embedder with Ray Serve behind an OpenAI-compatible `/v1/embeddings` API (recipe section 8).

`request.py` parses and checks request bodies, `batcher.py` groups requests into token-budget batches,
`tokens.py` counts and truncates tokens, `app.py` is the HTTP layer and the Ray Serve deployment, `deploy.py`
builds and starts it from the config.
"""
