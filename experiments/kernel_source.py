"""Where inside a GPU kernel its warps wait: Nsight Compute's per-instruction stall samples,
summed per phase (the code between two barriers).

``experiments/kernel_stalls.py`` says what a kernel's warps wait on overall; this says in which
part of its code. ``experiments/gpu_checks.sh source`` profiles a few launches of the cuda
backend's kernels with ncu's ``SourceCounters`` section (warp-state sampling at every
instruction address) and prints its source page as SASS (``ncu --import REP --page source
--csv --print-source sass``: per kernel, a ``"Kernel Name"`` line, a header, then one row per
instruction with its samples and stall reasons). This script adds up the launches of each
kernel by the instruction's offset in the kernel, cuts the SASS into phases after each barrier
wait (``BAR.SYNC``/``BAR.RED`` of the block, ``UCGABAR_WAIT`` of the cluster) and reports each
phase's share of the samples, its stall reasons and its hottest instructions. The phases follow
the code's addresses, not its execution order: for the kernels of this project, straight-line
phases separated by barriers, the two agree; a loop's body is one phase if it holds no barrier.
*Measured* by ncu on that GPU (each kernel alone, caches flushed by default).

Usage:
  python experiments/kernel_source.py --csv-files source_cuda.log --out kernel_source.json
"""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import checked_cli
from ncu_files import read_text, summarise_each, write_rows

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
STALL = re.compile(r"^stall_(\w+)$")  # the "(Not Issued)" columns do not match
BARRIER_WAIT = re.compile(r"^(@!?U?P\w+\s+)?(BAR\.(SYNC|RED)|UCGABAR_WAIT)\b")


@dataclasses.dataclass
class Args:
    csv_files: tuple[Path, ...]
    """Files holding ncu's source page as CSV, alone or among other output: only quoted lines
    are read."""
    out: Path = Path("kernel_source.json")
    min_share: float = 0.02
    """Phases printed: those with at least this share of their kernel's samples (the JSON keeps
    them all)."""
    hottest: int = 3
    """Instructions listed per phase, most samples first."""


def number(text: str) -> int:
    """ncu's count as an int (thousands separators dropped; text or n/a: 0)."""
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def sections(path: Path) -> list[tuple[str, list[dict[str, str]]]]:
    """``(kernel, rows)`` per kernel section of ``path``, each row a header -> cell dict.

    Raises ``ValueError`` naming the file when it holds no section with instruction rows.
    """
    out: list[tuple[str, list[dict[str, str]]]] = []
    header: list[str] = []
    lines = [ln for ln in read_text(path).splitlines() if ln.startswith('"')]
    for cells in csv.reader(lines):
        if cells[:1] == ["Kernel Name"]:
            out.append((cells[1] if len(cells) > 1 else "", []))
            header = []
        elif out and not header:
            header = cells
        elif out and len(cells) == len(header):
            out[-1][1].append(dict(zip(header, cells, strict=True)))
    out = [(kernel, rows) for kernel, rows in out if rows and SAMPLES in rows[0]]
    if not out:
        raise ValueError(f"{path}: no source page (ncu --page source --csv) in it")
    for kernel, rows in out:
        lacking = [c for c in ("Address", "Source") if c not in rows[0]]
        if lacking:
            raise ValueError(f"{path}: {kernel}'s source page has no {' or '.join(lacking)} column")
        for row in rows:
            if not re.fullmatch(r"(0x)?[0-9a-fA-F]+", row["Address"]):
                raise ValueError(
                    f"{path}: {kernel}'s address {row['Address']!r} is not hexadecimal"
                )
    return out


