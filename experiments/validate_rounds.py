"""validate_dse.py's rounds: each round profiles afresh and measures every runnable mapping
(trained samples/s) at the machine speed the profile was taken at (`_at_speed`), optionally in a
fresh process; the rounds' models, records and profiles are gathered per configuration.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import jax

from drlhet.backends.base import CPU
from drlhet.dse.build import build_model, replay_backends_here
from drlhet.dse.cache import ProfileCache
from drlhet.dse.key import ProfileKey
from drlhet.dse.measure import measure_mapping, speed_probe, whole_chunk
from drlhet.dse.search import search

if TYPE_CHECKING:
    from validate_dse import Args

DEVICES = [f"{CPU}:0", f"{CPU}:1"]


def _rounds(args: Args, key: ProfileKey, cache_path: Path) -> tuple[list, dict, list]:
    """Rounds A B A B ...: profile, then measure every mapping (in an order rotated from round
    to round), again. A mapping's error is the median over the rounds of (prediction from that
    round's profile) / (that round's measurement) - 1: the machine's drift (up to 1.5-2x over
    minutes here) hits both sides of each ratio. Returns ``(models, mapping -> records,
    round profiles)``."""
    per_round: dict[str, list[dict]] = {}
    models, profiles = [], []
    for rnd in range(args.rounds):
        t0 = time.perf_counter()
        job = (key, rnd, args.delay, args.chunks, args.chunk_steps, cache_path)
        if args.isolate:  # a fresh process per round (see Args.isolate)
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(1, mp_context=ctx) as pool:
                got = pool.submit(_round, *job).result()
        else:
            got = _round(*job)
        models.append(got["model"])
        for text, rec in got["records"].items():
            per_round.setdefault(text, []).append(rec)
        profiles.append(
            {
                "batch": key.batch,
                "capacity": key.capacity,
                "round": rnd,
                "probe": got["profile_probe"],
                "profiles": {
                    b: {
                        g: {n: v["median"] for n, v in prof.get(g, {}).items()}
                        for g in ("compute", "call", "latency", "transfer", "pipeline")
                    }
                    for b, prof in got["model"].profiles.items()
                },
            }
        )
        print(
            f"B={key.batch} C={key.capacity}: round {rnd + 1}/{args.rounds} done in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return models, per_round, profiles


def _round(key, rnd: int, delay: int, chunks: int, chunk_steps: int, cache_dir: Path) -> dict:
    """One round: profile ``key`` afresh, predict every mapping from that profile alone, then
    measure every runnable mapping (in an order rotated by ``rnd``), each at the speed the
    machine had while profiling (`_at_speed`). Returns ``{"model": the round's Model,
    "records": mapping text -> {predicted, measured, per_chunk, terms_s, speed, tries}}``."""
    jax.config.update("jax_num_cpu_devices", 2)
    every = whole_chunk(key, chunk_steps)  # the chunks measured: the model's U divides them
    model, ref = _at_speed(
        lambda: build_model(
            key, cache=ProfileCache(Path(cache_dir)), reprofile=True, log=_silent, eval_every=every
        )
    )
    preds = search(model, DEVICES, delay, present=DEVICES, backends_here=replay_backends_here())
    # cpu:0 and cpu:1 are the same two cores: a mapping and its relabeling (cpu:0 <-> cpu:1) are
    # the same hardware and get the same prediction; each such pair is measured once (its form
    # with cpu:0 first)
    runnable = [p for p in preds if p.runnable]  # once up to a swap of the CPUs
    shift = rnd % len(runnable)
    records = {}
    for p in runnable[shift:] + runnable[:shift]:
        text = p.mapping_text()
        m, probe = _at_speed(
            lambda t=text: measure_mapping(key, t, delay, chunks, chunk_steps), ref["probe_s"]
        )
        records[text] = {
            "predicted": p.trained_samples_per_s,
            "measured": m["trained_samples_per_s"],
            "per_chunk": m["per_chunk"],
            "terms_s": p.terms,
            "speed": ref["probe_s"] / probe["probe_s"],
            "tries": probe["tries"],
            "in_band": probe["in_band"],
        }
    return {"model": model, "records": records, "profile_probe": ref}


SPEED_BAND = 1.25
"""A measurement is kept when the machine's speed (`speed_probe` before and after it) stayed
within this factor, either way, of the speed the profile was taken at (a profile, when its two
probes agree within it); else it is retaken after a pause, at most `TRIES` times, keeping the
closest. The development VM's speed halves for minutes at a time (docs/results.md): a profile
taken at one speed says nothing of a measurement taken at the other."""
TRIES = 4


def _at_speed(work, ref_s: float | None = None) -> tuple:
    """Runs ``work()`` between two speed probes until both probes are within `SPEED_BAND` of
    ``ref_s`` (of each other when None). Returns ``(result, {"probe_s", "tries", "in_band"})``:
    the result whose probes were the closest, their mean, the tries, whether it was in band."""
    best: tuple | None = None
    tries = 0
    while tries < TRIES:
        tries += 1
        before = speed_probe()
        out = work()
        after = speed_probe()
        ref = ref_s or before
        worst = max(abs(math.log(p / ref)) for p in (before, after))
        if best is None or worst < best[0]:
            best = (worst, out, (before + after) / 2)
        if worst <= math.log(SPEED_BAND):
            break
        time.sleep(30)
    assert best is not None
    worst, out, probe = best
    return out, {"probe_s": probe, "tries": tries, "in_band": worst <= math.log(SPEED_BAND)}


def _silent(_: str) -> None:
    """A log that says nothing (a round's profiling is silent)."""
