"""`ray job submit -- python jobs/train.py CONFIG --run-dir DIR`: the training stage as a Ray job."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["train", *sys.argv[1:]]))
