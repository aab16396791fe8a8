"""experiments/gpu_checks.sh's measuring stages, run with a stand-in Python that records each
command (tests/gpu_checks_stand_ins.py): the benchmark and A/B stages (quick, tagged, find,
spread, top, flags, targets) run what they are asked to, `pick` reads their rows and the later
stages run with its choice, and each CUDA_* setting reaches every command in a form the
scripts parse. The GPU tests' triage: test_gpu_checks.py; the profiling stages:
test_gpu_checks_profiles.py."""

import functools
import importlib
import json

import pytest
from gpu_checks_stand_ins import REPO, run_checks


@pytest.mark.parametrize("setting, flag", [(None, " --peers "), ("0", " --no-peers ")])
def test_the_quick_stage_times_the_installed_peers_unless_told_not_to(tmp_path, setting, flag):
    """flashbax, pure JAX, runs on the same GPU in the quick stage (its wheel in WHEELS)."""
    extra = {} if setting is None else {"QUICK_PEERS": setting}
    _, calls = run_checks(tmp_path, ["quick"], extra_env=extra)
    quick = [c for c in calls if "bench_quick.json" in c]
    assert len(quick) == 1 and flag in quick[0]


def test_the_tagged_stage_is_an_ab_in_one_run_and_a_failing_case_of_it_turns_it_off(tmp_path):
    """`tagged`: one bench_replay run with --cuda-tagged-ab (the update and step of cuda with
    its claims in a tagged table, its parents from it or not, beside cuda without, and jax);
    with CUDA_TAGGED_CLAIMS=1 and CUDA_TAGGED_SIBLINGS=1 the later stages run with them, unless
    their GPU tests (tests_tagged) failed; the cluster path stays on either way."""
    arm, switch = "tagged", "tagged-claims"
    env = {"CUDA_TAGGED_CLAIMS": "1", "CUDA_TAGGED_SIBLINGS": "1"}
    wrapped = " --tagged-claims --tagged-siblings --"
    out, calls = run_checks(tmp_path, ["tests", arm, "quick", "train"], extra_env=env)
    assert f"== tests_{arm}: exit 0" in out
    main = next(c for c in calls if "tests.xml" in c)
    assert f"and not cuda_{arm}" in main
    assert f"not slow and cuda_{arm}" in next(c for c in calls if f"tests_{arm}.xml" in c)
    (ab,) = [c for c in calls if f"/{arm}.json" in c]
    assert f"--cuda-{arm}-ab" in ab and "--backends cuda jax" in ab and "--ops update step" in ab
    # its base arm on the workspace's claims, though the paths in force have the table on
    assert "--cuda-tagged-claims False" in ab and "True" not in ab, ab
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert f"--cuda-{switch}" in quick and "--cuda-tagged-siblings" in quick
    train = [c for c in calls if " train " in c]
    assert len(train) == 2 and all(wrapped in c for c in train)
    again = tmp_path / "again"
    again.mkdir()
    out, calls = run_checks(again, ["tests", arm, "quick"], extra_env=env, **{f"{arm}_ok": False})
    assert f"== tests_{arm}: 1; the {arm} path off" in out and f"== {arm}: skipped" in out
    assert not any(f"/{arm}.json" in c for c in calls)
    quick = next(c for c in calls if "bench_quick.json" in c)
    # off, not the library's: its default is on
    assert f"--cuda-{switch} False" in quick and "--cuda-cluster-max-batch 0" not in quick
    assert "--cuda-tagged-siblings" not in quick


SWITCH_STAGES = {  # name: (env, the A/B's ops, its base arm's flag, the flag on, the wrapper's)
    "wide": ({"CUDA_CLUSTER_BLOCKS": "16"}, "sample update step", "--cuda-cluster-blocks 8",
             "--cuda-cluster-blocks 16", " --cluster-blocks 16 --"),
    "sorted": ({"CUDA_SORTED_RUNS": "1"}, "update step", "--cuda-sorted-runs False",
               "--cuda-sorted-runs True", " --sorted-runs --"),
}  # fmt: skip