def merged(path: Path) -> dict[str, dict]:
    """Per kernel: its launches and, per instruction offset (from the kernel's first address),
    the SASS text and the samples, executions and stall samples summed over its launches."""
    kernels: dict[str, dict] = {}
    for kernel, rows in sections(path):
        entry = kernels.setdefault(kernel, {"launches": 0, "code": {}})
        entry["launches"] += 1
        start = int(rows[0]["Address"], 16)
        for row in rows:
            at = int(row["Address"], 16) - start
            slot = entry["code"].setdefault(
                at, {"sass": row["Source"].strip(), "samples": 0, "executed": 0, "stalls": {}}
            )
            slot["samples"] += number(row[SAMPLES])
            slot["executed"] += number(row.get(EXECUTED, ""))
            for name, cell in row.items():
                if (m := STALL.match(name)) and (v := number(cell)):
                    slot["stalls"][m[1]] = slot["stalls"].get(m[1], 0) + v
    return kernels


def phases(code: dict[int, dict], hottest: int) -> list[dict]:
    """The kernel's code cut after each barrier wait: per phase its offsets, instructions,
    executions, samples, stall samples (largest first), the barrier ending it, and its
    ``hottest`` instructions."""
    cuts: list[list[tuple[int, dict]]] = [[]]
    for at in sorted(code):
        cuts[-1].append((at, code[at]))
        if BARRIER_WAIT.match(code[at]["sass"]):
            cuts.append([])
    out = []
    for part in (p for p in cuts if p):
        stalls: dict[str, int] = {}
        for _, slot in part:
            for reason, v in slot["stalls"].items():
                stalls[reason] = stalls.get(reason, 0) + v
        last = part[-1][1]["sass"]
        hot = sorted(part, key=lambda item: -item[1]["samples"])[:hottest]
        out.append(
            {
                "first": hex(part[0][0]),
                "last": hex(part[-1][0]),
                "instructions": len(part),
                "executed": sum(slot["executed"] for _, slot in part),
                "samples": sum(slot["samples"] for _, slot in part),
                "stalls": dict(sorted(stalls.items(), key=lambda kv: -kv[1])),
                "ends_with": last if BARRIER_WAIT.match(last) else None,
                "hottest": [
                    {"at": hex(at), "sass": slot["sass"], "samples": slot["samples"]}
                    for at, slot in hot
                    if slot["samples"]
                ],
            }
        )
    return out


def summarise(path: Path, hottest: int = 3) -> list[dict]:
    """One entry per kernel of ``path``: launches, samples, phases (each with its share)."""
    entries = []
    for kernel, entry in merged(path).items():
        parts = phases(entry["code"], hottest)
        total = sum(p["samples"] for p in parts)
        for p in parts:
            p["share"] = p["samples"] / total if total else 0.0
        entries.append(
            {
                "file": path.name,
                "kernel": kernel,
                "launches": entry["launches"],
                "samples": total,
                "phases": parts,
                "measured": "ncu SourceCounters (warp-state sampling), each kernel alone",
            }
        )
    return sorted(entries, key=lambda e: -e["samples"])


def report(entries: list[dict], min_share: float) -> None:
    """Each kernel's phases with at least ``min_share`` of its samples, one line each."""
    for e in entries:
        print(f"== {e['kernel']}: {e['launches']} launches, {e['samples']} samples")
        for i, p in enumerate(e["phases"]):
            if p["share"] < min_share:
                continue
            stalls = ", ".join(f"{k} {v}" for k, v in list(p["stalls"].items())[:3])
            end = p["ends_with"] or "end"
            print(
                f"  phase {i:2d} {p['first']}..{p['last']} ({p['instructions']} instr, ends"
                f" {end}): {100 * p['share']:5.1f}% of samples; {stalls or 'no stalls'}"
            )
            for h in p["hottest"]:
                print(f"      {h['at']} {h['samples']:6d}  {h['sass'][:60]}")


def main(args: Args) -> list[dict]:
    entries = summarise_each(args.csv_files, lambda path: summarise(path, args.hottest))
    report(entries, args.min_share)
    write_rows(entries, args.out, "kernels")
    return entries


if __name__ == "__main__":
    least = {"hottest": 0}  # a negative one sliced all but the last instructions
    checked_cli.run(Args, main, least, lambda a: checked_cli.no_files("--csv-files", a.csv_files))
