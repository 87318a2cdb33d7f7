"""Deterministic random generators keyed by (seed, round, client, purpose).

Every random draw in a round comes from a generator derived from integers that do not depend
on how many processes ran or in which order clients were trained (DESIGN.md, step 5). That is
what makes a 1-process and an N-process run, or an interrupted and a resumed run, identical.
"""

from __future__ import annotations

import hashlib
import secrets

import torch

_MASK_63 = (1 << 63) - 1


def derive_seed(*keys: int | str) -> int:
    """Mixes integer/string keys into one 63-bit seed with BLAKE2b (stable across platforms)."""
    payload = "/".join(str(k) for k in keys).encode()
    digest = hashlib.blake2b(payload, digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK_63


def generator_for(*keys: int | str, device: torch.device | str = "cpu") -> torch.Generator:
    """Returns a fresh ``torch.Generator`` seeded from ``keys``.

    Example: ``generator_for(seed, round_idx, client_id, "dp_sgd")``.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(*keys))
    return generator


def draw_secret_seed() -> int:
    """A 63-bit seed from the operating system's entropy (``secrets``), for
    ``privacy.secure_mode``: it replaces the configured seed as the first key of every noise,
    cohort and batch generator and is kept only in the checkpoint."""
    return secrets.randbits(63)


def probe_normal(
    shape: torch.Size | tuple[int, ...],
    *,
    generator: torch.Generator,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Standard normal draws for a self-check's inputs (e.g. the stacked-client probe's perturbed
    copy of a model): never privacy noise, which only ``privacy/mechanisms`` draws (a release
    must carry its event; ``tests/test_privacy_contract.py``)."""
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)
