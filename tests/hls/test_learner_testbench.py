"""The learner module's cycle model (`drlhet.dse.devices.learner_cycles`) against the testbench's
stepped count of the loops one step of the HLS code runs (``hls/learner/learner_tb.cpp
--cycles``: the step runs, each pipelined loop recording its trip count as it starts)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from drlhet.dse.devices import learner_cycles
from drlhet.dse.devices.learner_testbench import (
    LEARNER_DIR,
    build,
    stepped_cycles,
    stepped_ddpg_cycles,
)

NETWORKS = [  # (obs_dim, hidden, actions, dueling, double)
    (8, (64,), 4, False, True),  # the authors' DQN learner, 8-64-4
    (4, (64, 64), 2, True, True),  # drlhet's CartPole DQN
    (16, (256, 256, 128), 6, True, False),  # the module's largest sizes
    (7, (65, 3), 130, True, True),  # widths past a block of 64 and below one
    (4, (), 2, False, True),  # no hidden layer
]


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return build(tmp_path_factory.mktemp("learner_tb"))


@pytest.mark.parametrize("net", NETWORKS)
@pytest.mark.parametrize("batch", [1, 8, 16, 100, 256])
def test_the_cycle_model_equals_the_stepped_count(exe, net, batch):
    obs_dim, hidden, actions, dueling, double = net
    stepped, params = stepped_cycles(exe, obs_dim, hidden, actions, batch, dueling, double)
    model = learner_cycles.dqn_step_cycles(obs_dim, hidden, actions, batch, dueling, double)
    assert model == stepped, (net, batch)
    heads = (1, actions) if dueling else (actions,)
    assert params == sum(i * o + o for i, o in learner_cycles.layers(obs_dim, hidden, heads))


DDPG_NETWORKS = [  # (obs_dim, hidden, actions, critics)
    (8, (32,), 4, 1),  # the authors' DDPG learner, 8-32-4 / 12-32-1
    (3, (64, 64), 1, 1),  # drlhet's Pendulum DDPG
    (17, (256, 256), 6, 2),  # TD3 on a MuJoCo-sized task
    (5, (), 3, 2),  # no hidden layer: the critic's input gradient written out by its head
]


@pytest.mark.parametrize("net", DDPG_NETWORKS)
@pytest.mark.parametrize("batch", [7, 16, 256])
@pytest.mark.parametrize("actor", [True, False])
def test_the_ddpg_cycle_model_equals_the_stepped_count(exe, net, batch, actor):
    obs_dim, hidden, actions, critics = net
    stepped, params = stepped_ddpg_cycles(exe, obs_dim, hidden, actions, batch, critics, actor)
    model = learner_cycles.ddpg_step_cycles(obs_dim, hidden, actions, batch, critics, actor)
    assert model == stepped, (net, batch, actor)
    pi = learner_cycles.layers(obs_dim, hidden, (actions,))
    q = learner_cycles.layers(obs_dim + actions, hidden, (1,))
    assert params == sum(i * o + o for i, o in pi + q)


def test_the_stepped_count_is_of_the_loops_the_code_runs(exe, tmp_path):
    """A change to the HLS code's loops moves the stepped count, not the model: here the
    optimizer stepping every row the module could hold (kMaxRows) instead of the network's
    (`memory_rows`), as a loop bound taken from the array rather than the layout would."""
    import shutil

    sources = tmp_path / "learner"
    shutil.copytree(LEARNER_DIR, sources)
    mlp = sources / "mlp.h"
    rows = "r < rows; ++r) {  // a row of kPOut parameters an iteration: the lanes"
    assert rows in mlp.read_text()
    mlp.write_text(mlp.read_text().replace(rows, "r < kMaxRows; ++r) {"))
    planted = build(tmp_path, sources=sources)
    net = (4, (64, 64), 2, 64)
    model = learner_cycles.dqn_step_cycles(*net)
    assert stepped_cycles(exe, *net)[0] == model
    # 5,140 iterations where the network's 200 rows ran
    assert stepped_cycles(planted, *net)[0] > model + 4900


def test_td3_costs_its_actor_step_one_step_in_policy_delay():
    full = learner_cycles.ddpg_step_cycles(3, (64, 64), 1, 64, 2, actor=True)
    light = learner_cycles.ddpg_step_cycles(3, (64, 64), 1, 64, 2, actor=False)
    assert light < full
    mean = learner_cycles.ddpg_mean_step_cycles(3, (64, 64), 1, 64, td3=True, policy_delay=2)
    assert mean == (full + light) / 2
    ddpg = learner_cycles.ddpg_mean_step_cycles(3, (64, 64), 1, 64)
    assert ddpg == learner_cycles.ddpg_step_cycles(3, (64, 64), 1, 64, 1, actor=True)


def test_the_stepped_count_sees_the_adders_latency(exe):
    """Below P_BATCH * add samples the forward accumulators recur faster than the adder
    finishes: per sample the step gets dearer, as the closed form says; and a slower adder
    costs more cycles in the model."""
    per_sample = {}
    for b in (8, 64):
        stepped, _ = stepped_cycles(exe, 4, (64, 64), 2, b)
        per_sample[b] = stepped / b
    assert per_sample[8] > 2 * per_sample[64]
    slow = dataclasses.replace(learner_cycles.Timing(), add=9)
    assert learner_cycles.dqn_step_cycles(4, (64, 64), 2, 8, t=slow) > (
        learner_cycles.dqn_step_cycles(4, (64, 64), 2, 8)
    )


def test_a_network_outside_the_module_is_refused(exe):
    with pytest.raises(ValueError, match="outside the module"):
        stepped_cycles(exe, 4, (512,), 2, 64)
    with pytest.raises(ValueError, match="outside the module"):
        stepped_cycles(exe, 4, (64,), 2, 1024)


TOPS = {  # the synthesized top's configurations (hls/learner/learner_top.h)
    "DQN 4-64-64-2 dueling": {},
    "DQN 8-64-4 plain": {
        "LEARNER_OBS": 8,
        "LEARNER_ACTIONS": 4,
        "LEARNER_H1": 0,
        "LEARNER_DUELING": 0,
    },
    "DDPG 3-64-64-1": {"LEARNER_ALGO": 1, "LEARNER_OBS": 3, "LEARNER_ACTIONS": 1},
    "TD3 5-32-16-2": {
        "LEARNER_ALGO": 1,
        "LEARNER_OBS": 5,
        "LEARNER_H0": 32,
        "LEARNER_H1": 16,
        "LEARNER_CRITICS": 2,
    },
}


@pytest.mark.parametrize("name", list(TOPS))
def test_the_synthesized_top_runs_the_c_simulations_step_bit_for_bit(tmp_path, name):
    """learner_top (load, steps, store through its host protocol) against DqnStep / DdpgStep
    on the host's memories: the same priorities, metrics, memories and counts."""
    import subprocess

    exe = build(tmp_path, TOPS[name])
    run = subprocess.run([str(exe), "--top", "4", "7"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("TOP OK"), run.stdout + run.stderr


TOP_OVER_BATCH = r"""
#include <cstdio>
#include <vector>
#include "learner_top.cpp"
int main() {  // a step command of B past kMaxBatch: nothing read or written
  namespace t = drlhet::learner::top;
  std::vector<double> hp(t::kHyper, 0.0);
  hp[0] = 1e-3, hp[1] = 0.9, hp[2] = 0.999, hp[3] = 1e-8, hp[4] = 10, hp[5] = 1, hp[9] = 1;
  std::vector<float> mem(t::kMemory, 0.01f), out(t::kMemory + 4096, -7.0f);
  uint32_t load[4] = {t::kLoad, 0, 0, 0};
  learner_top(load, hp.data(), mem.data(), out.data());
  const int b = drlhet::learner::kMaxBatch + 44;
  std::vector<float> batch(size_t(b) * (2 * LEARNER_OBS + 4), 0.0f);
  uint32_t step[4] = {t::kStep, uint32_t(b), 0, 0};
  learner_top(step, hp.data(), batch.data(), out.data());
  for (float v : out) if (v != -7.0f) return 3;
  std::puts("untouched");
}
"""


def _run_with_asan(tmp_path, source: str):
    """Compiles ``source`` (which includes learner_top.cpp) with AddressSanitizer and runs it."""
    import shutil
    import subprocess

    from drlhet.dse.devices.learner_testbench import LEARNER_DIR

    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    src, exe = tmp_path / "top.cpp", tmp_path / "top"
    src.write_text(source)
    cmd = [cxx, "-std=c++17", "-O1", "-g", "-w", "-fsanitize=address", f"-I{LEARNER_DIR}"]
    subprocess.run([*cmd, str(src), "-o", str(exe)], check=True, capture_output=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)


def test_the_top_does_nothing_for_a_batch_past_its_buffers(tmp_path):
    """``learner_top``'s step command takes B from the host: past ``kMaxBatch`` it wrote past
    its buffers (AddressSanitizer: a global-buffer-overflow); now it does nothing, as an
    unknown command."""
    done = _run_with_asan(tmp_path, TOP_OVER_BATCH)
    assert done.returncode == 0 and done.stdout.strip() == "untouched", done.stderr[-1500:]


TOP_BAD_ACTION = r"""
#include <cmath>
#include <cstdio>
#include <vector>
#include "learner_top.cpp"
int main() {  // DQN 4-64-64-2: a step whose action is not in {0, 1} changes nothing
  namespace t = drlhet::learner::top;
  std::vector<double> hp(t::kHyper, 0.0);
  hp[0] = 1e-3, hp[1] = 0.9, hp[2] = 0.999, hp[3] = 1e-8, hp[4] = 10, hp[5] = 1, hp[9] = 1;
  std::vector<float> mem(t::kMemory, 0.01f), out(t::kMemory, -7.0f);
  uint32_t load[4] = {t::kLoad, 5, 0, 9};
  learner_top(load, hp.data(), mem.data(), out.data());
  const int b = 4;
  std::vector<float> batch(size_t(b) * (2 * LEARNER_OBS + 4), 0.5f);
  float* action = batch.data() + b * LEARNER_OBS;
  for (float bad : {2.0f, -1.0f, 0.5f, NAN, 1e9f}) {
    for (int row = 0; row < b; ++row) action[row] = row == 2 ? bad : 1.0f;
    uint32_t step[4] = {t::kStep, uint32_t(b), 0, 0};
    learner_top(step, hp.data(), batch.data(), out.data());
    for (float v : out) if (v != -7.0f) return 3;
  }
  uint32_t store[4] = {t::kStore, 0, 0, 0};
  learner_top(store, hp.data(), batch.data(), out.data());
  if (out != mem || store[1] != 5 || store[3] != 9) return 4;
  action[2] = 0.0f;  // a good step does step
  uint32_t step[4] = {t::kStep, uint32_t(b), 0, 0};
  learner_top(step, hp.data(), batch.data(), out.data());
  learner_top(store, hp.data(), batch.data(), out.data());
  if (out == mem || store[1] != 6 || store[3] != 10) return 5;
  std::puts("untouched");
}
"""


def test_the_top_does_nothing_for_an_action_past_the_q_values(tmp_path):
    """A DQN step's actions come from the host as floats: one outside [0, actions) (or NaN,
    or not whole) indexed past the step's Q-value arrays and stepped; now the step does
    nothing, as for a batch past its buffers."""
    done = _run_with_asan(tmp_path, TOP_BAD_ACTION)
    assert done.returncode == 0 and done.stdout.strip() == "untouched", (
        done.returncode,
        done.stderr[-1500:],
    )


@pytest.mark.parametrize(
    "defines, match",
    [
        ({"LEARNER_H0": 0}, "the absent ones \\(0\\) last"),
        ({"LEARNER_OBS": 300}, "outside the module's widths"),
        ({"LEARNER_ALGO": 1, "LEARNER_OBS": 250, "LEARNER_ACTIONS": 7}, "module's widths"),
        (
            {"LEARNER_ALGO": 1, "LEARNER_OBS": 3, "LEARNER_ACTIONS": 1, "LEARNER_CRITICS": 3},
            "1 or 2",
        ),
    ],
)
def test_a_top_the_module_cannot_hold_does_not_build(tmp_path, defines, match):
    """``LEARNER_H0=0`` with ``H1=64`` (a gap), a 300-wide input or a 257-wide critic input
    built a top whose ``MakeNet`` failed unchecked at run time: the step ran on an
    uninitialised network. Now the build stops, naming why."""
    import subprocess

    with pytest.raises(subprocess.CalledProcessError) as e:
        build(tmp_path, defines)
    assert re.search(match, e.value.stderr), e.value.stderr[-1500:]


TD3_SETUP = r"""
  ln::DdpgNets nets;
  const int wd[3] = {33, 0, 0}, ao[1] = {2}, co[1] = {1};
  ln::MakeNet(5, wd, 1, ao, 1, &nets.actor);
  ln::MakeNet(7, wd, 1, co, 1, &nets.critic);
  ln::DdpgConfig dc;
  dc.critics = 2, dc.td3 = true, dc.actor_opt.clip = dc.critic_opt.clip = false;
  const size_t pa = size_t(nets.actor.size), pc = 2 * size_t(nets.critic.size);
  const int db = 21;
  std::vector<float> dm(4 * (pa + pc)), dobs(db * 5), dact(db * 2), drows(2 * db), dout(db);
  std::vector<float> dw(db, 1.0f), noise(db * 2);
  for (size_t k = 0; k < dm.size(); ++k)  // the second half: Adam's moments, >= 0
    dm[k] = k >= 2 * (pa + pc) ? 1e-4f * float(k % 7) : 0.05f * float(int(k % 17) - 8) / 8.0f;
  for (size_t k = 0; k < dobs.size(); ++k) dobs[k] = 0.2f * float(int(k % 7) - 3);
  for (size_t k = 0; k < dact.size(); ++k)
    dact[k] = 0.3f * float(int(k % 5) - 2), noise[k] = 0.01f * float(int(k % 3) - 1);
  for (size_t k = 0; k < drows.size(); ++k) drows[k] = k < size_t(db) ? float(k % 4) : 0.99f;
  float* q = dm.data();
  const ln::DdpgFlat mm{q, q + pa, q + pa + pc, q + 2 * pa + pc, q + 2 * (pa + pc),
                        q + 3 * pa + 2 * pc, q + 4 * pa + 2 * pc, q + 4 * pa + 3 * pc};
  const ln::DdpgFlatBatch bb{dobs.data(), dact.data(), drows.data(), drows.data() + db,
                             dobs.data(), dw.data(), noise.data(), db};
"""
"""C++ lines that make a TD3 learner (actor 5-33-2, two critics 7-33-1), its flat memories
(Adam's moments >= 0) and a batch of 21: `nets`, `dc`, `mm`, `bb`, `dm`, `dout`."""

STEPS_HASH = (
    r"""
#include <cstdio>
#include <cstring>
#include <vector>
#include "host.h"
namespace ln = drlhet::learner;
static unsigned long long Hash(unsigned long long h, const std::vector<float>& v) {
  for (float x : v) { unsigned u; std::memcpy(&u, &x, 4); h = (h ^ u) * 1099511628211ULL; }
  return h;
}
int main() {  // partial blocks everywhere: widths 70, 5, 3 and 33, batches 13 and 21, a clip
  static ln::DqnHost s;
  ln::Net net;
  const int widths[3] = {70, 5, 0}, outs[2] = {1, 3};
  ln::MakeNet(8, widths, 2, outs, 2, &net);
  ln::DqnConfig cfg;
  cfg.opt.max_norm = 0.5;
  const int b = 13;
  const size_t p = size_t(net.size);
  std::vector<float> mem(4 * p), obs(b * 8), next(b * 8), rows(3 * b), out(b), w(b, 1.0f);
  for (size_t k = 0; k < mem.size(); ++k)
    mem[k] = k >= 2 * p ? 1e-4f * float(k % 7) : 0.1f * float(int(k % 13) - 6) / 6.0f;
  for (size_t k = 0; k < obs.size(); ++k)
    obs[k] = 0.1f * float(int(k % 11) - 5), next[k] = 0.07f * float(int(k % 9) - 4);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = k < size_t(b) ? float(k % 3) : 0.99f;
  std::vector<int32_t> action(b);
  for (int r = 0; r < b; ++r) action[r] = r % 3;
  float* m = mem.data();
  for (int k = 0; k < 20; ++k)
    ln::DqnStepFlat(net, cfg, m, m + p, m + 2 * p, m + 3 * p, k, k + 1, obs.data(),
                    action.data(), rows.data(), rows.data() + b, next.data(), w.data(), b,
                    out.data(), &s);
  unsigned long long h = Hash(Hash(1469598103934665603ULL, mem), out);
  static ln::DdpgHost ds;
"""
    + TD3_SETUP
    + r"""
  for (int k = 0; k < 12; ++k) ln::DdpgStepFlat(nets, dc, mm, k, k, k + 1, bb, dout.data(), &ds);
  std::printf("%llx\n", Hash(Hash(h, dm), dout));
}
"""
)


def test_the_synthesized_lanes_compute_the_c_simulations_bits(tmp_path):
    """Under ``__SYNTHESIS__`` every lanes loop runs its constant count (64 or 16) with guards
    and every adder tree its full width; the C-simulation runs the live lanes and skips wholly
    padded subtrees (`DRLHET_LANES`, ``Tree<N>::Sum``). DQN and TD3 steps with partial blocks
    everywhere give the same bits either way."""
    import shutil
    import subprocess

    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    src = tmp_path / "steps.cpp"
    src.write_text(STEPS_HASH)
    hashes = []
    for flags in ([], ["-D__SYNTHESIS__"]):
        exe = tmp_path / f"steps{len(flags)}"
        cmd = [cxx, "-std=c++17", "-O2", "-w", *flags, f"-I{LEARNER_DIR}", str(src), "-o"]
        subprocess.run([*cmd, str(exe)], check=True, capture_output=True)
        hashes.append(subprocess.run([str(exe)], capture_output=True, text=True).stdout)
    assert hashes[0] == hashes[1] and len(hashes[0].strip()) >= 8, hashes


def test_the_testbench_builds_apart_from_the_top_as_vitis_compiles_it(tmp_path):
    """run_hls.tcl compiles learner_tb.cpp with LEARNER_TB_INCLUDES_TOP=0 and the top apart
    (two translation units): the testbench then needs the top's sizes from learner_top.h. They
    were in learner_top.cpp, so Vitis' C-simulation did not compile (a review found it)."""
    import shutil
    import subprocess

    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler, which `make test` needs for the kernels anyway"
    objs = []
    for name, flags in (("learner_top", []), ("learner_tb", ["-DLEARNER_TB_INCLUDES_TOP=0"])):
        obj = tmp_path / f"{name}.o"
        src = LEARNER_DIR / f"{name}.cpp"
        cmd = [cxx, "-std=c++17", "-O1", "-w", *flags, f"-I{LEARNER_DIR}", "-c", str(src)]
        subprocess.run([*cmd, "-o", str(obj)], check=True, capture_output=True, text=True)
        objs.append(str(obj))
    exe = tmp_path / "csim"
    subprocess.run([cxx, *objs, "-o", str(exe)], check=True, capture_output=True, text=True)
    done = subprocess.run([str(exe), "--top", "2", "5"], capture_output=True, text=True)
    assert done.stdout.startswith("TOP OK"), done.stdout + done.stderr
