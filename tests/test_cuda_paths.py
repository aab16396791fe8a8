"""experiments/pick_cuda_paths.py: the CUDA path thresholds picked from measured rows (the rows
are written out here; on a GPU they come from gpu_checks.sh's `cluster` and `narrow` stages).
Rows files it refuses: test_cuda_paths_refusals.py; a command run with the thresholds
(with_cuda_paths.py): test_with_cuda_paths.py."""

import functools

import pytest
from cuda_paths_rows import experiments as experiments  # a fixture
from cuda_paths_rows import row, write

# the current values these tests pick against (the library's are read where none is given)
CURRENT = {"block_max_batch": 1024, "cluster_max_batch": 0, "narrow_max_nodes": 4096,
           "shared_top": True, "tagged_claims": False, "tagged_siblings": False,
           "own_sample_max_batch": 1 << 62, "spread_min_batch": 1 << 62,
           "spread_threads": 128, "cluster_blocks": 8, "sorted_runs": False}  # fmt: skip


def pick(experiments, tmp_path, files, **kw):
    picker = experiments[0]
    args = picker.Args(
        rows=tuple(files), out=tmp_path / "p.json", env_out=tmp_path / "p.env", **(CURRENT | kw)
    )
    return picker.main(args), (tmp_path / "p.env").read_text()


def cluster_rows(tmp_path, on: dict, off: dict):
    """The `cluster` stage's two files: per level (0) and one cluster per tree (65536)."""
    per_level = [row(b, r) for b, r in off.items()] + [row(b, 1.0, impl="drlhet-jax") for b in off]
    clustered = [row(b, r, cluster=65536) for b, r in on.items()]
    return write(tmp_path, "cluster_0.json", per_level), write(tmp_path, "c.json", clustered)


def test_the_cluster_threshold_is_the_last_batch_of_an_unbroken_run_of_wins(experiments, tmp_path):
    off = {256: 8e6, 1024: 20e6, 4096: 70e6, 16384: 280e6, 65536: 1000e6}
    on = {256: 1e6, 1024: 1e6, 4096: 130e6, 16384: 300e6, 65536: 900e6}  # 256, 1024: one block
    result, env = pick(experiments, tmp_path, cluster_rows(tmp_path, on, off))
    assert result["cluster_max_batch"] == 16384
    assert [e["batch"] for e in result["cluster_evidence"]] == [4096, 16384, 65536]
    assert [e["wins"] for e in result["cluster_evidence"]] == [True, True, False]
    assert "CUDA_CLUSTER_MAX_BATCH=16384\n" in env and "CUDA_NARROW_MAX_NODES=4096\n" in env
    # a win after a loss does not count; a gain within the margin is no win
    on |= {4096: 71e6, 65536: 2000e6}
    result, env = pick(experiments, tmp_path, cluster_rows(tmp_path, on, off))
    assert result["cluster_max_batch"] == 0 and "CUDA_CLUSTER_MAX_BATCH=0\n" in env


def test_the_narrow_limit_is_picked_over_the_batches_the_per_level_path_keeps(
    experiments, tmp_path
):
    off = {4096: 70e6, 16384: 280e6, 65536: 1000e6}
    on = {4096: 130e6, 16384: 300e6, 65536: 100e6}  # not a per-level step: never averaged in
    files = list(cluster_rows(tmp_path, on, off))
    narrow = {4096: {4096: 70e6, 16384: 280e6, 65536: 1000e6},
              1024: {4096: 10e6, 16384: 10e6, 65536: 1200e6},  # best where it matters: 65536
              0: {4096: 90e6, 16384: 400e6, 65536: 1010e6}}  # fmt: skip
    for n, rates in narrow.items():
        rows = [row(b, r, block=1024, narrow=n) for b, r in rates.items()]
        files.append(write(tmp_path, f"narrow_{n}.json", rows))
    result, env = pick(experiments, tmp_path, files)
    assert result["cluster_max_batch"] == 16384 and result["narrow_max_nodes"] == 1024
    assert "CUDA_NARROW_MAX_NODES=1024\n" in env
    assert {e["narrow_max_nodes"] for e in result["narrow_evidence"]} == {4096, 1024, 0}
    # the current value kept when no other beats it by the margin
    result, _ = pick(experiments, tmp_path, files, margin=1.25)
    assert result["narrow_max_nodes"] == 4096 and "no value beats 4096" in result["narrow_why"]


