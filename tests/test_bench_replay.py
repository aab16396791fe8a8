"""experiments/bench_replay.py at a tiny scale: the pure-JAX peer (flashbax) runs where the
``jax`` backend runs, with as many steps a timed scan, and its rows say so; a backend that is
only simulated here (``cuda`` under the host emulation) is compared with no peer."""

import dataclasses
import importlib
import json
import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("bench_replay")


def tiny_run(bench, tmp_path):
    """The fused step of ``jax`` and the installed peers at capacity 256, B 32, one repeat."""
    return bench.Args(
        capacities=(256,), batches=(32,), branchings=(16,), backends=("jax",), ops=("step",),
        modes=("fused",), thread_scaling=False, limits=False, repeats=1, plain=False,
        out=tmp_path / "rows.json",
    )  # fmt: skip


def test_flashbax_runs_where_jax_runs_and_its_rows_say_so(bench, tmp_path, capsys):
    pytest.importorskip("flashbax", reason="missing library: flashbax (the bench extra)")
    args = tiny_run(bench, tmp_path)
    rows = bench.main(args)
    assert json.loads(args.out.read_text()) == rows
    by = {r["impl"]: r for r in rows}
    assert set(by) == {"drlhet-jax", "flashbax"}, sorted(by)
    for field in ("device", "speed_of", "steps_per_repeat"):
        assert by["flashbax"][field] == by["drlhet-jax"][field], field
    assert by["flashbax"]["items_per_s"] > 0 and by["flashbax"]["branching"] is None
    assert "step: drlhet-jax fused / flashbax fused = " in capsys.readouterr().out


def test_a_simulated_backend_is_compared_with_no_one(bench, capsys):
    def row(impl, rate, speed_of):
        return {"impl": impl, "op": "step", "mode": "fused", "capacity": 1024, "batch": 32,
                "branching": None if impl == "flashbax" else 16, "items_per_s": rate,
                "speed_of": speed_of}  # fmt: skip

    simulated = "simulation of cuda on this CPU: function only, not the hardware's speed"
    rows = [row("drlhet-jax", 2e6, "this CPU"), row("flashbax", 4e6, "this CPU")]
    bench.print_ratios([*rows, row("drlhet-cuda", 2e4, simulated)], 1024, 32, 16, 3)
    printed = capsys.readouterr().out
    assert "step: drlhet-jax fused / flashbax fused = 0.50x" in printed
    assert "drlhet-cuda" not in printed
    # the same rows from a GPU: cuda's speed is a device's, compared with both
    bench.print_ratios([*rows, row("drlhet-cuda", 8e6, "this GPU (H100)")], 1024, 32, 16, 3)
    printed = capsys.readouterr().out
    assert "step: drlhet-cuda fused / flashbax fused = 2.00x" in printed
    assert "step: drlhet-cuda fused / drlhet-jax fused = 4.00x" in printed
    # the in-process A/Bs of a GPU run, each against drlhet-cuda
    gpu = "this GPU (H100)"
    ab = [row("drlhet-cuda", 8e6, gpu), row("drlhet-cuda-find", 8.8e6, gpu)]
    ab += [row("drlhet-cuda-siblings", 6e6, gpu), row("drlhet-cuda-tagged", 9.6e6, gpu)]
    bench.print_ratios([*rows, *ab], 1024, 32, 16, 3)
    printed = capsys.readouterr().out
    assert "step: drlhet-cuda-find fused / drlhet-cuda fused = 1.10x" in printed
    assert "step: drlhet-cuda-siblings fused / drlhet-cuda fused = 0.75x" in printed
    assert "step: drlhet-cuda-tagged fused / drlhet-cuda fused = 1.20x" in printed


@pytest.mark.parametrize("where", ["built", "first run"])
def test_a_failing_peer_costs_its_rows_not_the_run(bench, tmp_path, capsys, monkeypatch, where):
    """A peer that fails (a version that does not run on this machine, say) is a one-line note;
    the run goes on and writes everyone else's rows."""
    fbx = pytest.importorskip("flashbax", reason="missing library: flashbax (the bench extra)")
    make = fbx.make_prioritised_flat_buffer

    def broken(**kw):
        if where == "built":
            raise RuntimeError("no such buffer here\nsecond line")
        buf = make(**kw)

        def sample(*a, **k):
            raise RuntimeError("no such buffer here\nsecond line")

        return buf.replace(sample=sample)

    monkeypatch.setattr(fbx, "make_prioritised_flat_buffer", broken)
    args = tiny_run(bench, tmp_path)
    rows = bench.main(args)
    assert {r["impl"] for r in rows} == {"drlhet-jax"}
    printed = capsys.readouterr().out
    assert (
        "note: flashbax failed at capacity 256, batch 32, skipped: RuntimeError: no such buffer "
        "here\n"
    ) in printed


