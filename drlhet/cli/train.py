"""``drlhet train``: one run, written to a run directory; ``drlhet backends``: what runs here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import tyro

from drlhet.backends import CPU, describe
from drlhet.cli.checkpoints import (
    CHECKPOINTS,
    MetricsFile,
    nothing_to_resume,
    peek_run,
    refuse_flags_with_resume,
    resume_run,
    resumed_stop,
    saving_for,
)
from drlhet.cli.common import (
    FLAGS_GIVEN,
    MAX_CPU_DEVICES,
    available_memory,
    bad_input,
    enable_compilation_cache,
    no_replay_backend,
    refuse_unused_flags,
    run_directory,
    set_cpu_devices,
)
from drlhet.cli.dse import auto_mapping
from drlhet.cli.ray_actors import ray_config, ray_runner
from drlhet.cli.report import plan_line, report_run
from drlhet.cli.stopping import stop_on_signals
from drlhet.runtime.config import TrainConfig, check, chunks_of, tree_shape
from drlhet.runtime.mapping import Mapping, cpu_devices_named
from drlhet.runtime.memory import estimate_memory, size_text
from drlhet.runtime.ray_cluster import warmup_end
from drlhet.runtime.run import Start, default_mapping, run
from drlhet.runtime.saving import Stopped
from drlhet.runtime.trainer import make_trainer

__all__ = ["train_command", "backends_command"]


CHECKPOINT_EVERY = 10
"""Chunks between checkpoints when ``--checkpoint-every`` is not given (runs without Ray)."""
KEEP_CHECKPOINTS = 2
"""Checkpoints kept when ``--keep-checkpoints`` is not given."""
AUTO_CPU_DEVICES = 2
"""XLA CPU devices that ``--mapping auto`` searches over when ``--cpu-devices`` is not given."""


def train_command(
    config: Annotated[TrainConfig, tyro.conf.arg(name="")],
    out: Path = Path("runs"),
    name: str | None = None,
    stop_at_return: float | None = None,
    progress: bool = True,
    mapping: str | None = None,
    cpu_devices: int | None = None,
    compilation_cache: bool = True,
    memory_check: bool = True,
    checkpoint_every: int | None = None,
    keep_checkpoints: int | None = None,
    resume: Path | None = None,
    actors: str | None = None,
    sync_every: int | None = None,
    rollout: int | None = None,
    ray_address: str | None = None,
    max_failures: int | None = None,
) -> Path:
    """Trains, writing ``config.json``, ``metrics.jsonl`` and ``curve.png`` to a run directory.

    Everything is checked before the run directory is made: the configuration, the mapping,
    the backends and what they accept, the memory the run's state needs. A run that fails
    removes the run directory it made, unless it holds checkpoints; one that existed is kept.

    Args:
      config: the run (see `drlhet.runtime.config.TrainConfig`); ``--backend`` names the replay
        backend (``drlhet backends`` lists them; default: the fastest that loads here).
      out: parent folder of run directories.
      name: run directory name, one folder's (default: time, algorithm and environment).
      stop_at_return: stop once the mean evaluation return over seeds reaches this value.
      progress: show a progress bar.
      mapping: where each group runs, e.g. ``actors=cpu:0,replay=native@cpu:1,learner=cpu:1``
        (see `drlhet.runtime.mapping.Mapping`), or ``auto``: the DSE's best mapping runnable
        here (profiles the run first if its profile is not cached); default: everything fused
        on one device.
      cpu_devices: XLA CPU devices to create (default: the mapping's; at most the cores).
      compilation_cache: keep compiled programs in the user's cache folder (JAX's persistent
        compilation cache): the same configuration run again does not compile.
      memory_check: refuse a run whose state (replay buffers, sum trees, agents of every seed)
        needs more memory than this machine has available.
      checkpoint_every: save the run's state to ``<run>/checkpoints/`` (`drlhet.checkpoint`)
        every this many chunks and after the last (0: never; default 10, or on ``--resume``
        the run's own; refused with --actors).
      keep_checkpoints: checkpoints kept, the newest (0 only with ``--checkpoint-every 0``;
        default 2, or on ``--resume`` the run's own; refused with --actors).
      resume: a run directory: go on in it from its newest checkpoint that reads back intact,
        with its configuration, ``--stop-at-return`` and (unless ``--mapping`` is given) its
        mapping, bit for bit as the run would have gone on (``--out``, ``--name`` refused).
      actors: ``ray:N``: N Ray actors feed the replay and learner (the ``ray`` extra; no
        checkpoints; `drlhet.runtime.ray_learner`); the next four need it.
      sync_every: learner iterations between parameter broadcasts to the actors (32).
      rollout: iterations of an actor's call (32).
      ray_address: a Ray cluster, ``HOST:PORT``, ``ray://HOST:PORT`` or ``auto`` (default:
        ``RAY_ADDRESS``, else a local Ray).
      max_failures: an actor's failed calls in a row that end the run (10).
    """
    with bad_input():
        remote = _remote(stop_at_return, actors, sync_every, rollout, ray_address, mapping,
                         resume, checkpoint_every, max_failures, keep_checkpoints)  # fmt: skip
        config, mapping, saved = _resume(config, resume, mapping, cpu_devices, out, name)
        stop_at_return = resumed_stop(stop_at_return, saved)
        every, keep, before = _saving(checkpoint_every, keep_checkpoints, remote, saved)
        run_dir = resume or _new_run_dir(config, out, name)  # before auto
        placed, tr = _prepare(config, mapping, cpu_devices, memory_check, every > 0)
        saving = saving_for(run_dir, config, str(placed), every, keep, before, stop_at_return)
        if compilation_cache:
            enable_compilation_cache()  # its folder can be made
        runner = run if remote is None else ray_runner(remote, tr.config)
    if nothing_to_resume(config, saved, tr.chunks, run_dir, stop_at_return):
        return run_dir
    print(plan_line(tr.config, tr.chunks, str(placed), remote))
    start = _start(saved, run_dir)
    with _removed_on_failure(run_dir), stop_on_signals(saving=every > 0) as stop:
        rows, reached, wall = _train(
            config, placed, run_dir, stop_at_return, progress, start, saving, before, runner, stop
        )
    warm = None if remote is None else warmup_end(tr.config, remote)
    _end(config, rows, reached, stop_at_return, wall, run_dir, stop, warm)
    return run_dir


def _remote(stop_at_return: float | None, *ray_options):
    """The Ray settings of the run (`ray_config`, which checks ``ray_options``), once
    ``stop_at_return`` is known to be a number."""
    if stop_at_return is not None and math.isnan(stop_at_return):
        raise ValueError("--stop-at-return must be a number (inf: never stop early), got nan")
    return ray_config(*ray_options)


def _new_run_dir(config: TrainConfig, out: Path, name: str | None) -> Path:
    """A new run's directory (`run_directory`): ``out/name``, by default named by the time,
    the algorithm and the environment."""
    env = re.sub(r"[:/\\]", "-", config.env)  # gymnasium:ALE/Pong-v5 -> gymnasium-ALE-Pong-v5
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{config.algo}-{env}"
    return run_directory(out, stamp if name is None else name)


def _saving(every: int | None, keep: int | None, remote, saved) -> tuple[int, int, list]:
    """Chunks between checkpoints and checkpoints kept: as given; else, resuming, as the run
    saved them (``saved``'s metadata; checkpoints before 2026-11-30 do not say); else none for
    a Ray run, else `CHECKPOINT_EVERY`, and `KEEP_CHECKPOINTS`; and the rows saved before."""
    meta = {} if saved is None else saved.meta
    if every is None:
        every = meta.get("checkpoint_every", 0 if remote is not None else CHECKPOINT_EVERY)
    keep = meta.get("keep_checkpoints", KEEP_CHECKPOINTS) if keep is None else keep
    return every, keep, [] if saved is None else saved.rows


def _end(
    config, rows, reached, stop_at_return, wall: float, run_dir: Path, stop, warm=None
) -> None:
    """Reports the run (`report_run`; ``warm``: a Ray run's warm-up); a run that a signal
    stopped early exits with its status (one that the signal reached in its last chunk has
    ended as usual)."""
    if rows:
        report_run(config, rows, reached, stop_at_return, wall, run_dir, warm)
    if "stopped" in reached:
        raise SystemExit(stop.exit_status)


def _start(saved, run_dir: Path) -> Start | None:
    """Where a resumed run starts (None: a fresh run), said on stdout."""
    if saved is None:
        return None
    print(f"resuming {run_dir} after chunk {saved.chunk} ({saved.path})")
    return Start.from_saved(saved)  # run checks the configuration against the saved one


def _resume(config: TrainConfig, run_dir: Path | None, mapping, cpu_devices, out, name):
    """``(config, mapping, checkpoint)``: a new run's as given (``run_dir`` None), else those
    to go on with from ``run_dir``, its ``out`` and ``name`` left at their default; a mapping
    given must suit the config (`no_replay_backend`). The CPU devices the mapping needs are made
    before the checkpoint is read (reading it starts JAX, which then keeps the devices it has)."""
    if mapping is not None and mapping.strip().lower() == "auto":  # AUTO, " auto"
        mapping = "auto"
    if run_dir is None:  # its bad values first, then the options it would ignore
        check(config)
        refuse_unused_flags(config.algo, config.uniform, FLAGS_GIVEN.get())
        return config, no_replay_backend(config.uniform, mapping), None
    refuse_flags_with_resume(config, FLAGS_GIVEN.get())
    if out != Path("runs") or name is not None:
        raise ValueError(f"--resume goes on in {run_dir}; drop --out and --name")
    config, saved_mapping = peek_run(run_dir)
    mapping = no_replay_backend(config.uniform, mapping) or saved_mapping
    set_cpu_devices(
        _auto_devices(cpu_devices) if mapping == "auto" else _cpu_devices(mapping, cpu_devices)
    )
    _, _, saved = resume_run(run_dir)
    return config, mapping, saved


def _prepare(config: TrainConfig, mapping: str | None, cpu_devices, memory_check, saving: bool):
    """Checks the whole run and places it: ``-> (Mapping, Trainer)``; creates the XLA CPU
    devices it needs (``saving``: checkpoints add a host copy of the state to the memory
    needed). Raises ``ValueError`` or `BackendUnavailable` for bad input."""
    check(config)
    chunks_of(config)
    if mapping == "auto":
        set_cpu_devices(_auto_devices(cpu_devices))
        if memory_check:  # before profiling: the run's shapes do not depend on the mapping
            _check_memory(_trainer(config, default_mapping(config)), config, 1 + saving)
        with bad_input("--mapping auto: "):
            mapping = auto_mapping(
                config, config.delay, backend=config.backend, learner=config.learner
            )
    elif mapping is not None or cpu_devices is not None:
        set_cpu_devices(_cpu_devices(mapping or "", cpu_devices))
    if mapping is None:
        placed = default_mapping(config)
        placed.validate()
    else:
        with bad_input("--mapping: "):
            placed = Mapping.parse(mapping, tree_shape(config))
            placed.validate()
    tr = _trainer(config, placed)
    if memory_check:
        _check_memory(tr, config, 1 + saving)
    return placed, tr


def _auto_devices(given: int | None) -> int:
    """The XLA CPU devices that ``--mapping auto`` searches over: ``given`` (0 too, which
    `set_cpu_devices` refuses), else `AUTO_CPU_DEVICES`."""
    return AUTO_CPU_DEVICES if given is None else given


def _cpu_devices(mapping: str, given: int | None) -> int:
    """The XLA CPU devices to create for ``mapping``: ``given``, or as many as it names."""
    if given is not None and not 1 <= given <= MAX_CPU_DEVICES:
        raise ValueError(f"--cpu-devices must be in [1, {MAX_CPU_DEVICES}], got {given}")
    with bad_input("--mapping: "):
        needed = cpu_devices_named(mapping)
    if given is not None:
        if given < needed:
            raise ValueError(
                f"--mapping names {CPU}:{needed - 1} but --cpu-devices is {given}; "
                f"pass --cpu-devices {needed} or more"
            )
        return given
    cores = os.cpu_count() or 1
    if needed > max(2, cores):
        raise ValueError(
            f"--mapping names {CPU}:{needed - 1}, more CPU devices than this machine has cores "
            f"({cores}); pass --cpu-devices {needed} to create {needed} XLA CPU devices anyway"
        )
    return needed


def _trainer(config: TrainConfig, placed: Mapping):
    """The trainer of ``config`` run on ``placed`` (what `drlhet.runtime.run.run` builds),
    after checking that ``--backend`` and ``--learner`` agree with the mapping."""
    for option, group in (("backend", "replay"), ("learner", "learner")):
        wanted, place = getattr(config, option), getattr(placed, group)
        if wanted is not None and wanted != place.backend:
            raise ValueError(
                f"--{option} {wanted} disagrees with the mapping's {group}={place}; name it in "
                f"the mapping instead ({group}={wanted}@{place.device})"
            )
    ran = dataclasses.replace(config, backend=placed.replay.backend, learner=placed.learner.backend)
    return make_trainer(ran)


def _check_memory(tr, config: TrainConfig, copies: int) -> None:
    """Refuses a run whose state needs more memory than this machine has available now
    (``copies`` of the state: one as every run path donates it to each step, one more on the
    host for checkpoints; `drlhet.runtime.memory`)."""
    have = available_memory()
    if have is None:
        return
    free, source = have
    need = estimate_memory(tr, config.seeds, copies=copies)
    if need.total > free:
        text = size_text
        lower, what = _largest_part(need, config)
        raise ValueError(
            f"{what}: the run needs ~{text(need.total)} (replay {text(need.replay)}, agents "
            f"{text(need.agent)}, delayed updates and the rest {text(need.other)}, evaluation "
            f"{text(need.evaluation)}), this machine has {text(free)} available ({source}); "
            f"lower {lower} or --seeds (--no-memory-check runs it anyway)"
        )


def _largest_part(need, config: TrainConfig) -> tuple[str, str]:
    """``(option, what)`` of the largest part of ``need``: the evaluation's environments, a
    long ``--delay``'s queue of pending updates, else the replay buffers."""
    seeds = f" x --seeds {config.seeds}"
    if need.evaluation > need.total // 2:  # its evaluation, not its state
        return "--eval-envs", f"--eval-envs {config.eval_envs}{seeds}"
    if config.delay and need.other > need.replay:
        return "--delay", f"--delay {config.delay} x --batch-size {config.batch_size}{seeds}"
    return "--buffer-size", f"--buffer-size {config.buffer_size}{seeds}"


@contextlib.contextmanager
def _removed_on_failure(run_dir: Path) -> Iterator[None]:
    """Removes what this run creates on the way to ``run_dir`` if the body raises, unless
    ``run_dir`` holds checkpoints; folders that existed before are kept."""
    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        if missing and not (run_dir / CHECKPOINTS).exists():
            shutil.rmtree(missing[-1], ignore_errors=True)
        raise


def _train(
    config, mapping, run_dir: Path, stop_at_return, progress, start, saving, before, runner, stop
):
    """Runs ``config`` with ``runner`` (`drlhet.runtime.run.run`'s signature), streaming rows
    to ``metrics.jsonl`` (after ``before``, the rows of a resumed run's earlier chunks), until
    the end, ``stop_at_return`` or a `StopRequest` (``stop``; None: none);
    ``-> (rows, reached, wall_s)``: ``reached`` holds ``env_steps`` and ``wall_s`` where the
    return was reached, or ``stopped`` (`Stopped`) where a stop request ended the run."""
    from tqdm import tqdm

    run_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = list(before)
    reached: dict = {}
    bar = tqdm(total=config.steps, unit="step", disable=not progress, dynamic_ncols=True)

    def on_chunk(row: dict) -> None:
        if not rows:  # the backend is resolved by now: record the configuration that ran
            ran = dataclasses.replace(config, backend=None if config.uniform else row["backend"])
            (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(ran), indent=1))
        rows.append(row)
        metrics.write(row)
        mean_ret = sum(row["eval_return"]) / len(row["eval_return"])
        bar.n = min(row["env_steps"], config.steps)
        bar.set_postfix(
            ret=f"{mean_ret:.1f}",
            env_sps=f"{row['env_steps_per_s']:.3g}",
            trained_sps=f"{row['trained_samples_per_s']:.3g}",
            refresh=False,  # drawn once, below: a log (no terminal) got each chunk's line twice
        )
        bar.refresh()
        if stop_at_return is not None and mean_ret >= stop_at_return and not reached:
            reached.update(env_steps=row["env_steps"], wall_s=row["wall_s"])

    def signalled() -> bool:
        return stop is not None and stop.asked()

    def asked() -> bool:  # the return reached ends the run after that chunk, saved as a stop
        return signalled() or "env_steps" in reached

    t0 = time.perf_counter()
    metrics = MetricsFile(run_dir / "metrics.jsonl", before)  # made at its first row
    with contextlib.closing(metrics):
        try:
            kwargs = {"on_chunk": on_chunk, "start": start, "saving": saving, "stop_asked": asked}
            # the memory: checked with the options' names (_check_memory)
            runner(config, mapping, memory_check=False, **kwargs)
        except Stopped as e:
            if signalled() or "env_steps" not in reached:
                reached["stopped"] = e
        finally:
            bar.close()
    return rows, reached, time.perf_counter() - t0


def backends_command() -> list[dict]:
    """Lists every backend: where it runs, what it provides, and whether it loads here."""
    rows = describe()
    for r in rows:
        where = "/".join(r["platforms"])
        if r["simulation"]:  # (platform, groups): simulated there
            where += f" ({r['simulation'][0]}: sim)"
        groups = "+".join(r["provides"])
        print(f"{r['name']:<8} {where:<16} {groups:<22} rank {r['rank']:<3} {r['status']}")
        if r["summary"]:
            print(f"{'':<8} {r['summary']}")
        if r["holds"]:
            print(f"{'':<8} its replay holds trees of {r['holds']}")
    return rows
