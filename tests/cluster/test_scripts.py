"""Issue 51: the cluster scripts parse, say what they run, and place runs on GPUs as stated.

No GPU and no SLURM here: ``bash -n`` for every script (and benchmarks/gpu_check.sh, whose
cluster section runs them with NCCL where a GPU is present), the job arrays' directives, and
runs_per_gpu.sh's placement read from its ``DRY_RUN=1`` listing: one GPU per run, from
``GPUS`` or else ``CUDA_VISIBLE_DEVICES``, ``RUNS_PER_GPU`` runs on each, one seed and folder
each, and a command line the CLI accepts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.cluster.emulate import BIN, SLURM, directives
from tests.conftest import REPO

SCRIPTS = sorted(p for p in SLURM.iterdir() if p.suffix in (".sh", ".sbatch"))


@pytest.mark.parametrize(
    "script", [*SCRIPTS, REPO / "benchmarks" / "gpu_check.sh"], ids=lambda p: p.name
)
def test_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.access(script, os.X_OK) or script.parent.name == "benchmarks"


def test_the_sweep_arrays_directives():
    local, agent = (
        directives(SLURM / "sweep_array.sbatch"),
        directives(SLURM / "sweep_array_wandb.sbatch"),
    )
    for d in (local, agent):
        assert d["--array"] and d["--ntasks"] == "1" and d["--gres"] == "gpu:1"
    assert "--requeue" in local  # a requeued task's worker takes its point over
    text = (SLURM / "sweep_array.sbatch").read_text()
    assert 'exec fl-lightning sweep "${SPEC}" --store "${STORE}" --jobs "${JOBS:-1}"' in text
    assert (
        'exec wandb agent --count "${COUNT:-5}"' in (SLURM / "sweep_array_wandb.sbatch").read_text()
    )


def placement(**env: str) -> list[tuple[str, list[str]]]:
    """(CUDA_VISIBLE_DEVICES, fit arguments) of every run runs_per_gpu.sh would start."""
    full = {**{k: v for k, v in os.environ.items() if k not in ("GPUS", "CUDA_VISIBLE_DEVICES")},
            "DRY_RUN": "1", **env}  # fmt: skip
    done = subprocess.run(["bash", str(SLURM / "runs_per_gpu.sh"), "--trainer.max_steps", "4"],
                          capture_output=True, text=True, env=full, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = []
    for line in done.stdout.splitlines():
        var, *cmd = shlex.split(line)
        assert var.startswith("CUDA_VISIBLE_DEVICES=") and cmd[:3] == [
            "python",
            "-m",
            "fl_lightning.cli",
        ]
        runs.append((var.split("=", 1)[1], cmd[3:]))
    return runs


def test_runs_per_gpu_places_one_gpu_per_run_and_respects_cuda_visible_devices():
    from fl_lightning.runs.arguments import argument_problem

    runs = placement(GPUS="2 3", RUNS_PER_GPU="3")
    assert [gpu for gpu, _ in runs] == ["2"] * 3 + ["3"] * 3
    seeds = [args[args.index("--seed_everything") + 1] for _, args in runs]
    dirs = [args[args.index("--trainer.default_root_dir") + 1] for _, args in runs]
    assert seeds == [str(s) for s in range(6)] and len(set(dirs)) == 6
    assert all(a[a.index("--trainer.devices") + 1] == "1" for _, a in runs)
    assert runs[0][1][-2:] == ["--trainer.max_steps", "4"]  # extra arguments reach every run
    # SLURM's allocation (CUDA_VISIBLE_DEVICES) is what the runs are spread over.
    assert [gpu for gpu, _ in placement(CUDA_VISIBLE_DEVICES="5,7", RUNS_PER_GPU="1")] == ["5", "7"]
    assert argument_problem(runs[0][1]) is None
    empty = subprocess.run(["bash", str(SLURM / "runs_per_gpu.sh")], capture_output=True,
                           text=True, env={**os.environ, "GPUS": " "})  # fmt: skip
    assert empty.returncode == 2 and empty.stderr.startswith("error: no GPU found")


def test_scontrol_stand_in_expands_node_lists():
    done = subprocess.run([str(BIN / "scontrol"), "show", "hostnames", "gpu[01-03,7],login"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.stdout.split() == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]


def test_requeue_outside_slurm_is_one_reason_not_a_crash(tmp_path, monkeypatch):
    from fl_lightning.runs.slurm import requeue_job, slurm_job_id

    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    assert slurm_job_id() == "123"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "120")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_id() == "120_3"
    path = os.environ.get("PATH", "")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    assert requeue_job("120_3").startswith("scontrol requeue 120_3: ")
    assert requeue_job("1; rm -rf /") == "SLURM_JOB_ID '1; rm -rf /' is not a job id"
    log = tmp_path / "slurm.log"
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{path}")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(log))
    assert requeue_job("120_3") is None and log.read_text() == "requeue 120_3\n"


def test_every_script_is_named_in_the_cluster_docs():
    text = (REPO / "docs" / "distributed.md").read_text()
    for script in SCRIPTS:
        assert f"examples/slurm/{script.name}" in text, script.name
    for test in Path(__file__).parent.glob("test_*.py"):
        if test.name != Path(__file__).name:
            assert f"tests/cluster/{test.name}" in text, test.name


@pytest.mark.parametrize(
    ("script", "env", "line"),
    [
        ("fit.sbatch", {}, "error: SLURM_JOB_ID: not set; submit this script with sbatch"),
        ("fit.sbatch", {"SLURM_JOB_ID": "1", "SLURM_NNODES": "1"},
         "error: SLURM_NTASKS_PER_NODE: not set; give sbatch --ntasks-per-node"),
        ("fit.sbatch", {"SLURM_JOB_ID": "1", "SLURM_NNODES": "1", "SLURM_NTASKS_PER_NODE": "1",
                        "VENV": "/nonexistent/venv"},
         "error: VENV: no /nonexistent/venv/bin/activate here"),
        ("sweep_array.sbatch", {"VENV": "/nonexistent/venv"}, "error: VENV: no /nonexistent"),
        ("sweep_array_wandb.sbatch", {}, "error: SWEEP_ID: not set; set SWEEP_ID=<entity>/"),
        ("torchrun_multinode.sh", {}, "error: NODE_RANK: not set; give this node's rank"),
        ("torchrun_multinode.sh", {"NODE_RANK": "0"}, "error: MASTER_ADDR: not set"),
    ],
)  # fmt: skip
def test_a_missing_variable_is_one_line_and_exit_2(tmp_path, script, env, line):
    """Issue 58 item 3: a cluster script missing what it needs says which variable, in one
    line, exit 2 (bash's ``${X:?}`` exits 1; a missing ``srun`` 127), and starts nothing."""
    from tests.cluster.emulate import clean_env

    full = {**clean_env(), "PATH": os.pathsep.join([str(BIN), os.environ["PATH"]]), **env}
    full = {k: v for k, v in full.items() if k not in ("NODE_RANK", "MASTER_ADDR", "SWEEP_ID")
            or k in env}  # fmt: skip
    done = subprocess.run(["bash", str(SLURM / script)], capture_output=True, text=True,
                          env=full, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
    assert not any(tmp_path.iterdir()), "nothing may be written"


def test_the_batch_scripts_carry_the_cluster_lines_and_the_environment_step(tmp_path):
    """Issue 58 item 5: each sbatch example carries commented partition/account/GPU lines that
    become directives when filled in, and the step that loads modules and the venv."""
    from tests.cluster.emulate import filled_in

    for script in (p for p in SCRIPTS if p.suffix == ".sbatch"):
        assert "--partition" not in directives(script)  # shipped commented out
        filled = directives(filled_in(script, tmp_path))
        assert {"--partition", "--account", "--constraint"} <= set(filled), script.name
        text = script.read_text()
        assert "module load ${MODULES}" in text and 'source "${VENV:-.venv}/bin/activate"' in text
