"""Profiles: measured latency of each primitive on the devices and backends present here.

docs/design.md section 5 (Zhang, Meng, Prasanna, TPDS 2023, Sec. 6.1: the performance model is
fed by per-primitive measurements on the devices that exist). For one training configuration
(algorithm, environment, network, batch, capacity, K, envs) and one replay backend,
`profile_config` measures on one XLA device:

* ``compute``: the time of each primitive inside a compiled ``lax.scan`` (what it costs when the
  whole loop is one fused program): ``actors`` (act + env_step for ``num_envs`` envs),
  ``insert``, ``sample``, ``train`` (one SGD step), ``update``. ``train`` and ``update`` run as
  in the loop, after a sample in the same program (the train step on the rows just gathered,
  the update on the slots just sampled), and the sample's time is subtracted: measured alone,
  on a batch from outside the program or on random slots, they look 20-40% cheaper than they
  are in the loop.
* ``call``: the time per call of each jitted stage of the host loop
  (`drlhet.runtime.stages.iteration_stages`) called back to back with asynchronous dispatch,
  what a multi-segment mapping pays per stage.
* ``latency``: the same stages, each call waited for before the next (dispatch + run +
  completion), what a stage of a strict dependency chain costs.
* ``transfer``: the time per ``device_put`` of each payload between two XLA devices (transitions,
  sampled batch, priorities, actor parameters), from a dependent chain across the two devices
  less the same chain on one device; only when two devices exist.
* ``pipeline``: the threaded pipeline's host seconds per stage call of each group and per packed
  payload put, from a short pipelined run over the two devices
  (`drlhet.dse.profile_pipeline`); only when two devices exist.

Every figure is the median of ``repeats`` timed repeats after a warm-up that compiles; min and max
are kept beside it. `drlhet.dse.cache.ProfileCache` keeps them.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from drlhet.backends.base import CPU
from drlhet.dse.key import ProfileKey
from drlhet.dse.profile_pipeline import profile_pipeline
from drlhet.runtime.compiling import jit
from drlhet.runtime.parts import Batch
from drlhet.runtime.stages import IterationStages, iteration_stages
from drlhet.runtime.trainer import Trainer, make_trainer

__all__ = ["profile_config", "compute_figures", "timed"]


def timed(fn: Callable[[], Any], repeats: int, per: int) -> dict:
    """Runs ``fn`` once to warm up, then ``repeats`` times; seconds per unit (``per`` units):
    ``{"median", "min", "max"}``."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append((time.perf_counter() - t) / per)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def _nbytes(tree: Any) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


class _Setup(NamedTuple):
    """Where a profile starts: a warmed-up trainer state (one seed) and the outputs of one
    pass through the host loop's stages, which the timed calls then repeat."""

    tr: Trainer
    st: IterationStages
    state: Any  # TrainState [1] after warm-up (its env, fifo and replay fields were donated)
    env: tuple  # (env_state, obs, fifo, episode_return, key) after one actor step
    transitions: Any  # [1, N, ...] of that step
    learn_keys: tuple  # one key [1] per SGD step
    rep: Any  # the replay state after one insert
    batch: Any  # the sample that followed
    k_update: Any  # its train step's key
    entry: tuple  # (indices, stamps, priorities) [1, B] of one learner step
    env_steps: int


