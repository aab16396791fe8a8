"""Actors on Ray (`drlhet.runtime.ray_learner`): a two-node local cluster, one actor killed
mid-run; nothing lost, nothing inserted twice, the restarted actor back on the newest
parameters."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="missing library: ray")

# Ray starts its processes with fork + exec (subprocess) after JAX has started threads: Python
# warns about fork, harmless before an exec
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from ray.util.placement_group import remove_placement_group  # noqa: E402

from drlhet.agents.dqn import DQNConfig  # noqa: E402
from drlhet.cli.ray_actors import ray_config  # noqa: E402
from drlhet.cli.train import CHECKPOINT_EVERY, KEEP_CHECKPOINTS, _saving  # noqa: E402
from drlhet.runtime.config import TrainConfig  # noqa: E402
from drlhet.runtime.ray_cluster import (  # noqa: E402
    check_address,
    check_run,
    end_steps,
    init_ray,
    reserve_cpus,
)
from drlhet.runtime.ray_learner import RayConfig, parse_actors, run_ray  # noqa: E402

SMALL = TrainConfig(
    env="CartPole-v1",
    steps=256 + 3 * 512,
    warmup=256,
    eval_every=512,
    eval_envs=2,
    seeds=1,
    num_envs=4,
    sgd_steps=1,
    batch_size=32,
    buffer_size=4096,
    dqn=DQNConfig(hidden=(16,)),
)


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def where(name: str) -> tuple[int, str]:
    """``(pid, node id)`` of actor ``name``, waiting while Ray restarts it."""
    for _ in range(300):
        try:
            return ray.get(ray.get_actor(name).where.remote())
        except ray.exceptions.RayActorError:
            time.sleep(0.2)
    raise AssertionError(f"actor {name} did not come back")


def test_a_killed_actor_restarts_rejoins_and_nothing_is_lost_or_duplicated(two_nodes):
    seen: dict = {}

    def on_chunk(row):
        names = row["ray"]["actors"]
        if row["chunk"] == 0:  # both actors placed, one per node; kill actor 1 mid-run
            places = [where(n) for n in names]
            seen["nodes"] = {node for _, node in places}
            seen["pid"] = places[1][0]
            ray.kill(ray.get_actor(names[1]), no_restart=False)
        if row["chunk"] == 2:
            seen["pid_after"] = where(names[1])[0]

    rc = RayConfig(actors=2, rollout=8, sync_every=8)
    agent, rows, rep = run_ray(SMALL, rc, on_chunk)
    assert [r["chunk"] for r in rows] == [0, 1, 2]
    assert len(seen["nodes"]) == 2  # one actor on each node
    assert seen["pid_after"] != seen["pid"]  # a new process
    assert rep["restarts"] == [0, 1]
    assert rep["rejoins"] and all(r["actor"] == 1 and r["latest"] for r in rep["rejoins"])
    assert rep["duplicates"] == [0, 0] and rep["gaps"] == [0, 0]
    assert rep["env_steps_reported"] == rep["env_steps_inserted"]
    # every env step the learner counted came from exactly one reported batch
    assert sum(rep["env_steps_inserted"]) == rows[-1]["env_steps"]
    assert rows[-1]["env_steps"] == end_steps(SMALL, rc) == SMALL.warmup + 3 * SMALL.eval_every
    assert rep["lag_max"] <= rc.lag_bound + rc.rollout
    assert all(np.isfinite(r["eval_return"]).all() for r in rows)


def test_local_actors_share_the_compilation_cache_and_remote_ones_do_not(tmp_path):
    from drlhet.runtime.ray_cluster import _shared_cache

    config = SimpleNamespace(
        jax_compilation_cache_dir=str(tmp_path),
        jax_persistent_cache_min_compile_time_secs=0.0,
        jax_persistent_cache_min_entry_size_bytes=0,
    )
    env = _shared_cache(RayConfig(actors=2), config)
    assert env == {
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    assert _shared_cache(RayConfig(actors=2, address="10.0.0.1:6379"), config) == {}
    config.jax_compilation_cache_dir = None
    assert _shared_cache(RayConfig(actors=2), config) == {}


@pytest.mark.parametrize("text", ["ray", "ray:0", "ray:x", "local:2", "ray:-1"])
def test_bad_actor_specs_are_named(text):
    with pytest.raises(ValueError, match="--actors must be ray:N"):
        parse_actors(text)


def test_ray_config_checks():
    with pytest.raises(ValueError, match="rollout must be >= 1"):
        RayConfig(actors=1, rollout=0)
    assert RayConfig(actors=2, rollout=8, sync_every=8).lag_bound == 32


@pytest.mark.parametrize(
    "flags,match",
    [
        (dict(actors="ray:0"), "--actors must be ray:N with N >= 1, got 'ray:0'"),
        (
            dict(actors="ray:2", mapping="actors=cpu:0,replay=cpu:0,learner=cpu:0"),
            "--mapping actors=cpu:0,replay=cpu:0,learner=cpu:0 cannot be combined with "
            "--actors ray:2",
        ),
        (dict(actors="ray:2", resume=Path("runs/x")), "--resume cannot be combined"),
        (
            dict(actors="ray:2", checkpoint_every=5),
            "--checkpoint-every 5 cannot be combined with --actors ray:2 (Ray runs write no",
        ),
        (dict(address="auto"), "--ray-address needs --actors ray:N"),
        (dict(sync_every=8), "--sync-every needs --actors ray:N"),
        (dict(rollout=0), "--rollout needs --actors ray:N"),
        (dict(actors="ray:1", rollout=0), "--rollout must be >= 1, got 0"),
        (dict(actors="ray:1", sync_every=-3), "--sync-every must be >= 1, got -3"),
        (dict(max_failures=3), "--max-failures needs --actors ray:N"),
        (dict(actors="ray:1", max_failures=0), "--max-failures must be >= 1, got 0"),
        (  # Ray exited 1 on it after the run's plan, or hung
            dict(actors="ray:1", address="nonsense"),
            "--ray-address must be HOST:PORT, ray://HOST:PORT or auto: nonsense",
        ),
    ],
)
def test_bad_ray_flags_are_named(flags, match):
    args = dict(actors=None, sync_every=None, rollout=None, address=None, mapping=None, resume=None)
    with pytest.raises(ValueError, match=re.escape(match)):
        ray_config(**{**args, **flags})


def test_ray_flags_left_out_take_the_configs_defaults():
    args = dict(actors="ray:2", sync_every=None, rollout=None, address=None, mapping=None)
    assert ray_config(**args, resume=None) == RayConfig(actors=2)
    assert ray_config(**{**args, "rollout": 8}, resume=None) == RayConfig(actors=2, rollout=8)
    assert ray_config(**{**args, "actors": None}, resume=None) is None
    assert ray_config(**args, resume=None, checkpoint_every=0) == RayConfig(actors=2)
    given = ray_config(**args, resume=None, max_failures=3)
    assert given == RayConfig(actors=2, max_failures=3)


def test_checkpoints_default_to_every_ten_chunks_and_none_with_ray():
    assert _saving(None, None, None, None) == (CHECKPOINT_EVERY, KEEP_CHECKPOINTS) == (10, 2)
    assert _saving(None, None, RayConfig(actors=2), None)[0] == 0
    assert _saving(3, None, None, None)[0] == 3 and _saving(0, 5, None, None) == (0, 5)


@pytest.mark.parametrize(
    "flags,error",
    [
        (["--actors", "ray:0"], "--actors must be ray:N with N >= 1, got 'ray:0'"),
        (
            ["--actors", "ray:2", "--checkpoint-every", "5"],
            "--checkpoint-every 5 cannot be combined with --actors ray:2 "
            "(Ray runs write no checkpoints)",
        ),
        (  # a chunk could get no actor call: the run failed in it (TypeError), after its plan
            ["--actors", "ray:1", "--eval-every", "64", "--warmup", "128", "--steps", "448"],
            "--eval-every 64 is below one Ray actor call's env steps (--rollout 32 x "
            "--num-envs 4 = 128)",
        ),
        (  # an actor Ray cannot place never answers: the learner waited for it, silently
            ["--actors", "ray:64", "--steps", "1400", "--eval-every", "128", "--warmup", "128"],
            "--actors ray:64 needs a CPU each; the Ray cluster has ",
        ),
    ],
)
def test_cli_refuses_bad_ray_flags_in_one_line(tmp_path, flags, error):
    assert refused(tmp_path, flags).startswith(f"drlhet: error: {error}")


def refused(tmp_path: Path, flags: list[str], timeout_s: float = 120) -> str:
    """The one line of stderr of ``drlhet train`` refusing ``flags`` (exit 2, nothing written),
    with a Ray of its own (this module's test cluster may run, and Ray joins the newest)."""
    got = subprocess.run(
        [sys.executable, "-m", "drlhet", "train", "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_ADDRESS": "local"},
        timeout=timeout_s,
    )
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr[-2000:]
    assert not any(tmp_path.iterdir())
    return lines[0]


@pytest.fixture
def closed_port():
    """A port of 127.0.0.1 that refuses connections: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_cli_refuses_an_address_nothing_answers_at_up_front(tmp_path, closed_port):
    """``ray.init`` waited without end for an address where no cluster runs (a closed port, a
    host that does not answer): the CLI hung after its plan."""
    address = f"127.0.0.1:{closed_port}"
    flags = ["--actors", "ray:1", "--ray-address", address, "--steps", "384", "--warmup",
             "128", "--eval-every", "128"]  # fmt: skip
    t = time.monotonic()
    line = refused(tmp_path, flags, timeout_s=90)
    assert line == (
        f"drlhet: error: --ray-address {address} cannot be reached (Connection refused); is "
        "its cluster started?"
    )
    assert time.monotonic() - t < 60


def test_an_address_is_probed_briefly_and_only_when_it_names_a_host(closed_port):
    with pytest.raises(ValueError, match=rf"^--ray-address ray://127.0.0.1:{closed_port} cannot"):
        check_address(f"ray://127.0.0.1:{closed_port}")
    with socket.socket() as s:  # a host that does not answer: its backlog full, SYNs dropped
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with socket.create_connection(s.getsockname(), timeout=1):
            t = time.monotonic()
            with pytest.raises(ValueError, match=rf"^--ray-address {address} cannot be reached"):
                check_address(address, timeout_s=0.5)
            assert time.monotonic() - t < 3
    with pytest.raises(ValueError, match=r"the port must be in \[1, 65535\]"):
        check_address("127.0.0.1:99999")
    with socket.socket() as s:  # something answers: Ray's to join
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_address(f"127.0.0.1:{s.getsockname()[1]}")
    for left_to_ray in (None, "auto", "local"):
        check_address(left_to_ray)


def test_ray_address_from_the_environment_is_probed_and_named(closed_port, monkeypatch):
    """Without ``--ray-address``, ``ray.init`` joins ``RAY_ADDRESS``: it was not probed (a
    closed port had Ray retrying for minutes) and its errors named no address."""
    address = f"127.0.0.1:{closed_port}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ValueError) as e:
        check_address(None, timeout_s=0.5)
    assert str(e.value) == (
        f"RAY_ADDRESS={address} (from the environment) cannot be reached (Connection refused); "
        "is its cluster started?"
    )
    with pytest.raises(ValueError, match=r"^--ray-address ray://127.0.0.1:\d+ cannot"):
        check_address(f"ray://{address}")  # the option, where given, is what Ray joins
    monkeypatch.setenv("RAY_ADDRESS", "local")
    check_address(None)


def test_an_address_where_ray_joins_no_cluster_is_named_in_one_line(monkeypatch):
    """Something other than Ray's GCS answering there (a proxy: this VM's network answers any
    outside address) made ``ray.init`` give up after ~20 s with a ``ConnectionError``: a
    traceback and exit status 1 from the CLI."""

    def no_cluster(**kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs['address']}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ValueError) as e:
            init_ray(RayConfig(actors=1, address=address))
        monkeypatch.setenv("RAY_ADDRESS", address)  # no option: the environment's, named
        with pytest.raises(ValueError, match=rf"^RAY_ADDRESS={address} \(from the env"):
            init_ray(RayConfig(actors=1))
    assert str(e.value) == (
        f"--ray-address {address}: no Ray cluster joined there (Failed to connect to Ray "
        f"cluster at {address})"
    )
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(ConnectionError):  # no address anywhere: Ray's own error, as it was
        init_ray(RayConfig(actors=1))


@ray.remote(num_cpus=1)
class Holder:
    """Another job's actor: it holds one CPU while it lives."""

    def ready(self) -> bool:
        return True


