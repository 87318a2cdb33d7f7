"""Local training semantics, stated once: what every executor does to a client in one round.

Both executors (``server/executor.py``: one client at a time; ``server/vectorized_executor.py``:
a stack of clients at once) call these functions, so the two paths cannot drift apart:

- :func:`batch_plan`: which examples each local step uses. Without DP-SGD, epochs of a
  permutation cut into batches of ``B``; with DP-SGD, a Poisson sample at rate ``q = B / n_i``
  per step (Abadi et al. 2016, §3.1 "lots"; the subsampling the accountant's event assumes);
  both drawn from the client's ``(seed, round, client, "batches")`` generator.
- :func:`sgd_step_`: the SGD update (momentum, weight decay, no dampening), which is
  ``torch.optim.sgd.sgd``, the function ``torch.optim.SGD.step`` itself calls.
- the DP-SGD step: per-example clipping by ``privacy/mechanisms/clipping.py: clip_factors`` and the
  noisy mean of ``client/dp_sgd.py: noisy_mean_`` (Abadi et al. 2016, Alg. 1), noise from the
  client's ``(seed, round, client, "dp_sgd")`` generator, parameter by parameter in parameter order;
- ``client/local_loop.py: client_update``: the ``ClientUpdate`` (mean loss over non-empty
  steps, ``local_steps``, the DP-SGD event of ``privacy/accounting/budget.py: dp_sgd_event``).

Every one of these generators, and the ``(seed, round, client, "client_mechanism")`` generator
of the strategy's upload mechanism, lives on the device of the client's data and update, so that
the draws happen where the tensors are (a CPU generator cannot draw a CUDA tensor). A run is
reproducible on its device; a GPU run's streams are CUDA's Philox, not the CPU's Mersenne
Twister, so its numbers differ from the same seed on the CPU.
"""

from __future__ import annotations

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.privacy.accounting.budget import dp_sgd_rate


def batch_plan(
    cfg: LocalTrainingConfig, n: int, generator: torch.Generator, device: torch.device | str
) -> list[torch.Tensor]:
    """The example indices (into the client's ``n`` examples) of each local step."""
    out = []
    if cfg.dp_sgd is not None:
        rate = dp_sgd_rate(batch_size=cfg.batch_size, size=n)
        for _ in range(cfg.steps_for(n)):
            mask = torch.rand(n, generator=generator, device=device) < rate
            out.append(mask.nonzero().squeeze(1))
        return out
    order = torch.empty(0, dtype=torch.long, device=device)
    cursor = 0
    for _ in range(cfg.steps_for(n)):
        if cursor >= len(order):
            order = torch.randperm(n, generator=generator, device=device)
            cursor = 0
        out.append(order[cursor : cursor + cfg.batch_size])
        cursor += cfg.batch_size
    return out


def sgd_step_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    momentum_buffers: list[torch.Tensor | None],
    cfg: LocalTrainingConfig,
) -> None:
    """``torch.optim.SGD``'s update of ``params`` in place (``momentum_buffers`` entries that are
    None are created, as the optimizer does on its first step). Works on stacked tensors with a
    leading client axis as on one client's parameters: the update is elementwise."""
    from torch.optim.sgd import sgd

    with torch.no_grad():
        sgd(
            params,
            grads,
            momentum_buffers,
            weight_decay=cfg.weight_decay,
            momentum=cfg.momentum,
            lr=cfg.lr,
            dampening=0.0,
            nesterov=False,
            maximize=False,
        )