def _setup(key: ProfileKey, fill: int) -> _Setup:
    """A trainer warmed up with ``fill`` transitions, then one call of each stage."""
    cfg = key.train_config(warmup=fill)
    tr = make_trainer(cfg)
    p, vm = tr.parts, jax.vmap
    state = jit(vm(tr.init))(jax.random.split(jax.random.key(0), 1))
    state = jit(vm(tr.warmup), donate_argnums=0)(state)
    st = iteration_stages(cfg, tr)
    keys = jax.random.split(jax.random.key(1), 1)
    env_steps = int(state.env_steps[0])
    out = st.actor_step(
        state.agent, state.env_state, state.obs, state.fifo, state.episode_return, keys, env_steps
    )
    transitions, learn_keys = out[5], out[7]
    rep, batch, k_update = st.replay_in(state.replay, transitions, learn_keys[0], env_steps)
    _, prio, _ = jit(vm(lambda a, d, w, k: p.train(a, Batch(d, w), k)))(
        state.agent, batch.data, batch.weights, k_update
    )
    entry = (batch.indices, batch.stamps, prio)
    # out[:5]: (env_state, obs, fifo, episode_return, key); the inputs were donated
    return _Setup(
        tr, st, state, out[:5], transitions, learn_keys, rep, batch, k_update, entry, env_steps
    )


def _scan_of(body: Callable, carry: Any, steps: int) -> Callable[[], Any]:
    """``steps`` calls of ``body`` in one compiled scan; the carry is donated and fed from one
    repeat to the next (as the training loop donates its state: without it, each call would
    copy the whole buffer)."""
    f = jit(lambda c: jax.lax.scan(body, c, None, length=steps)[0], donate_argnums=0)
    held = [jax.tree.map(jnp.copy, carry)]

    def go():
        held[0] = f(held[0])
        return held[0]

    return go


def _scan_bodies(su: _Setup) -> dict[str, tuple[Callable, Any]]:
    """Primitive -> (scan body, first carry) of the ``compute`` figures."""
    p, vm, agent, rep = su.tr.parts, jax.vmap, su.state.agent, su.rep
    steps_now = jnp.int32(su.env_steps)

    def actors_body(c, _):
        env_state, obs, fifo, ret, k = c
        k, k_act, k_env = jax.random.split(k, 3)
        a = vm(p.act, in_axes=(0, 0, None, None))(agent, obs, k_act, steps_now)
        env_state, obs, fifo, ret, _, _ = vm(p.env_step, in_axes=(0, 0, 0, 0, 0, None))(
            env_state, obs, fifo, ret, a, k_env
        )
        return (env_state, obs, fifo, ret, k), None

    def insert_body(r, _):
        return vm(p.insert)(r, su.transitions), None

    def sample_body(c, _):
        k, acc = c
        k, ks = jax.random.split(k)
        b = vm(p.sample, in_axes=(0, None, None))(rep, ks, steps_now)
        return (k, acc + jnp.sum(b.weights) + jnp.sum(b.indices)), None

    # train as it runs in the loop: on a batch sampled in the same program. With a batch
    # from outside (fixed, or scanned over) the step measures ~30% cheaper than in the
    # fused loop (XLA fuses the row gather into the step's consumers); so this body is
    # sample -> train, and the sample body's time is subtracted.
    def train_body(c, _):
        agent, k = c
        k, ks, kt = jax.random.split(k, 3)
        b = vm(p.sample, in_axes=(0, None, None))(rep, ks, steps_now)
        agent, _, _ = vm(lambda a, d, w: p.train(a, Batch(d, w), kt))(agent, b.data, b.weights)
        return (agent, k), None

    def update_body(c, _):
        # as in the loop: the update follows the sample of the same slots (whose tree paths
        # the descent has just brought into cache); the sample is subtracted
        r, k = c
        k, ks = jax.random.split(k)
        b = vm(p.sample, in_axes=(0, None, None))(r, ks, steps_now)
        r = vm(su.tr.replay.update_priorities)(r, b.indices, su.entry[2], b.stamps)
        return (r, k), None

    k0 = jax.random.key(2)
    return {
        "actors": (actors_body, (*su.env[:4], k0)),
        "insert": (insert_body, rep),
        "sample": (sample_body, (k0, jnp.float32(0))),
        "train": (train_body, (agent, k0)),
        "update": (update_body, (rep, k0)),
    }


