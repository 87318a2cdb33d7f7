"""Every random draw from an explicit generator names where it happens (issue 22, GPU readiness).

A ``torch.Generator`` draws only on its own device type: ``torch.rand(n, generator=g)`` with a
CUDA ``g`` fails ("Expected a 'cpu' device type for generator but found 'cuda'"), since the
tensor defaults to the CPU. The generators of a run live on the device of the data they noise
(``client/semantics.py``), so such a call works on the CPU and breaks only on a GPU, which CI
does not have: the first GPU run found seven configs failing this way (DP-FedASGP's threshold
draw, GCFL's reference-client permutation). This test reads the package's source and fails on
any ``torch.<random>(..., generator=...)`` call without ``device=`` or ``out=``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fl_lightning

RANDOM = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial"}
# torch.poisson has no size form: it draws on the device of its tensor of rates, which the
# caller places on the generator's device (mechanisms/skellam.py)


def _unplaced_draws(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func = node.func
        if not (isinstance(func.value, ast.Name) and func.value.id == "torch"):
            continue
        keywords = {k.arg for k in node.keywords}
        if func.attr in RANDOM and "generator" in keywords and not keywords & {"device", "out"}:
            found.append((node.lineno, func.attr))
    return found


def test_the_check_finds_an_unplaced_draw() -> None:
    assert _unplaced_draws("torch.randperm(n, generator=g)") == [(1, "randperm")]
    assert _unplaced_draws("torch.randperm(n, generator=g, device=g.device)") == []
    assert _unplaced_draws("torch.rand(m, generator=g, out=buf)") == []
    assert _unplaced_draws("torch.rand(m)") == []  # the global generator: device as asked


def test_every_generator_draw_names_its_device() -> None:
    root = Path(fl_lightning.__file__).parent
    bad = [
        f"{path.relative_to(root.parent)}:{line}: torch.{name}"
        for path in sorted(root.rglob("*.py"))
        for line, name in _unplaced_draws(path.read_text())
    ]
    assert not bad, "draws from a generator without device= (fails for a CUDA generator):\n" + (
        "\n".join(bad)
    )