def test_rows_that_cannot_decide_keep_the_current_values(experiments, tmp_path):
    only_off = write(tmp_path, "o.json", [row(4096, 70e6), row(256, 8e6, cluster=65536)])
    result, env = pick(experiments, tmp_path, [only_off], cluster_max_batch=8192)
    assert result["cluster_max_batch"] == 8192 and "measured both ways" in result["cluster_why"]
    assert result["narrow_max_nodes"] == 4096 and "CUDA_CLUSTER_MAX_BATCH=8192\n" in env


def test_the_top_copy_is_turned_off_only_where_its_absence_wins_by_the_margin(
    experiments, tmp_path
):
    """pick_top: each batch both ways under the same thresholds (`gpu_checks.sh top`); the rows
    without the copy never count for the other picks."""
    on = [row(b, r, cluster=4096, top=True) for b, r in ((1024, 30e6), (4096, 130e6))]
    off = [row(b, r, cluster=4096, top=False) for b, r in ((1024, 28e6), (4096, 120e6))]
    stale = [row(4096, 999e6, cluster=0, top=False)]  # another path, one way only: no evidence
    files = [write(tmp_path, "top_on.json", on), write(tmp_path, "top_off.json", off + stale)]
    result, env = pick(experiments, tmp_path, files)
    assert result["shared_top"] is True and "CUDA_SHARED_TOP=1\n" in env
    assert [e["batch"] for e in result["shared_top_evidence"]] == [1024, 4096]
    assert result["shared_top_evidence"][1]["ratio"] == pytest.approx(130 / 120)
    # without the copy's rows winning, 999M at B 4096 per level never reaches the cluster pick
    assert all(e["per_level_items_per_s"] < 999e6 for e in result["cluster_evidence"])
    # the copy off where it loses by more than the margin; kept within it
    result, env = pick(experiments, tmp_path, files, shared_top=False)
    assert result["shared_top"] is True and "CUDA_SHARED_TOP=1\n" in env
    slower = [dict(r, items_per_s=r["items_per_s"] * 0.8) for r in on]
    files[0] = write(tmp_path, "top_on.json", slower)
    result, env = pick(experiments, tmp_path, files)
    assert result["shared_top"] is False and "CUDA_SHARED_TOP=0\n" in env
    result, _ = pick(experiments, tmp_path, files, margin=1.5)
    assert result["shared_top"] is True and "does not win" in result["shared_top_why"]


def ab_rows(tmp_path, impl, base, arm, gain):
    """An A/B stage's one run at B 2048 and 4096 (the cluster path on, as gpu_checks.sh's
    `tagged` and `wide` write it): drlhet-cuda's rows with the switch columns ``base``, the arm
    ``impl``'s with ``arm`` at ``gain`` times its items/s; the file is named after the arm."""
    rows = []
    for b, r in ((2048, 70e6), (4096, 120e6)):
        rows.append(row(b, r, cluster=4096) | base)
        rows.append(row(b, r * gain, cluster=4096, impl=impl) | arm)
    return write(tmp_path, impl.removeprefix("drlhet-cuda-") + ".json", rows)


def switch_ab(tmp_path, impl, switch, base, arm):
    """``gain -> file``: `ab_rows` of the arm ``impl`` with the column ``switch`` at ``base``
    in drlhet-cuda's rows and ``arm`` in its own."""
    return functools.partial(ab_rows, tmp_path, impl, {switch: base}, {switch: arm})


