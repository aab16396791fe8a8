"""The learner module's banked memories (``hls/learner/memory.h``): parameter memories as rows
of 64 lanes, each layer padded to whole blocks of outputs, converted from and to the host's flat
(flax) layout only at the load and store. The C-simulation's path through them is checked
against flax by tests/backends/test_fpga_learner*.py; here the layout itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from drlhet.dse.devices import learner_cycles
from drlhet.dse.devices.learner_testbench import LEARNER_DIR
from tests.hls.test_learner_testbench import TD3_SETUP

LAYOUT = (
    r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "host.h"
namespace ln = drlhet::learner;

// Every padding lane (outputs past a layer's width in its last block) of `rows` is +0.
static bool PaddingZero(const ln::Net& net, const ln::Row* rows) {
  std::vector<char> live(size_t(net.rows) * ln::kPOut, 0);
  ln::ForEachParam(net, [&](int64_t, int64_t r, int q) { live[size_t(r) * ln::kPOut + q] = 1; });
  for (int64_t r = 0; r < net.rows; ++r)
    for (int q = 0; q < ln::kPOut; ++q) {
      const float v = rows[r][q];
      if (!live[size_t(r) * ln::kPOut + q] && (v != 0.0f || std::signbit(v))) return false;
    }
  return true;
}

static bool Finite(const std::vector<float>& v) {
  for (float x : v) if (!std::isfinite(x)) return false;
  return true;
}

int main() {
  static ln::Row rows[ln::kMaxRows];
  static ln::DqnHost h;
  static ln::DdpgHost dh;
  std::memset(&h, 0xFF, sizeof(h));  // NaN everywhere: a step may read only what it wrote
  std::memset(&dh, 0xFF, sizeof(dh));
  std::memset(rows, 0xFF, sizeof(rows));
  ln::Net net;
  const int widths[3] = {70, 5, 0}, outs[2] = {1, 3};
  ln::MakeNet(8, widths, 2, outs, 2, &net);
  const size_t p = size_t(net.size);
  std::vector<float> flat(p), back(p, -1.0f);
  for (size_t k = 0; k < p; ++k) flat[k] = 0.01f * float(int(k % 97) - 48);
  ln::PackParams(net, flat.data(), rows);
  ln::UnpackParams(net, rows, back.data());
  bool roundtrip = std::memcmp(flat.data(), back.data(), 4 * p) == 0;
  ln::ForEachParam(net, [&](int64_t k, int64_t r, int q) {  // the loops' rows, element by element
    roundtrip = roundtrip && std::memcmp(&rows[r][q], &flat[k], 4) == 0;
  });
  bool pad = PaddingZero(net, rows);
  ln::DqnConfig cfg;
  cfg.opt.max_norm = 0.5;  // the clip reads the global norm over every lane
  const int b = 13;
  std::vector<float> mem(4 * p), obs(b * 8), next(b * 8), r(3 * b), out(b), w(b, 1.0f);
  for (size_t k = 0; k < mem.size(); ++k)
    mem[k] = k >= 2 * p ? 1e-4f * float(k % 7) : 0.1f * float(int(k % 13) - 6) / 6.0f;
  for (size_t k = 0; k < obs.size(); ++k) obs[k] = 0.1f * float(int(k % 11) - 5), next[k] = 0.05f;
  for (size_t k = 0; k < r.size(); ++k) r[k] = k < size_t(b) ? float(k % 3) : 0.99f;
  std::vector<int32_t> action(b);
  for (int k = 0; k < b; ++k) action[k] = k % 3;
  float* m = mem.data();
  for (int k = 0; k < 5; ++k)
    ln::DqnStepFlat(net, cfg, m, m + p, m + 2 * p, m + 3 * p, k, k + 1, obs.data(),
                    action.data(), r.data(), r.data() + b, next.data(), w.data(), b,
                    out.data(), &h);
  for (const ln::Row* rs : {h.params, h.target, h.mu, h.nu, h.scratch.grads})
    pad = pad && PaddingZero(net, rs);
  bool finite = Finite(mem) && Finite(out);
"""
    + TD3_SETUP
    + r"""
  for (int k = 0; k < 4; ++k) ln::DdpgStepFlat(nets, dc, mm, k, k, k + 1, bb, dout.data(), &dh);
  for (const ln::Row* rs : {dh.actor, dh.target_actor, dh.actor_mu, dh.actor_nu})
    pad = pad && PaddingZero(nets.actor, rs);
  for (const ln::Row* rs : {dh.critic, dh.target_critic, dh.critic_mu, dh.critic_nu})
    pad = pad && PaddingZero(nets.critic, rs) && PaddingZero(nets.critic, rs + nets.critic.rows);
  finite = finite && Finite(dm) && Finite(dout);
  std::printf("ROWS %lld %lld %lld ROUNDTRIP %d PAD %d FINITE %d\n", (long long)net.rows,
              (long long)nets.actor.rows, (long long)nets.critic.rows, int(roundtrip), int(pad),
              int(finite));
}
"""
)


