"""``fl-lightning fit --help`` fits a screen (issue 48): the federated groups first, the model zoo
and the strategies by name, Lightning's trainer last; ``--help-all`` is jsonargparse's full help,
and the short help lists exactly the group options the parser accepts."""

from __future__ import annotations

import re

import pytest

from fl_lightning.cli import main
from fl_lightning.runs.help import model_zoo, subclasses_of


@pytest.fixture(scope="module")
def full_help() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as done:
        main(["fit", "--help-all"])
    assert done.value.code == 0
    return buf.getvalue()


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
def test_help_fits_a_screen_and_leads_with_the_federated_groups(subcommand, capsys):
    assert main([subcommand, "--help"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert len(lines) <= 200 and max(len(ln) for ln in lines) <= 100, len(lines)
    heads = [ln.split(":")[0] for ln in lines[1:] if re.match(r"^[a-z]+: ", ln)]
    assert heads == ["model", "data", "client", "strategy", "privacy", "trainer"], heads
    assert lines[0].startswith(f"usage: fl-lightning {subcommand} ")
    assert f"fl-lightning {subcommand} --help-all" in text
    for name in ("MLP", "MnistCNN", "ResNet18GN", "DPFedAvg", "GCFL", "DPFTRL", "FedAvg"):
        assert re.search(rf"\b{name}\b", text), name
    assert "torch.nn." not in text and "--trainer.fast_dev_run" not in text


def test_short_help_lists_exactly_the_group_options_the_parser_accepts(full_help, capsys):
    main(["fit", "--help"])
    short = capsys.readouterr().out

    def keys(text: str) -> set[str]:
        found = re.findall(r"^\s+--((?:model|data|client|privacy)\.\w+)\b(?!\.)", text, re.M)
        return {k for k in found if not k.endswith(".help")}

    assert keys(short) == keys(full_help)
    assert len(keys(short)) > 30
    assert "--trainer.fast_dev_run" in full_help and "--strategy.help" in full_help


def test_zoo_and_strategy_names_are_the_packages():
    import fl_lightning.models as zoo
    import fl_lightning.strategies  # noqa: F401  (imports every strategy module)
    from fl_lightning.strategies import Strategy

    assert model_zoo() == list(zoo.__all__)

    def every(cls: type) -> set[type]:
        return set(cls.__subclasses__()).union(*(every(c) for c in cls.__subclasses__()))

    public = {
        c.__name__
        for c in every(Strategy)
        if c.__module__.startswith("fl_lightning.strategies") and not c.__name__.startswith("_")
    }
    assert set(subclasses_of("Strategy", "strategies")) == {
        n for n in public if not n.endswith("Strategy")
    }
