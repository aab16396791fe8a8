"""experiments/kernel_source.py: ncu's per-instruction stall samples summed per phase (ncu needs a
GPU; its source page's layout, as ncu 2025.3 prints it on an H100, is written out here)."""

import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", "stall_barrier",
          "stall_long_sb", "stall_membar", "stall_barrier (Not Issued)"]  # fmt: skip


def line(cells) -> str:
    return ",".join(f'"{c}"' for c in cells)


def section(kernel: str, base: int, code: list[tuple[str, int, int, int, int]]) -> list[str]:
    """A kernel's section: ``code`` rows of (sass, samples, barrier, long_sb, membar)."""
    rows = [f'"Kernel Name","{kernel}",', line(HEADER)]
    for i, (sass, samples, barrier, long_sb, membar) in enumerate(code):
        cells = [hex(base + 16 * i), f"      {sass}", samples, samples, "1,024", barrier, long_sb,
                 membar, barrier]  # fmt: skip
        rows.append(line(cells))
    return rows


UPDATE = [
    ("LDG.E R2, desc[UR8][R4.64]", 10, 0, 10, 0),
    ("FADD R3, R2, R3", 2, 0, 0, 0),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 4, 4, 0, 0),  # phase 0 ends here
    ("ERRBAR", 6, 0, 0, 6),
    ("@!P1 UCGABAR_WAIT", 3, 3, 0, 0),  # phase 1: a predicated cluster wait ends it too
    ("UCGABAR_ARV", 0, 0, 0, 0),  # an arrive alone is no wait
    ("EXIT", 1, 0, 0, 0),
]


@pytest.fixture
def source(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    return importlib.import_module("kernel_source")


def page(tmp_path: Path) -> Path:
    """Two launches of the update (at other addresses) and one of the sample, among other
    output, as the gpu_checks stage's log holds them."""
    text = ["==PROF== Disconnected from process 7"]
    text += section("drlhet_cuda_update_cluster", 0x7F0000, UPDATE)
    text += section("drlhet_cuda_sample_cluster_k16", 0x7F9000, [("EXIT", 5, 0, 0, 0)])
    text += section("drlhet_cuda_update_cluster", 0x7A0000, UPDATE)
    path = tmp_path / "source_cuda.log"
    path.write_text("\n".join(text) + "\n")
    return path


def test_launches_are_summed_by_offset_and_cut_after_each_barrier_wait(source, tmp_path, capsys):
    out = tmp_path / "k.json"
    entries = source.main(source.Args(csv_files=(page(tmp_path),), out=out, min_share=0.1))
    assert json.loads(out.read_text()) == entries
    update, sample = entries  # most samples first
    assert (update["kernel"], update["launches"], update["samples"]) == (
        "drlhet_cuda_update_cluster", 2, 52)  # fmt: skip
    assert sample["launches"] == 1 and sample["samples"] == 5
    first, second, third = update["phases"]
    assert (first["first"], first["last"], first["instructions"]) == ("0x0", "0x20", 3)
    assert first["ends_with"] == "BAR.SYNC.DEFER_BLOCKING 0x0"
    assert first["samples"] == 32 and first["share"] == pytest.approx(32 / 52)
    assert first["stalls"] == {"long_sb": 20, "barrier": 8}  # the Not Issued column left out
    assert first["executed"] == 3 * 2 * 1024
    assert first["hottest"][0] == {"at": "0x0", "sass": "LDG.E R2, desc[UR8][R4.64]",
                                   "samples": 20}  # fmt: skip
    assert second["ends_with"] == "@!P1 UCGABAR_WAIT" and second["stalls"]["membar"] == 12
    assert third["ends_with"] is None and third["instructions"] == 2
    printed = capsys.readouterr().out
    assert "== drlhet_cuda_update_cluster: 2 launches, 52 samples" in printed
    assert "61.5% of samples; long_sb 20, barrier 8" in printed
    assert "phase  2" not in printed  # 2 of 52 samples: under min_share


def test_a_file_without_a_source_page_is_refused_by_name(source, tmp_path, refused):
    raw = tmp_path / "stalls_cuda.log"
    raw.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","1"\n')
    with refused("stalls_cuda.log: no source page"):
        source.main(source.Args(csv_files=(raw,), out=tmp_path / "k.json"))
    with refused("no such file"):
        source.main(source.Args(csv_files=(tmp_path / "none.log",), out=tmp_path / "k.json"))


def test_a_source_page_without_addresses_or_with_foreign_ones_is_refused_by_name(
    source, tmp_path, refused
):
    log = tmp_path / "source_cuda.log"
    rows = section("k", 0x7F0000, UPDATE[:2])
    log.write_text("\n".join(rows[:1] + [rows[1].replace('"Address",', '"Addr",')] + rows[2:]))
    with refused(f"{log}: k's source page has no Address column"):
        source.main(source.Args(csv_files=(log,), out=tmp_path / "k.json"))
    log.write_text("\n".join(rows[:2] + [rows[2].replace(hex(0x7F0000), "next")] + rows[3:]))
    with refused(f"{log}: k's address 'next' is not hexadecimal"):
        source.main(source.Args(csv_files=(log,), out=tmp_path / "k.json"))
    log.write_bytes(b'"Kernel Name","k"\n\xff\n')
    with refused(f"{log}: not a text file"):
        source.main(source.Args(csv_files=(log,), out=tmp_path / "k.json"))
    assert not (tmp_path / "k.json").exists()
