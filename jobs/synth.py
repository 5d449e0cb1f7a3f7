"""`ray job submit -- python jobs/synth.py CONFIG --run-dir DIR`: the synth stage as a Ray job."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["synth", *sys.argv[1:]]))
