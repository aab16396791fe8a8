"""Checkpoints of a whole training run (orbax): everything a run needs to go on bit for bit.

A checkpoint holds the `drlhet.runtime.trainer.TrainState` of every seed (learner and optimizer
state, the actors' agent, replay storage, sum tree, stamps and error bits, the queue of delayed
priority updates, environment states, RNG keys, step counters) after a chunk, the rows of the
chunks run so far, the configuration and the mapping. It is written synchronously from host
copies, by orbax's `CheckpointManager` (a step is written to a temporary folder and renamed when
complete, so a process killed mid-write leaves the previous checkpoints intact), kept ``keep``
deep, and carries a SHA-256 digest of its arrays: a truncated or corrupt one is refused with one
line naming its folder, and `Checkpoints.restore` falls back to the one before.

The folder holds one history. A run resumed from an older checkpoint while newer ones are there
(`Checkpoints.restore` with ``chunk``, or a newer one that does not read back) abandons the run
that wrote them: saving chunk c deletes every checkpoint of a later chunk, and those of earlier
chunks whose rows disagree with chunk c's rows on a chunk both hold (the abandoned run's, saved
between the chunk resumed from and c). `restore` then never picks another history's state, and
orbax, which deletes the oldest beyond ``keep``, keeps the newest of this one.

The arrays are stored per leaf in the order of the state's pytree, as plain host arrays (typed RNG
keys as their key data; zero-size leaves by shape only), so a checkpoint written with one device
layout restores on another: the run places the restored state on the devices of its mapping.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from drlhet.runtime.config import TrainConfig, differences, said
from drlhet.runtime.saving import Saving

__all__ = ["Checkpoints", "Saved", "CheckpointError", "config_from_dict", "checkpoint_saving"]

FORMAT = 1
"""Version of the layout written here; a checkpoint of another version is refused."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, or of another run's shapes."""


class Saved(NamedTuple):
    """A restored checkpoint.

    Attributes:
      chunk: the last chunk the state includes (the run goes on with ``chunk + 1``).
      states: the `TrainState` of every seed (``[S]`` leading axis), host arrays.
      rows: the rows of chunks ``0..chunk`` (as `drlhet.runtime.run.run` made them).
      meta: ``config`` (a dict, `config_from_dict`), ``mapping`` (text), and what the caller
        stored.
      path: the checkpoint's folder.
      skipped: ``(folder, reason)`` of every newer checkpoint that could not be read.
    """

    chunk: int
    states: Any
    rows: list[dict]
    meta: dict
    path: Path
    skipped: list[tuple[Path, str]]


