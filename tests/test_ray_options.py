"""The Ray options of `drlhet train` (``--actors ray:N``, ``--rollout``, ``--sync-every``,
``--max-failures``, ``--ray-address``) checked before a run: bad values and combinations named
in one line, an address nothing answers at probed briefly and refused up front."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="missing library: ray")

# Ray starts its processes with fork + exec (subprocess) after JAX has started threads: Python
# warns about fork, harmless before an exec
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from ray_cli import refused  # noqa: E402

from drlhet.cli.ray_actors import ray_config  # noqa: E402
from drlhet.cli.train import CHECKPOINT_EVERY, KEEP_CHECKPOINTS, _saving  # noqa: E402
from drlhet.runtime.ray_cluster import check_address, init_ray  # noqa: E402
from drlhet.runtime.ray_learner import RayConfig, parse_actors  # noqa: E402


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
        (  # it was accepted and ignored
            dict(actors="ray:2", keep_checkpoints=3),
            "--keep-checkpoints 3 cannot be combined with --actors ray:2 (Ray runs write no",
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
    assert ray_config(**args, resume=None, keep_checkpoints=0) == RayConfig(actors=2)
    given = ray_config(**args, resume=None, max_failures=3)
    assert given == RayConfig(actors=2, max_failures=3)


def test_checkpoints_default_to_every_ten_chunks_and_none_with_ray():
    assert _saving(None, None, None, None)[:2] == (CHECKPOINT_EVERY, KEEP_CHECKPOINTS) == (10, 2)
    assert _saving(None, None, RayConfig(actors=2), None)[0] == 0
    assert _saving(3, None, None, None)[0] == 3 and _saving(0, 5, None, None) == (0, 5, [])


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
