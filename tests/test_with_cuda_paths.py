"""experiments/with_cuda_paths.py: a command run with the CUDA path thresholds set, the library
keeping its own; bad input refused in one line."""

import subprocess
import sys

import pytest
from cuda_paths_rows import REPO
from cuda_paths_rows import experiments as experiments  # a fixture


def test_a_command_runs_with_the_thresholds_set_and_the_library_keeps_its_own(tmp_path):
    from drlhet.backends import cuda

    before = (cuda.BLOCK_MAX_BATCH, cuda.CLUSTER_MAX_BATCH, cuda.NARROW_MAX_NODES, cuda.KEY_TARGETS,
              cuda.SHARED_TOP, cuda.TAGGED_CLAIMS)  # fmt: skip
    script = tmp_path / "show.py"
    script.write_text(
        "import sys\nfrom drlhet.backends import cuda\n"
        "print(cuda.CLUSTER_MAX_BATCH, cuda.NARROW_MAX_NODES, cuda.BLOCK_MAX_BATCH,"
        " cuda.KEY_TARGETS, cuda.SHARED_TOP, cuda.TAGGED_CLAIMS, cuda.OWN_SAMPLE_MAX_BATCH,"
        " sys.argv[1:])\n"
    )
    wrapper = [sys.executable, str(REPO / "experiments" / "with_cuda_paths.py")]
    out = subprocess.run(
        [*wrapper, "--cluster-max-batch", "16384", "--narrow-max-nodes", "0", "--no-key-targets",
         "--no-shared-top", "--no-tagged-claims", "--own-sample-max-batch", "1024",
         "--spread-min-batch", "2048", "--spread-threads", "64", "--", script, "x"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[-1] == f"16384 0 {before[0]} False False False 1024 ['x']"
    assert "OWN_SAMPLE_MAX_BATCH 1024" in out.splitlines()[0]
    assert "SPREAD_MIN_BATCH 2048" in out.splitlines()[0]
    assert "SPREAD_THREADS 64" in out.splitlines()[0]
    assert "TAGGED_CLAIMS 0" in out.splitlines()[0]  # the library's default is on
    assert "KEY_TARGETS 0" in out.splitlines()[0] and "SHARED_TOP 0" in out.splitlines()[0]
    assert "CLUSTER_MAX_BATCH 16384" in out.splitlines()[0]
    module = subprocess.run(
        [*wrapper, "--cluster-max-batch", "8", "--", "-m", "drlhet", "backends", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "CLUSTER_MAX_BATCH 8" in module and "KEY_TARGETS 1" in module
    assert "SHARED_TOP 1" in module and "TAGGED_CLAIMS 1" in module
    assert "usage" in module.lower()
    assert (cuda.BLOCK_MAX_BATCH, cuda.CLUSTER_MAX_BATCH, cuda.NARROW_MAX_NODES,
            cuda.KEY_TARGETS, cuda.SHARED_TOP, cuda.TAGGED_CLAIMS) == before  # fmt: skip


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cluster-max-batch", "8"], "give the command after `--` (-m MODULE ... or SCRIPT ...)"),
        (["--cluster-max-batch", "-1", "--", "x.py"], "--cluster-max-batch must be >= 0, got -1"),
        (["--", "-m"], "-m needs a module name"),
        (
            ["--spread-threads", "48", "--", "x.py"],
            "--spread-threads must be whole warps, 32 to 1024, got 48",
        ),
        (
            ["--tagged-claims", "--no-tagged-claims", "--", "x.py"],
            "give --tagged-claims or --no-tagged-claims, not both",
        ),
    ],
)
def test_the_wrapper_refuses_bad_input_with_one_line(experiments, argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        experiments[1].main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"with_cuda_paths: error: {message}"]