@pytest.mark.parametrize("name", SWITCH_STAGES)
def test_a_switch_stage_is_an_ab_in_one_run_and_a_failing_case_of_it_keeps_it_off(tmp_path, name):
    """`wide` and `sorted`: one bench_replay run with --cuda-NAME-ab (cuda with the switch on
    beside its base arm, and jax); with the switch's env (CUDA_CLUSTER_BLOCKS=16,
    CUDA_SORTED_RUNS=1) the later stages run with it, unless its GPU tests (tests_NAME) failed:
    then without."""
    env, ops, base, on, wrapped = SWITCH_STAGES[name]
    out, calls = run_checks(tmp_path, ["tests", name, "quick", "train"], extra_env=env)
    assert f"== tests_{name}: exit 0" in out
    assert f"and not cuda_{name}" in next(c for c in calls if "tests.xml" in c)
    assert f"not slow and cuda_{name}" in next(c for c in calls if f"tests_{name}.xml" in c)
    (ab,) = [c for c in calls if f"/{name}.json" in c]
    assert f"--cuda-{name}-ab" in ab and "--backends cuda jax" in ab and f"--ops {ops} " in ab
    # its base arm without the switch, though the paths in force have it on
    assert base in ab and on not in ab, ab
    assert on in next(c for c in calls if "bench_quick.json" in c)
    train = [c for c in calls if " train " in c]
    assert len(train) == 2 and all(wrapped in c for c in train)
    again = tmp_path / "again"
    again.mkdir()
    out, calls = run_checks(again, ["tests", name, "quick"], extra_env=env, **{f"{name}_ok": False})
    assert f"== tests_{name}: 1; the {name} path off" in out and f"== {name}: skipped" in out
    assert not any(f"/{name}.json" in c for c in calls)
    assert on not in next(c for c in calls if "bench_quick.json" in c)


@pytest.mark.parametrize("claims, flag, wrapped", [
    ("0", " --cuda-tagged-claims False", " --no-tagged-claims --"),
    ("1", " --cuda-tagged-claims True", " --tagged-claims --"),
    (None, None, None),
])  # fmt: skip
def test_the_tagged_claims_setting_reaches_every_stage_and_unset_is_the_librarys(
    tmp_path, claims, flag, wrapped
):
    """CUDA_TAGGED_CLAIMS (from pick, or by hand): 0 turns the library's default (on) off in the
    benchmarks and the wrapped commands, 1 turns it on; unset, no flag (the library's)."""
    env = {} if claims is None else {"CUDA_TAGGED_CLAIMS": claims}
    _, calls = run_checks(tmp_path, ["quick", "train"], extra_env=env)
    quick = next(c for c in calls if "bench_quick.json" in c)
    train = [c for c in calls if " train " in c]
    assert len(train) == 2
    if claims is None:
        assert "-tagged-claims" not in quick and not any("-tagged-claims" in c for c in train)
    else:
        assert flag in quick and all(wrapped in c for c in train)


def test_the_find_stage_is_an_ab_of_the_sample_in_one_run(tmp_path):
    """`find`: one bench_replay run with --cuda-find-ab (cuda's own sample call beside the sample
    in XLA around cuda's find, the sample and the step, jax too, 7 repeats by default)."""
    out, calls = run_checks(tmp_path, ["find"], extra_env={"FIND_BATCHES": "4096"})
    assert "== find: exit 0" in out
    (ab,) = [c for c in calls if "/find.json" in c]
    assert "--cuda-find-ab" in ab and "--backends cuda jax" in ab and "--ops sample step" in ab
    assert "--batches 4096 " in ab and "--repeats 7" in ab