def _run(tmp_path, source: str) -> str:
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    src, exe = tmp_path / "layout.cpp", tmp_path / "layout"
    src.write_text(source)
    cmd = [cxx, "-std=c++17", "-O1", "-w", f"-I{LEARNER_DIR}", str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("layout"), LAYOUT).split()


def test_the_row_count_is_the_cycle_models(layout):
    """The optimizer and the global norm run one iteration a row: the model's `memory_rows`
    must be the rows the code lays out (partial blocks: widths 70, 5, 3 and 33, heads of 1)."""
    rows = [int(x) for x in layout[1:4]]
    net = learner_cycles.layers(8, (70, 5), (1, 3))
    actor = learner_cycles.layers(5, (33,), (2,))
    critic = learner_cycles.layers(7, (33,), (1,))
    assert rows == [learner_cycles.memory_rows(n) for n in (net, actor, critic)]
    assert rows[0] == 9 * 2 + 71 * 1 + 6 * 1 + 6 * 1  # 70 outputs take two blocks of 64


def test_the_flat_layout_round_trips_bit_for_bit(layout):
    assert layout[layout.index("ROUNDTRIP") + 1] == "1"


def test_the_padding_stays_positive_zero_from_a_scratch_of_nans(layout):
    """The memories and the scratch start as NaN bytes: a step that read a padding lane it had
    not written (the gradient's, in the clip's global norm) would spread NaN; the packed
    memories, the gradient and the optimizer keep every padding lane +0 over DQN and TD3 steps."""
    assert layout[layout.index("PAD") + 1] == "1"
    assert layout[layout.index("FINITE") + 1] == "1"


TOP_HASH = r"""
#include <cstdio>
#include <cstring>
#include <vector>
#include "learner_top.cpp"
namespace t = drlhet::learner::top;
static unsigned long long Hash(unsigned long long h, const std::vector<float>& v) {
  for (float x : v) { unsigned u; std::memcpy(&u, &x, 4); h = (h ^ u) * 1099511628211ULL; }
  return h;
}
int main() {  // the default top (4-64-64-2 dueling): load, three steps of B 40, store
  std::vector<double> hp = {1e-3, 0.9, 0.999, 1e-8, 0.5, 1.0, 1e-6, 0.01, 0, 1, 0};
  hp.resize(t::kHyper);
  std::vector<float> mem(t::kMemory), out(t::kMemory + 64), batch(40 * (2 * t::kObs + 4));
  for (size_t k = 0; k < mem.size(); ++k)
    mem[k] = k >= mem.size() / 2 ? 1e-4f * float(k % 5) : 0.02f * float(int(k % 19) - 9);
  uint32_t cmd[4] = {t::kLoad, 0, 0, 0};
  learner_top(cmd, hp.data(), mem.data(), out.data());
  unsigned long long h = 1469598103934665603ULL;
  for (int s = 0; s < 3; ++s) {
    for (size_t k = 0; k < batch.size(); ++k) batch[k] = 0.1f * float(int((k * 7 + s) % 23) - 11);
    for (int r = 0; r < 40; ++r) batch[40 * t::kObs + r] = float(r % t::kActions);
    cmd[0] = t::kStep, cmd[1] = 40;
    learner_top(cmd, hp.data(), batch.data(), out.data());
    h = Hash(h, std::vector<float>(out.begin(), out.begin() + 42));
  }
  cmd[0] = t::kStore;
  learner_top(cmd, hp.data(), nullptr, out.data());
  out.resize(t::kMemory);
  std::printf("WIDTH %d HASH %llx\n", drlhet::learner::kMaxWidth, Hash(h, out));
}
"""


