"""`ray job submit ... -- python jobs/pipeline.py CONFIG --run-dir DIR`: the whole pipeline as one Ray job."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["run", *sys.argv[1:]]))