def test_the_spread_stage_is_an_ab_in_one_run_and_a_failing_spread_case_turns_it_off(tmp_path):
    """`spread`: one bench_replay run with --cuda-spread-ab (three block sizes by default) and
    --cuda-find-ab; the spread sample's GPU tests run apart (tests_spread), and a failure there
    skips the stage and keeps the later stages off the spread path."""
    out, calls = run_checks(tmp_path, ["tests", "spread"])
    assert "== tests_spread: exit 0" in out
    main = next(c for c in calls if "/tests.xml" in c)
    assert "and not cuda_spread" in main
    assert "not slow and cuda_spread" in next(c for c in calls if "tests_spread.xml" in c)
    (ab,) = [c for c in calls if "/spread.json" in c]
    assert "--cuda-spread-ab 64 128 256 " in ab and "--cuda-find-ab" in ab
    assert "--ops sample step" in ab and "--batches 2048 4096 " in ab and "--repeats 7" in ab
    # with the spread sample in force, the A/B's base arm is still the own call, not spread
    on = tmp_path / "on"
    on.mkdir()
    env = {"CUDA_SPREAD_MIN_BATCH": "2048", "CUDA_SPREAD_THREADS": "64"}
    _, calls = run_checks(on, ["tests", "spread", "quick"], extra_env=env)
    (ab,) = [c for c in calls if "/spread.json" in c]
    assert f"--cuda-spread-min-batch {1 << 62} " in ab and "--cuda-spread-min-batch 2048" not in ab
    assert "--cuda-spread-min-batch 2048" in next(c for c in calls if "bench_quick.json" in c)
    again = tmp_path / "again"
    again.mkdir()
    env = {"CUDA_SPREAD_MIN_BATCH": "2048"}
    out, calls = run_checks(again, ["tests", "spread", "quick"], extra_env=env, spread_ok=False)
    assert "== tests_spread: 1; the spread path off" in out and "== spread: skipped" in out
    assert not any("/spread.json" in c for c in calls)
    assert "--cuda-spread-min-batch" not in next(c for c in calls if "bench_quick.json" in c)


def test_pick_reads_the_spread_rows_and_the_later_stages_spread_the_sample_where_it_won(
    tmp_path,
):
    """`pick` with only the spread stage's rows (written here as the stage would): where the
    spread sample in blocks of 64 wins from B 2048, the later stages run with it."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    base = {"op": "step", "mode": "fused", "capacity": 2**20, "branching": 16,
            "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
            "cuda_cluster_max_batch": 4096, "cuda_own_sample": True,
            "cuda_tagged_claims": 1}  # fmt: skip
    arms = {"drlhet-cuda": (1 << 62, 128, 120e6), "drlhet-cuda-spread64": (1, 64, 135e6)}
    rows = [
        base | {"impl": impl, "batch": b, "cuda_spread_min_batch": least,
                "cuda_spread_threads": threads, "items_per_s": rate}
        for b in (2048, 4096)
        for impl, (least, threads, rate) in arms.items()
    ]  # fmt: skip
    (out_dir / "spread.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick", "train"])
    assert "SPREAD_MIN_BATCH = 2048, SPREAD_THREADS = 64" in out
    env = (out_dir / "cuda_paths.env").read_text()
    assert "CUDA_SPREAD_MIN_BATCH=2048\nCUDA_SPREAD_THREADS=64\n" in env
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--cuda-spread-min-batch 2048 --cuda-spread-threads 64" in quick
    train = [c for c in calls if " train " in c]
    assert train and all(" --spread-min-batch 2048 --spread-threads 64" in c for c in train)


EVERY_PATH_SETTING = {
    "CUDA_CLUSTER_MAX_BATCH": "2048", "CUDA_NARROW_MAX_NODES": "512", "CUDA_SHARED_TOP": "0",
    "CUDA_KEY_TARGETS": "0", "CUDA_TAGGED_CLAIMS": "1", "CUDA_TAGGED_SIBLINGS": "1",
    "CUDA_OWN_SAMPLE_MAX_BATCH": "1024", "CUDA_SPREAD_MIN_BATCH": "2048",
    "CUDA_SPREAD_THREADS": "64",
}  # fmt: skip


def test_every_command_the_stages_run_with_every_setting_parses(tmp_path, monkeypatch):
    """With every CUDA_* setting given (as `pick` or a person would), each bench_replay.py and
    with_cuda_paths.py command line the stages build, and the drlhet or profile_gpu.py command
    each wraps, parses with the scripts' own options (the stand-in Python runs none of them): a
    flag the scripts spell otherwise would cost a GPU call its stage, as `--cuda-tagged-claims`
    without its value once would have."""
    import tyro

    from drlhet import cli

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    bench = importlib.import_module("bench_replay")
    wrapper = importlib.import_module("with_cuda_paths")
    stages = ["quick", "train", "bench", "profile", "tagged", "spread", "find", "top", "probe",
              "narrow", "cluster", "targets", "flags", "split", "eval"]  # fmt: skip
    _, calls = run_checks(tmp_path, stages, extra_env=EVERY_PATH_SETTING)
    benches = [c.split() for c in calls if c.startswith("experiments/bench_replay.py")]
    wrapped = [c.split() for c in calls if c.startswith("experiments/with_cuda_paths.py")]
    assert len(benches) >= 15 and len(wrapped) >= 5
    for argv in benches:
        tyro.cli(bench.Args, args=argv[1:])  # the stages that set a path themselves: parse only
    for argv in [b for b in benches if "bench_quick.json" in b[-1]]:
        args = tyro.cli(bench.Args, args=argv[1:])
        assert args.cuda_tagged_claims is True and args.cuda_tagged_siblings is True
        assert args.cuda_cluster_max_batch == 2048 and args.cuda_spread_threads == 64
    profile = importlib.import_module("profile_gpu")
    timing = importlib.import_module("bench_eval")
    ran = []
    for name in ("train_command", "backends_command", "profile_command", "dse_command"):
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, functools.wraps(real)(lambda *a, **k: ran.append(k)))
    for argv in wrapped:
        split = argv.index("--")
        args = tyro.cli(wrapper.Args, args=argv[1:split])
        assert args.tagged_claims and args.tagged_siblings and args.no_shared_top
        assert (args.cluster_max_batch, args.spread_min_batch) == (2048, 2048)
        command = argv[split + 1 :]
        if command[:2] == ["-m", "drlhet"]:
            cli.main(command[2:])  # parsed by drlhet's own CLI; the command itself stubbed
        elif command[0] == "experiments/bench_eval.py":
            evaluated = tyro.cli(timing.Args, args=command[1:])
            assert evaluated.envs == ("CartPole-v1",) and evaluated.episodes == (10, 1000)
        else:
            assert command[0] == "experiments/profile_gpu.py", command
            tyro.cli(profile.Args, args=command[1:])
    assert len(ran) == len(wrapped) - 2  # every drlhet command (train, split) parsed and "run"


def test_the_own_sample_limit_reaches_the_benchmarks_and_the_wrapped_commands(tmp_path):
    """CUDA_OWN_SAMPLE_MAX_BATCH (set by hand after `find`): bench_replay's flag in quick, the
    wrapper's in train."""
    env = {"CUDA_OWN_SAMPLE_MAX_BATCH": "1024"}
    out, calls = run_checks(tmp_path, ["quick", "train"], extra_env=env)
    assert "--cuda-own-sample-max-batch 1024" in next(c for c in calls if "bench_quick.json" in c)
    train = [c for c in calls if " train " in c]
    assert train and all(" --own-sample-max-batch 1024 --" in c for c in train)