def test_a_top_sized_to_its_network_computes_the_same_bits(tmp_path):
    """LEARNER_SIZED_TILES (the default) makes the default top's tiles 64 columns wide, its
    widest layer, not the module's 256: the same steps and memories bit for bit either way."""
    src = tmp_path / "top.cpp"
    src.write_text(TOP_HASH)
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    outs = []
    for sized in (1, 0):
        exe = tmp_path / f"top{sized}"
        flags = [f"-DLEARNER_SIZED_TILES={sized}", f"-I{LEARNER_DIR}", str(src), "-o", str(exe)]
        subprocess.run([cxx, "-std=c++17", "-O1", "-w", *flags], check=True, capture_output=True)
        outs.append(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)
    sized, module = (o.split() for o in outs)
    assert sized[1] == "64" and module[1] == "256"
    assert sized[3] == module[3] and len(sized[3]) >= 8


@pytest.mark.parametrize(
    "defines, width, nets",
    [
        ({}, 64, [(4, (64, 64), (1, 2))]),
        ({"LEARNER_H0": 65}, 128, [(4, (65, 64), (1, 2))]),
        ({"LEARNER_OBS": 200, "LEARNER_H0": 32, "LEARNER_H1": 0}, 256, [(200, (32,), (1, 2))]),
        (
            {"LEARNER_ALGO": 1, "LEARNER_OBS": 60, "LEARNER_ACTIONS": 6, "LEARNER_H1": 0},
            128,
            [(60, (64,), (6,)), (66, (64,), (1,))],
        ),
    ],
)
def test_a_sized_top_holds_its_widest_layer_and_its_networks_rows(tmp_path, defines, width, nets):
    """The tiles as wide as the widest layer rounded up to 64 columns (DDPG's critic reads
    obs + actions, 66), the gradient memory as many rows as the top's largest network has."""
    src = tmp_path / "w.cpp"
    src.write_text(
        '#include <cstdio>\n#include "learner_top.h"\n#include "memory.h"\n'
        'int main() { std::printf("%d %lld", drlhet::learner::kMaxWidth,'
        " (long long)drlhet::learner::kMaxRows); }\n"
    )
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    exe = tmp_path / "w"
    cmd = [cxx, "-std=c++17", *flags, f"-I{LEARNER_DIR}", str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
    rows = max(learner_cycles.memory_rows(learner_cycles.layers(*n)) for n in nets)
    assert got == [str(width), str(rows)]


PERIODIC_COPY = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>
#include "host.h"
namespace ln = drlhet::learner;
int main() {  // a periodic target update (period 1: a copy every step) over an inf target
  static ln::DqnHost h;
  ln::Net net;
  const int widths[3] = {8, 0, 0}, outs[2] = {1, 2};
  ln::MakeNet(3, widths, 1, outs, 2, &net);
  ln::DqnConfig cfg;
  cfg.period = 1;
  const size_t p = size_t(net.size);
  const int b = 4;
  std::vector<float> mem(4 * p, 0.0f), obs(b * 3, 0.5f), r(2 * b, 0.5f), out(b), w(b, 1.0f);
  for (size_t k = 0; k < p; ++k) mem[k] = k % 3 == 0 ? -0.0f : 0.1f * float(k % 7);
  for (size_t k = p; k < 2 * p; ++k) mem[k] = std::numeric_limits<float>::infinity();
  std::vector<int32_t> action(b, 1);
  float* m = mem.data();
  ln::DqnStepFlat(net, cfg, m, m + p, m + 2 * p, m + 3 * p, 0, 1, obs.data(), action.data(),
                  r.data(), r.data() + b, obs.data(), w.data(), b, out.data(), &h);
  std::printf("%d\n", std::memcmp(m, m + p, 4 * p) == 0);
}
"""


def test_a_periodic_target_update_is_an_exact_copy(tmp_path):
    """optax.periodic_update selects the online parameters; the module computed 1 p + 0 t,
    which turned an inf target into NaN and a -0 parameter into +0: now a copy, bit for bit."""
    assert _run(tmp_path, PERIODIC_COPY).strip() == "1"
