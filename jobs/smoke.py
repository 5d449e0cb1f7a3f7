"""`ray job submit ... -- python jobs/smoke.py --run-dir DIR`: the smoke job (see embedforge.cluster.smoke)."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["cluster", "smoke", *sys.argv[1:]]))
