"""Every mapping's predicted vs measured throughput, the DSE's pick and the baseline mappings.

Drawn from a committed validation of the performance model (``experiments/validate_dse.py``'s
JSON; default ``results/dse_validation_in_program_k4_2026-12-02.json``: DQN + PER on
CartPole-v1, MLP 64x64, delay k = 4, every runnable mapping of actors / replay / learner over
this machine's two XLA CPU devices, predicted from profiles and measured). **By default
nothing is measured anew**: the figure redraws the committed rows. ``--measure`` first reruns
validate_dse.py at a small scale (``--measure-batches``, ``--measure-capacities``, one round
by default) into ``--measured-out`` and draws that instead.

For each (batch, capacity) configuration: the predicted and measured trained samples/s of each
mapping, the DSE's pick and the best measured mapping marked, and the baseline mappings
validate_dse reports (the best mapping of each baseline family: measured where it ran here,
else *modeled* from a device sheet, labelled so) with the pick's and the best measured
mapping's speedup over each. The paper's headline ("up to 997.3x over baseline mappings") is
reproduced as: the best measured mapping over each named baseline, the largest ratio over the
configurations; printed and in the JSON (``kind: "ratio"`` rows).

Usage:
  python experiments/fig_mapping.py                       # redraw the committed validation
  python experiments/fig_mapping.py --validation results/dse_validation_in_program_k16.json
  python experiments/fig_mapping.py --measure             # validate_dse at a small scale first
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import checked_cli

WORST = "worst runnable mapping"
"""The baseline family validate_dse reports as ``pick_over_worst`` (always measured)."""
PAPER_RATIO = 997.3
"""The paper's "up to 997.3x over baseline mappings"."""
ROW_KEYS: tuple[str, ...] = ("batch", "capacity", "delay", "mapping", "error")
ROW_KEYS += ("predicted_trained_samples_per_s", "measured_trained_samples_per_s")
CONFIG_KEYS: tuple[str, ...] = ("batch", "capacity", "delay", "baselines", "pick", "pick_measured")
CONFIG_KEYS += ("best_measured", "best_measured_value", "worst_measured")
"""What the figure reads of each row and each configuration of validate_dse.py's JSON."""


@dataclasses.dataclass
class Args:
    validation: Path = Path("results/dse_validation_in_program_k4_2026-12-02.json")
    """A JSON written by experiments/validate_dse.py (used as is unless ``--measure``)."""
    measure: bool = False
    """Rerun experiments/validate_dse.py at a small scale first and draw its result."""
    measure_batches: tuple[int, ...] = (64,)
    measure_capacities: tuple[int, ...] = (1 << 17,)
    delay: int = 4
    """``--measure``: the delay k of the validation (the default JSON's)."""
    rounds: int = 1
    chunks: int = 2
    chunk_steps: int = 1_000
    measured_out: Path = Path("results/raw/fig_mapping_validation.json")
    """``--measure``: where validate_dse writes its JSON (and its own plot beside it)."""
    out: Path = Path("results/fig_mapping.json")
    plot: Path = Path("results/fig_mapping.png")


def load(args: Args) -> tuple[dict, Path]:
    """The validation to draw: the committed one, or a fresh small one with ``--measure``."""
    if not args.measure:
        print(f"note: no new measurement; drawing the committed rows of {args.validation}")
        return json.loads(args.validation.read_text()), args.validation
    import validate_dse

    v_args = validate_dse.Args(
        batches=args.measure_batches,
        capacities=args.measure_capacities,
        delay=args.delay,
        rounds=args.rounds,
        chunks=args.chunks,
        chunk_steps=args.chunk_steps,
        out=args.measured_out,
        plot=args.measured_out.with_suffix(".png"),
    )
    print(f"measuring: validate_dse at B {args.measure_batches}, C {args.measure_capacities}")
    return validate_dse.main(v_args), args.measured_out


def _validation(v: Any) -> str:
    """Why ``v`` (a ``--validation`` file's JSON) is not validate_dse.py's, or ""."""
    why = checked_cli.lacking(v, ("config", "machine", "rows", "configs"))
    why = why or checked_cli.rows_lacking(v["rows"], ROW_KEYS, "rows")
    why = why or checked_cli.rows_lacking(v["configs"], CONFIG_KEYS, "configs")
    return f"not validate_dse.py's JSON ({why})" if why else ""