def test_pick_reads_the_tagged_stages_rows_and_the_later_stages_run_with_its_choice(tmp_path):
    """`pick` with only the tagged stage's rows (written here as the stage would): where its
    claims win, the later stages run with them."""
    arm, switch = "tagged", "tagged_claims"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rows = [
        {"impl": impl, "op": "step", "mode": "fused", "capacity": 2**20, "batch": b,
         "branching": 16, "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
         "cuda_cluster_max_batch": 4096, f"cuda_{switch}": int(impl.endswith(arm)),
         "items_per_s": 130e6 if impl.endswith(arm) else 120e6}
        for b in (2048, 4096)
        for impl in ("drlhet-cuda", f"drlhet-cuda-{arm}")
    ]  # fmt: skip
    (out_dir / f"{arm}.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick"])
    assert f"{switch.upper()} = True" in out
    assert f"CUDA_{switch.upper()}=1" in (out_dir / "cuda_paths.env").read_text()
    flag = f"--cuda-{switch.replace('_', '-')}"
    assert flag in next(c for c in calls if "bench_quick.json" in c)


def test_pick_reads_the_find_rows_and_the_later_stages_sample_around_find_where_it_won(
    tmp_path,
):
    """`pick` with only the find stage's rows (written here as the stage would): where the
    sample around find wins from B 2048, the later stages run with OWN_SAMPLE_MAX_BATCH 2047."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rows = [
        {"impl": impl, "op": "step", "mode": "fused", "capacity": 2**20, "batch": b,
         "branching": 16, "cuda_block_max_batch": 1024, "cuda_narrow_max_nodes": 1024,
         "cuda_cluster_max_batch": 4096, "cuda_own_sample": impl == "drlhet-cuda",
         "cuda_tagged_claims": 1, "items_per_s": 130e6 if impl.endswith("find") else 120e6}
        for b in (2048, 4096)
        for impl in ("drlhet-cuda", "drlhet-cuda-find")
    ]  # fmt: skip
    (out_dir / "find.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["pick", "quick"])
    assert "OWN_SAMPLE_MAX_BATCH = 2047" in out
    assert "CUDA_OWN_SAMPLE_MAX_BATCH=2047" in (out_dir / "cuda_paths.env").read_text()
    assert "--cuda-own-sample-max-batch 2047" in next(c for c in calls if "bench_quick.json" in c)


def test_the_top_stage_times_the_copy_both_ways_and_pick_turns_it_off_where_it_loses(tmp_path):
    """`top`: the sample and step with the top levels copied and not; `pick` reads its rows
    (written here as the stage would) and the later stages run without the copy."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name, top, rate in (("top_on", True, 90e6), ("top_off", False, 120e6)):
        rows = [{"impl": "drlhet-cuda", "op": "step", "mode": "fused", "capacity": 2**20,
                 "batch": 4096, "branching": 16, "cuda_block_max_batch": 1024,
                 "cuda_narrow_max_nodes": 1024, "cuda_cluster_max_batch": 4096,
                 "cuda_shared_top": top, "cuda_tagged_claims": 1, "items_per_s": rate}]  # fmt: skip
        (out_dir / f"{name}.json").write_text(json.dumps(rows))
    out, calls = run_checks(tmp_path, ["top", "pick", "quick", "train"])
    top = [c for c in calls if c.startswith("experiments/bench_replay.py") and "/top_" in c]
    assert len(top) == 2 and "--ops sample step" in top[0]
    assert " --cuda-shared-top " in top[0] and top[0].endswith("top_on.json")
    assert " --no-cuda-shared-top " in top[1] and top[1].endswith("top_off.json")
    assert "SHARED_TOP = False" in out
    quick = next(c for c in calls if "bench_quick.json" in c)
    assert "--no-cuda-shared-top" in quick
    train = [c for c in calls if " train " in c]
    assert train and all("--no-shared-top" in c.split(" -- ")[0] for c in train)