class Checkpoints:
    """The checkpoints folder of a run: ``save`` after a chunk, ``restore`` the newest good one.

    Args:
      folder: where the checkpoints live (made on the first save), one sub-folder per chunk.
      keep: how many to keep (the oldest are deleted after a save).
    """

    def __init__(self, folder: Path, keep: int = 3):
        if not isinstance(keep, int | np.integer) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
        self.folder, self.keep = Path(folder), int(keep)
        self._manager: Any = None

    def _open(self):
        import orbax.checkpoint as ocp

        if self._manager is None:
            options = ocp.CheckpointManagerOptions(
                max_to_keep=self.keep, enable_async_checkpointing=False, create=True
            )
            self._manager = ocp.CheckpointManager(self.folder.absolute(), options=options)
        return self._manager

    def chunks(self) -> list[int]:
        """The chunks with a complete checkpoint, oldest first (half-written ones excluded)."""
        if not self.folder.is_dir():
            return []
        done = [p for p in self.folder.iterdir() if p.name.isdigit()]
        return sorted(int(p.name) for p in done if (p / "_CHECKPOINT_METADATA").exists())

    def save(self, chunk: int, states: Any, rows: list[dict], meta: dict) -> Path:
        """Writes the state after ``chunk`` (returns its folder; blocks until it is complete).

        The folder keeps one history (see the module's docstring): the checkpoints of chunk
        ``chunk`` (a corrupt one a resumed run skipped) and later ones are deleted first, then,
        newest first, the earlier ones whose rows disagree with ``rows`` on a chunk both hold
        (their ``chunk`` field; the fields both rows have), down to the first that does not:
        the checkpoints a run wrote after the one this run was resumed from.

        Args:
          chunk: the index of the chunk just run.
          states: the `TrainState` of every seed (device or host arrays; fetched here).
          rows: every chunk's row so far (JSON-serializable), of chunks ``0..chunk``, or of
            this run's chunks only (then the checkpoints before the one resumed from are
            kept whatever their rows).
          meta: JSON-serializable: ``config`` and ``mapping`` at least.

        Raises:
          TypeError: ``rows`` or ``meta`` is not JSON-serializable (the folder is untouched).
        """
        import orbax.checkpoint as ocp

        leaves, arrays = _host_leaves(states)
        record = {
            **meta,
            "format": FORMAT,
            "chunk": chunk,
            "rows": rows,
            "leaves": leaves,
            "digest": _digest(arrays),
        }
        json.dumps(record)  # before anything is deleted
        stale = self._other_history(chunk, rows)
        manager = self._open()
        if stale:
            for c in stale:
                if c in manager.all_steps():
                    manager.delete(c)
                shutil.rmtree(self.folder / str(c), ignore_errors=True)
            manager.reload()
        state_args = ocp.args.StandardSave(arrays) if arrays else ocp.args.JsonSave({})
        manager.save(
            chunk,
            args=ocp.args.Composite(state=state_args, meta=ocp.args.JsonSave(record)),
            force=True,
        )
        manager.wait_until_finished()
        return self.folder / str(chunk)

    def _other_history(self, chunk: int, rows: list[dict]) -> list[int]:
        """The checkpoints that saving ``chunk`` with ``rows`` deletes (`save`): every folder
        of ``chunk`` or later (complete or not), and the earlier ones of another history."""
        if not self.folder.is_dir():
            return []
        there = sorted(int(p.name) for p in self.folder.iterdir() if p.name.isdigit())
        stale = [c for c in there if c >= chunk]
        mine = _by_chunk(rows)
        for c in reversed([c for c in there if c < chunk]):
            if not _disagree(mine, self._rows_of(c)):
                break
            stale.append(c)
        return stale

    def _rows_of(self, chunk: int) -> list[dict]:
        """The rows that the checkpoint of ``chunk`` holds (none where they do not read back:
        nothing to judge it by)."""
        rows = self._meta_of(chunk).get("rows")
        return rows if isinstance(rows, list) else []

    def _meta_of(self, chunk: int) -> dict:
        """The JSON record of the checkpoint of ``chunk`` ({} where it does not read back)."""
        try:
            meta = json.loads((self.folder / str(chunk) / "meta" / "metadata").read_text())
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    def restore(self, example: Any, chunk: int | None = None) -> Saved:
        """The newest checkpoint that reads back intact (or the one of ``chunk``).

        Args:
          example: the run's state as `jax.eval_shape` gives it (``[S]`` seeds): the structure,
            shapes and dtypes the checkpoint must have; or a function ``(meta) -> example``
            (when the configuration comes from the checkpoint itself: `config_from_dict`).
          chunk: a given checkpoint instead of the newest good one.

        Raises:
          CheckpointError: none is readable (naming each and why), or the named one is not.
        """
        found = self.chunks() if chunk is None else [chunk]
        if not found:
            raise CheckpointError(f"no checkpoint in {self.folder}")
        skipped: list[tuple[Path, str]] = []
        try:
            for c in reversed(found):
                path = self.folder / str(c)
                try:
                    states, meta = self._read(c, example)
                except CheckpointError as e:
                    skipped.append((path, str(e)))
                    continue
                rows = meta.pop("rows")
                return Saved(c, states, rows, meta, path, skipped)
        finally:
            self.close()
        raise CheckpointError("; ".join(f"{p}: {why}" for p, why in skipped))

    def close(self) -> None:
        """Ends orbax's manager (its threads); the next save or restore opens a new one."""
        if self._manager is not None:
            self._manager.close()
            self._manager = None

    def _read(self, chunk: int, example: Any) -> tuple[Any, dict]:
        import orbax.checkpoint as ocp

        manager = self._open()
        try:
            meta = manager.restore(chunk, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            meta = dict(meta["meta"])
            if meta.get("format") != FORMAT:
                raise CheckpointError(f"format {meta.get('format')}, expected {FORMAT}")
            if callable(example):
                example = example(meta)
            target = _target(meta["leaves"])
            state_args = ocp.args.StandardRestore(target) if target else ocp.args.JsonRestore()
            got = manager.restore(chunk, args=ocp.args.Composite(state=state_args))["state"]
        except CheckpointError:
            raise
        except Exception as e:  # orbax / tensorstore: truncated, missing or garbled files
            raise CheckpointError(f"unreadable ({type(e).__name__}: {_first_line(e)})") from e
        arrays = {k: np.asarray(got[k]) for k in target}
        if _digest(arrays) != meta["digest"]:
            raise CheckpointError("corrupt: its arrays do not match the digest written with them")
        return _rebuild(example, meta["leaves"], arrays), meta


def _by_chunk(rows: list[dict]) -> dict[int, dict]:
    """``{chunk: row}`` of the rows that say their chunk (an integer)."""
    return {r["chunk"]: r for r in rows if isinstance(r, dict) and isinstance(r.get("chunk"), int)}


def _disagree(mine: dict[int, dict], rows: list[dict]) -> bool:
    """Whether ``rows`` (a stored checkpoint's) and ``mine`` (`_by_chunk`) differ in a field
    both have of a chunk both hold (compared as JSON: a tuple as the list read back)."""
    for chunk, theirs in _by_chunk(rows).items():
        ours = mine.get(chunk)
        if ours is None:
            continue
        for k in ours.keys() & theirs.keys():
            if json.dumps(ours[k], sort_keys=True) != json.dumps(theirs[k], sort_keys=True):
                return True
    return False


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def _host_leaves(states: Any) -> tuple[list[dict], dict[str, np.ndarray]]:
    """``(leaf records, {name: host array})``: one record per leaf of ``states`` (shape, dtype,
    whether it is a typed key); zero-size leaves have a record and no array."""
    records, arrays = [], {}
    for i, leaf in enumerate(jax.tree.leaves(states)):
        impl = None
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            impl, leaf = str(jax.random.key_impl(leaf)), jax.random.key_data(leaf)
        a = np.asarray(jax.device_get(leaf))
        name = f"{i:05d}"
        records.append({"name": name, "shape": list(a.shape), "dtype": a.dtype.name, "key": impl})
        if a.size:
            arrays[name] = a
    return records, arrays


def _target(records: list[dict]) -> dict[str, np.ndarray]:
    return {
        r["name"]: np.zeros(r["shape"], np.dtype(r["dtype"]))
        for r in records
        if int(np.prod(r["shape"]))
    }


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.name}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _rebuild(example: Any, records: list[dict], arrays: dict[str, np.ndarray]) -> Any:
    """The state of ``example``'s structure from the stored leaves (keys re-wrapped)."""
    leaves, treedef = jax.tree.flatten(example)
    if len(leaves) != len(records):
        raise CheckpointError(
            f"holds {len(records)} arrays; this configuration's state has {len(leaves)}"
        )
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(example)[0]]
    out = []
    for path, want, rec in zip(paths, leaves, records, strict=True):
        is_key = jax.dtypes.issubdtype(want.dtype, jax.dtypes.prng_key)
        shape = jax.eval_shape(jax.random.key_data, want) if is_key else want
        got = arrays.get(rec["name"], np.zeros(rec["shape"], np.dtype(rec["dtype"])))
        if tuple(got.shape) != tuple(shape.shape) or got.dtype != shape.dtype:
            raise CheckpointError(
                f"state{path} is {got.dtype.name}{list(got.shape)} in the checkpoint, "
                f"{np.dtype(shape.dtype).name}{list(shape.shape)} in this configuration"
            )
        if is_key != bool(rec.get("key")):
            raise CheckpointError(f"state{path}: an RNG key in one of checkpoint and config only")
        out.append(
            jax.random.wrap_key_data(jax.numpy.asarray(got), impl=rec["key"]) if is_key else got
        )
    return jax.tree.unflatten(treedef, out)


