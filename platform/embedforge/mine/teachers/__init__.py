"""Teachers that score (query, document) for mining: dense embedders, BM25, and pairwise relevance scorers."""
