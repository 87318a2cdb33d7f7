from tests.configs.conftest import run_experiment  # noqa: F401  (the fixture, shared)