MEASURE_ONLY: tuple[str, ...] = ("measure_batches", "measure_capacities", "delay", "rounds")
MEASURE_ONLY += ("chunks", "chunk_steps", "measured_out")
"""The options of ``--measure``'s validation run."""


def refused(args: Args) -> str:
    """Why ``args`` cannot run, in one line, or "": a ``--validation`` file (drawn unless
    ``--measure``) that is missing or not validate_dse.py's JSON; an option of the validation
    run without ``--measure`` (the committed rows are drawn: it was ignored), or
    ``--validation`` with it (the fresh validation is drawn)."""
    if args.measure:
        return checked_cli.ignored_options(
            args, Args(), ("validation",), "with --measure (it draws the validation it runs)"
        )
    why = checked_cli.ignored_options(
        args, Args(), MEASURE_ONLY, "without --measure (it draws --validation's rows)"
    )
    return why or checked_cli.unreadable_json(args.validation, _validation)


def measured_label(v: dict) -> str:
    return f"measured ({v['machine']}, {v.get('threads', 'threads not recorded')})"


def mapping_rows(v: dict, source: Path) -> list[dict]:
    """One row per runnable mapping: predicted and measured, whether it is the pick or the
    best measured, and which baseline family it is (if any)."""
    rows = []
    for r in v["rows"]:
        conf = _config_of(v, r)
        names = [n for n, b in conf["baselines"].items() if b["mapping"] == r["mapping"]]
        rows.append(
            {
                "kind": "mapping", "batch": r["batch"], "capacity": r["capacity"],
                "delay": r["delay"], "mapping": r["mapping"],
                "predicted_trained_samples_per_s": r["predicted_trained_samples_per_s"],
                "measured_trained_samples_per_s": r["measured_trained_samples_per_s"],
                "error": r["error"], "pick": r["mapping"] == conf["pick"],
                "best_measured": r["mapping"] == conf["best_measured"],
                "baselines": names + ([WORST] if r["mapping"] == conf["worst_measured"] else []),
                "label": f"predicted (profiled model) vs {measured_label(v)}",
                "source": str(source),
            }
        )  # fmt: skip
    return rows


def _config_of(v: dict, r: dict) -> dict:
    return next(c for c in v["configs"] if _at(c) == _at(r))


def baseline_rows(v: dict, source: Path) -> list[dict]:
    """One row per (configuration, baseline family) with the pick's and the best measured
    mapping's speedup over it; the worst runnable mapping (measured) is one family more."""
    rows = []
    for c in v["configs"]:
        worst = {
            "mapping": c["worst_measured"],
            "trained_samples_per_s": _measured(v, c, c["worst_measured"]),
            "basis": "measured",
        }
        for name, b in {**c["baselines"], WORST: worst}.items():
            value = b["trained_samples_per_s"]
            rows.append(
                {
                    "kind": "baseline", "batch": c["batch"], "capacity": c["capacity"],
                    "delay": c["delay"], "baseline": name, "mapping": b["mapping"],
                    "trained_samples_per_s": value, "basis": b["basis"],
                    "label": measured_label(v) if b["basis"] == "measured" else b["basis"],
                    "pick": c["pick"], "pick_speedup": c["pick_measured"] / value,
                    "best_measured": c["best_measured"],
                    "best_speedup": c["best_measured_value"] / value, "source": str(source),
                }
            )  # fmt: skip
    return rows


def _measured(v: dict, c: dict, mapping: str) -> float:
    """The measured trained samples/s of ``mapping`` in configuration ``c``."""
    at = (c["batch"], c["capacity"], mapping)
    rows = v["rows"]
    return next(r["measured_trained_samples_per_s"] for r in rows if _key(r) == at)


def _key(r: dict) -> tuple[int, int, str]:
    return r["batch"], r["capacity"], r["mapping"]


