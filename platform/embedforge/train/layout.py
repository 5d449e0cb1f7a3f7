"""Names of the training stage's folder and files, apart from the modules that import torch, so the driver can
find a complete stage (and skip it) without importing the training stack."""

STAGE = "train"
EXAMPLES = "examples"  # the Ray Data dataset Ray Train hands to the workers
METRICS_CSV = "metrics.csv"
ATTEMPTS = "attempts.jsonl"
RAY_DIR = "ray"  # Ray Train storage (checkpoints) inside the stage folder