def test_flashbax_gets_its_own_switch_for_the_device_it_runs_on(bench, tmp_path, monkeypatch):
    """On a GPU flashbax must be told so: its default updates priorities one at a time in a
    scan, a round of launches per entry there (it outlasted a whole stage on an H100)."""
    fbx = pytest.importorskip("flashbax", reason="missing library: flashbax (the bench extra)")
    impls = importlib.import_module("replay_impls")  # bench_replay's implementations
    assert [impls.flashbax_device(p) for p in ("gpu", "tpu", "cpu")] == ["gpu", "tpu", "cpu"]
    seen = []
    real = fbx.make_prioritised_flat_buffer

    def spy(**kwargs):
        seen.append(kwargs.get("device"))
        return real(**kwargs)

    monkeypatch.setattr(fbx, "make_prioritised_flat_buffer", spy)
    bench.main(tiny_run(bench, tmp_path))
    assert seen == ["cpu"]  # where jax runs here


def test_a_peer_over_its_warm_up_limit_is_not_repeated(bench, tmp_path, capsys):
    pytest.importorskip("flashbax", reason="missing library: flashbax (the bench extra)")
    args = dataclasses.replace(tiny_run(bench, tmp_path), peer_limit_s=0.0)
    rows = bench.main(args)
    assert {r["impl"] for r in rows} == {"drlhet-jax"}
    out = capsys.readouterr().out
    assert "note: flashbax step (fused) took " in out and "--peer-limit-s 0: not repeated" in out


def test_a_traced_run_leaves_one_trace_per_fused_row_that_the_timeline_reads(
    bench, tmp_path, monkeypatch
):
    monkeypatch.setenv("XLA_FLAGS", "")  # main adds the command-buffer flag for jax's start
    args = dataclasses.replace(  # B 256: 256 steps a scan (B 32: 2048, a larger trace)
        tiny_run(bench, tmp_path), batches=(256,), peers=False, trace_dir=tmp_path / "t"
    )
    (row,) = bench.main(args)
    assert bench.TRACE_COMMAND_BUFFERS in row["xla_flags"]
    (trace,) = (tmp_path / "t").glob("*.trace.json.gz")
    assert trace.name == "drlhet-jax-step-c256-b256-k16.trace.json.gz"
    timeline = importlib.import_module("kernel_timeline")
    (entry,) = timeline.entries(
        timeline.Args(trace_files=(trace,), plane="/host:CPU", lines="tf_XLA")
    )
    assert entry["kernel_us_per_step"] > 0 and entry["kernels"]


@pytest.fixture
def emulated_cuda():
    """The cuda backend's module, its kernels' host emulation built (skipped where it is not)."""
    from drlhet.backends import BackendUnavailable, cuda
    from drlhet.backends.native import library_path

    try:
        library_path(*cuda.EMU_LIBRARY)
    except BackendUnavailable as e:  # built wherever <ucontext.h> exists
        pytest.skip(f"missing library: the CUDA kernels' host emulation ({e})")
    return cuda


@pytest.fixture
def built(monkeypatch):
    """The `TreeOps` every buffer the benchmark builds is made with, in order."""
    from drlhet.replay import prioritized

    ops: list = []
    make = prioritized.make_prioritized_replay

    def recording(*a, **kw):
        ops.append(kw["tree_ops"])
        return make(*a, **kw)

    monkeypatch.setattr(prioritized, "make_prioritized_replay", recording)
    return ops


def test_the_sample_around_find_keeps_the_backends_own_update(
    bench, tmp_path, built, emulated_cuda
):
    """``--no-cuda-own-sample``: the buffer's sample in XLA around ``find``, the update still the
    backend's own call (cuda, here under the host emulation), and its rows say so."""
    args = dataclasses.replace(
        tiny_run(bench, tmp_path), backends=("cuda",), batches=(256,), peers=False,
        cuda_own_sample=False,
    )  # fmt: skip
    (row,) = bench.main(args)
    assert row["impl"] == "drlhet-cuda" and row["cuda_own_sample"] is False
    assert row["cuda_key_targets"] is False and row["cuda_shared_top"] is False
    assert row["items_per_s"] > 0
    (ops,) = built
    assert ops.weigh is None and ops.weigh_key is None and ops.update is not None