def _compute(su: _Setup, repeats: int, steps: int) -> dict[str, dict]:
    """The ``compute`` figures: each primitive in a compiled scan."""
    compute = {
        name: timed(_scan_of(body, carry, steps), repeats, steps)
        for name, (body, carry) in _scan_bodies(su).items()
    }
    sample_s = compute["sample"]["median"]
    for name in ("train", "update"):  # sample -> train / update, less the sample
        compute[name] = {s: max(v - sample_s, 0.1 * v) for s, v in compute[name].items()}
    return compute


def compute_figures(
    key: ProfileKey, device: Any = None, repeats: int = 7, steps: int = 200, fill: int = 16_384
) -> dict[str, dict]:
    """The ``compute`` figures of `profile_config` alone (each primitive in a compiled scan,
    seconds per call: ``median``, ``min``, ``max``), for studies of their spread."""
    device = device or jax.devices(CPU)[0]
    with jax.default_device(device):
        return _compute(_setup(key, min(key.capacity, max(fill, key.batch))), repeats, steps)


def _loop(step: Callable[[Any], Any], first: Any, calls: int) -> Callable[[], Any]:
    """``calls`` calls of ``step``, the output of each the input of the next; the carry of
    one timed repeat feeds the next (donated buffers)."""
    held = [first]

    def go():
        c = held[0]
        for _ in range(calls):
            c = step(c)
        held[0] = c
        return c

    return go


def _stage_calls(su: _Setup) -> dict[str, tuple[Callable[[Any], Any], Callable[[], Any]]]:
    """Host-loop stage -> (one call, a fresh first input for a timed loop)."""
    st, e, agent = su.st, su.env_steps, su.state.agent
    agent_copy = jax.tree.map(jnp.copy, agent)
    k_learn = su.learn_keys[0]

    def copy_of(tree: Any) -> Callable[[], Any]:
        return lambda: jax.tree.map(jnp.copy, tree)

    return {
        "actors": (lambda c: st.actor_step(agent, *c, e)[:5], copy_of(su.env)),
        "replay_in": (lambda r: st.replay_in(r, su.transitions, k_learn, e)[0], copy_of(su.rep)),
        "replay_next": (lambda r: st.replay_next(r, *su.entry, k_learn, e)[0], copy_of(su.rep)),
        "apply": (lambda r: st.replay_apply(r, *su.entry), copy_of(su.rep)),
        "learner": (
            lambda a: st.learner(a, su.batch.data, su.batch.weights, su.k_update)[0],
            copy_of(agent_copy),
        ),
    }