def _at(r: dict) -> tuple[int, int]:
    """A row's or a configuration's (batch, capacity)."""
    return r["batch"], r["capacity"]


def ratio_rows(baselines: list[dict]) -> list[dict]:
    """Per baseline family: the largest (best measured / baseline) and (pick / baseline) over
    the configurations, and where; then the largest over every family."""
    rows = []
    for name in dict.fromkeys(b["baseline"] for b in baselines):
        sel = [b for b in baselines if b["baseline"] == name]
        top = max(sel, key=lambda b: b["best_speedup"])
        rows.append(
            {
                "kind": "ratio", "baseline": name, "best_over_baseline": top["best_speedup"],
                "at_batch": top["batch"], "at_capacity": top["capacity"],
                "pick_over_baseline": max(b["pick_speedup"] for b in sel),
                "per_config": {f"B{b['batch']} C{b['capacity']}": b["best_speedup"] for b in sel},
                "basis": top["basis"], "label": top["label"], "paper_ratio": PAPER_RATIO,
            }
        )  # fmt: skip
    top = max(rows, key=lambda r: r["best_over_baseline"])
    rows.append({**top, "kind": "ratio_max", "over": "every baseline"})
    measured = [r for r in rows if r["kind"] == "ratio" and r["basis"] == "measured"]
    if measured:
        top = max(measured, key=lambda r: r["best_over_baseline"])
        rows.append({**top, "kind": "ratio_max", "over": "measured baselines"})
    return rows


def print_tables(v: dict, rows: list[dict]) -> None:
    for c in v["configs"]:
        at = _at(c)
        print(f"\n== B {at[0]}, capacity 2^{at[1].bit_length() - 1}, delay k {c['delay']} ==")
        print(f"{'mapping':<58} {'predicted':>10} {'measured':>10} {'error':>7}")
        for r in rows:
            if r["kind"] == "mapping" and _at(r) == at:
                mark = " <- DSE pick" if r["pick"] else ""
                mark += " (best measured)" if r["best_measured"] else ""
                print(
                    f"{r['mapping']:<58} {r['predicted_trained_samples_per_s']:>10,.0f} "
                    f"{r['measured_trained_samples_per_s']:>10,.0f} {r['error']:>+7.1%}{mark}"
                )
        for b in rows:
            if b["kind"] == "baseline" and _at(b) == at:
                print(
                    f"  baseline {b['baseline']:<30} {b['trained_samples_per_s']:>10,.0f} "
                    f"[{b['basis']}]: best {b['best_speedup']:.2f}x, pick "
                    f"{b['pick_speedup']:.2f}x"
                )
    print("\n== best measured mapping over each baseline mapping (largest over configurations) ==")
    for r in rows:
        if r["kind"] == "ratio":
            print(
                f"  {r['baseline']:<32} up to {r['best_over_baseline']:.2f}x (B {r['at_batch']}, "
                f"C {r['at_capacity']}; baseline {r['basis']}); pick up to "
                f"{r['pick_over_baseline']:.2f}x"
            )
    for top in (r for r in rows if r["kind"] == "ratio_max"):
        print(
            f"best vs {top['over']}: up to {top['best_over_baseline']:.2f}x (over "
            f"'{top['baseline']}', {top['basis']}); the paper: up to {PAPER_RATIO}x"
        )


def short(mapping: str) -> str:
    """``actors=jax@cpu:0,replay=native@cpu:1,...`` -> ``A jax@cpu0  R native@cpu1  ...``."""
    parts = [p.split("=", 1) for p in mapping.split(",")]
    return "  ".join(f"{g[0].upper()} {where.replace(':', '')}" for g, where in parts)


def _speedups(b: dict) -> str:
    """``name: best 1.72x`` (and the pick's when it is not the best measured mapping)."""
    text = f"{b['baseline']}: best {b['best_speedup']:.2f}x"
    return text + ("" if b["pick"] == b["best_measured"] else f", pick {b['pick_speedup']:.2f}x")