def test_the_flags_stage_times_the_step_with_the_loop_in_the_graph_and_unrolled(tmp_path):
    _, calls = run_checks(tmp_path, ["flags"], extra_env={"XLA_FLAGS": "--xla_mine=1"})
    flags = (tmp_path / "calls.log.xla_flags").read_text().splitlines()
    runs = [(c, f) for c, f in zip(calls, flags, strict=True) if "bench_replay" in c]
    assert [c.split("--out ")[1].split("/")[-1] for c, _ in runs] == [
        "flags_default.json", "flags_while.json", "flags_unroll.json", "flags_carry.json",
        "flags_carry_while.json",
    ]  # fmt: skip
    (default, _), (_, while_flags), (unroll, unroll_flags), (carry, carry_flags) = runs[:4]
    assert "WHILE,CONDITIONAL" in while_flags and while_flags.startswith("--xla_mine=1")
    assert unroll_flags == "--xla_mine=1" == carry_flags  # put back after the while run
    assert "--unroll 8" in unroll and "--unroll" not in default
    assert "--loop carry" in carry and "--loop" not in default + unroll
    carry_while, carry_while_flags = runs[4]
    assert "--loop carry" in carry_while and "WHILE,CONDITIONAL" in carry_while_flags


def test_the_targets_stage_times_the_key_xlas_targets_and_the_sample_around_find(tmp_path):
    _, calls = run_checks(tmp_path, ["targets"])
    runs = [c for c in calls if c.startswith("experiments/bench_replay.py")]
    assert [c.split("--out ")[1].split("/")[-1] for c in runs] == [
        "targets_key.json", "targets_xla.json", "targets_find.json"
    ]  # fmt: skip
    assert "--no-cuda-own-sample" in runs[2] and "--no-cuda-key-targets" in runs[1]