def config_from_dict(d: dict) -> TrainConfig:
    """The `TrainConfig` a checkpoint's (JSON) ``config`` describes (lists back to tuples)."""
    return _dataclass_from(TrainConfig, d)


def _dataclass_from(cls: Any, d: dict) -> Any:
    kwargs = {}
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        value, default = d[f.name], getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            value = _dataclass_from(type(default), value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def checkpoint_saving(
    store: Checkpoints,
    config: TrainConfig,
    mapping: str = "",
    every: int = 1,
    before: list[dict] | None = None,
    **meta: Any,
) -> Saving:
    """A run's checkpoints (``run(..., saving=...)``) into ``store`` after every ``every``-th
    chunk and the last. Each records ``config`` and ``mapping`` (what
    `drlhet.runtime.run.Start.from_saved` checks a resume against) and ``meta`` (JSON); it
    holds the rows of every chunk so far, ``before`` first (a resumed run's earlier rows).

    Raises:
      ValueError: ``every`` below 1; ``store`` holds the checkpoints of a run of another
        configuration (`RESUMABLE` fields aside), which this run's first save would delete (a
        folder holds one history); a ``meta`` value JSON cannot write.
    """
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ValueError(f"every must be an integer >= 1 chunk, got {every!r}")
    for key, value in meta.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"meta {key}={value!r} cannot be written as JSON: {e}") from None
    _check_history(store, config)
    recorded = {"config": dataclasses.asdict(config), "mapping": mapping, **meta}
    earlier = list(before or [])

    def write(chunk: int, states: Any, rows: list[dict]) -> None:
        store.save(chunk, states, earlier + rows, recorded)

    return Saving(every, write, config)


def _check_history(store: Checkpoints, config: TrainConfig) -> None:
    """Raises ``ValueError`` when the newest checkpoint in ``store`` that records a
    configuration records another than ``config`` (`RESUMABLE` fields aside)."""
    from drlhet.runtime.run import RESUMABLE

    for c in reversed(store.chunks()):
        recorded = store._meta_of(c).get("config")
        if isinstance(recorded, dict):
            differ = differences(config, recorded, RESUMABLE)
            if differ:
                raise ValueError(
                    f"{store.folder} holds the checkpoints of a run of another configuration "
                    f"({said(differ)}); this run's first save would delete them: give "
                    "another folder"
                )
            return
