"""Actors on Ray (`drlhet.runtime.ray_learner`): a two-node local cluster, one actor killed
mid-run; nothing lost, nothing inserted twice, the restarted actor back on the newest
parameters; a cluster whose CPUs other jobs hold is refused up front (the Ray options checked
before a run: test_ray_options.py; where a Ray run ends: test_ray_run_end.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="missing library: ray")

# Ray starts its processes with fork + exec (subprocess) after JAX has started threads: Python
# warns about fork, harmless before an exec
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from ray.util.placement_group import remove_placement_group  # noqa: E402

from drlhet.agents.dqn import DQNConfig  # noqa: E402
from drlhet.runtime.config import TrainConfig  # noqa: E402
from drlhet.runtime.ray_cluster import end_steps, init_ray, reserve_cpus  # noqa: E402
from drlhet.runtime.ray_learner import RayConfig, run_ray  # noqa: E402

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