def test_a_cluster_whose_cpus_other_jobs_hold_is_refused_up_front(two_nodes):
    """`init_ray` checked the cluster's CPUs in all: with one of two held by another job, the
    second actor could not be placed and the run failed after 300 s ("did not come back")."""

    holder = Holder.remote()
    try:
        ray.get(holder.ready.remote())
        deadline = time.monotonic() + 30  # the resource view follows the placement shortly
        while ray.available_resources().get("CPU", 0) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ray.available_resources().get("CPU", 0) == 1
        t = time.monotonic()
        with pytest.raises(ValueError) as e:
            init_ray(RayConfig(actors=2))
        assert str(e.value) == (
            "--actors ray:2 needs a free CPU each; the Ray cluster has 2, 1 free (other jobs "
            "hold the rest)"
        )
        assert time.monotonic() - t < 30
        init_ray(RayConfig(actors=1))  # one is free
    finally:
        ray.kill(holder)


def test_cpus_taken_between_the_check_and_the_placement_are_refused_not_waited_for(
    two_nodes, monkeypatch
):
    """A CPU free at `init_ray`'s check could be taken by another job before an actor was
    placed on it; the actor then never answered. `reserve_cpus` holds them all at once."""

    holder = Holder.remote()
    try:
        ray.get(holder.ready.remote())
        monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 2.0})  # the check's view
        init_ray(RayConfig(actors=2), free_wait_s=0)  # passes: the other job came after it
        t = time.monotonic()
        with pytest.raises(ValueError) as e:
            reserve_cpus(RayConfig(actors=2), wait_s=2)
        assert str(e.value) == (
            "--actors ray:2 needs a free CPU each; Ray could not reserve them within 2 s "
            "(other jobs took them after the check)"
        )
        assert time.monotonic() - t < 30
        group = reserve_cpus(RayConfig(actors=1))  # the one left, held
        remove_placement_group(group)
    finally:
        ray.kill(holder)


