"""Actors on Ray: ``drlhet train --actors ray:N`` (docs/design.md, "Actors on Ray").

N Ray actors (`drlhet.runtime.ray_actor.RolloutActor`, one CPU each) step their environments
with the policy and return transition batches; this process (the learner side) inserts them
into the replay and trains ``sgd_steps`` steps per inserted iteration, the same replay ratio as
the fused loop, through the per-iteration loop's body (`drlhet.runtime.host_loop
.learn_iteration`, delayed priority updates included). The parameters go out every
``sync_every`` learner iterations as one ``ray.put`` whose reference every actor's next call
takes; an actor acts with parameters at most ``sync_every`` + one call behind, and the lag of
every inserted batch (learner iterations between the parameters it was collected with and the
learner's at insertion) is measured and reported, like the delay k.

The learner takes whole actor calls: a chunk ends at the first call's end at or past its own
(each row counts what its chunk ran). What the run asks of Ray (an address that answers, a free
CPU per actor, an end within ``steps``) is checked before it starts (`drlhet.runtime
.ray_cluster`).

Faults: the actors are started with ``max_restarts=-1``. A call that fails because its actor
died is counted and dropped (its transitions were never inserted); the restarted actor is sent
the newest parameters and its next sequence number before anything else, and the run goes on.
Per actor the learner keeps the next expected sequence number: a batch seen before is a
duplicate (dropped), a jump a gap; both are counted in the report.

This mirrors the authors' framework of parallel actors feeding one learner (Zhang, Meng,
Prasanna, TPDS 2023, Sec. 3); Ray is the distributed engine, not a home-made one.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.runtime.chunks import check_replay_error, chunk_row, host_summary, split_keys
from drlhet.runtime.compiling import jit
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.ray_actor import RolloutActor, params_digest
from drlhet.runtime.ray_cluster import check_run, start_actors
from drlhet.runtime.saving import ChunkHook
from drlhet.runtime.trainer import Trainer, make_trainer

__all__ = ["RayConfig", "RayReport", "parse_actors", "run_ray"]


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """How a Ray run places its actors.

    Attributes:
      actors: N, remote actors (one CPU each).
      sync_every: learner iterations between parameter broadcasts (one ``ray.put`` each).
      rollout: iterations (of ``num_envs`` env steps per seed) per actor call.
      max_lag: the most learner iterations a batch's parameters may be behind when it is
        inserted, beyond one call's ``rollout``: the learner waits for a straggler's batch
        before it runs further ahead (None: ``(actors + 1) x rollout + sync_every``, which
        gates only stragglers, e.g. an actor compiling or restarting).
      address: a running cluster's address (``ray start --head`` prints it); None: a local
        ``ray.init()``.
      max_failures: calls of one actor that may fail in a row, with no batch from it between
        (its process died, or it was restarting), before the run fails naming it: Ray restarts
        an actor without end (``max_restarts=-1``), even one that dies each time it comes back.
    """

    actors: int
    sync_every: int = 32
    rollout: int = 32
    max_lag: int | None = None
    address: str | None = None
    max_failures: int = 10

    def __post_init__(self) -> None:
        for name in ("actors", "sync_every", "rollout", "max_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_lag is not None and self.max_lag < 0:
            raise ValueError(f"max_lag must be >= 0, got {self.max_lag}")

    @property
    def lag_bound(self) -> int:
        """`max_lag`, or its default."""
        if self.max_lag is not None:
            return self.max_lag
        return (self.actors + 1) * self.rollout + self.sync_every


def parse_actors(text: str) -> int:
    """``"ray:N"`` -> N.

    Raises:
      ValueError: anything else, named.
    """
    kind, _, n = text.partition(":")
    if kind != "ray" or not n.isdigit() or int(n) < 1:
        raise ValueError(f"--actors must be ray:N with N >= 1, got {text!r}")
    return int(n)


@dataclasses.dataclass
class RayReport:
    """What the actors did (host side, filled during the run; ``as_dict`` for the rows)."""

    names: list[str]
    reported: list[int]  # env steps per seed each actor returned
    inserted: list[int]  # of which inserted (== reported unless a batch was dropped)
    duplicates: list[int]
    gaps: list[int]
    restarts: list[int]
    fill_steps: list[int]
    lags: list[int] = dataclasses.field(default_factory=list)
    rejoins: list[dict] = dataclasses.field(default_factory=list)
    broadcasts: int = 0

    def as_dict(self) -> dict:
        lag = np.asarray(self.lags or [0])
        return {
            "actors": list(self.names),  # copies: a row keeps the report as it was then
            "env_steps_reported": list(self.reported),
            "env_steps_inserted": list(self.inserted),
            "duplicates": list(self.duplicates),
            "gaps": list(self.gaps),
            "restarts": list(self.restarts),
            "fill_steps": list(self.fill_steps),
            "lag_mean": float(lag.mean()),
            "lag_max": int(lag.max()),
            "rejoins": [dict(r) for r in self.rejoins],
            "broadcasts": self.broadcasts,
        }


def _learn_fn(cfg: TrainConfig, tr: Trainer, iterations: int, train: bool):
    """``(agent, replay, pending, key, transitions [S, T, N, ...], env_steps) -> (agent, replay,
    pending, key, metrics)``, jitted and vmapped over seeds, the state donated: per iteration
    t < T, insert transitions ``[:, t]`` then (with ``train``) ``sgd_steps`` samples, train
    steps and delayed priority updates, as the fused loop's iteration
    (`drlhet.runtime.trainer`) does after its env step; without ``train`` (the warm-up) only
    the inserts."""
    p = tr.parts

    def one(agent, rep, pending, key, trans, env_steps):
        def body(carry, tr_t):
            agent, rep, pending, key, steps = carry
            rep = p.insert(rep, tr_t)
            if not train:
                return (agent, rep, pending, key, steps + cfg.num_envs), {}
            key, k_learn = jax.random.split(key)

            def sgd(c, k):
                agent, rep, pending = c
                k_sample, k_update = jax.random.split(k)
                batch = p.sample(rep, k_sample, steps)
                agent, priorities, metrics = p.train(agent, batch, k_update)
                rep, pending = p.update(rep, pending, batch, priorities)
                return (agent, rep, pending), metrics

            keys = jax.random.split(k_learn, cfg.sgd_steps)
            (agent, rep, pending), metrics = jax.lax.scan(sgd, (agent, rep, pending), keys)
            out = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)  # over SGD steps
            return (agent, rep, pending, key, steps + cfg.num_envs), out

        init = (agent, rep, pending, key, env_steps)
        (agent, rep, pending, key, _), metrics = jax.lax.scan(body, init, trans, length=iterations)
        return agent, rep, pending, key, jax.tree.map(jnp.mean, metrics)

    vm = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, None))
    return jit(vm, donate_argnums=(0, 1, 2))


class _Learner:
    """The learner side's state and its Ray bookkeeping (mutable, host side)."""

    def __init__(self, tr: Trainer, rc: RayConfig, actors: list, names: list[str], device, record):
        import ray

        self.record = record
        self.ray, self.tr, self.rc, self.actors = ray, tr, rc, actors
        cfg = tr.config
        keys = jax.random.split(jax.random.key(cfg.seed), cfg.seeds)
        with jax.default_device(device):
            s = jit(jax.vmap(tr.init))(keys)
        self.state = [s.agent, s.replay, s.pending, s.key]
        self.env_steps = 0
        self.evaluate = jit(jax.vmap(tr.parts.evaluate))
        self.learn = {t: _learn_fn(cfg, tr, rc.rollout, t) for t in (False, True)}
        self.iters, self.version = 0, 0
        n = len(actors)
        self.report = RayReport(names, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n)
        self.next_seq, self.call_version, self.failures = [0] * n, [0] * n, [0] * n
        self.params = self._broadcast()
        self.calls = {i: self._call(i) for i in range(n)}

    def _broadcast(self):
        self.host_params = jax.device_get(self.state[0])
        self.version = self.iters
        self.report.broadcasts += 1
        return self.ray.put(self.host_params)

    def _call(self, i: int):
        self.call_version[i] = self.version
        return self.actors[i].rollout.remote(self.params, self.version, self.env_steps)

    def next_batch(self) -> dict:
        """The next batch any actor returns, in sequence; dead actors' calls are dropped and the
        restarted actors rejoin with the newest parameters."""
        while True:
            oldest = min(self.calls, key=lambda a: self.call_version[a])
            if self.iters - self.call_version[oldest] > self.rc.lag_bound:
                refs = [self.calls[oldest]]  # a straggler: wait for it, run no further ahead
            else:
                refs = list(self.calls.values())
            [ready], _ = self.ray.wait(refs, num_returns=1)
            i = next(a for a, r in self.calls.items() if r == ready)
            try:
                got = self.ray.get(ready)
            except self.ray.exceptions.RayTaskError as e:  # a bug, not a crash: no retry
                raise self._raised(i, "rollout", e) from e
            except self.ray.exceptions.RayActorError as e:  # died during the call: Ray restarts it
                self._failed(i, e)
                got = {"rejoin": True}
            if got.get("rejoin"):  # restarted (during or between calls): its batch is lost
                self._rejoin(i)
                continue
            if self._in_sequence(i, got):
                self.failures[i] = 0
                return got
            self.calls[i] = self._call(i)

    def _rejoin(self, i: int, timeout_s: float = 300.0) -> None:
        """Sends restarted actor ``i`` the newest parameters and its next sequence number,
        retrying while Ray restarts it (idempotent); records whether it holds them."""
        rep = self.report
        rep.restarts[i] += 1
        deadline = time.monotonic() + timeout_s
        while True:
            call = self.actors[i].rejoin.remote(self.params, self.version, self.next_seq[i])
            try:
                version, digest = self.ray.get(call)
                break
            except self.ray.exceptions.RayTaskError as e:
                raise self._raised(i, "rejoin", e) from e
            except self.ray.exceptions.RayActorError as e:  # restarting, or died again
                self._failed(i, e)
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self._named(i)} did not come back in {timeout_s:.0f} s "
                        f"(last: {_first_line(e)})"
                    ) from e
                time.sleep(0.2)
        latest = version == self.version and digest == params_digest(self.host_params)
        rep.rejoins.append({"actor": i, "version": version, "latest": bool(latest)})
        self.calls[i] = self._call(i)

    def _named(self, i: int) -> str:
        return f"ray actor {i} ({self.report.names[i]})"

    def _raised(self, i: int, method: str, e: Exception) -> RuntimeError:
        """The run's error for actor ``i``'s ``method`` raising ``e`` (a Ray task error): its
        cause, named, with the actor; Ray would only restart a process that died."""
        cause = getattr(e, "cause", None) or e
        return RuntimeError(
            f"{self._named(i)}: {method} raised {type(cause).__name__}: {_first_line(cause)}"
        )

    def _failed(self, i: int, e: Exception) -> None:
        """Counts a call of actor ``i`` that failed with ``e`` (its process died or was
        restarting); raises once more than ``max_failures`` failed with no batch between."""
        self.failures[i] += 1
        if self.failures[i] > self.rc.max_failures:
            raise RuntimeError(
                f"{self._named(i)}: {self.failures[i]} calls failed in a row without a batch "
                f"(its process died or was restarting; the most is {self.rc.max_failures}); "
                f"last: {_first_line(e)}"
            ) from e

    def _in_sequence(self, i: int, got: dict) -> bool:
        rep, seq = self.report, got["seq"]
        rep.fill_steps[i] = max(rep.fill_steps[i], got["fill_steps"])
        if seq < self.next_seq[i]:
            rep.duplicates[i] += 1
            return False
        rep.gaps[i] += seq - self.next_seq[i]
        self.next_seq[i] = seq + 1
        rep.reported[i] += got["env_steps"]
        return True

    def take(self, got: dict) -> dict | None:
        """Calls the batch's actor again (with the newest parameters), then inserts the batch and
        trains on it (past the warm-up); returns the train steps' mean metrics (None in the
        warm-up)."""
        cfg, rc = self.tr.config, self.rc
        # call the actor again first, so that it collects while this batch trains
        self.calls[got["actor"]] = self._call(got["actor"])
        train = self.env_steps >= cfg.warmup
        trans = got["transitions"]  # [S, T, N, ...]
        if self.record is not None:
            self.record.append(trans)
        *self.state, metrics = self.learn[train](*self.state, trans, self.env_steps)
        self.env_steps += rc.rollout * cfg.num_envs
        self.report.inserted[got["actor"]] += got["env_steps"]
        if train:
            self.report.lags.append(self.iters - got["version"])
            before, self.iters = self.iters, self.iters + rc.rollout
            if self.iters // rc.sync_every > before // rc.sync_every:
                self.params = self._broadcast()
        return metrics if train else None


