"""validate_dse.py's report: one row per runnable mapping (prediction, measurement, errors),
the DSE's pick per configuration against the best and worst measured mapping and the baselines,
the whole validation's JSON summary, and the predicted-vs-measured plot.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import run_info
from report_dse import round_spread, spread_words
from validate_rounds import DEVICES, SPEED_BAND, TRIES

from drlhet.dse.baselines import baselines
from drlhet.dse.build import replay_backends_here
from drlhet.dse.key import ProfileKey
from drlhet.dse.measure import whole_chunk
from drlhet.dse.model import Model, Prediction
from drlhet.dse.search import search

if TYPE_CHECKING:
    from validate_dse import Args

MODELED = ["h100", "u250"]
"""Device sheets the baselines are also searched over (labelled modeled)."""


def _rows(
    args: Args, key: ProfileKey, runnable: list[Prediction], per_round: dict
) -> tuple[list[dict], dict[str, float]]:
    """One row per runnable mapping (prediction, measurement, errors); and mapping -> the
    median of every measured chunk."""
    print(f"{'mapping':<62} {'predicted':>10} {'measured':>10} {'error':>7} {'per round':>20}")
    rows, measured = [], {}
    for p in runnable:
        text = p.mapping_text()
        rs = per_round[text]
        value = statistics.median(c for r in rs for c in r["per_chunk"])
        measured[text] = value
        paired = [r["predicted"] / r["measured"] - 1 for r in rs]
        err = statistics.median(paired)
        print(
            f"{text:<62} {p.trained_samples_per_s:>10,.0f} {value:>10,.0f} {err:>+7.1%} "
            + " ".join(f"{e:+.0%}" for e in paired),
            flush=True,
        )
        rows.append(
            {
                "batch": key.batch,
                "capacity": key.capacity,
                "delay": args.delay,
                "chunk_steps": whole_chunk(key, args.chunk_steps),
                "mapping": text,
                "bottleneck": p.bottleneck,
                "predicted_trained_samples_per_s": p.trained_samples_per_s,
                "measured_trained_samples_per_s": value,
                "error": err,
                "error_per_round": paired,
                "error_unpaired": p.trained_samples_per_s / value - 1,
                "rounds": rs,
                "terms_s": p.terms,
            }
        )
    return rows, measured


def _baselines(model: Model, wide: list[Prediction], measured: dict, pick: float) -> dict:
    """The best mapping of each baseline family over the modeled devices too: measured where
    it ran here, else predicted (labelled with its basis); with the pick's speedup over it."""
    base = {}
    for name, b in baselines(wide, model).items():
        text = b.mapping_text()
        if text in measured:
            base[name] = {"mapping": text, "trained_samples_per_s": measured[text]}
            base[name]["basis"] = "measured"
        else:
            base[name] = {"mapping": text, "trained_samples_per_s": b.trained_samples_per_s}
            base[name]["basis"] = b.basis
        base[name]["pick_speedup"] = pick / base[name]["trained_samples_per_s"]
    return base


def _config(
    args: Args, key: ProfileKey, model: Model, pick: Prediction, measured: dict[str, float]
) -> dict:
    """The DSE's pick for one configuration against the best and worst measured mapping and
    the baselines (printed, and returned as the configuration's summary)."""
    best_text = max(measured, key=lambda t: measured[t])
    worst_text = min(measured, key=lambda t: measured[t])
    pick_measured = measured[pick.mapping_text()]
    wide = search(
        model, DEVICES + MODELED, args.delay, present=DEVICES, backends_here=replay_backends_here()
    )
    conf: dict[str, Any] = {
        "batch": key.batch,
        "capacity": key.capacity,
        "delay": args.delay,
        "pick": pick.mapping_text(),
        "pick_measured": pick_measured,
        "best_measured": best_text,
        "best_measured_value": measured[best_text],
        "pick_within": pick_measured / measured[best_text],
        "worst_measured": worst_text,
        "pick_over_worst": pick_measured / measured[worst_text],
        "best_overall_predicted": wide[0].mapping_text(),
        "best_overall_basis": wide[0].basis,
        "best_overall_predicted_value": wide[0].trained_samples_per_s,
        "baselines": _baselines(model, wide, measured, pick_measured),
    }
    print(
        f"DSE pick {conf['pick']}: {pick_measured:,.0f} measured = "
        f"{conf['pick_within']:.1%} of the best measured ({best_text}); "
        f"{conf['pick_over_worst']:.2f}x the worst ({worst_text})"
    )
    for name, b in conf["baselines"].items():
        print(
            f"  vs {name:<32} {b['trained_samples_per_s']:>12,.0f} ({b['basis']}): "
            f"{b['pick_speedup']:.2f}x"
        )
    return conf


