"""What ``bench_replay.py`` times: each implementation's operations as runners.

An implementation is a dict ``{(op, mode): run}``: ``run()`` performs S steps of ``op`` (insert,
sample, update, step) in ``mode`` (``fused``: one jitted ``lax.scan`` of S steps, the buffer
donated; ``percall``: a jitted op called S times from Python) and waits for them. drlhet's
buffer on any backend, flashbax's prioritised flat buffer (pure JAX, built where it runs) and
cpprb's PrioritizedReplayBuffer (the host CPU; per call only) are built here at one
(capacity, batch), filled with ``capacity`` transitions and random priorities first.

Imports jax: ``bench_replay.py`` imports this module after it has set up its threading.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet import backends as backends_api
from drlhet.replay import prioritized

Runners = dict[tuple[str, str], Callable[[], None]]


@dataclasses.dataclass(frozen=True)
class Harness:
    """How every implementation of a run is built and looped (``bench_replay.Args``' say)."""

    device: str = "cpu"  # "gpu": XLA backends (and flashbax) on the first GPU
    loop: str = "xs"  # how the fused scan feeds its steps (bench_replay's --loop)
    unroll: int = 1  # steps per iteration of the fused scan's loop
    own_sample: bool = True  # the buffer's sample may be the backend's own call
    key_targets: bool = True  # ... which may draw its targets from the key


def transitions(n: int, seed: int = 0) -> dict:
    """``n`` CartPole-shaped transitions of random numbers (obs ``[n, 4]``, act, rew, ...)."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.random((n, 4), np.float32),
        "act": rng.integers(0, 2, n).astype(np.int32),
        "rew": rng.random(n).astype(np.float32),
        "next_obs": rng.random((n, 4), np.float32),
        "done": np.zeros(n, np.float32),
    }


@functools.cache
def _update_table(capacity: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return (
        rng.integers(0, capacity, (16, batch)).astype(np.int32),
        rng.random((16, batch), np.float32) + np.float32(1e-3),
    )


def update_batch(key: jax.Array, capacity: int, batch: int) -> tuple[jax.Array, jax.Array]:
    """``update``'s indices and priorities ``[batch]``: one of 16 fixed rows, picked by ``key``
    (one word drawn, not B), as cpprb's are, so that no implementation pays for random number
    generation inside the timed op (``step`` derives its priorities from the sampled data)."""
    idx_t, pr_t = _update_table(capacity, batch)
    row = jax.random.bits(key, (), jnp.uint32) % 16
    return jnp.asarray(idx_t)[row], jnp.asarray(pr_t)[row]


def td_like(data: dict) -> jax.Array:
    """New priorities ``[B]`` from every field of a sampled batch, item by item, as a TD error
    reads them: ``|rew + 0.99 (1 - done) v(next_obs) - q(obs, act)| + 1e-3``, with the two
    networks' stand-ins an observation's features summed (plus the action for q). Every field
    feeds it, so XLA keeps every gather (cpprb's sample gathers all five), and it is
    elementwise over the batch, as a learner's loss is before its mean: a scalar sum of every
    field (this module's stand-in from 2026-11-30 to 2026-12-01) made XLA fuse the gathers into
    one reduction kernel, 17 us a step on an H200 for 180 KB, a cost of the stand-in that no
    learner pays."""
    q = jnp.sum(data["obs"], -1) + data["act"].astype(jnp.float32)
    target = data["rew"] + 0.99 * (1.0 - data["done"]) * jnp.sum(data["next_obs"], -1)
    return jnp.abs(target - q) + 1e-3


def loss_like(weights: jax.Array, data: dict) -> jax.Array:
    """The sample op's output: the importance-weighted mean of `td_like`, the scalar a learner
    minimises (every field and the weights read)."""
    return jnp.mean(weights * td_like(data))


def fused_loop(h: Harness, body: Callable, steps: int, s: Any, key: jax.Array):
    """``steps`` calls of ``body`` ``(state, key) -> (state, out)`` in one scan, fed as
    ``h.loop`` says: (state, the outputs stacked [steps] or summed [])."""
    if h.loop == "xs":
        return jax.lax.scan(body, s, jax.random.split(key, steps), unroll=h.unroll)

    def carried(c, _):
        state, k, total = c
        k, sub = jax.random.split(k)
        state, out = body(state, sub)
        return (state, k, total + out), None

    init = (s, key, jnp.float32(0))
    (s, _, total), _ = jax.lax.scan(carried, init, None, length=steps, unroll=h.unroll)
    return s, total


def jitted_runners(h: Harness, bodies: dict, state: Any, steps: int) -> Runners:
    """For each op body ``(state, key) -> (state, out)``: a fused and a per-call runner, all
    sharing one buffer state (each donates it and keeps the result)."""
    holder = {"state": state}
    runners: Runners = {}
    for op, body in bodies.items():
        fused = jax.jit(functools.partial(fused_loop, h, body, steps), donate_argnums=0)
        single = jax.jit(body, donate_argnums=0)

        def run_fused(fused=fused, seed=[0]):  # noqa: B006 - a counter
            seed[0] += 1
            s, ys = fused(holder["state"], jax.random.key(seed[0]))
            holder["state"] = s
            jax.block_until_ready((s, ys))

        keys = list(jax.random.split(jax.random.key(7), steps))  # not timed: cpprb has none

        def run_percall(single=single, keys=keys):
            s = holder["state"]
            for key in keys:
                s, _ = single(s, key)
            holder["state"] = s
            jax.block_until_ready(s)

        runners[(op, "fused")] = run_fused
        runners[(op, "percall")] = run_percall
    return runners


def device_of(h: Harness, backend: str):
    """Where a backend's buffer lives: the GPU for XLA backends with ``--device gpu``."""
    on_gpu = h.device == "gpu" and backends_api.GPU in backends_api.get(backend).platforms
    return jax.devices(backends_api.GPU if on_gpu else backends_api.CPU)[0]


def _tree_ops(h: Harness, backend: str, plain: bool, own_sample: bool):
    """The backend's `TreeOps`, less its own calls where the run or the variant says so."""
    ops = backends_api.tree_ops(backend)
    if plain:  # the backend's find and write only, the rest in XLA
        return ops._replace(weigh=None, update=None, weigh_key=None)
    if not (h.own_sample and own_sample):  # the sample in XLA around find
        return ops._replace(weigh=None, weigh_key=None)
    if not h.key_targets:
        return ops._replace(weigh_key=None)
    return ops


def drlhet_ops(
    h: Harness,
    capacity: int,
    batch: int,
    k: int,
    steps: int,
    backend: str,
    plain: bool = False,
    own_sample: bool = True,
) -> Runners:
    """drlhet's prioritized buffer on ``backend`` (K ``k``), filled, as runners of ``steps``
    steps. ``plain``: the backend's find and write under the buffer's XLA code; ``own_sample``
    False: the sample so, the update the backend's own call. Raises ValueError where the
    backend is not built for ``k``."""
    ops = _tree_ops(h, backend, plain, own_sample)
    fns = prioritized.make_prioritized_replay(capacity, batch, branching=k, tree_ops=ops)
    example = jax.tree.map(lambda x: x[0], transitions(1))
    where = device_of(h, backend)
    with jax.default_device(where):  # built where the backend runs
        state = fns.init(example)
        state = jax.jit(fns.add, donate_argnums=0)(
            state,
            transitions(capacity),
            jnp.asarray(np.random.default_rng(1).random(capacity, np.float32) + 1e-3),
        )
        new = jax.tree.map(jnp.asarray, transitions(batch, 2))
    state, new = jax.device_put((state, new), where)  # the jits run there

    def insert(s, key):
        return fns.add(s, new), jnp.float32(0)

    def sample(s, key):
        b = fns.sample(s, key)
        return s, loss_like(b.weights, b.data)

    def update(s, key):
        idx, pr = update_batch(key, capacity, batch)
        return fns.update_priorities(s, idx, pr), 0.0

    def step(s, key):
        b = fns.sample(s, key)
        new = fns.update_priorities(s, b.indices, td_like(b.data), b.stamps)
        return new, b.weights.sum()

    bodies = {"insert": insert, "sample": sample, "update": update, "step": step}
    return jitted_runners(h, bodies, state, steps)


def flashbax_device(platform: str) -> str:
    """flashbax's ``device`` argument where its buffer runs on ``platform``: its batched
    priority update (a ``bincount``) on a GPU or TPU, its default (one priority after another
    in a ``lax.scan``) on a CPU. The scan on a GPU is a round of launches per entry: one
    2^20 x B 4096 run with it outlasted a 200 s stage on an H100 (2026-11-27)."""
    return platform if platform in ("gpu", "tpu") else "cpu"


def flashbax_ops(h: Harness, capacity: int, batch: int, steps: int, device) -> Runners:
    """flashbax's prioritised flat buffer, built and run on ``device`` (the ``jax``
    backend's: with ``--device gpu``, the same GPU)."""
    import flashbax as fbx

    buf = fbx.make_prioritised_flat_buffer(
        max_length=capacity,
        min_length=batch,
        sample_batch_size=batch,
        add_batch_size=batch,
        priority_exponent=0.6,
        device=flashbax_device(device.platform),
    )
    with jax.default_device(device):
        example = jax.tree.map(lambda x: jnp.asarray(x[0]), transitions(1))
        state = jax.device_put(buf.init(example), device)
        add = jax.jit(buf.add, donate_argnums=0)
        data = transitions(capacity)
        for i in range(capacity // batch):
            chunk = jax.tree.map(lambda x, i=i: x[i * batch : (i + 1) * batch], data)
            state = add(state, jax.device_put(chunk, device))
        rng = np.random.default_rng(1)
        state = jax.jit(buf.set_priorities, donate_argnums=0)(
            state, jnp.arange(capacity), jnp.asarray(rng.random(capacity, np.float32) + 1e-3)
        )
        new = jax.device_put(jax.tree.map(jnp.asarray, transitions(batch, 2)), device)

    def insert(s, key):
        return buf.add(s, new), jnp.float32(0)

    def sample(s, key):
        b = buf.sample(s, key)
        return s, loss_like(b.probabilities, b.experience.first)

    def update(s, key):
        idx, pr = update_batch(key, capacity, batch)
        return buf.set_priorities(s, idx, pr), 0.0

    def step(s, key):
        b = buf.sample(s, key)
        new = buf.set_priorities(s, b.indices, td_like(b.experience.first))
        return new, b.probabilities.sum()

    bodies = {"insert": insert, "sample": sample, "update": update, "step": step}
    return jitted_runners(h, bodies, state, steps)


def cpprb_ops(capacity: int, batch: int, steps: int) -> Runners:
    """cpprb's PrioritizedReplayBuffer (alpha 0.6, beta 0.4) on the host CPU, per call only."""
    import cpprb

    env_dict = {"obs": {"shape": 4}, "act": {}, "rew": {}, "next_obs": {"shape": 4}, "done": {}}
    rb = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6)
    data = transitions(capacity)
    rb.add(**data, priorities=np.random.default_rng(1).random(capacity) + 1e-3)
    new = transitions(batch, 2)
    rng = np.random.default_rng(3)
    prio = [rng.random(batch) + 1e-3 for _ in range(16)]
    idxs = [rng.integers(0, capacity, batch) for _ in range(16)]

    def insert():
        for _ in range(steps):
            rb.add(**new)

    def sample():
        for _ in range(steps):
            rb.sample(batch, beta=0.4)

    def update():
        for i in range(steps):
            rb.update_priorities(idxs[i % 16], prio[i % 16])

    def step():
        for i in range(steps):
            b = rb.sample(batch, beta=0.4)
            rb.update_priorities(b["indexes"], prio[i % 16])

    return {
        ("insert", "percall"): insert,
        ("sample", "percall"): sample,
        ("update", "percall"): update,
        ("step", "percall"): step,
    }


def with_threads(runners: Runners, n: int) -> Runners:
    """``runners`` that run with the native backend's thread count set to ``n`` (then reset)."""
    from drlhet.backends import native

    def wrap(fn):
        def run():
            native.set_num_threads(n)
            try:
                fn()
            finally:
                native.set_num_threads(0)

        return run

    return {key: wrap(fn) for key, fn in runners.items()}


def with_cuda(runners: Runners, **settings: Any) -> Runners:
    """``runners`` that run (and so trace) with ``drlhet.backends.cuda``'s ``settings``, the
    library's values restored after each run."""
    from drlhet.backends import cuda

    def wrap(fn):
        def run():
            before = {name: getattr(cuda, name) for name in settings}
            for name, value in settings.items():
                setattr(cuda, name, value)
            try:
                fn()
            finally:
                for name, value in before.items():
                    setattr(cuda, name, value)

        return run

    return {key: wrap(fn) for key, fn in runners.items()}
