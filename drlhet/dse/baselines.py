"""Baselines: the paper-style Python-level buffer, and the mapping families a pick is compared to.

docs/design.md section 5. The authors' framework keeps its replay buffer in Python on the host,
so transitions come to the host and sampled batches go back to the device every step. The
registry describes such a buffer as a *host* backend (`drlhet.backends.base.Backend.host`, modeled
only); `profile_python_replay` measures one (cpprb) so that the model can cost it, and
`baselines` reports the best mapping of each baseline family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from drlhet.backends.base import CPU, GPU, get, providing, reference
from drlhet.dse.key import ProfileKey
from drlhet.dse.model import Model, Prediction
from drlhet.dse.profile import timed
from drlhet.runtime.trainer import make_trainer

__all__ = ["host_replay_backend", "profile_python_replay", "families", "baselines"]

_FIELDS = ("obs", "action", "reward", "discount", "next_obs")


def host_replay_backend() -> str | None:
    """The registry's host replay backend, which the cpprb profile stands for (None: the
    registry has none)."""
    hosts = [b.name for b in providing("replay", CPU) if b.host]
    return hosts[0] if hosts else None


def _filled_buffer(cpprb: Any, key: ProfileKey, obs_dim: int) -> Any:
    """A cpprb prioritized buffer of ``key``'s capacity holding random transitions."""
    rb = cpprb.PrioritizedReplayBuffer(
        key.capacity,
        {
            "obs": {"shape": obs_dim},
            "action": {},
            "reward": {},
            "discount": {},
            "next_obs": {"shape": obs_dim},
        },
        alpha=0.6,
    )
    rng = np.random.default_rng(0)
    n = min(key.capacity, max(10_000, key.batch))
    rb.add(
        obs=rng.random((n, obs_dim)),
        action=rng.integers(0, 2, n),
        reward=rng.random(n),
        discount=np.ones(n),
        next_obs=rng.random((n, obs_dim)),
    )
    return rb


def _host_stages(rb: Any, key: ProfileKey, obs_dim: int, device: Any) -> dict[str, Callable]:
    """Host-loop stage -> one call of it with a host buffer: transitions and priorities come
    from ``device``, batches go back to it."""
    e = key.num_envs
    with jax.default_device(device):
        trans = jax.device_put(
            {
                "obs": np.ones((1, e, obs_dim), np.float32),
                "action": np.zeros((1, e), np.int32),
                "reward": np.zeros((1, e), np.float32),
                "discount": np.ones((1, e), np.float32),
                "next_obs": np.ones((1, e, obs_dim), np.float32),
            },
            device,
        )
        prios = jax.device_put(np.ones((1, key.batch), np.float32), device)

    def sample_put():
        b = rb.sample(key.batch, beta=0.4)
        out = jax.device_put(({k: b[k] for k in _FIELDS}, b["weights"]), device)
        return out, b["indexes"]

    last = {"idx": sample_put()[1]}

    def update():
        rb.update_priorities(last["idx"], np.asarray(jax.device_get(prios))[0] + 1e-3)

    def replay_in():
        t = jax.device_get(trans)
        rb.add(**{k: v[0] for k, v in t.items()})
        out, last["idx"] = sample_put()
        return out

    def replay_next():
        update()
        out, last["idx"] = sample_put()
        return out

    return {"replay_in": replay_in, "replay_next": replay_next, "apply": update}


def profile_python_replay(
    key: ProfileKey, device: Any = None, repeats: int = 5, calls: int = 200
) -> dict | None:
    """Measures a Python-level prioritized buffer (cpprb) driven from a host loop: the
    paper-style baseline, where transitions come to the host and batches go back to the device.

    Returns seconds per host-loop call (stats) of ``replay_in`` (fetch transitions, add, sample,
    put the batch on the device), ``replay_next`` (fetch priorities, update, sample, put) and
    ``apply`` (fetch priorities, update); None when cpprb is not installed.
    """
    try:
        import cpprb  # optional: the `bench` and `test` extras
    except ImportError:
        return None
    device = device or jax.devices(CPU)[0]
    tr = make_trainer(key.train_config(backend=reference()))
    obs_dim = int(np.prod(tr.env.obs_shape))
    rb = _filled_buffer(cpprb, key, obs_dim)

    def loop(f: Callable[[], Any]) -> Callable[[], Any]:
        def go():
            out = None
            for _ in range(calls):
                out = f()
            return out

        return go

    out: dict[str, Any] = {
        name: timed(loop(f), repeats, calls)
        for name, f in _host_stages(rb, key, obs_dim, device).items()
    }
    out["library"] = f"cpprb {getattr(cpprb, '__version__', '')}".strip()
    return out


def families(model: Model) -> dict[str, Callable[[Prediction], bool]]:
    """Baseline family name -> whether a prediction belongs to it:

    * all on the CPU: every group on one CPU device, the reference replay backend;
    * replay on the CPU (a backend inside XLA), learner on a GPU (actors on the CPU);
    * all on a GPU;
    * paper-style: a host backend's replay (the Python-level buffer), the rest anywhere; one
      family per host replay backend of the registry.
    """
    ref = reference()

    def on(p: Prediction, group: str, kind: str) -> bool:
        return model.kind(p.places[group].device) == kind

    def one_device(p: Prediction) -> bool:
        return len({pl.device for pl in p.places.values()}) == 1

    fams: dict[str, Callable[[Prediction], bool]] = {
        f"all on {CPU.upper()} ({ref})": lambda p: (
            one_device(p) and on(p, "replay", CPU) and p.places["replay"].backend == ref
        ),
        f"replay on {CPU.upper()}, learner on {GPU.upper()}": lambda p: (
            on(p, "replay", CPU)
            and not get(p.places["replay"].backend).host
            and on(p, "actors", CPU)
            and on(p, "learner", GPU)
        ),
        f"all on {GPU.upper()}": lambda p: one_device(p) and on(p, "learner", GPU),
    }
    for b in providing("replay", CPU):
        if b.host:
            fams[f"paper-style: {b.name.capitalize()} replay"] = _replay_on(b.name)
    return fams


def _replay_on(backend: str) -> Callable[[Prediction], bool]:
    """Whether a prediction places the replay on ``backend``."""
    return lambda p: p.places["replay"].backend == backend


def baselines(preds: list[Prediction], model: Model) -> dict[str, Prediction]:
    """The best feasible mapping of each baseline family (`families`) present in ``preds``."""
    out = {}
    for name, member in families(model).items():
        hits = [p for p in preds if p.note == "" and member(p)]
        if hits:
            out[name] = max(hits, key=lambda p: p.trained_samples_per_s)
    return out
