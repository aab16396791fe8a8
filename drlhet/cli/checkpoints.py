"""``drlhet train``'s checkpoints: where they go, what they record, how ``--resume`` reads them.

A run directory holds ``checkpoints/<chunk>/`` (`drlhet.checkpoint.Checkpoints`) beside its
``config.json`` and ``metrics.jsonl``. ``--resume DIR`` takes the configuration and the mapping
from the newest checkpoint that reads back intact (a newer one that does not is named on
stderr and skipped), rewrites ``metrics.jsonl`` with the rows up to that checkpoint, and goes
on from there; the mapping may be changed (``--mapping``): the state is placed anew.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from drlhet.checkpoint import Checkpoints, Saved, config_from_dict
from drlhet.runtime.config import TrainConfig
from drlhet.runtime.run import initial_example
from drlhet.runtime.saving import Saving

__all__ = ["CHECKPOINTS", "saving_for", "peek_run", "resume_run", "refuse_flags_with_resume"]

CHECKPOINTS = "checkpoints"
"""The sub-folder of a run directory that holds its checkpoints."""


def saving_for(
    run_dir: Path, config: TrainConfig, mapping: str, every: int, keep: int, before: list[dict]
) -> Saving | None:
    """Checkpoints of a run into ``run_dir/checkpoints`` every ``every`` chunks (0: none),
    ``keep`` deep (0 only with ``every`` 0, where it says what ``every`` says); ``before``: the
    rows of a resumed run's earlier chunks."""
    if every < 0:
        raise ValueError(f"--checkpoint-every must be >= 0 chunks, got {every}")
    if keep < 0 or (keep == 0 and every > 0):
        raise ValueError(
            f"--keep-checkpoints must be >= 1 (0 only with --checkpoint-every 0), got {keep}"
        )
    if every == 0:
        return None
    store = Checkpoints(run_dir / CHECKPOINTS, keep)
    meta = {"config": dataclasses.asdict(config), "mapping": mapping}

    def write(chunk: int, states, rows: list[dict]) -> None:
        store.save(chunk, states, before + rows, meta)

    return Saving(every, write)


def resume_run(run_dir: Path) -> tuple[TrainConfig, str, Saved]:
    """``(config, mapping text, checkpoint)`` of the newest good checkpoint in ``run_dir``.

    Raises:
      ValueError: not a run directory with a usable checkpoint (one line naming it).
    """
    store = Checkpoints(run_dir / CHECKPOINTS)
    if not store.chunks():
        raise ValueError(f"--resume {run_dir}: no checkpoint in {store.folder}")
    saved = store.restore(lambda meta: initial_example(config_from_dict(meta["config"])))
    for path, why in saved.skipped:
        print(f"drlhet: warning: checkpoint {path} skipped: {why}", file=sys.stderr)
    config = config_from_dict(saved.meta["config"])
    return config, saved.meta["mapping"], saved


def peek_run(run_dir: Path) -> tuple[TrainConfig, str]:
    """``(config, mapping text)`` of the newest checkpoint in ``run_dir`` whose metadata reads
    back, without starting JAX (the mapping says how many CPU devices to create first).

    Raises:
      ValueError: no checkpoint with readable metadata (one line naming the folder).
    """
    store = Checkpoints(run_dir / CHECKPOINTS)
    for chunk in reversed(store.chunks()):
        try:
            meta = json.loads((store.folder / str(chunk) / "meta" / "metadata").read_text())
            return config_from_dict(meta["config"]), meta["mapping"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    raise ValueError(f"--resume {run_dir}: no checkpoint in {store.folder}")


def refuse_flags_with_resume(config: TrainConfig) -> None:
    """``--resume`` takes the configuration from the checkpoint: other settings are refused."""
    changed = [
        f.name
        for f in dataclasses.fields(TrainConfig)
        if getattr(config, f.name) != getattr(TrainConfig(), f.name)
    ]
    if changed:
        flags = ", ".join("--" + n.replace("_", "-") for n in changed)
        raise ValueError(f"--resume takes the configuration from the checkpoint; drop {flags}")
