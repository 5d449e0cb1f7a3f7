"""`ray job submit -- python jobs/evaluate.py CONFIG --run-dir DIR`: the evaluate stage as a Ray job."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["eval", *sys.argv[1:]]))
