"""Build a run from a config. One job per module:

- ``cli_class``: the LightningCLI class (``build_cli_class``): groups, links, pre-flight hooks;
- ``defaults``: the Trainer's settings, loggers, callbacks and checkpoint plugin by default;
- ``preflight``: output-directory and checkpoint checks before the Trainer starts;
- ``distributed``: collective timeout, lost-peer detection, its one-line report, stopping ranks;
- ``phase``: where the command is (config, setup, training);
- ``error_lines``: a parser or ValueError as one line ``<field>: <why>``;
- ``arguments``: whether a command line parses (YAML, keys, types), building nothing.

Used by the ``fl-lightning`` entry point (``cli.py``), by the attack pipeline (shadow runs) and by
the sweep runner (a spec's points are checked against this parser before launching), so that none
of them imports the entry point.
"""
