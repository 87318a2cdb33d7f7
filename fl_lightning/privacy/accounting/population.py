"""δ against the population it protects.

An (ε, δ) guarantee with δ ≥ 1/N says nothing about a population of N units: the mechanism that
publishes one unit's data whole, chosen at random, meets (0, 1/N)-DP (Dwork and Roth 2014,
Sec. 2.3, after Def. 2.4: values of δ on the order of 1/‖x‖₁ "permit preserving privacy by
publishing the complete records of a small number of database participants"). So a run is
refused when its ``privacy.delta`` is at least:

* 1/N, N clients, where the unit is a client: client-level DP (noise on the aggregate) and local
  DP (each client's uploads privatised; the unit is a client's whole data, and one client
  published in full among N is what δ = 1/N allows);
* 1/n, n the number of examples of the smallest client, where the unit is a record: DP-SGD's
  record-level guarantee holds per client, so its smallest dataset is the population.

``privacy.allow_large_delta: true`` releases the guarantee anyway; its sentence then says so
(:func:`large_delta_note`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LargeDelta:
    """Why δ is too large for one level of the run: its unit, population and the bound 1/size."""

    level: str  # "client-level", "local", "per-client" or "record-level"
    unit: str  # "client" or "record"
    size: int  # N clients, or n examples of the smallest client
    where: str  # e.g. "40 clients" or "client 3, the smallest, holds 12 examples"


def large_delta(
    delta: float,
    *,
    client_unit: str | None,
    num_clients: int,
    record_unit: bool,
    smallest_client: tuple[int, int] | None,
) -> LargeDelta | None:
    """The first level at which ``delta`` ≥ 1/size, or None.

    Args:
        delta: the run's δ (``privacy.delta``).
        client_unit: the level whose unit is a client (``client-level``, ``local``, ...), or
            None when nothing is privatised per client.
        num_clients: N.
        record_unit: the run trains with DP-SGD (record-level).
        smallest_client: (client id, n) of the smallest non-empty client.
    """
    if client_unit is not None and num_clients > 0 and delta >= 1.0 / num_clients:
        return LargeDelta(client_unit, "client", num_clients, f"{num_clients} clients")
    if record_unit and smallest_client is not None:
        cid, n = smallest_client
        if n > 0 and delta >= 1.0 / n:
            where = f"client {cid}, the smallest, holds {n} examples"
            return LargeDelta("record-level", "record", n, where)
    return None


def large_delta_problem(delta: float, found: LargeDelta) -> str:
    """The one-line refusal, naming ``privacy.delta`` and the population."""
    sym = "N" if found.unit == "client" else "n"
    whole = "a whole client's data" if found.unit == "client" else "a whole record of a client"
    return (
        f"privacy.delta: {delta:g} ≥ 1/{sym} = 1/{found.size} ({found.where}): a {found.level} "
        f"guarantee at this δ allows publishing {whole}; choose δ < {1.0 / found.size:.3g} "
        "(δ ≪ 1/" + sym + " is the usual choice), or set privacy.allow_large_delta: true to "
        "release it anyway (its guarantee then says so)"
    )


def large_delta_note(delta: float, found: LargeDelta) -> str:
    """What the guarantee sentence adds when ``privacy.allow_large_delta`` released it anyway."""
    sym = "N" if found.unit == "client" else "n"
    whole = "one client's data" if found.unit == "client" else "one record of a client"
    return (
        f"δ = {delta:g} ≥ 1/{sym} = 1/{found.size} ({found.where}) allowed by "
        f"privacy.allow_large_delta: publishing {whole} whole meets this δ"
    )
