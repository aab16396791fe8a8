"""Faults of a Ray run (`drlhet.runtime.ray_learner`): the learner side raising, an actor whose
code raises, an actor that dies each time it comes back. Each run ends promptly with an error
that names its cause, and gives its actors and their CPUs back."""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="missing library: ray")
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from drlhet.runtime import ray_learner  # noqa: E402
from drlhet.runtime.ray_actor import RolloutActor  # noqa: E402
from drlhet.runtime.ray_learner import RayConfig, run_ray  # noqa: E402
from tests.test_ray_actors import SMALL  # noqa: E402

# the faulty actors below go to Ray's workers by value (this module is not on their path)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

RC = RayConfig(actors=2, rollout=8, sync_every=8)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class RaisesInRollout(RolloutActor):
    def rollout(self, params, version, env_steps):
        raise ValueError(f"a bug in actor {self.index}'s rollout")


class RaisesInInit(RolloutActor):
    def __init__(self, cfg, index, iterations):
        raise ValueError("a bug in the actor's constructor")


class DiesAfterItsFirstBatch(RolloutActor):
    """Actor 1's process exits in every call of every life after its first batch."""

    def rollout(self, params, version, env_steps):
        if self.index == 1 and self.joined and self.seq >= 1:
            os._exit(1)
        return super().rollout(params, version, env_steps)


def released(timeout_s: float = 30) -> None:
    """The run's actors killed, its placement group removed, every CPU free again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) == 2:
            break
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 2
    groups = ray.util.placement_group_table().values()
    assert all(g["state"] == "REMOVED" for g in groups), groups


def with_actor(monkeypatch, cls) -> None:
    monkeypatch.setattr(ray_learner, "RolloutActor", cls)


class Boom(Exception):
    pass


def test_a_learner_error_ends_the_run_and_gives_its_cpus_back(local_ray):
    def on_chunk(row):
        raise Boom(f"chunk {row['chunk']}")

    t = time.monotonic()
    with pytest.raises(Boom, match="chunk 0"):
        run_ray(SMALL, RC, on_chunk)
    assert time.monotonic() - t < 240
    released()


def test_a_failing_learner_step_ends_the_run_and_gives_its_cpus_back(local_ray, monkeypatch):
    def failing(cfg, tr, iterations, train):
        def learn(*args):
            if train:
                raise Boom("the learner's step failed")
            return learn_fn(*args)

        learn_fn = make(cfg, tr, iterations, train)
        return learn

    make = ray_learner._learn_fn
    monkeypatch.setattr(ray_learner, "_learn_fn", failing)
    with pytest.raises(Boom, match="the learner's step failed"):
        run_ray(SMALL, RC)
    released()


def test_an_actor_whose_rollout_raises_ends_the_run_naming_it(local_ray, monkeypatch):
    """A Python error in an actor's code came back as Ray's error, naming neither the actor's
    number nor its name; Ray restarts only processes that die, so it must end the run."""
    with_actor(monkeypatch, RaisesInRollout)
    with pytest.raises(RuntimeError) as e:
        run_ray(SMALL, RC)
    assert str(e.value).startswith("ray actor ")
    assert "drlhet-" in str(e.value) and "rollout raised ValueError: a bug in actor" in str(e.value)
    released()


def test_an_actor_whose_constructor_raises_ends_the_run_at_once_naming_it(local_ray, monkeypatch):
    """Ray does not restart an actor whose constructor raised: `_rejoin` retried it for 300 s,
    then said it "did not come back", without the cause."""
    with_actor(monkeypatch, RaisesInInit)
    t = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        run_ray(SMALL, RC)
    assert time.monotonic() - t < 60
    assert str(e.value).startswith("ray actor ") and "calls failed in a row" in str(e.value)
    assert "creation task" in str(e.value)
    released()


def test_an_actor_that_dies_each_time_it_comes_back_ends_the_run(local_ray, monkeypatch):
    """Ray restarts it without end (``max_restarts=-1``) and the learner rejoined it each time:
    the run never ended."""
    with_actor(monkeypatch, DiesAfterItsFirstBatch)
    rc = RayConfig(actors=2, rollout=8, sync_every=8, max_failures=2)
    with pytest.raises(RuntimeError) as e:
        run_ray(SMALL, rc)
    message = str(e.value)
    assert message.startswith("ray actor 1 (drlhet-") and "3 calls failed in a row" in message
    released()
