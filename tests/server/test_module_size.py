"""``server/module.py`` only wires Lightning's hooks to the server's parts (docs/architecture.md,
"Where a round lives"); a whole job that grows in it moves to a module of its own (issue 60:
the secure seed, the end of a run, the noise-to-signal warning, the set-up hand-off)."""

from pathlib import Path

import fl_lightning.server.module as module

MAX_LINES = 350


def test_the_round_module_stays_under_its_ceiling():
    lines = len(Path(module.__file__).read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"server/module.py: {lines} lines > {MAX_LINES}; move a whole job out"
    )
