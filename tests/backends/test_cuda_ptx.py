"""What the CUDA kernels that wait on other blocks compile to (nvcc -ptx, sm_90).

A 64-bit atomic on shared memory is not done by an sm_90 GPU through a generic or
shared::cluster address: nvcc emits it with a fallback (SASS: ATOM.E.*.64 whose predicate comes
back false, then LDS/ATOMS on the address's low word, or plain LD/ST) that acts on the executing
block's own shared memory or not atomically. The cluster update's claims in shared memory (a
path since removed: slower than the claims in global memory) made exactly that mistake and lost
claims on an H100 (15 of 26 GPU cases failed, 2026-11-27) while the host emulation, whose blocks
never run at once, passed. This test reads the PTX of every kernel that maps another block's
shared memory (``mapa``) and refuses a generic 64-bit atomic there (the tagged update's 64-bit
claims on its table in global memory compile to ``atom.global``); it needs nvcc only, no GPU.
The same for the barrier of the whole grid that the spread sample waits at on a GPU, where the
emulation runs a barrier of its own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ("sample_kernels.cuh", "sample_spread.cuh", "sum_tree_kernels.cuh", "tag_table.cuh")
# an atomic or reduction with no state space (generic addressing) on a 64-bit word
GENERIC_64 = re.compile(r"\b(?:atom|red)(?!\.(?:shared|global))(?:\.\w+)*\.[bsu]64\b")


def ptx_entries(tmp_path: Path, source: str) -> dict[str, str]:
    """The PTX body of each kernel (.entry) that `source` (CUDA C++) defines, for sm_90."""
    if shutil.which("nvcc") is None:
        pytest.skip("missing library: the CUDA toolkit (nvcc is not on PATH)")
    cu, ptx = tmp_path / "kernels.cu", tmp_path / "kernels.ptx"
    cu.write_text(source)
    flags = ["-std=c++17", "-arch=sm_90", "-ptx", f"-I{ROOT}", f"-I{ROOT / 'kernels/include'}"]
    subprocess.run(["nvcc", *flags, "-o", str(ptx), str(cu)], check=True, capture_output=True)
    text = ptx.read_text()
    starts = [(m.group(1), m.start()) for m in re.finditer(r"\.entry\s+(\w+)", text)]
    ends = [s for _, s in starts[1:]] + [len(text)]
    return {name: text[s:e] for (name, s), e in zip(starts, ends, strict=True)}


def test_kernels_on_other_blocks_shared_memory_use_no_64_bit_generic_atomic(tmp_path):
    includes = "".join(f'#include "kernels/cuda/{h}"\n' for h in HEADERS)
    entries = ptx_entries(tmp_path, includes)
    remote = {name: body for name, body in entries.items() if "mapa" in body}
    assert {"drlhet_cuda_update_cluster", "drlhet_cuda_update_cluster_tagged"} <= set(remote)
    bad = {name: GENERIC_64.findall(body) for name, body in remote.items()}
    assert not {name: ops for name, ops in bad.items() if ops}


def test_the_check_sees_a_64_bit_atomic_on_another_blocks_shared_memory(tmp_path):
    # the claims' first form: 64-bit CAS and max through a mapped (generic) address
    entries = ptx_entries(
        tmp_path,
        """#include <cooperative_groups.h>
__global__ void __cluster_dims__(8, 1, 1) claims(unsigned long long* out) {
  __shared__ unsigned long long table[64];
  unsigned long long* peer = cooperative_groups::this_cluster().map_shared_rank(table, 1);
  unsigned long long held = atomicCAS(peer + threadIdx.x, ~0ull, out[threadIdx.x]);
  atomicMax(peer + threadIdx.x, held);
  out[threadIdx.x] = held;
}
""",
    )
    assert GENERIC_64.findall(entries["_Z6claimsPy"]) == ["atom.cas.b64", "atom.max.u64"]


def test_the_spread_sample_waits_at_a_barrier_of_the_whole_grid(tmp_path):
    """The spread sample's GridSync on a GPU (kernels/cuda/sample_spread.cuh) is cooperative
    groups' grid barrier: an arrival released at GPU scope and a wait acquired at GPU scope
    between two barriers of the block. The emulation runs its own GridSync, so only the PTX
    shows that the GPU's is there; no other sample kernel has one."""
    entries = ptx_entries(tmp_path, '#include "kernels/cuda/sample_spread.cuh"\n')
    grid_barrier = re.compile(
        r"barrier\.sync\s+0;.*?atom\.add\.release\.gpu\.u32.*?ld\.acquire\.gpu\.u32.*?"
        r"barrier\.sync\s+0;",
        re.S,
    )
    spread = {n: body for n, body in entries.items() if n.startswith("drlhet_cuda_sample_spread")}
    assert sorted(spread) == ["drlhet_cuda_sample_spread", "drlhet_cuda_sample_spread_k16"]
    assert all(grid_barrier.search(body) for body in spread.values())
    others = {n: body for n, body in entries.items() if n not in spread}
    assert others and not any(grid_barrier.search(body) for body in others.values())