def ray_run(steps: int, warmup: int, eval_every: int) -> TrainConfig:
    return TrainConfig(steps=steps, warmup=warmup, eval_every=eval_every, num_envs=4)


@pytest.mark.parametrize(
    "cfg,end",
    [
        (ray_run(1792, 256, 512), 1792),  # whole calls: exactly the chunks
        (ray_run(60000, 128, 192), 59904),  # chunks end within calls: the last call's end
        (ray_run(60000, 1000, 5000), 56064),
    ],
)
def test_a_ray_run_ends_at_the_first_whole_call_past_its_chunks(cfg, end):
    rc = RayConfig(actors=1, rollout=32)
    assert end_steps(cfg, rc) == end <= cfg.steps
    check_run(cfg, rc)


def test_a_ray_run_that_would_end_past_its_steps_is_refused():
    """The learner takes whole actor calls: the run ended at the first call's end at or past
    its last chunk's, up to a call past ``--steps``."""
    cfg = ray_run(356, 100, 128)  # 2 chunks end at 356; calls of 128 end at 384
    with pytest.raises(ValueError) as e:
        check_run(cfg, RayConfig(actors=1, rollout=32))
    assert str(e.value) == (
        "--steps 356: a Ray run moves in whole actor calls of 128 env steps (--rollout 32 x "
        "--num-envs 4) and would end at 384, past it; pass --steps 384 (the same chunks)"
    )
    check_run(ray_run(384, 100, 128), RayConfig(actors=1, rollout=32))
    with pytest.raises(ValueError, match="--eval-every 64 is below one Ray actor call"):
        check_run(ray_run(356, 100, 64), RayConfig(actors=1, rollout=32))


