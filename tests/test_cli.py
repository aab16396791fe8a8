"""The command line and the run directory it writes; the training program has no tree copies."""

from __future__ import annotations

import json

import jax

from drlhet.agents.dqn import DQNConfig
from drlhet.cli import main
from drlhet.train import TrainConfig, make_trainer


def test_train_command_writes_a_run_directory(tmp_path, capsys):
    main(
        [
            "train",
            "--env",
            "probe-constant",
            "--steps",
            "600",
            "--warmup",
            "100",
            "--batch-size",
            "16",
            "--buffer-size",
            "500",
            "--eval-every",
            "200",
            "--eval-envs",
            "2",
            "--dqn.hidden",
            "8",
            "--out",
            str(tmp_path),
            "--name",
            "run",
            "--no-progress",
        ]
    )
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["env"] == "probe-constant" and config["dqn"]["hidden"] == [8]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # warmup 100 + (n_step - 1) x 4 envs to fill the 3-step FIFO + 3 chunks of 200
    assert len(rows) == 3 and rows[-1]["env_steps"] == 100 + 2 * 4 + 3 * 200
    assert (run / "curve.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "trained samples/s" in out and "final evaluation return" in out


def test_compiled_training_iterations_do_not_copy_the_tree():
    cfg = TrainConfig(
        env="CartPole-v1",
        num_envs=4,
        batch_size=64,
        buffer_size=2**15,
        warmup=256,
        eval_every=64,
        dqn=DQNConfig(hidden=(16,)),
    )
    tr = make_trainer(cfg)
    state = jax.jit(tr.warmup)(jax.jit(tr.init)(jax.random.key(0)))
    text = jax.jit(tr.iterate, donate_argnums=0).lower(state).compile().as_text()
    size = state.replay.tree.nodes.shape[0]
    assert not [line for line in text.splitlines() if " copy(" in line and f"[{size}]" in line]
