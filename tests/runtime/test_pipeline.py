"""The threaded pipeline: stage threads, bounded channels, errors that stop every thread (the
threads' crew itself: test_threads.py; the payload a channel carries: test_payload.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.extend import core as jax_core

from drlhet.runtime import channel_stages, compiling, pipeline
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from tests.runtime.pipeline_threads import stage_threads
from tests.runtime.test_run import SMALL, SPLITS, assert_same_state

SPLIT = "actors=cpu:0,replay=jax@cpu:1,learner=cpu:0"


def with_learner(monkeypatch, wrap):
    """Runs the pipeline with its learner stage replaced by ``wrap(learner)``."""
    build = pipeline.pipeline_stages

    def patched(*args, **kwargs):
        st = build(*args, **kwargs)
        return st._replace(learner=wrap(st.learner))

    monkeypatch.setattr(pipeline, "pipeline_stages", patched)


THREADS = {
    # the host-driven loops (an accelerator's path): each thread and the stage calls it
    # dispatches (two stages on one device: two loops on one thread, or one program per call
    # for actors + replay); in-program channels: one program per device and chunk
    "A+L|R": (
        {"actors+learner": ["actors", "learner"], "replay": ["replay"]},
        {"actors+learner", "replay"},
    ),
    "A+R|L": (
        {"actors+replay": ["actors+replay"], "learner": ["learner"]},
        {"actors+replay", "learner"},
    ),
    "A|R+L": (
        {"actors": ["actors"], "replay+learner": ["replay", "learner"]},
        {"actors", "replay+learner"},
    ),
}


def assert_host_threads(rows: list[dict], cfg: TrainConfig, threads: dict) -> None:
    """The host-driven loops ran one thread per device group and timed where it went."""
    assert rows[-1]["channels"] == "host"
    assert rows[-1]["host_threads"] == 2 and rows[-1]["iterations_per_stage_call"] == 1
    assert set(rows[-1]["threads"]) == set(threads)
    for name, dispatched in threads.items():
        clock = rows[-1]["threads"][name]
        assert clock["calls"] == 200 // cfg.num_envs
        assert all(clock[f"{k}_ms"] >= 0 for k in ("dispatch", "transfer", "wait", "sync"))
        assert all(clock[f"dispatch_{s}_ms"] > 0 for s in dispatched)


def assert_program_threads(rows: list[dict], cfg: TrainConfig, threads: set) -> None:
    """In-program channels ran one program per device and chunk, each on its own thread."""
    assert rows[-1]["channels"] == "in-program" and rows[-1]["host_threads"] == 2
    assert set(rows[-1]["threads"]) == threads
    for clock in rows[-1]["threads"].values():
        assert clock["calls"] == 200 // cfg.num_envs
        assert clock["run_ms"] > 0 and 0 <= clock["wait_ms"] <= clock["run_ms"] * 1.05


@pytest.mark.parametrize(
    "delay,split",
    [
        (4, "A+L|R"),
        # ~23 s on the 2-core VM; the A+R|L split's host loop is test_run.py's k = 3 case
        pytest.param(4, "A+R|L", marks=pytest.mark.slow),
        # ~28 s on the 2-core VM; this split's in-program lead is also k = 5's, below
        pytest.param(4, "A|R+L", marks=pytest.mark.slow),
        (5, "A|R+L"),
        # ~30 s each on the 2-core VM; k = 5's straddling updates are covered by A|R+L above
        pytest.param(5, "A+R|L", marks=pytest.mark.slow),
        pytest.param(5, "A+L|R", marks=pytest.mark.slow),
    ],
)
def test_in_program_channels_and_host_loops_run_their_threads_and_agree_bit_for_bit(
    monkeypatch, delay, split
):
    # k = 4, 5 with P = 2: the replay + learner program runs the replay a call ahead (lead 2),
    # and with k = 5 the updates of a replay call straddle two learner calls
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": delay})
    host_threads, program_threads = THREADS[split]
    state, rows = run(cfg, SPLITS[split])
    assert_program_threads(rows, cfg, program_threads)
    assert stage_threads() == []
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", True)
    host_state, host_rows = run(cfg, SPLITS[split])
    assert_host_threads(host_rows, cfg, host_threads)
    assert stage_threads() == []
    assert state.pending.indices.shape == (cfg.seeds, delay, cfg.batch_size)
    assert_same_state(host_state, state)
    assert [r["eval_return"] for r in rows] == [r["eval_return"] for r in host_rows]
    assert [r["train_return"] for r in rows] == [r["train_return"] for r in host_rows]


def calls_a_channel(eqn) -> bool:
    """Whether ``eqn`` sends or receives on a channel, itself or inside a scan or call."""
    if eqn.primitive.name == "ffi_call":
        return eqn.params["target_name"].startswith("drlhet_channel_")
    return any(calls_a_channel(e) for j in inner_jaxprs(eqn) for e in j.eqns)


def inner_jaxprs(eqn) -> list:
    found = []
    for v in eqn.params.values():
        for x in v if isinstance(v, tuple | list) else [v]:
            found += [x.jaxpr] if isinstance(x, jax_core.ClosedJaxpr) else []
            found += [x] if isinstance(x, jax_core.Jaxpr) else []
    return found


def assert_channel_calls_chained(jaxpr) -> int:
    """At every level of ``jaxpr`` (the program, a scan's body), each equation that calls a
    channel depends on the one before it (equations are listed in an order their data allow):
    the program waits in one channel call at a time. ``-> channel calls checked``."""
    producer = {v: i for i, e in enumerate(jaxpr.eqns) for v in e.outvars}

    def ancestors(i: int) -> set[int]:
        seen, todo = set(), [i]
        while todo:
            for v in jaxpr.eqns[todo.pop()].invars:
                j = producer.get(v) if isinstance(v, jax_core.Var) else None
                if j is not None and j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    calls = [i for i, e in enumerate(jaxpr.eqns) if calls_a_channel(e)]
    for a, b in zip(calls, calls[1:], strict=False):
        assert a in ancestors(b), (jaxpr.eqns[a], jaxpr.eqns[b])
    return len(calls) + sum(
        assert_channel_calls_chained(j) for i in calls for j in inner_jaxprs(jaxpr.eqns[i])
    )


@pytest.mark.parametrize("split", ["A+R|L", "A+L|R", "A|R+L"])
def test_a_chunk_program_waits_in_one_channel_call_at_a_time(monkeypatch, split):
    # XLA issues a program's independent channel calls in an order of its own: a receive put
    # before the send it waits for would hang (and while waiting calls blocked their thread,
    # two receives at once held both of XLA's pool threads on 2 cores, a hang seen once), so
    # each call follows the one before in the data: traced, not compiled
    build, jaxprs = channel_stages.chunk_program, []

    class Traced(Exception):
        pass

    def traced(*args):
        program = build(*args)

        class Lower:
            def lower(self, *inputs):
                jaxprs.append(program.trace(*inputs).jaxpr.jaxpr)
                return self

            def compile(self):
                return self

            def __call__(self, *inputs):
                raise Traced

        return Lower()

    monkeypatch.setattr(channel_stages, "chunk_program", traced)
    with pytest.raises(Traced):
        run(TrainConfig(**{**SMALL.__dict__, "delay": 4}), SPLITS[split])
    assert len(jaxprs) >= 2  # a program per device (a skewed group: one per variant)
    assert all(assert_channel_calls_chained(j) >= 2 for j in jaxprs)


_OTHER_FUSIONS = """
import os
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # XLA's pools: 2 threads
import jax
jax.config.update("jax_num_cpu_devices", 2)
import drlhet
if os.environ.get("DRLHET_TEST_KERNEL_DIR"):
    drlhet.__path__.insert(0, os.environ["DRLHET_TEST_KERNEL_DIR"])
from drlhet.runtime import compiling
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import run
from tests.runtime.test_run import SMALL
compiling.OPTIONS["xla_cpu_use_fusion_emitters"] = False
cfg = TrainConfig(**{**SMALL.__dict__, "delay": 3})
_, rows = run(cfg, "actors=cpu:0,replay=native@cpu:1,learner=cpu:0")
print(rows[-1]["channels"], rows[-1]["env_steps"])
"""


def test_a_waiting_channel_call_lets_go_of_xlas_thread():
    # where XLA runs a program's channel call on its CPU pool rather than on the thread that
    # called the program (it did with its legacy fusion emitters), a call that blocked while
    # it waited held a pool thread: the two programs' receives held both of a 2-core
    # machine's, and the run hung for good (kernels/cpu/channel.cc: a call waiting past 100 ms
    # now returns an unfinished future and lets go). In a process of its own, for the compile
    # option and a timeout.
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _OTHER_FUSIONS],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the pipelined run compiled with XLA's legacy emitters hung (240 s)")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["in-program", str(SMALL.steps + 2 * SMALL.num_envs)]


def test_a_second_run_loads_every_program_from_the_compilation_cache():
    # the channels' ids are the chunk programs' arguments, not constants: nothing of a run
    # (init, warm-up, the stages' programs, evaluation) is compiled again by the next one
    cfg = TrainConfig(**{**SMALL.__dict__, "delay": 4})
    run(cfg, SPLITS["A+L|R"])  # loaded from the cache where the test above ran first
    events: list[str] = []

    def listen(event: str, **kwargs) -> None:
        events.append(event)

    jax.monitoring.register_event_listener(listen)
    try:
        _, rows = run(cfg, SPLITS["A+L|R"])
    finally:
        jax.monitoring.unregister_event_listener(listen)
    assert rows[-1]["channels"] == "in-program"
    requests = events.count("/jax/compilation_cache/compile_requests_use_cache")
    assert requests > 0
    assert events.count("/jax/compilation_cache/cache_hits") == requests


def test_device_groups_one_thread_per_device():
    cpu = jax.devices("cpu")
    spread = {"actors": cpu[0], "replay": cpu[1], "learner": cpu[0]}
    assert pipeline.device_groups(spread) == [("actors", "learner"), ("replay",)]
    with pytest.raises(ValueError, match="split across devices"):
        pipeline.device_groups(dict.fromkeys(("actors", "replay", "learner"), cpu[0]))


@pytest.mark.parametrize("host,fail_at", [(True, 3), (False, 1)])
def test_a_stage_that_raises_stops_the_run_and_leaves_no_thread(monkeypatch, host, fail_at):
    # host loops: the learner's third call raises; in-program: building its program raises
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    calls = []

    def wrap(learner):
        def failing(*args):
            calls.append(1)
            if len(calls) == fail_at:
                raise RuntimeError("learner broke")
            return learner(*args)

        return failing

    with_learner(monkeypatch, wrap)
    with pytest.raises(RuntimeError, match="learner broke") as info:
        run(TrainConfig(**{**SMALL.__dict__, "delay": 4}), SPLIT)
    assert any("learner stage" in note for note in info.value.__notes__)
    assert stage_threads() == []


@pytest.mark.parametrize("host", [True, False])
def test_a_nan_priority_is_refused_and_stops_every_thread(monkeypatch, host):
    # the learner's updates carry NaN priorities: the buffer refuses them (error flag), and the
    # host thread's check at the chunk's end stops the run while the stages still run (in
    # programs: closing the channels cancels them)
    def wrap(learner):
        def nan_priorities(agent, batches):
            agent, updates, metrics = compiling.inlined(learner)(agent, batches)
            b = SMALL.batch_size
            nan = np.float32(np.nan).view(np.uint32)
            return agent, updates.at[..., 2 * b :].set(nan), metrics

        return compiling.jit(nan_priorities)  # a stage: called alone, or inside a program

    with_learner(monkeypatch, wrap)
    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    with pytest.raises(ValueError, match="refused a negative, NaN, infinite or too large priority"):
        run(TrainConfig(**{**SMALL.__dict__, "delay": 4}), SPLIT)
    assert stage_threads() == []


@pytest.mark.parametrize("host", [True, False])
def test_an_error_in_the_callback_stops_the_threads(monkeypatch, host):
    def stop(row):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_FORCE_HOST_CHANNELS", host)
    with pytest.raises(KeyboardInterrupt):
        run(TrainConfig(**{**SMALL.__dict__, "delay": 2}), SPLIT, on_chunk=stop)
    assert stage_threads() == []
