"""Profiles: measured latency of each primitive on the devices and backends present here.

DESIGN section 5 (Zhang, Meng, Prasanna, TPDS 2023, Sec. 6.1: the performance model is fed by
per-primitive measurements on the devices that exist). For one training configuration (algorithm,
environment, network, batch, capacity, K, envs) and one replay backend, `profile_config`
measures on one XLA device:

* ``compute``: the time of each primitive inside a compiled ``lax.scan`` (what it costs when the
  whole loop is one fused program): ``actors`` (act + env_step for ``num_envs`` envs),
  ``insert``, ``sample``, ``train`` (one SGD step), ``update``. ``train`` and ``update`` run as
  in the loop, after a sample in the same program (the train step on the rows just gathered,
  the update on the slots just sampled), and the sample's time is subtracted: measured alone,
  on a batch from outside the program or on random slots, they look 20-40% cheaper than they
  are in the loop.
* ``call``: the time per call of each jitted stage of the host loop (`drlhet.schedule.host_stages`)
  called back to back with asynchronous dispatch, what a multi-segment mapping pays per stage.
* ``latency``: the same stages, each call waited for before the next (dispatch + run +
  completion), what a stage of a strict dependency chain costs.
* ``transfer``: the time per ``device_put`` of each payload between two XLA devices (transitions,
  sampled batch, priorities, actor parameters), back to back; only when two devices exist.

Every figure is the median of ``repeats`` timed repeats after a warm-up that compiles; min and max
are kept beside it. Results are cached as JSON (`ProfileCache`), keyed by the configuration and a
fingerprint of the machine and of the package, and reused until either changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "ProfileKey",
    "ProfileCache",
    "profile_config",
    "profile_python_replay",
    "fingerprint",
    "default_cache_dir",
]


@dataclasses.dataclass(frozen=True)
class ProfileKey:
    """What a profile depends on (a run's shape, not its learning hyper-parameters)."""

    algo: str = "dqn"
    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 128
    capacity: int = 50_000
    branching: int = 16
    num_envs: int = 4
    sgd_steps: int = 2
    backend: str = "jax"

    def name(self) -> str:
        h = "x".join(map(str, self.hidden))
        return (
            f"{self.algo}-{self.env}-h{h}-B{self.batch}-C{self.capacity}-K{self.branching}"
            f"-E{self.num_envs}-S{self.sgd_steps}-{self.backend}"
        )

    @classmethod
    def of(cls, cfg: Any) -> ProfileKey:
        """The key of a `drlhet.runtime.config.TrainConfig` (its shape; its replay backend)."""
        hidden = cfg.dqn.hidden if cfg.algo == "dqn" else cfg.ddpg.hidden
        return cls(
            algo=cfg.algo,
            env=cfg.env,
            hidden=tuple(hidden),
            batch=cfg.batch_size,
            capacity=cfg.buffer_size,
            branching=cfg.branching,
            num_envs=cfg.num_envs,
            sgd_steps=cfg.sgd_steps,
            backend=cfg.backend,
        )

    def train_config(self, delay: int = 0, **overrides: Any):
        """The `TrainConfig` this key stands for (one seed)."""
        from drlhet.agents.ddpg import DDPGConfig
        from drlhet.agents.dqn import DQNConfig
        from drlhet.runtime.config import TrainConfig

        fields: dict[str, Any] = dict(
            algo=self.algo,
            env=self.env,
            batch_size=self.batch,
            buffer_size=self.capacity,
            branching=self.branching,
            num_envs=self.num_envs,
            sgd_steps=self.sgd_steps,
            backend=self.backend,
            delay=delay,
            warmup=max(1_000, self.batch),
            dqn=DQNConfig(hidden=self.hidden),
            ddpg=DDPGConfig(hidden=self.hidden),
        )
        fields.update(overrides)
        return TrainConfig(**fields)


def fingerprint() -> str:
    """Machine and package identity: profiles are reused only while it is unchanged."""
    import jax

    from drlhet.backends import native

    parts = [platform.node(), platform.machine(), platform.processor(), str(os.cpu_count())]
    try:
        with open("/proc/cpuinfo") as f:
            parts += sorted({ln for ln in f if ln.startswith("model name")})
    except OSError:
        pass
    parts += [jax.__version__, jax.lib.__version__ if hasattr(jax, "lib") else ""]
    here = Path(__file__).resolve().parents[1]
    for path in sorted(here.rglob("*.py")):
        parts.append(hashlib.sha1(path.read_bytes()).hexdigest())
    try:
        parts.append(hashlib.sha1(native.library_path().read_bytes()).hexdigest())
    except Exception:  # noqa: BLE001 - no native library built: nothing to fingerprint
        parts.append("no-native")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("DRLHET_CACHE") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "drlhet" if base else Path.home() / ".cache" / "drlhet"


class ProfileCache:
    """Profiles as JSON files ``<dir>/profiles-<fingerprint>.json`` (one dict per key name)."""

    def __init__(self, directory: Path | None = None, fp: str | None = None):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.path = self.directory / f"profiles-{fp or fingerprint()}.json"

    def load(self) -> dict[str, dict]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"profile cache {self.path} is corrupt ({e}); delete it") from e
        if not isinstance(data, dict):
            raise ValueError(f"profile cache {self.path} is corrupt (not an object); delete it")
        return data

    def get(self, key: ProfileKey) -> dict | None:
        return self.load().get(key.name())

    def put(self, key: ProfileKey, profile: dict) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self.load()
        data[key.name()] = profile
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)


