"""The Gaussian noise of DP-SGD's release for many clients at once (Abadi et al. 2016, Alg. 1).

``client.dp_sgd.noise_rng`` picks the generator (``client/config.py: DPSGDConfig``):

- ``torch`` (default; every stored result): each client's own ``torch.Generator`` keyed by
  ``(seed, round, client, "dp_sgd")``, drawn parameter by parameter in parameter order with the
  draws of Opacus' ``_generate_noise`` (``torch.normal(0, σC, shape)``; nothing drawn when
  σC = 0) — one draw per client, parameter and step;
- ``philox``: the counter-based generator of ``counter_noise.py``, keyed by the same integers;
  one evaluation gives every client's noise of a bucket, for all its steps.

Both give the same numbers to the sequential loop (``client/dp_sgd.py: noisy_mean``) and to the
stacked executor (``server/vectorized_executor.py``), which asks :func:`bucket_noise` for the
noise of its active clients at a step as one (clients, parameters) tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fl_lightning.privacy.mechanisms.counter_noise import CounterStream, standard_normals

NOISE_RNGS = ("torch", "philox")
#: most noise values a bucket holds at once under ``philox`` (64 MB of float32)
WINDOW_VALUES = 1 << 24


def generator_noise(
    generators: Sequence[torch.Generator],
    shapes: Sequence[torch.Size],
    *,
    std: float,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    """(clients, parameters) N(0, std²) noise, row j from ``generators[j]`` drawn shape by shape
    exactly as Opacus' ``_generate_noise`` draws it (the same values, bit for bit)."""
    total = sum(s.numel() for s in shapes)
    if std == 0:  # _generate_noise returns zeros without drawing
        return torch.zeros(len(generators), total, device=device, dtype=dtype)
    draws = [
        torch.normal(0.0, std, size=(s.numel(),), generator=g, device=device, dtype=dtype)
        for g in generators
        for s in shapes
    ]
    return torch.cat(draws).view(len(generators), total)


class BucketNoise:
    """The DP-SGD noise of a bucket of clients through its local steps.

    Args:
        noise_rng: ``torch`` or ``philox`` (module docstring).
        seed, round_idx, clients: the keys (``ctx.seed`` is the secret seed in secure mode).
        shapes: the trainable parameters' shapes, in parameter order.
        std: σC.
        steps: the most local steps of a client of the bucket (``philox`` draws as many of
            them at once as fit in ``WINDOW_VALUES``).
    """

    def __init__(
        self,
        noise_rng: str,
        *,
        seed: int,
        round_idx: int,
        clients: Sequence[int],
        shapes: Sequence[torch.Size],
        std: float,
        steps: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        from fl_lightning.utils.rng import generator_for

        if noise_rng not in NOISE_RNGS:
            raise ValueError(f"client.dp_sgd.noise_rng: expected one of {NOISE_RNGS}, got "
                             f"{noise_rng!r}")  # fmt: skip
        self.noise_rng, self.shapes, self.std = noise_rng, list(shapes), float(std)
        self.device, self.dtype = device, dtype
        self.size = sum(s.numel() for s in shapes)
        self._z: torch.Tensor | None = None  # steps [self._first, ...) of the window
        self._first = 0
        self._generators: list[torch.Generator] = []
        self._keys = [CounterStream(seed, round_idx, c).key for c in clients]
        # philox: as many steps at once as fit in WINDOW_VALUES values (at least one)
        self._window = max(1, min(steps, WINDOW_VALUES // max(1, len(clients) * self.size)))
        if noise_rng == "torch":
            self._generators = [
                generator_for(seed, round_idx, c, "dp_sgd", device=device) for c in clients
            ]

    def at(self, step: int, first: int) -> torch.Tensor:
        """(clients[first:], parameters): the noise of the clients still active at ``step``
        (every step's call for ``torch``, in step order: the generators are stateful)."""
        if self.noise_rng == "philox":
            if self._z is None or not self._first <= step < self._first + self._z.shape[1]:
                self._first = step
                steps = range(step, step + self._window)
                z = standard_normals(self._keys, steps, self.size, device=self.device,
                                     dtype=self.dtype)  # fmt: skip
                self._z = z.mul_(self.std)
            return self._z[first:, step - self._first]
        return generator_noise(self._generators[first:], self.shapes, std=self.std,
                               device=self.device, dtype=self.dtype)  # fmt: skip


def stream_noise(
    stream: CounterStream, shapes: Sequence[torch.Size], *, std: float, device: torch.device,
    dtype: torch.dtype,
) -> list[torch.Tensor]:  # fmt: skip
    """One client's next-step noise from its counter stream, one tensor per shape (views of one
    buffer), σC times the standard normals: the sequential loop's ``philox`` draw."""
    z = stream.normals(sum(s.numel() for s in shapes), device=device, dtype=dtype).mul_(std)
    return [part.view(s) for part, s in zip(z.split([s.numel() for s in shapes]), shapes)]


__all__ = ["NOISE_RNGS", "BucketNoise", "generator_noise", "stream_noise"]