def _summary(machine: str, rows: list[dict], configs: list[dict], profiles: list[dict]) -> dict:
    """The JSON of the whole validation (printed in one line)."""
    errs = [abs(r["error"]) for r in rows]
    summary = {
        "machine": machine,
        "run": run_info(),
        "config": "DQN-PER CartPole-v1, MLP 64x64, 4 envs, 2 SGD steps/iteration, K=16",
        "threads": "default (not pinned; two XLA CPU devices on two cores)",
        "error": "median over rounds of (prediction from the round's profile) / (the round's "
        "measurement) - 1; error_unpaired: merged prediction / median of all chunks - 1",
        "median_abs_error": statistics.median(errs),
        "max_abs_error": max(errs),
        "median_abs_error_unpaired": statistics.median(abs(r["error_unpaired"]) for r in rows),
        "max_abs_error_unpaired": max(abs(r["error_unpaired"]) for r in rows),
        "picks_within_5pct": all(c["pick_within"] >= 0.95 for c in configs),
        "speed_protocol": f"measurements retaken while the machine's speed was not within "
        f"{SPEED_BAND}x of the profile's (speed_probe before and after), at most {TRIES} tries",
        "retakes": sum(rec["tries"] - 1 for r in rows for rec in r["rounds"]),
        "out_of_band": sum(not rec["in_band"] for r in rows for rec in r["rounds"]),
        "round_spread": _spread(rows),
        "configs": configs,
        "rows": rows,
        "round_profiles": profiles,
    }
    print(
        f"\nmodel error over {len(rows)} runnable mappings (paired per round): median |error| "
        f"{summary['median_abs_error']:.1%}, max {summary['max_abs_error']:.1%} (unpaired: "
        f"{summary['median_abs_error_unpaired']:.1%}, {summary['max_abs_error_unpaired']:.1%}); "
        f"DSE pick within 5% of the best measured in every config: {summary['picks_within_5pct']}"
        f"; {summary['retakes']} measurements retaken for the machine's speed, "
        f"{summary['out_of_band']} kept out of band"
        + (f"; between rounds, {spread_words(rows)}" if spread_words(rows) else "")
    )
    return summary


def _spread(rows: list[dict]) -> dict | None:
    """`report_dse.round_spread` as the summary's JSON (None for a run of one round)."""
    spread = round_spread(rows)
    if spread is None:
        return None
    half, both, n = spread
    return {"median_half_range": half, "rows_both_signs": both, "rows": n}


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for (b, c), marker in zip(
        sorted({(r["batch"], r["capacity"]) for r in rows}), "osD^", strict=False
    ):
        sel = [r for r in rows if (r["batch"], r["capacity"]) == (b, c)]
        ax.scatter(
            [r["measured_trained_samples_per_s"] for r in sel],
            [r["predicted_trained_samples_per_s"] for r in sel],
            marker=marker,
            label=f"B={b}, C=2^{c.bit_length() - 1}",
        )
    lo = (
        min(
            min(r["measured_trained_samples_per_s"], r["predicted_trained_samples_per_s"])
            for r in rows
        )
        * 0.8
    )
    hi = (
        max(
            max(r["measured_trained_samples_per_s"], r["predicted_trained_samples_per_s"])
            for r in rows
        )
        * 1.2
    )
    ax.plot([lo, hi], [lo, hi], "k-", lw=1)
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="0.9")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured trained samples/s (this machine)")
    ax.set_ylabel("predicted trained samples/s (profiled model)")
    ax.set_title("DSE model vs measurement, every runnable mapping")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