def _first_line(e: BaseException) -> str:
    """The first line of ``e``'s message that says something (Ray's start with a blank one)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _chunk(lr: _Learner, i: int, t0: float, last: float) -> dict:
    """Collects chunk ``i``'s env steps from the actors (-1: the warm-up), training on them,
    then evaluates: the chunk's row."""
    cfg = lr.tr.config
    end = cfg.warmup if i < 0 else cfg.warmup + (i + 1) * cfg.eval_every
    metrics, finished, start = [], [], lr.env_steps
    while lr.env_steps < end:
        got = lr.next_batch()
        m = lr.take(got)
        metrics += [m] if m is not None else []
        finished.append(got["finished"])
    if i < 0:
        return {}
    jax.block_until_ready(lr.state)
    t_eval = time.perf_counter()
    key, k_eval = split_keys(lr.state[3])
    lr.state[3] = key
    eval_return = jax.device_get(lr.evaluate(lr.state[0], k_eval))
    eval_s = time.perf_counter() - t_eval
    summary = host_summary(cfg, metrics, finished, eval_return, lr.env_steps)
    check_replay_error(lr.state[1].error, i, summary, cfg)
    iterations = len(metrics) * lr.rc.rollout  # whole actor calls: not always --eval-every's
    row = chunk_row(cfg, iterations, summary, i, t0, last, stepped=lr.env_steps - start)
    return {**row, "eval_s": eval_s, "ray": lr.report.as_dict()}


