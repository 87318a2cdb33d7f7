"""``python -m fl_lightning.reports.repro``: the same as ``fl-lightning repro``."""

import sys

from fl_lightning.reports.repro.cli import main

sys.exit(main())