def _waited(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step``, each call waited for before the next."""
    return lambda c: jax.block_until_ready(step(c))


def _calls(su: _Setup, repeats: int, calls: int) -> tuple[dict, dict]:
    """The ``call`` (back to back) and ``latency`` (each waited for) figures of each stage."""
    call, latency = {}, {}
    for name, (step, fresh) in _stage_calls(su).items():
        call[name] = timed(_loop(step, fresh(), calls), repeats, calls)
        latency[name] = timed(_loop(_waited(step), fresh(), calls), repeats, calls)
    return call, latency


def _plain(v: Any) -> Any:
    """A leaf as an array ``touch`` can add to (keys as their data, booleans as int8)."""
    if jnp.issubdtype(v.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(v)
    return v.astype(jnp.int8) if v.dtype == jnp.bool_ else v


def _chain(x: Any, devices: tuple, calls: int, touch: Callable) -> Callable[[], Any]:
    """A dependent chain, as in the host loop: each hop waits for the producer, copies the
    payload to the next of ``devices`` (when there are several) and runs a consumer there.
    It starts on the last device, so that each of the ``calls`` is a hop (started on the
    first, the first put was none: the hop's figure was ``calls - 1`` hops over ``calls``)."""

    def go():
        y = jax.device_put(x, devices[-1])
        for i in range(calls):
            if len(devices) > 1:
                y = jax.device_put(y, devices[i % len(devices)])
            y = touch(y)
        return y

    return go


def _transfer(x: Any, device: Any, other: Any, repeats: int, calls: int, touch: Callable) -> dict:
    """Seconds per hop of payload ``x`` between ``device`` and ``other``: (chain across the two
    devices - the same chain on one device) / calls, in paired repeats (across, same, across,
    same, ...) so that drift hits both alike; a repeat in which the chain across was not the
    slower counts as 0. ``difference`` keeps the median of the differences unclamped."""
    across_f, same_f = _chain(x, (other, device), calls, touch), _chain(x, (device,), calls, touch)
    jax.block_until_ready((across_f(), same_f()))
    diffs, sames = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(across_f())
        t_across = time.perf_counter() - t
        t = time.perf_counter()
        jax.block_until_ready(same_f())
        t_same = time.perf_counter() - t
        diffs.append((t_across - t_same) / calls)
        sames.append(t_same / calls)
    clamped = [max(0.0, d) for d in diffs]
    return {
        "median": statistics.median(clamped),
        "min": min(clamped),
        "max": max(clamped),
        "same_device_chain": statistics.median(sames),
        "difference": statistics.median(diffs),
    }


def _transfers(payloads: dict, device: Any, other: Any, repeats: int, calls: int) -> dict:
    """The ``transfer`` figure of every payload."""
    touch = jax.jit(lambda t: jax.tree.map(lambda v: v + jnp.ones((), v.dtype), t))
    return {
        name: _transfer(jax.tree.map(_plain, x), device, other, repeats, calls, touch)
        for name, x in payloads.items()
    }


def profile_config(
    key: ProfileKey,
    device: Any = None,
    other_device: Any = None,
    repeats: int = 7,
    steps: int = 200,
    calls: int = 200,
    fill: int = 16_384,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Measures the primitives of ``key`` on ``device`` (default: the first CPU device).

    Args:
      key: the configuration and replay backend.
      device: the XLA device the primitives run on.
      other_device: a second device for the transfer figures (skipped when None).
      repeats: timed repeats per figure (median, min, max kept).
      steps: primitive calls per compiled scan (``compute``).
      calls: stage calls per timed host loop (``call`` and ``transfer``).
      fill: transitions in the buffer while profiling (capped at the capacity): as a buffer
        holds some way into training (which slots are live sets how much of the tree the
        descent touches).
      log: told each part as it is done, with the seconds since the start (a profile takes
        minutes on a small machine); None: nothing said.

    Returns:
      ``{"compute": {primitive: stats}, "call": {stage: stats}, "latency": {stage: stats},
      "transfer": {payload: stats}, "pipeline": {figure: stats}, "bytes": {payload: int},
      "device": str, ...}``; stats are seconds per call (``median``, ``min``, ``max``).
    """
    device = device or jax.devices(CPU)[0]
    fill = min(key.capacity, max(fill, key.batch))
    t0 = time.perf_counter()

    def done(part: str) -> None:
        if log is not None:
            log(f"  {part} ({time.perf_counter() - t0:.0f} s)")

    with jax.default_device(device):
        su = _setup(key, fill)
        compute = _compute(su, repeats, steps)
        done("primitives timed in compiled scans")
        call, latency = _calls(su, repeats, calls)
        done("host-loop stage calls timed")
    payloads = {
        "transitions": (su.transitions, su.learn_keys),
        "batch": (su.batch.data, su.batch.weights, su.k_update),
        "priorities": su.entry,
        "params": su.state.agent,
    }
    transfer, pipeline = {}, {}
    if other_device is not None:
        transfer = _transfers(payloads, device, other_device, repeats, calls)
        done(f"transfers to {other_device} timed")
        pipeline = profile_pipeline(key, (device, other_device))
        done("a pipelined run's host costs timed")
    return {
        "key": dataclasses.asdict(key),
        "device": str(device),
        "other_device": str(other_device) if other_device is not None else None,
        "compute": compute,
        "call": call,
        "latency": latency,
        "transfer": transfer,
        "pipeline": pipeline,
        "bytes": {name: _nbytes(x) for name, x in payloads.items()},
        "repeats": repeats,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