def test_the_find_ab_times_cudas_own_sample_beside_the_sample_around_find(
    bench, tmp_path, built, capsys, emulated_cuda
):
    """``--cuda-find-ab``: ``drlhet-cuda-find`` (the sample in XLA around ``find``, the update
    the backend's own call) beside ``drlhet-cuda`` in one run (cuda under the host emulation
    here), the rows saying which sample ran; no ratio printed for a simulation's speeds (a GPU
    prints ``sample: drlhet-cuda-find fused / drlhet-cuda fused = ...``)."""
    args = dataclasses.replace(
        tiny_run(bench, tmp_path), backends=("cuda",), batches=(256,), peers=False,
        ops=("sample", "step"), cuda_find_ab=True,
    )  # fmt: skip
    rows = bench.main(args)
    assert sorted((r["impl"], r["op"], r["cuda_own_sample"]) for r in rows) == [
        ("drlhet-cuda", "sample", True), ("drlhet-cuda", "step", True),
        ("drlhet-cuda-find", "sample", False), ("drlhet-cuda-find", "step", False),
    ]  # fmt: skip
    assert all(r["items_per_s"] > 0 and r["steps_per_repeat"] for r in rows)
    own, find = built
    assert own.weigh is not None and own.update is not None
    assert find.weigh is None and find.weigh_key is None and find.update is own.update
    assert all("simulation of cuda" in r["speed_of"] for r in rows)
    assert "drlhet-cuda-find fused / drlhet-cuda fused" not in capsys.readouterr().out


ARMS = [  # the tagged A/B's arms: their rows' names and switches
    ("drlhet-cuda-tagged", {"TAGGED_CLAIMS": 1, "TAGGED_SIBLINGS": 0}),
    ("drlhet-cuda-siblings", {"TAGGED_CLAIMS": 1, "TAGGED_SIBLINGS": 1}),
]


def test_the_tagged_ab_traces_one_program_per_arm_with_its_switches_and_restores_them(
    bench, tmp_path, monkeypatch, emulated_cuda
):
    """``--cuda-tagged-ab``: ``drlhet-cuda-tagged`` and ``-siblings`` beside ``drlhet-cuda`` in
    one run (cuda under the host emulation here), each program traced with `cuda.TAGGED_CLAIMS`
    on and `TAGGED_SIBLINGS` off, then on, and ``drlhet-cuda``'s with them off (``--cuda-
    tagged-claims False``, as ``gpu_checks.sh tagged`` gives it: the library's default is on),
    the rows saying which, and the run's settings as they were after the arms."""
    cuda = emulated_cuda
    names = ["TAGGED_CLAIMS", "TAGGED_SIBLINGS"]
    for n in names:  # the run's options set them for the process: put back after the test
        monkeypatch.setattr(cuda, n, getattr(cuda, n))
    traced = []
    target = cuda._update_target
    monkeypatch.setattr(
        cuda,
        "_update_target",
        lambda t: traced.append(tuple(int(getattr(cuda, n)) for n in names)) or target(t),
    )
    args = dataclasses.replace(
        tiny_run(bench, tmp_path),
        backends=("cuda",),
        batches=(256,),
        peers=False,
        cuda_tagged_ab=True,
        cuda_tagged_claims=False,
    )
    rows = bench.main(args)
    columns = [f"cuda_{n.lower()}" for n in names]
    want = [("drlhet-cuda", (0,) * len(names))]
    want += [(impl, tuple(s[n] for n in names)) for impl, s in ARMS]
    assert [(r["impl"], tuple(r[c] for c in columns)) for r in rows] == want
    # each program traces the update (the scan may trace its body more than once), in order
    seen = [settings for i, settings in enumerate(traced) if i == 0 or traced[i - 1] != settings]
    assert seen == [w[1] for w in want]
    assert not any(getattr(cuda, n) for n in names)  # the run's, after the arms
    assert all(r["items_per_s"] > 0 for r in rows)