def test_the_tagged_claims_are_turned_on_only_where_they_win_by_the_margin(experiments, tmp_path):
    """pick_tagged: the `tagged` stage's one run (drlhet-cuda-tagged beside drlhet-cuda); its
    tagged rows never count for the other picks, its workspace rows do."""
    ab_file = switch_ab(tmp_path, "drlhet-cuda-tagged", "cuda_tagged_claims", 0, 1)

    files = [ab_file(1.10), *cluster_rows(tmp_path, {4096: 1e6}, {4096: 2e6})]
    result, env = pick(experiments, tmp_path, files)
    assert result["tagged_claims"] is True and "CUDA_TAGGED_CLAIMS=1\n" in env
    assert [e["batch"] for e in result["tagged_claims_evidence"]] == [2048, 4096]
    assert result["tagged_claims_evidence"][0]["ratio"] == pytest.approx(1.10)
    # the tagged rows (132M at B 4096) are not the cluster path's: its mean there is the
    # cluster file's 1M and the run's workspace row
    (at_4096,) = [e for e in result["cluster_evidence"] if e["batch"] == 4096]
    assert at_4096["cluster_items_per_s"] == pytest.approx((1e6 + 120e6) / 2)
    files[0] = ab_file(1.02)
    result, env = pick(experiments, tmp_path, files)
    assert result["tagged_claims"] is False and "CUDA_TAGGED_CLAIMS=0\n" in env
    assert "does not win" in result["tagged_claims_why"]


def test_clusters_of_16_blocks_are_picked_only_where_they_win_by_the_margin(experiments, tmp_path):
    """pick_wide: the `wide` stage's one run (drlhet-cuda-wide beside drlhet-cuda in clusters
    of 8); its 16-block rows never count for the other picks, its 8-block rows do."""
    ab_file = switch_ab(tmp_path, "drlhet-cuda-wide", "cuda_cluster_blocks", 8, 16)

    files = [ab_file(1.10), *cluster_rows(tmp_path, {4096: 1e6}, {4096: 2e6})]
    result, env = pick(experiments, tmp_path, files)
    assert result["cluster_blocks"] == 16 and "CUDA_CLUSTER_BLOCKS=16\n" in env
    assert [e["batch"] for e in result["wide_evidence"]] == [2048, 4096]
    assert result["wide_evidence"][1]["ratio"] == pytest.approx(1.10)
    (at_4096,) = [e for e in result["cluster_evidence"] if e["batch"] == 4096]
    assert at_4096["cluster_items_per_s"] == pytest.approx((1e6 + 120e6) / 2)
    files[0] = ab_file(1.02)
    result, env = pick(experiments, tmp_path, files)
    assert result["cluster_blocks"] == 8 and "CUDA_CLUSTER_BLOCKS=8\n" in env
    assert "does not win" in result["wide_why"]
    # from 16, back to 8 only where 8 wins by the margin
    result, env = pick(experiments, tmp_path, [ab_file(0.9)], cluster_blocks=16)
    assert result["cluster_blocks"] == 8 and "CUDA_CLUSTER_BLOCKS=8\n" in env
    result, env = pick(experiments, tmp_path, [ab_file(0.99)], cluster_blocks=16)
    assert result["cluster_blocks"] == 16


def test_the_sorted_runs_are_turned_on_only_where_they_win_by_the_margin(experiments, tmp_path):
    """pick_sorted: the `sorted` stage's one run (drlhet-cuda-sorted beside drlhet-cuda by its
    claims); its sorted rows never count for the other picks."""
    ab_file = switch_ab(tmp_path, "drlhet-cuda-sorted", "cuda_sorted_runs", 0, 1)

    files = [ab_file(1.10), *cluster_rows(tmp_path, {4096: 1e6}, {4096: 2e6})]
    result, env = pick(experiments, tmp_path, files)
    assert result["sorted_runs"] is True and "CUDA_SORTED_RUNS=1\n" in env
    assert [e["ratio"] for e in result["sorted_evidence"]] == pytest.approx([1.10, 1.10])
    (at_4096,) = [e for e in result["cluster_evidence"] if e["batch"] == 4096]
    assert at_4096["cluster_items_per_s"] == pytest.approx((1e6 + 120e6) / 2)
    result, env = pick(experiments, tmp_path, [ab_file(1.02), *files[1:]])
    assert result["sorted_runs"] is False and "CUDA_SORTED_RUNS=0\n" in env
    assert "does not win" in result["sorted_why"]


