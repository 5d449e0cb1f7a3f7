"""`ray job submit -- python jobs/serve.py CONFIG [--model M] [--run-dir D] --detach`: thin entry to the CLI."""

import sys

from embedforge.cli.main import main

raise SystemExit(main(["serve", *sys.argv[1:]]))
