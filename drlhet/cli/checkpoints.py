"""``drlhet train``'s checkpoints: where they go, what they record, how ``--resume`` reads them.

A run directory holds ``checkpoints/<chunk>/`` (`drlhet.checkpoint.Checkpoints`) beside its
``config.json`` and ``metrics.jsonl``. ``--resume DIR`` takes the configuration and the mapping
from the newest checkpoint that reads back intact (a newer one that does not is named on
stderr and skipped; the resumed run's first checkpoint deletes those of later chunks:
`Checkpoints.save` keeps one history), rewrites ``metrics.jsonl`` with the rows up to that
checkpoint, and goes on from there; the mapping may be changed (``--mapping``): the state is
placed anew. The checkpoints also record how often they were taken and how many are kept, which
a resumed run keeps unless told otherwise; a run resumed after its last chunk only gets back
what its folder lacks of it (`finished_run`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from drlhet.checkpoint import Checkpoints, Saved, checkpoint_saving, config_from_dict
from drlhet.cli.report import report_run
from drlhet.runtime.config import TrainConfig, tree_shape
from drlhet.runtime.mapping import Mapping
from drlhet.runtime.run import initial_example
from drlhet.runtime.saving import Saving

__all__ = [
    "CHECKPOINTS",
    "saving_for",
    "peek_run",
    "resume_run",
    "refuse_flags_with_resume",
    "finished_run",
    "MetricsFile",
]

CHECKPOINTS = "checkpoints"
"""The sub-folder of a run directory that holds its checkpoints."""


def saving_for(
    run_dir: Path,
    config: TrainConfig,
    mapping: str,
    every: int,
    keep: int,
    before: list[dict],
    stop_at_return: float | None = None,
) -> Saving | None:
    """Checkpoints of a run into ``run_dir/checkpoints`` every ``every`` chunks (0: none),
    ``keep`` deep (0 only with ``every`` 0, where it says what ``every`` says); ``before``: the
    rows of a resumed run's earlier chunks; ``stop_at_return`` recorded (what ``--resume``
    goes on with unless given again; an infinite one as none)."""
    if every < 0:
        raise ValueError(f"--checkpoint-every must be >= 0 chunks, got {every}")
    if keep < 0 or (keep == 0 and every > 0):
        raise ValueError(
            f"--keep-checkpoints must be >= 1 (0 only with --checkpoint-every 0), got {keep}"
        )
    if every == 0:
        return None
    store = Checkpoints(run_dir / CHECKPOINTS, keep)
    # (with what --resume goes on with)
    return checkpoint_saving(
        store, config, mapping, every, before, checkpoint_every=every, keep_checkpoints=keep,
        stop_at_return=stop_at_return if stop_at_return != math.inf else None,
    )  # fmt: skip


def resume_run(
    run_dir: Path, chunk: int | None = None, option: str = "--resume"
) -> tuple[TrainConfig, str, Saved]:
    """``(config, mapping text, checkpoint)`` of the newest good checkpoint in ``run_dir`` (or
    the one of ``chunk``); errors start with ``option`` and the folder.

    Raises:
      ValueError: not a run directory with a usable checkpoint (one line naming it).
    """
    store = Checkpoints(run_dir / CHECKPOINTS)
    if not store.chunks():
        raise ValueError(f"{option} {run_dir}: no checkpoint in {store.folder}")
    if chunk is not None and chunk not in store.chunks():
        kept = ", ".join(map(str, store.chunks()))
        raise ValueError(f"{option} {run_dir}: no checkpoint of chunk {chunk} (chunks {kept})")
    saved = store.restore(_example, chunk)
    for path, why in saved.skipped:
        print(f"drlhet: warning: checkpoint {path} skipped: {why}", file=sys.stderr)
    config = config_from_dict(saved.meta["config"])
    return config, saved.meta["mapping"], saved


def _example(meta: dict):
    """The state's shapes of the run that ``meta`` describes, with the backends its mapping
    placed (a replay backend named only in the mapping, as ``replay=fpga@cpu:0``, holds another
    state than the configuration's default one)."""
    config = config_from_dict(meta["config"])
    placed = Mapping.parse(meta["mapping"], tree_shape(config))
    ran = dataclasses.replace(config, backend=placed.replay.backend, learner=placed.learner.backend)
    return initial_example(ran)


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
            if not isinstance(meta["mapping"], str):  # parsed later: it must be text
                raise TypeError(f"mapping {meta['mapping']!r} is not text")
            return config_from_dict(meta["config"]), meta["mapping"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if store.chunks():  # checkpoints there, none whose metadata reads back
        raise ValueError(
            f"--resume {run_dir}: no checkpoint in {store.folder} whose metadata reads back "
            f"(chunks {', '.join(map(str, store.chunks()))})"
        )
    raise ValueError(f"--resume {run_dir}: no checkpoint in {store.folder}")


def refuse_flags_with_resume(config: TrainConfig, given: Iterable[str] | None = None) -> None:
    """``--resume`` takes the configuration from the checkpoint: other settings are refused,
    those ``given`` on the command line (`drlhet.cli.common.FLAGS_GIVEN`; at their default
    value too), else (None: called from Python) those that differ from the defaults."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    if given is not None:  # --dqn.hidden sets dqn; --no-uniform sets uniform: named as given
        flags = [g for g in sorted(set(given)) if g.split(".")[0].removeprefix("no_") in names]
    else:
        flags = [n for n in names if getattr(config, n) != getattr(TrainConfig(), n)]
    if flags:
        text = ", ".join("--" + f.replace("_", "-") for f in flags)
        raise ValueError(f"--resume takes the configuration from the checkpoint; drop {text}")


def resumed_stop(stop_at_return: float | None, saved: Saved | None) -> float | None:
    """``--stop-at-return`` as given, else (resuming) as the run was started with."""
    if stop_at_return is None and saved is not None:
        return saved.meta.get("stop_at_return")
    return stop_at_return


def nothing_to_resume(
    config: TrainConfig, saved: Saved | None, chunks: int, run_dir: Path, stop_at: float | None
) -> bool:
    """Whether the run resumed from ``saved`` has nothing left to run: all its ``chunks``
    (`finished_run`) or its ``--stop-at-return`` reached (`reached_before`)."""
    return finished_run(config, saved, chunks, run_dir) or reached_before(saved, stop_at, run_dir)


def reached_before(saved: Saved | None, stop_at_return: float | None, run_dir: Path) -> bool:
    """Whether the run resumed from ``saved`` had reached ``stop_at_return`` (the mean of its
    seeds' evaluation returns) in a chunk it saved (said on stdout: nothing to go on with)."""
    if saved is None or stop_at_return is None:
        return False
    for row in saved.rows:
        returns = row.get("eval_return") or [math.nan]
        if sum(returns) / len(returns) >= stop_at_return:
            print(
                f"{run_dir} reached --stop-at-return {stop_at_return:g} at chunk {row['chunk']}: "
                "nothing to go on with (a higher --stop-at-return, or inf, trains on)"
            )
            return True
    return False


def finished_run(config: TrainConfig, saved: Saved | None, chunks: int, run_dir: Path) -> bool:
    """Whether the run resumed from ``saved`` has run all its ``chunks`` (said on stdout). A
    run killed after its last checkpoint but before its last row, its ``config.json`` or its
    report gets them from that checkpoint (and the report is printed again); a complete one is
    left as it is."""
    if saved is None or saved.chunk + 1 < chunks:
        return False
    written = _complete(config, saved.rows, run_dir)
    print(
        f"{run_dir} has run all its {chunks} chunks: nothing left to resume"
        + (f" ({', '.join(written)} written from {saved.path})" if written else "")
    )
    if written:
        report_run(config, saved.rows, {}, None, saved.rows[-1]["wall_s"], run_dir)
    return True


class MetricsFile:
    """A run's ``metrics.jsonl``, one JSON row a line, made at its first row: a run killed
    before its first chunk ends (a second SIGTERM, SIGKILL, the machine gone) leaves no file
    there, so its name is free again (`drlhet.cli.common.run_directory` refuses a folder
    holding one). ``before`` (a resumed run's earlier rows) is written at once, as the file
    then holds the rows up to the checkpoint it goes on from. Flushed after every row."""

    def __init__(self, path: Path, before: Iterable[dict] = ()):
        self.path = path
        self._file: TextIO | None = None
        if before := list(before):
            self.write(*before)

    def write(self, *rows: dict) -> None:
        if self._file is None:
            self._file = self.path.open("w")
        self._file.writelines(json.dumps(r) + "\n" for r in rows)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _complete(config: TrainConfig, rows: list[dict], run_dir: Path) -> list[str]:
    """Writes what ``run_dir`` lacks of a finished run whose rows are ``rows``:
    ``metrics.jsonl`` (unless it holds them all), ``config.json``; ``->`` their names, with
    ``curve.png`` where it is missing or they were (`report_run` draws it)."""
    written = []
    metrics, text = run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows)
    if not metrics.is_file() or metrics.read_text() != text:
        metrics.write_text(text)
        written.append(metrics.name)
    if not (run_dir / "config.json").is_file():
        ran = dataclasses.replace(config, backend=None if config.uniform else rows[0]["backend"])
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(ran), indent=1))
        written.append("config.json")
    if written or not (run_dir / "curve.png").is_file():
        written.append("curve.png")
    return written