def _timed(fn: Callable[[], Any], repeats: int, per: int) -> dict:
    """Runs ``fn`` once to warm up, then ``repeats`` times; seconds per unit (``per`` units)."""
    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append((time.perf_counter() - t) / per)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def _nbytes(tree: Any) -> int:
    import jax

    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def profile_config(
    key: ProfileKey,
    device: Any = None,
    other_device: Any = None,
    repeats: int = 7,
    steps: int = 200,
    calls: int = 200,
    fill: int = 16_384,
) -> dict:
    """Measures the primitives of ``key`` on ``device`` (default: the first CPU device).

    Args:
      key: the configuration and replay backend.
      device: the XLA device the primitives run on.
      other_device: a second device for the transfer figures (skipped when None).
      repeats: timed repeats per figure (median, min, max kept).
      steps: primitive calls per compiled scan (``compute``).
      calls: stage calls per timed host loop (``call`` and ``transfer``).
      fill: transitions in the buffer while profiling (capped at the capacity).

    Returns:
      ``{"compute": {primitive: stats}, "call": {stage: stats}, "transfer": {payload: stats},
      "bytes": {payload: int}, "device": str, ...}``; stats are seconds per call
      (``median``, ``min``, ``max``).
    """
    import jax
    import jax.numpy as jnp

    from drlhet.runtime.stages import iteration_stages as host_stages
    from drlhet.runtime.trainer import make_trainer

    device = device or jax.devices("cpu")[0]
    # the buffer holds ``fill`` transitions, as a buffer does some way into training (which
    # slots are live sets how much of the tree the descent touches)
    fill = min(key.capacity, max(fill, key.batch))
    cfg = key.train_config(warmup=fill)
    tr = make_trainer(cfg)
    p = tr.parts
    vm = jax.vmap
    with jax.default_device(device):
        state = jax.jit(vm(tr.init))(jax.random.split(jax.random.key(0), 1))
        state = jax.jit(vm(tr.warmup), donate_argnums=0)(state)
        st = host_stages(cfg, tr)
        keys = jax.random.split(jax.random.key(1), 1)
        env_steps = int(state.env_steps[0])
        steps_now = jnp.int32(env_steps)
        out = st.actor_step(
            state.agent,
            state.env_state,
            state.obs,
            state.fifo,
            state.episode_return,
            keys,
            env_steps,
        )
        transitions, learn_keys = out[5], out[7]
        env = out[:5]  # (env_state, obs, fifo, episode_return, key); the inputs were donated
        rep, batch, k_update = st.replay_in(state.replay, transitions, learn_keys[0], env_steps)
        _, prio, _ = jax.jit(vm(lambda a, d, w, k: p.train(a, _B(d, w), k)))(
            state.agent, batch.data, batch.weights, k_update
        )
        entry = (batch.indices, batch.stamps, prio)

        # --- compute: each primitive in a compiled scan -------------------------------------
        def scan_of(body, carry):
            """``steps`` calls of ``body`` in one compiled scan; the carry is donated and fed
            from one repeat to the next (as the training loop donates its state: without it,
            each call would copy the whole buffer)."""
            f = jax.jit(lambda c: jax.lax.scan(body, c, None, length=steps)[0], donate_argnums=0)
            held = [jax.tree.map(jnp.copy, carry)]

            def go():
                held[0] = f(held[0])
                return held[0]

            return go

        def actors_body(c, _):
            env_state, obs, fifo, ret, k = c
            k, k_act, k_env = jax.random.split(k, 3)
            a = vm(p.act, in_axes=(0, 0, None, None))(state.agent, obs, k_act, steps_now)
            env_state, obs, fifo, ret, _, _ = vm(p.env_step, in_axes=(0, 0, 0, 0, 0, None))(
                env_state, obs, fifo, ret, a, k_env
            )
            return (env_state, obs, fifo, ret, k), None

        def insert_body(r, _):
            return vm(p.insert)(r, transitions), None

        def sample_body(c, _):
            k, acc = c
            k, ks = jax.random.split(k)
            b = vm(p.sample, in_axes=(0, None, None))(rep, ks, steps_now)
            return (k, acc + jnp.sum(b.weights) + jnp.sum(b.indices)), None

        # train as it runs in the loop: on a batch sampled in the same program. With a batch
        # from outside (fixed, or scanned over) the step measures ~30% cheaper than in the
        # fused loop (XLA fuses the row gather into the step's consumers); so this body is
        # sample -> train, and the sample body's time is subtracted below.
        def train_body(c, _):
            agent, k = c
            k, ks, kt = jax.random.split(k, 3)
            b = vm(p.sample, in_axes=(0, None, None))(rep, ks, steps_now)
            agent, pr, _ = vm(lambda a, d, w: p.train(a, _B(d, w), kt))(agent, b.data, b.weights)
            return (agent, k), None

        def update_body(c, _):
            # as in the loop: the update follows the sample of the same slots (whose tree
            # paths the descent has just brought into cache); the sample is subtracted below
            r, k = c
            k, ks = jax.random.split(k)
            b = vm(p.sample, in_axes=(0, None, None))(r, ks, steps_now)
            return (vm(tr.replay.update_priorities)(r, b.indices, entry[2], b.stamps), k), None

        k0 = jax.random.key(2)
        carries = {
            "actors": (
                actors_body,
                (*env[:4], k0),
            ),
            "insert": (insert_body, rep),
            "sample": (sample_body, (k0, jnp.float32(0))),
            "train": (train_body, (state.agent, k0)),
            "update": (update_body, (rep, k0)),
        }
        compute = {}
        for name, (body, carry) in carries.items():
            compute[name] = _timed(scan_of(body, carry), repeats, steps)
        sample_s = compute["sample"]["median"]
        for name in ("train", "update"):  # sample -> train / update, less the sample
            compute[name] = {s: max(v - sample_s, 0.1 * v) for s, v in compute[name].items()}

        # --- call: host-loop stages back to back --------------------------------------------
        def loop(step, first):
            held = [first]

            def go():  # the carry of one timed repeat feeds the next (donated buffers)
                c = held[0]
                for _ in range(calls):
                    c = step(c)
                held[0] = c
                return c

            return go

        agent_copy = jax.tree.map(jnp.copy, state.agent)

        def actor_call(c):
            o = st.actor_step(state.agent, *c, env_steps)
            return o[:5]

        def replay_in_call(r):
            return st.replay_in(r, transitions, learn_keys[0], env_steps)[0]

        def replay_next_call(r):
            return st.replay_next(r, *entry, learn_keys[0], env_steps)[0]

        def apply_call(r):
            return st.replay_apply(r, *entry)

        def learner_call(a):
            return st.learner(a, batch.data, batch.weights, k_update)[0]

        fresh = {
            "actors": lambda: jax.tree.map(jnp.copy, env),
            "replay_in": lambda: jax.tree.map(jnp.copy, rep),
            "replay_next": lambda: jax.tree.map(jnp.copy, rep),
            "apply": lambda: jax.tree.map(jnp.copy, rep),
            "learner": lambda: jax.tree.map(jnp.copy, agent_copy),
        }
        steppers = {
            "actors": actor_call,
            "replay_in": replay_in_call,
            "replay_next": replay_next_call,
            "apply": apply_call,
            "learner": learner_call,
        }
        call, latency = {}, {}
        for name, step in steppers.items():
            call[name] = _timed(loop(step, fresh[name]()), repeats, calls)
            latency[name] = _timed(
                loop(lambda c, s=step: jax.block_until_ready(s(c)), fresh[name]()), repeats, calls
            )

    payloads = {
        "transitions": (transitions, learn_keys),
        "batch": (batch.data, batch.weights, k_update),
        "priorities": entry,
        "params": state.agent,
    }
    transfer = {}
    if other_device is not None:
        # A dependent chain, as in the host loop: each hop waits for the producer, copies the
        # payload and runs a consumer on the other device. Per hop: (chain across the two
        # devices - the same chain on one device) / calls.
        touch = jax.jit(lambda t: jax.tree.map(lambda v: v + jnp.ones((), v.dtype), t))
        for name, x in payloads.items():
            x = jax.tree.map(_plain, x)

            def chain(devices, x=x):
                def go():
                    y = jax.device_put(x, devices[0])
                    for i in range(calls):
                        if len(devices) > 1:
                            y = jax.device_put(y, devices[i % len(devices)])
                        y = touch(y)
                    return y

                return go

            # paired repeats (across, same, across, same, ...): drift hits both alike
            across_f, same_f = chain((other_device, device)), chain((device,))
            jax.block_until_ready((across_f(), same_f()))
            diffs, sames = [], []
            for _ in range(repeats):
                t = time.perf_counter()
                jax.block_until_ready(across_f())
                t_across = time.perf_counter() - t
                t = time.perf_counter()
                jax.block_until_ready(same_f())
                t_same = time.perf_counter() - t
                diffs.append(max(0.0, t_across - t_same) / calls)
                sames.append(t_same / calls)
            transfer[name] = {
                "median": statistics.median(diffs),
                "min": min(diffs),
                "max": max(diffs),
            }
            same = {"median": statistics.median(sames)}
            transfer[name]["same_device_chain"] = same["median"]
    return {
        "key": dataclasses.asdict(key),
        "device": str(device),
        "other_device": str(other_device) if other_device is not None else None,
        "compute": compute,
        "call": call,
        "latency": latency,
        "transfer": transfer,
        "bytes": {name: _nbytes(x) for name, x in payloads.items()},
        "repeats": repeats,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


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
        import cpprb
    except ImportError:
        return None
    import jax
    import numpy as np

    from drlhet.runtime.trainer import make_trainer

    device = device or jax.devices("cpu")[0]
    tr = make_trainer(key.train_config(backend="jax"))
    obs_dim = int(np.prod(tr.env.obs_shape))
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

    def add():
        t = jax.device_get(trans)
        rb.add(**{k: v[0] for k, v in t.items()})

    def sample_put():
        b = rb.sample(key.batch, beta=0.4)
        return jax.device_put(
            ({k: b[k] for k in ("obs", "action", "reward", "discount", "next_obs")}, b["weights"]),
            device,
        ), b["indexes"]

    last = {"idx": sample_put()[1]}

    def update():
        rb.update_priorities(last["idx"], np.asarray(jax.device_get(prios))[0] + 1e-3)

    def replay_in():
        add()
        out, last["idx"] = sample_put()
        return out

    def replay_next():
        update()
        out, last["idx"] = sample_put()
        return out

    def loop(f):
        def go():
            out = None
            for _ in range(calls):
                out = f()
            return out

        return go

    return {
        "replay_in": _timed(loop(replay_in), repeats, calls),
        "replay_next": _timed(loop(replay_next), repeats, calls),
        "apply": _timed(loop(update), repeats, calls),
        "library": f"cpprb {getattr(cpprb, '__version__', '')}".strip(),
    }


def _plain(v: Any) -> Any:
    """A leaf as an array ``touch`` can add to (keys as their data, booleans as int8)."""
    import jax
    import jax.numpy as jnp

    if jnp.issubdtype(v.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(v)
    return v.astype(jnp.int8) if v.dtype == jnp.bool_ else v


class _B:
    """A sampled batch as the learner takes it (data and IS weights)."""

    def __init__(self, data: Any, weights: Any):
        self.data = data
        self.weights = weights