@pytest.mark.parametrize(
    "tagged_rate, siblings_rate, want",
    [(101e6, 112e6, (True, True)), (104e6, 102e6, (False, True)), (90e6, 101e6, (True, False))],
    ids=["both win", "the table without its parents", "the parents, not the table"],
)
def test_the_tagged_stage_picks_the_parents_from_the_table_then_the_table(
    experiments, tmp_path, tagged_rate, siblings_rate, want
):
    """pick_siblings, then pick_tagged: the `tagged` stage's one run (drlhet-cuda-tagged and
    drlhet-cuda-siblings beside drlhet-cuda at 100M items/s): `TAGGED_SIBLINGS` from the two
    tagged arms, then `TAGGED_CLAIMS` from the arm so picked against the workspace; both by the
    margin, both in the env file."""
    rows = []
    for b in (2048, 4096):
        rows.append(row(b, 100e6, cluster=4096))
        for impl, rate, siblings in (("tagged", tagged_rate, 0), ("siblings", siblings_rate, 1)):
            rows.append(
                row(b, rate, cluster=4096, impl=f"drlhet-cuda-{impl}")
                | {"cuda_tagged_claims": 1, "cuda_tagged_siblings": siblings}
            )  # fmt: skip
    files = [write(tmp_path, "tagged.json", rows), *cluster_rows(tmp_path, {4096: 1e6}, {})]
    result, env = pick(experiments, tmp_path, files)
    siblings, tagged = want
    assert (result["tagged_siblings"], result["tagged_claims"]) == want
    assert f"CUDA_TAGGED_SIBLINGS={int(siblings)}\n" in env
    assert f"CUDA_TAGGED_CLAIMS={int(tagged)}\n" in env
    ratio = siblings_rate / tagged_rate
    assert result["tagged_siblings_evidence"][0]["ratio"] == pytest.approx(ratio)
    chosen = siblings_rate if siblings else tagged_rate
    assert result["tagged_claims_evidence"][0]["ratio"] == pytest.approx(chosen / 100e6)


def test_rows_of_the_removed_update_paths_decide_nothing(experiments, tmp_path):
    """Rows that older runs wrote with the region path (a batch above the one-block limit, at
    most ``cuda_region_max_batch``) or the claims in the cluster's shared memory
    (``cuda_shared_claims``; both paths removed from the library) are skipped; a region row's
    batch that the one-block path took still counts, as rows from before either path do."""
    per_level = [row(4096, 100e6, block=1024, cluster=0, region=0)]
    cluster = [row(4096, 120e6, block=1024, cluster=4096, region=0)]
    removed = [
        row(4096, 150e6, block=512, cluster=4096, region=4096),
        row(4096, 160e6, cluster=4096, impl="drlhet-cuda-claims") | {"cuda_shared_claims": 1},
        row(4096, 170e6, cluster=4096) | {"cuda_shared_claims": 1},
    ]  # fmt: skip
    in_block = [row(1024, 9e6, block=1024, cluster=4096, region=4096)]
    files = [write(tmp_path, "old.json", per_level + cluster + removed + in_block)]
    result, env = pick(experiments, tmp_path, files)
    assert [e["cluster_items_per_s"] for e in result["cluster_evidence"]] == [120e6]
    assert "REGION" not in env and "SHARED_CLAIMS" not in env
    picker = experiments[0]
    steps = picker.read_steps(tuple(files), 2**20, 16)
    assert sorted(s.rate for s in steps) == [9e6, 100e6, 120e6]


def test_the_current_values_default_to_the_librarys(experiments, tmp_path):
    from drlhet.backends import cuda

    picker = experiments[0]
    args = picker.library_defaults(picker.Args(rows=(), narrow_max_nodes=7))
    assert (args.block_max_batch, args.cluster_max_batch, args.narrow_max_nodes,
            args.shared_top, args.tagged_claims) == (cuda.BLOCK_MAX_BATCH,
            cuda.CLUSTER_MAX_BATCH, 7, cuda.SHARED_TOP, cuda.TAGGED_CLAIMS)  # fmt: skip


def find_rows(tmp_path, own: dict, find: dict):
    """The `find` stage's file: cuda's own sample call and the sample around find, per batch
    (the cluster path on), jax beside them."""
    rows = [row(b, r, cluster=4096) | {"cuda_own_sample": True} for b, r in own.items()]
    rows += [row(b, r, cluster=4096, impl="drlhet-cuda-find") | {"cuda_own_sample": False}
             for b, r in find.items()]  # fmt: skip
    rows += [row(b, 1.0, impl="drlhet-jax") for b in own]
    return write(tmp_path, "find.json", rows)


