"""Parallel training and sweeps: DDP on 2 CPU processes (gloo) gives the 1-process answer, a run killed
mid-training resumes from its checkpoint to the same result, the rank-count cost model, the shared
graph, and a parallel joblib sweep whose records all reach a leaderboard."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import config
from fourdb.engine.distribution import ddp
from fourdb.engine.planning.cost import thread_factor
from fourdb.engine.planning.parallel import Profile, choose_nproc, predict
from fourdb.experiment.run import run_experiment
from fourdb.train import checkpoint

# small synthetic taste, 2 epochs, the same global batch for every process count
RUN = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", "sampler=recent", "trainer=ddp",
       "trainer.epochs=2", "trainer.patience=2", "trainer.batch_size=256", "trainer.progress=false",
       "trainer.checkpoint_every=4", "seed=0"]


def fourdb(*args, cwd, env=None, timeout=240):
    """``fourdb ARGS`` in its own process group, all of which (torchrun and its ranks) dies on a timeout."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    cmd = [sys.executable, "-m", "fourdb.cli", *args]
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        err += f"\n(killed after {timeout} s)"
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    return run_experiment(config(*RUN, "trainer.nproc=1"), out), out


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("two") / "run"
    p = fourdb("run", *RUN, "trainer.nproc=2", f"hydra.run.dir={out}", cwd=out.parent)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "record.json").read_text()), out, p


def test_two_processes_reach_the_one_process_answer(one_process, two_processes):
    one, _ = one_process
    two, out, p = two_processes
    assert one["nproc"] == 1 and two["nproc"] == 2
    assert abs(one["metrics"]["val"]["auroc"] - two["metrics"]["val"]["auroc"]) <= 0.02, (one["metrics"], two["metrics"])
    assert two["metrics"]["val"]["auroc"] > 0.7
    assert two["distributed"]["world_size"] == 2 and two["distributed"]["backend"] == "gloo"
    assert len(two["distributed"]["peak_memory_mb_per_rank"]) == 2
    assert two["distributed"]["shared_graph"]["arrays"] > 10
    # one record, from rank 0; the shared graph is removed once every rank is done
    assert sorted(f.name for f in out.iterdir() if f.suffix == ".json") == ["record.json"]
    assert not (out / ".shared_graph").exists() and (out / "checkpoint.npz").exists()
    assert p.stdout.count("synthetic") == 1  # the launching process prints the record once


def test_killed_rank_resumes_from_checkpoint_to_the_same_result(two_processes, tmp_path):
    """Rank 1 SIGKILLs itself mid-epoch; torchrun (--max-restarts 1) restarts the group, which resumes."""
    ref, _, _ = two_processes
    out = tmp_path / "run"
    hooks = str(Path(__file__).parent / "hooks")  # tests/hooks/sitecustomize.py kills the last rank
    p = fourdb("run", *RUN, "trainer.nproc=2", f"hydra.run.dir={out}", cwd=tmp_path,
               env={"FOURDB_TEST_KILL_AT_STEP": "6", "FOURDB_TEST_KILL_MARKER": str(tmp_path / "killed"),
                    "PYTHONPATH": os.pathsep.join([hooks, os.environ.get("PYTHONPATH", "")])})
    # 10 steps per epoch: step 6 is mid-epoch 1, after the checkpoint at 4
    assert p.returncode == 0, p.stderr[-3000:]
    assert "kills itself at step 6" in p.stderr and "resuming from" in p.stderr
    rec = json.loads((out / "record.json").read_text())
    assert rec["distributed"]["restarts"] == 1
    for split in ("train", "val", "test"):
        for name, value in ref["metrics"][split].items():
            assert rec["metrics"][split][name] == pytest.approx(value, abs=1e-6), (split, name)
    assert [h["loss"] for h in rec["history"]] == pytest.approx([h["loss"] for h in ref["history"]], abs=1e-6)