def test_the_wide_and_sorted_abs_trace_their_arms_with_their_switches_and_restore_them(
    bench, tmp_path, monkeypatch, emulated_cuda
):
    """``--cuda-wide-ab`` and ``--cuda-sorted-ab`` in one run (the host emulation here):
    ``drlhet-cuda-wide`` traced with `cuda.CLUSTER_BLOCKS` 16 and ``drlhet-cuda-sorted`` with
    `cuda.SORTED_RUNS` on, beside ``drlhet-cuda`` with the run's 8 and off (as ``gpu_checks.sh
    wide`` and ``sorted`` give them), the rows saying which, the run's settings back after."""
    cuda = emulated_cuda
    for name in ("CLUSTER_BLOCKS", "SORTED_RUNS"):  # put back after the test
        monkeypatch.setattr(cuda, name, getattr(cuda, name))
    traced = []
    paths = cuda._paths
    monkeypatch.setattr(
        cuda, "_paths", lambda: traced.append((cuda.CLUSTER_BLOCKS, cuda.SORTED_RUNS)) or paths()
    )
    args = dataclasses.replace(
        tiny_run(bench, tmp_path), backends=("cuda",), batches=(256,), peers=False,
        cuda_wide_ab=True, cuda_cluster_blocks=8, cuda_sorted_ab=True, cuda_sorted_runs=False,
    )  # fmt: skip
    rows = bench.main(args)
    want = [("drlhet-cuda", (8, 0)), ("drlhet-cuda-wide", (16, 0)), ("drlhet-cuda-sorted", (8, 1))]
    got = [(r["impl"], (r["cuda_cluster_blocks"], r["cuda_sorted_runs"])) for r in rows]
    assert got == want
    seen = [b for i, b in enumerate(traced) if i == 0 or traced[i - 1] != b]
    assert seen == [(8, False), (16, False), (8, True)], seen
    assert cuda.CLUSTER_BLOCKS == 8 and cuda.SORTED_RUNS is False
    assert all(r["items_per_s"] > 0 for r in rows)


@pytest.mark.parametrize("loop", ["xs", "carry"])
def test_both_loops_time_the_same_steps_and_rows_say_which(bench, tmp_path, loop):
    """``--loop carry`` (the key split in the step from a carried one, the outputs summed, as
    the trainer loops) runs the same ops as ``xs`` (keys sliced, outputs stacked); rows record
    the loop."""
    args = dataclasses.replace(
        tiny_run(bench, tmp_path), ops=("sample", "update", "step"), peers=False, loop=loop
    )
    rows = bench.main(args)
    assert [(r["op"], r["loop"]) for r in rows] == [(op, loop) for op in args.ops]
    assert all(r["items_per_s"] > 0 for r in rows)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"capacities": (0,)}, "--capacities must be integers in [1, 2147483647], got [0]"),
        ({"batches": (32, -1)}, "--batches must be integers in [1, 16777216], got [-1]"),
        ({"branchings": (1, 16)}, "--branchings must be integers in [2, 2147483647], got [1]"),
        ({"capacities": ()}, "--capacities must be integers in [1, 2147483647], got none"),
        ({"repeats": 0}, "--repeats must be >= 1, got 0"),
        ({"unroll": 0}, "--unroll must be >= 1, got 0"),
        ({"ops": ()}, "--ops and --modes each name at least one"),
    ],
)
def test_bad_values_are_refused_in_one_line(bench, tmp_path, change, message):
    assert bench.refused(tiny_run(bench, tmp_path)) == ""
    assert bench.refused(dataclasses.replace(tiny_run(bench, tmp_path), **change)) == message


@pytest.mark.parametrize(
    "args, line",
    [
        (["--capacities", "0"], "--capacities must be integers in [1, 2147483647], got [0]"),
        # JAX is given the CPU alone, so that a GPU machine checks the refusal too
        (["--device", "gpu"], "--device gpu: JAX has no GPU here (platforms: cpu)"),
    ],
)
def test_a_refused_run_exits_2_and_leaves_the_results_file_alone(tmp_path, args, line):
    import subprocess
    import sys

    out = tmp_path / "rows.json"
    out.write_text("[]")
    script = str(REPO / "experiments" / "bench_replay.py")
    done = subprocess.run(
        [sys.executable, script, *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"bench_replay: error: {line}"]
    assert out.read_text() == "[]"


def test_every_sampled_field_is_read_by_the_timed_programs(bench, tmp_path, monkeypatch):
    """The sample and step bodies of drlhet and flashbax read every field of their batch (a
    field no output depends on is a gather XLA drops, while cpprb's sample gathers all five)
    through `td_like`, item by item: a field's change moves its item's priority."""
    ri = importlib.import_module("replay_impls")
    seen: list[tuple[str, ...]] = []
    real = ri.td_like
    monkeypatch.setattr(ri, "td_like", lambda d: seen.append(tuple(sorted(d))) or real(d))
    args = dataclasses.replace(tiny_run(bench, tmp_path), ops=("sample", "step"))
    rows = bench.main(args)
    impls = {r["impl"] for r in rows}
    fields = tuple(sorted(ri.transitions(1)))
    assert len(seen) >= 2 * len(impls) and set(seen) == {fields}, seen
    data = {f: jnp.asarray(v) for f, v in ri.transitions(3).items()}
    base = np.asarray(real(data))
    assert base.shape == (3,) and (base > 0).all()
    for f in fields:  # each field feeds the priority of its own item only
        moved = dict(data, **{f: data[f].at[1].add(1)})
        changed = np.asarray(real(moved)) != base
        assert changed.tolist() == [False, True, False], f