def run_ray(
    cfg: TrainConfig,
    rc: RayConfig,
    on_chunk=None,
    device: jax.Device | None = None,
    record_batches: list | None = None,
    stop_asked=None,
) -> tuple[Any, list[dict], dict]:
    """Trains ``cfg`` with ``rc.actors`` Ray actors feeding this process's replay and learner
    (on ``device``, default JAX's first); ``record_batches`` (a list) receives every inserted
    batch's transitions (host arrays ``[S, T, N, ...]``; for benchmarks); ``stop_asked``
    (``() -> bool``): once true, the run ends after its chunk by raising `Stopped`.

    Returns:
      ``(agent state [S], rows, report)``: one row per chunk as `drlhet.runtime.run.run`'s, each
      with the actors' report so far under ``"ray"`` and the evaluation's seconds
      (``eval_s``, part of ``chunk_s``); the final report (`RayReport.as_dict`). Run to its
      end, the last row's ``env_steps`` is `drlhet.runtime.ray_cluster.end_steps`, within
      ``cfg.steps``.

    Raises:
      ValueError: a bad configuration, or one that a Ray run cannot run as asked
        (`drlhet.runtime.ray_cluster.check_run`), or a Ray cluster that cannot take it
        (`drlhet.runtime.ray_cluster.init_ray`).
      ImportError: Ray is not installed (the ``ray`` extra).
    """
    tr = make_trainer(cfg)
    check_run(cfg, rc)
    actors, names, group = start_actors(cfg, rc, RolloutActor)
    import ray
    from ray.util.placement_group import remove_placement_group

    try:
        lr = _Learner(tr, rc, actors, names, device or jax.devices()[0], record_batches)
        hook = ChunkHook(tr.chunks, None, on_chunk, stop_asked)
        t0 = time.perf_counter()
        _chunk(lr, -1, t0, t0)  # the warm-up
        last = time.perf_counter()
        for i in range(tr.chunks):
            row = _chunk(lr, i, t0, last)
            last = time.perf_counter()
            hook.after(row, lambda: lr.state[0])  # no checkpoints: only a stop asks for it
        return lr.state[0], hook.rows, lr.report.as_dict()
    finally:
        for a in actors:
            ray.kill(a)
        remove_placement_group(group)
