"""Where a Ray run ends: at the first whole actor call past its chunks, refused where that is
past ``--steps``; after its chunk on SIGTERM, its folder kept; each row's report as it was
then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="missing library: ray")

# Ray starts its processes with fork + exec (subprocess) after JAX has started threads: Python
# warns about fork, harmless before an exec
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

from ray_cli import refused  # noqa: E402

from drlhet.runtime.config import TrainConfig  # noqa: E402
from drlhet.runtime.ray_cluster import check_run, end_steps  # noqa: E402
from drlhet.runtime.ray_learner import RayConfig  # noqa: E402


def ray_run(steps: int, warmup: int, eval_every: int) -> TrainConfig:
    return TrainConfig(steps=steps, warmup=warmup, eval_every=eval_every, num_envs=4)


@pytest.mark.parametrize(
    "cfg,end",
    [
        (ray_run(1792, 256, 512), 1792),  # whole calls: exactly the chunks
        (ray_run(60000, 128, 192), 59904),  # chunks end within calls: the last call's end
        (ray_run(60000, 1000, 5000), 56064),
    ],
)
def test_a_ray_run_ends_at_the_first_whole_call_past_its_chunks(cfg, end):
    rc = RayConfig(actors=1, rollout=32)
    assert end_steps(cfg, rc) == end <= cfg.steps
    check_run(cfg, rc)


def test_a_ray_run_that_would_end_past_its_steps_is_refused():
    """The learner takes whole actor calls: the run ended at the first call's end at or past
    its last chunk's, up to a call past ``--steps``."""
    cfg = ray_run(356, 100, 128)  # 2 chunks end at 356; calls of 128 end at 384
    with pytest.raises(ValueError) as e:
        check_run(cfg, RayConfig(actors=1, rollout=32))
    assert str(e.value) == (
        "--steps 356: a Ray run moves in whole actor calls of 128 env steps (--rollout 32 x "
        "--num-envs 4) and would end at 384, past it; pass --steps 384 (the same chunks)"
    )
    check_run(ray_run(384, 100, 128), RayConfig(actors=1, rollout=32))
    with pytest.raises(ValueError, match="--eval-every 64 is below one Ray actor call"):
        check_run(ray_run(356, 100, 64), RayConfig(actors=1, rollout=32))


def test_cli_refuses_a_ray_run_past_its_steps(tmp_path):
    flags = ["--actors", "ray:1", "--steps", "356", "--warmup", "100", "--eval-every", "128",
             "--batch-size", "32", "--buffer-size", "1000", "--eval-envs", "2", "--dqn.hidden",
             "8", "--seeds", "1", "--no-progress"]  # fmt: skip
    line = refused(tmp_path, flags, timeout_s=300)
    assert line.startswith("drlhet: error: --steps 356: a Ray run moves in whole actor calls")


def test_a_report_in_a_row_is_the_report_then():
    """`RayReport.as_dict` gave its live lists: every row returned carried the final report."""
    from drlhet.runtime.ray_learner import RayReport

    report = RayReport(["a"], [256], [256], [0], [0], [0], [8])
    first = report.as_dict()
    report.reported[0], report.rejoins = 512, [{"actor": 0}]
    assert first["env_steps_reported"] == [256] and first["rejoins"] == []


def test_sigterm_ends_a_ray_run_after_its_chunk_and_keeps_its_folder(tmp_path):
    """Ray puts its own SIGTERM handler in place at ``ray.init``: it killed the run (status 15,
    a stack dump), and a SIGINT's ``KeyboardInterrupt`` removed the run's folder, rows and all.
    Ray now starts before the run's handlers: the run ends after its chunk, with 143. Its
    chunks of 192 env steps take whole actor calls of 128: each row's rate counts the steps the
    chunk ran (128 or 256; it counted 192 each time)."""
    run = tmp_path / "r"
    args = ["--actors", "ray:1", "--steps", "60000", "--warmup", "128", "--eval-every", "192",
            "--batch-size", "32", "--buffer-size", "1000", "--eval-envs", "2", "--dqn.hidden",
            "8", "--seeds", "1", "--no-progress", "--out", str(tmp_path),
            "--name", "r"]  # fmt: skip
    # a Ray of its own: this module's test cluster (two_nodes) may still run, and Ray joins
    # the newest on the machine (RAY_ADDRESS)
    env = {**os.environ, "RAY_ADDRESS": "local"}
    # in a process group of its own, which the SIGTERM goes to whole (as `timeout`, Slurm's
    # cancel or systemd send it): Ray's head was in it and died, and the run with it (exit 1,
    # its rows lost, after a minute of "Failed to connect to GCS")
    proc = subprocess.Popen([sys.executable, "-m", "drlhet", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 4:
            os.killpg(proc.pid, signal.SIGTERM)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped after chunk" in out and "SIGTERM: stopping after this chunk" in err
    # the plan names where the run ends: chunks end on whole calls (59,904, not 59,848 steps)
    assert "training 59,904 env steps per seed (--steps 60,000): 128 of warm-up" in out
    assert "each ending on a whole actor call of 128" in out
    # and so does the summary: its warm-up ends on a whole call (it said warmup_steps', 136)
    assert "of --steps 60,000 (128 of warm-up, then" in out
    rows = [json.loads(r) for r in metrics.read_text().splitlines()]
    assert len(rows) >= 4 and (run / "curve.png").is_file()
    ran = [b["env_steps"] - a["env_steps"] for a, b in zip(rows, rows[1:], strict=False)]
    assert set(ran) == {128, 256}, ran
    for r, n in zip(rows[1:], ran, strict=True):
        assert r["env_steps_per_s"] * r["chunk_s"] == pytest.approx(n)
