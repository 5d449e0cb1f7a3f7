"""The GPU benchmark's parts (benchmarks/gpu.py): backbone shapes, random-weight folders, texts, measurements."""
