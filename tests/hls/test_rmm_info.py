"""The replay module's info op (``hls/rmm/rmm.h``: kInfo) in its g++ testbench: the synthesized
top (``rmm_top.cpp``) answers the K, capacity and F it was compiled with, as ``rmm::Serve`` does
for the same build; and the host's words for the op (`drlhet.backends.rmm_spec`) are the
header's."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from drlhet.backends import rmm_spec
from drlhet.dse.devices.rmm_testbench import RMM_DIR, ap_types


def test_the_synthesized_top_answers_its_build(tmp_path):
    """Built for K 8, 1000 leaves (not a power of K) and F 12, none of them the defaults
    (the testbench requires rmm_top's answer to equal its macros and Serve's answer)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("missing library: no C++ compiler (g++) for the testbench")
    exe = tmp_path / "rmm_tb_info"
    cmd = [cxx, "-std=c++17", "-O2", "-w", f"-I{RMM_DIR}", "-isystem", str(ap_types())]
    cmd += ["-DRMM_K=8", "-DRMM_CAPACITY=1000", "-DRMM_FRAC_BITS=12"]
    subprocess.run([*cmd, str(RMM_DIR / "rmm_tb.cpp"), "-o", str(exe)], check=True)
    run = subprocess.run([str(exe), "40", "3"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    version = rmm_spec.PROTOCOL_VERSION
    assert run.stdout.startswith("PASS K=8 capacity=1000")
    assert run.stdout.rstrip().endswith(f"info={version},8,1000,12"), run.stdout


def test_the_hosts_info_words_are_the_headers():
    header = (RMM_DIR / "rmm.h").read_text()

    def constant(name: str) -> int:
        found = re.search(rf"\b{name}\s*=\s*(0x[0-9A-Fa-f]+|\d+)u?\b", header)
        assert found, name
        return int(found.group(1), 0)

    assert constant("kInfo") == rmm_spec.INFO
    assert constant("kProtocolVersion") == rmm_spec.PROTOCOL_VERSION
    assert constant("kInfoMagic") == rmm_spec.INFO_MAGIC
    assert constant("kInfoWords") == rmm_spec.INFO_WORDS