def panel(ax, conf: dict, rows: list[dict]) -> None:
    """One configuration: horizontal bars of predicted and measured per mapping (best measured
    first), then the modeled baselines; the pick starred, baselines annotated with ratios."""
    at = _at(conf)
    maps = sorted(
        (r for r in rows if r["kind"] == "mapping" and _at(r) == at),
        key=lambda r: -r["measured_trained_samples_per_s"],
    )
    bases = [r for r in rows if r["kind"] == "baseline" and _at(r) == at]
    modeled = [b for b in bases if b["basis"] != "measured"]
    labels, top = [], max(r["measured_trained_samples_per_s"] for r in maps)
    for i, r in enumerate(maps):
        pred, meas = r["predicted_trained_samples_per_s"], r["measured_trained_samples_per_s"]
        ax.barh(i - 0.2, pred, 0.4, color="C0", alpha=0.45)
        ax.barh(i + 0.2, meas, 0.4, color="C0")
        notes = ["DSE pick"] if r["pick"] else []
        notes += ["best measured"] if r["best_measured"] else []
        notes += [_speedups(b) for n in r["baselines"] for b in bases if b["baseline"] == n]
        if r["pick"]:
            ax.plot(meas, i + 0.2, "*", color="C3", ms=12)
        ax.text(max(pred, meas) * 1.02, i, "; ".join(notes), va="center", fontsize=7)
        labels.append(short(r["mapping"]))
    for j, b in enumerate(modeled, start=len(maps)):
        ax.barh(j, b["trained_samples_per_s"], 0.5, color="0.7", hatch="//", edgecolor="0.4")
        text = f"{b['baseline']} [{b['label']}]: {_speedups(b)[len(b['baseline']) + 2 :]}"
        ax.text(b["trained_samples_per_s"] * 1.02, j, text, va="center", fontsize=7)
        labels.append(short(b["mapping"]))
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 2.1 * top)
    ax.set_xlabel("trained samples/s")
    ax.set_ylabel("mapping (A actors, R replay, L learner)", fontsize=8)
    ax.set_title(
        f"B {at[0]}, capacity 2^{at[1].bit_length() - 1}, delay k {conf['delay']}", fontsize=10
    )
    ax.grid(True, axis="x", lw=0.3, alpha=0.5)


def plot(v: dict, rows: list[dict], path: Path, source: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(v["configs"])
    cols = 2 if n > 1 else 1
    fig, axes = plt.subplots(-(-n // cols), cols, figsize=(9 * cols, 5 * -(-n // cols)))
    flat = list(getattr(axes, "flat", [axes]))
    for ax, conf in zip(flat, v["configs"], strict=False):
        panel(ax, conf, rows)
    for ax in flat[n:]:
        ax.axis("off")
    handles = [
        Patch(color="C0", alpha=0.45, label="predicted (DSE model from profiles)"),
        Patch(color="C0", label=measured_label(v)),
        Patch(
            facecolor="0.7",
            hatch="//",
            edgecolor="0.4",
            label="baseline mapping, modeled (its basis beside it)",
        ),
        Line2D([], [], ls="", marker="*", color="C3", ms=12, label="DSE pick"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    tops = "; ".join(
        f"vs {r['over']} up to {r['best_over_baseline']:.2f}x ('{r['baseline']}', {r['basis']})"
        for r in rows
        if r["kind"] == "ratio_max"
    )
    fig.suptitle(
        f"{v['config']}: every runnable mapping, predicted vs measured ({source.name}; no new "
        f"measurement unless --measure)\nbest measured mapping {tops}; paper: up to "
        f"{PAPER_RATIO}x",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: Args) -> list[dict]:
    v, source = load(args)
    rows = mapping_rows(v, source)
    baselines = baseline_rows(v, source)
    rows += baselines + ratio_rows(baselines)
    print_tables(v, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    plot(v, rows, args.plot, source)
    print(f"\nwrote {len(rows)} rows to {args.out} and the plot to {args.plot}")
    return rows


LEAST = {
    "measure_batches": 1,
    "measure_capacities": 1,
    "delay": 0,
    "rounds": 1,
    "chunks": 1,
    "chunk_steps": 1,
}
"""The smallest value of each count (`checked_cli.refused_counts`)."""

if __name__ == "__main__":
    checked_cli.run(Args, main, LEAST, refused)
