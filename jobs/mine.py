"""`ray job submit -- python jobs/mine.py CONFIG --run-dir DIR`: the mining stage as a Ray job."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["mine", *sys.argv[1:]]))