@pytest.mark.parametrize(
    "find, limit, why",
    [
        ({2048: 75e6, 4096: 130e6}, 2047, "wins by >= 1.03x from B 2048"),
        ({2048: 70e6, 4096: 130e6}, 4095, "wins by >= 1.03x from B 4096"),  # a tie at 2048
        ({2048: 80e6, 4096: 120e6}, 1 << 62, "does not win by >= 1.03x at the largest batch"),
    ],
)
def test_the_own_sample_limit_stops_below_where_the_sample_around_find_wins(
    experiments, tmp_path, find, limit, why
):
    files = [find_rows(tmp_path, {2048: 70e6, 4096: 120e6}, find)]
    result, env = pick(experiments, tmp_path, files)
    assert result["own_sample_max_batch"] == limit and why in result["own_sample_why"]
    assert f"CUDA_OWN_SAMPLE_MAX_BATCH={limit}\n" in env
    assert [e["batch"] for e in result["own_sample_evidence"]] == [2048, 4096]
    # the other picks see cuda's own sample only: no find row reaches them
    assert result["cluster_max_batch"] == CURRENT["cluster_max_batch"]


def spread_rows(tmp_path, own: dict, arms: dict, find: dict | None = None):
    """The `spread` stage's file: cuda's own sample call, each spread arm (threads: rates by
    batch) and, where given, the sample around find, per batch (the cluster path on)."""
    never = {"cuda_own_sample": True, "cuda_spread_min_batch": 1 << 62, "cuda_spread_threads": 128}
    rows = [row(b, r, cluster=4096) | never for b, r in own.items()]
    for threads, rates in arms.items():
        rows += [row(b, r, cluster=4096, impl=f"drlhet-cuda-spread{threads}") | never
                 | {"cuda_spread_min_batch": 1, "cuda_spread_threads": threads}
                 for b, r in rates.items()]  # fmt: skip
    rows += [row(b, r, cluster=4096, impl="drlhet-cuda-find") | never | {"cuda_own_sample": False}
             for b, r in (find or {}).items()]  # fmt: skip
    return write(tmp_path, "spread.json", rows)


@pytest.mark.parametrize(
    "arms, least, threads, why",
    [
        ({64: {2048: 80e6, 4096: 150e6}, 128: {2048: 75e6, 4096: 140e6}}, 2048, 64, "from B 2048"),
        ({128: {2048: 70e6, 4096: 140e6}}, 4096, 128, "blocks of 128 wins by >= 1.03x from B 4096"),
        ({256: {2048: 80e6, 4096: 121e6}}, 1 << 62, 128, "does not win by >= 1.03x at the largest"),
    ],
)
def test_the_spread_sample_is_picked_from_the_batch_where_its_best_threads_win(
    experiments, tmp_path, arms, least, threads, why
):
    files = [spread_rows(tmp_path, {2048: 70e6, 4096: 120e6}, arms)]
    result, env = pick(experiments, tmp_path, files)
    assert (result["spread_min_batch"], result["spread_threads"]) == (least, threads)
    assert why in result["spread_why"]
    assert f"CUDA_SPREAD_MIN_BATCH={least}\nCUDA_SPREAD_THREADS={threads}\n" in env
    assert {e["threads"] for e in result["spread_evidence"]} == set(arms)
    # the other picks see cuda's own sample call without the spread only
    assert result["cluster_max_batch"] == CURRENT["cluster_max_batch"]


def test_the_sample_around_find_is_weighed_against_the_own_call_as_picked(experiments, tmp_path):
    # find beats the cluster sample at 4096 (1.08x), but not the spread one picked there
    arms = {128: {2048: 70e6, 4096: 140e6}}
    files = [spread_rows(tmp_path, {2048: 70e6, 4096: 120e6}, arms, {2048: 60e6, 4096: 130e6})]
    result, env = pick(experiments, tmp_path, files)
    assert result["spread_min_batch"] == 4096
    assert result["own_sample_max_batch"] == 1 << 62
    assert [e["own_items_per_s"] for e in result["own_sample_evidence"]] == [70e6, 140e6]
    files = [spread_rows(tmp_path, {2048: 70e6, 4096: 120e6}, {}, {2048: 60e6, 4096: 130e6})]
    assert pick(experiments, tmp_path, files)[0]["own_sample_max_batch"] == 4095
