"""In ``privacy.secure_mode`` every SecAgg key, dropout, rotation and noise share of distributed
DP is keyed by the run's secret, never by the configured seed."""

from __future__ import annotations

from fl_lightning.strategies import distributed_dp
from fl_lightning.utils import rng
from tests.conftest import REPO, TINY

SECRET = 6_917_529_027_641_081_857
DDG = REPO / "configs" / "experiment" / "distributed_dp" / "ddg.yaml"


def test_secagg_keys_and_noise_come_from_the_secret(tmp_path, monkeypatch):
    from fl_lightning.cli import main

    monkeypatch.setattr("fl_lightning.server.secure_seed.draw_secret_seed", lambda: SECRET)
    keys: list[int] = []
    generators: list[int] = []
    real_keys, real_generator = distributed_dp.RoundKeys, rng.generator_for

    def record_keys(seed, round_idx):
        keys.append(seed)
        return real_keys(seed, round_idx)

    def record_generator(*k, **kw):
        if any(str(x).startswith(("secagg", "client_mechanism")) for x in k):
            generators.append(k[0])
        return real_generator(*k, **kw)

    monkeypatch.setattr(distributed_dp, "RoundKeys", record_keys)
    monkeypatch.setattr(distributed_dp, "generator_for", record_generator)
    monkeypatch.setattr("fl_lightning.server.round.generator_for", record_generator)
    args = ["fit", "--config", str(DDG), *TINY, "--trainer.max_steps", "2",
            "--trainer.default_root_dir", str(tmp_path), "--seed_everything", "7",
            "--privacy.secure_mode", "true",
            # cohorts of about 5: with 3, both rounds of this secret's draw abort (too few
            # survivors), and a run that aggregates nothing ends with exit 1
            "--model.clients_per_round", "5"]  # fmt: skip
    assert main(args) == 0
    assert keys and generators
    assert set(keys) == {SECRET} and set(generators) == {SECRET}  # never the configured 7