def test_single_process_resumes_from_its_folder(one_process, tmp_path, monkeypatch):
    """A 1-process run stopped mid-epoch and started again in the same folder ends as an unbroken run."""
    ref, _ = one_process

    class Killed(Exception):
        pass

    steps, step = [0], torch.optim.AdamW.step

    def killed_at_15(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        steps[0] += 1
        if steps[0] == 15:  # mid-epoch 2 (10 steps per epoch), after the checkpoint at step 12
            raise Killed
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", killed_at_15)
    cfg = config(*RUN, "trainer.nproc=1")
    with pytest.raises(Killed):
        run_experiment(cfg, tmp_path)
    state = checkpoint.read(checkpoint.path_in(tmp_path))
    assert (state["epoch"], state["step"], state["global_step"]) == (1, 2, 12)
    assert checkpoint.load(tmp_path, state["key"]) is not None  # what the second run resumes from
    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    rec = run_experiment(cfg, tmp_path)
    assert rec["metrics"]["val"]["auroc"] == pytest.approx(ref["metrics"]["val"]["auroc"], abs=1e-9)
    assert rec["metrics"]["test"]["auroc"] == pytest.approx(ref["metrics"]["test"]["auroc"], abs=1e-9)
    # a checkpoint of another config is not resumed
    other = run_experiment(config(*RUN, "trainer.nproc=1", "trainer.lr=0.01", "trainer.epochs=1"), tmp_path)
    assert len(other["history"]) == 1


def test_shared_graph_is_mapped_not_copied(tmp_path):
    from fourdb.datasets import load_dataset
    from fourdb.engine.sampling.source import GraphSource
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    cfg = config(*RUN)
    db = load_dataset("synthetic", size=150)
    task = load_task(db, "synthetic", "taste")
    splits = subsample(task, None, None, 0)
    data = graph_inputs(cfg, db, task, splits)
    shared, info = ddp.shared_inputs(lambda: data, tmp_path / "shared", ddp.Context())
    big = max(shared.graph.ntypes, key=lambda t: shared.graph.features[t].numeric.nbytes)
    assert isinstance(shared.graph.features[big].numeric, np.memmap)  # a mapped file, not a private copy
    assert info["mapped_mb"] > 0.5 and info["private_pickle_kb"] < info["mapped_mb"] * 1024
    # sampling from the mapped copy gives the same batch as from the built one
    a, b = GraphSource(data, 64), GraphSource(shared, 64)
    (xa, ya), (xb, yb) = a.train_batch(np.arange(64), 7), b.train_batch(np.arange(64), 7)
    assert torch.equal(ya, yb)
    for t in xa[1]:
        assert torch.equal(xa[1][t]["num"], xb[1][t]["num"]) and torch.equal(xa[1][t]["cat"], xb[1][t]["cat"])


def test_a_shard_samples_its_part_of_every_global_batch(tmp_path):
    from fourdb.engine.sampling.source import GraphSource

    class Data:
        seeds = {"train": np.arange(10)}

    src = GraphSource.__new__(GraphSource)
    src.data, src.batch_size, src.rank, src.world = Data(), 4, 0, 1
    full = src.epoch_plan(np.random.default_rng(3))
    parts = []
    for r in range(2):
        src.shard(r, 2)
        parts.append(src.epoch_plan(np.random.default_rng(3)))
    assert [len(p) for p in parts] == [3, 3]  # 3 global batches (4, 4, 2 seeds)
    for k, (idx, _) in enumerate(full):
        assert np.array_equal(np.concatenate([parts[0][k][0], parts[1][k][0]]), idx)


def test_cost_model_picks_ranks_from_the_machine():
    # sampling-bound model on a 16-core machine: more ranks split the sampling
    prof = Profile(batch_size=512, sample_s=(0.005, 2e-4), model_s=(0.004, 2e-5), model_1t_s=(0.01, 8e-5),
                   grad_bytes=4 << 20, batches=100)
    plan = choose_nproc(prof, cores=16, gpus=0)
    assert plan.nproc > 1 and plan.predicted_epoch_s[plan.nproc] < plan.predicted_epoch_s[1]
    assert 1 <= plan.workers <= 4
    # one core: one rank
    assert choose_nproc(prof, cores=1, gpus=0).nproc == 1
    # GPUs: at most one rank per GPU
    assert choose_nproc(prof, cores=32, gpus=4).nproc <= 4
    # a huge model on a slow link: the all-reduce eats the gain
    heavy = Profile(512, (0.0, 0.0), (0.01, 0.0), (0.01, 0.0), grad_bytes=4 << 30, batches=10)
    assert choose_nproc(heavy, cores=16, gpus=0).nproc == 1
    assert predict(prof, 2, 16, 0)[0] > 0
    assert thread_factor(0.5, 1, 2) == 1.0 and thread_factor(0.5, 2, 2) == pytest.approx(0.5)
    assert thread_factor(2.0, 2, 2) == pytest.approx(2.0)  # threads that hurt, as measured


def test_joblib_sweep_runs_in_parallel_and_every_record_reaches_the_leaderboard(tmp_path):
    sweep, board = tmp_path / "sweep", tmp_path / "boards"
    p = fourdb("run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "dataset=synthetic",
               "dataset.params.size=150", "task=taste", "model=gbdt,mlp", "trainer.epochs=1",
               "trainer.progress=false", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Results (2 runs" in p.stdout
    from fourdb.cli import main

    assert main(["leaderboard", "submit", str(sweep), "--root", str(board)]) == 0  # in-process
    lines = (board / "synthetic" / "taste.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["model"] for x in lines) == ["gbdt", "mlp"]


def test_cluster_launchers_are_configured():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fourdb.defaults import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        ray = compose("config", overrides=["hydra/launcher=ray"], return_hydra_config=True)
        assert OmegaConf.select(ray, "hydra.launcher._target_").endswith("RayLauncher")
        try:
            import hydra_plugins.hydra_submitit_launcher  # noqa: F401
        except ImportError:
            pytest.skip("hydra-submitit-launcher not installed (pip install -e '.[slurm]')")
        slurm = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                        return_hydra_config=True)
        assert slurm.hydra.launcher.partition == "gpu" and slurm.hydra.launcher.tasks_per_node == 1
        assert slurm.hydra.launcher._target_.endswith("SlurmLauncher")


def test_nproc_auto_hands_its_plan_to_the_run_by_file_not_environment(tmp_path):
    """``trainer.nproc=auto``: the launcher's plan reaches the run (in this process or in its ranks)
    through a note in the run folder, which is gone once the record holds the prediction beside the
    measured epochs; a run started afterwards in the same folder without the launcher has no plan."""
    out = tmp_path / "run"
    p = fourdb("run", *RUN, "trainer.nproc=auto", f"hydra.run.dir={out}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    record = json.loads((out / "record.json").read_text())
    auto = record["parallel_auto"]
    assert auto["nproc"] == record["nproc"] in (1, 2)
    assert set(auto["predicted_epoch_s"]) >= {"1"} and len(auto["measured_epoch_s"]) == 2
    assert not (out / "launch.json").exists()
    (out / "launch.json").write_text(json.dumps({"nproc": 1, "plan": auto}))  # left by a crashed launcher
    p = fourdb("run", *RUN, "trainer.nproc=1", f"hydra.run.dir={out}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "parallel_auto" not in json.loads((out / "record.json").read_text())