def test_cli_refuses_a_ray_run_past_its_steps(tmp_path):
    flags = ["--actors", "ray:1", "--steps", "356", "--warmup", "100", "--eval-every", "128",
             "--batch-size", "32", "--buffer-size", "1000", "--eval-envs", "2", "--dqn.hidden",
             "8", "--seeds", "1", "--no-progress"]  # fmt: skip
    line = refused(tmp_path, flags, timeout_s=300)
    assert line.startswith("drlhet: error: --steps 356: a Ray run moves in whole actor calls")


def test_a_report_in_a_row_is_the_report_then():
    """`RayReport.as_dict` gave its live lists: every row returned carried the final report."""
    from drlhet.runtime.ray_learner import RayReport

    report = RayReport(["a"], [256], [256], [0], [0], [0], [8])
    first = report.as_dict()
    report.reported[0], report.rejoins = 512, [{"actor": 0}]
    assert first["env_steps_reported"] == [256] and first["rejoins"] == []


def test_sigterm_ends_a_ray_run_after_its_chunk_and_keeps_its_folder(tmp_path):
    """Ray puts its own SIGTERM handler in place at ``ray.init``: it killed the run (status 15,
    a stack dump), and a SIGINT's ``KeyboardInterrupt`` removed the run's folder, rows and all.
    Ray now starts before the run's handlers: the run ends after its chunk, with 143. Its
    chunks of 192 env steps take whole actor calls of 128: each row's rate counts the steps the
    chunk ran (128 or 256; it counted 192 each time)."""
    run = tmp_path / "r"
    args = ["--actors", "ray:1", "--steps", "60000", "--warmup", "128", "--eval-every", "192",
            "--batch-size", "32", "--buffer-size", "1000", "--eval-envs", "2", "--dqn.hidden",
            "8", "--seeds", "1", "--no-progress", "--out", str(tmp_path),
            "--name", "r"]  # fmt: skip
    # a Ray of its own: this module's test cluster (two_nodes) may still run, and Ray joins
    # the newest on the machine (RAY_ADDRESS)
    env = {**os.environ, "RAY_ADDRESS": "local"}
    proc = subprocess.Popen([sys.executable, "-m", "drlhet", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 4:
            proc.terminate()
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped after chunk" in out and "SIGTERM: stopping after this chunk" in err
    # the plan names where the run ends: chunks end on whole calls (59,904, not 59,848 steps)
    assert "training 59,904 env steps per seed (--steps 60,000): 128 of warm-up" in out
    assert "each ending on a whole actor call of 128" in out
    # and so does the summary: its warm-up ends on a whole call (it said warmup_steps', 136)
    assert "of --steps 60,000 (128 of warm-up, then" in out
    rows = [json.loads(r) for r in metrics.read_text().splitlines()]
    assert len(rows) >= 4 and (run / "curve.png").is_file()
    ran = [b["env_steps"] - a["env_steps"] for a, b in zip(rows, rows[1:], strict=False)]
    assert set(ran) == {128, 256}, ran
    for r, n in zip(rows[1:], ran, strict=True):
        assert r["env_steps_per_s"] * r["chunk_s"] == pytest.approx(n)
