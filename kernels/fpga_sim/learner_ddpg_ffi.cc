// The FPGA learner module's DDPG / TD3 step (hls/learner/ddpg.h) C-simulated as an XLA FFI
// handler on a CPU device (backend "fpga", learner placement).
//
//   drlhet_learner_ddpg (
//       actor f32[V, Pa], critic f32[V, n, Pc], target_actor, target_critic (same shapes),
//       actor_mu, actor_nu f32[V, Pa], critic_mu, critic_nu f32[V, n, Pc],
//       actor_count s32[V], critic_count s32[V], steps s32[V],
//       obs f32[V, B, D], action f32[V, B, M], reward f32[V, B], discount f32[V, B],
//       next_obs f32[V, B, D], weights f32[V, B], noise f32[V, B, M])
//   -> (the eight memories and the two counts, in the same order, aliased: written in place;
//       priorities f32[V, B]; metrics f32[V, 3] (critic loss, actor loss, mean |td|))
//
// Pa, Pc: the actor's and one critic's parameter memory (hls/learner/memory.h's flat layout); n the
// critics (2 for TD3); V independent learners (vmap). `steps` is the learner's step count after
// this step; `noise` TD3's clipped target-policy noise (ignored by DDPG). Attributes: obs_dim,
// actions, hidden, w0..w2, critics, td3, policy_delay (int64); tau, priority_eps, low, high,
// actor_lr, critic_lr, b1, b2, eps (float64).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host.h"
#include "learner_common.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace ln = drlhet::learner;

namespace {

constexpr int kMemories = 8, kCounts = 2, kInputs = 18;

ln::DdpgHost* Scratch() {
  thread_local std::unique_ptr<ln::DdpgHost> scratch(new ln::DdpgHost);
  return scratch.get();
}

// The step's configuration and networks from the attributes; checks the memories' sizes.
ffi::Error Configure(const ffi::Dictionary& a, int64_t pa, int64_t pc, int64_t batch,
                     ln::DdpgNets* nets, ln::DdpgConfig* cfg) {
  auto i = [&](const char* k) { return a.get<int64_t>(k); };
  auto f = [&](const char* k) { return a.get<double>(k); };
  for (const char* k : {"obs_dim", "actions", "hidden", "w0", "w1", "w2", "critics", "td3",
                        "policy_delay"}) {
    if (i(k).has_error()) return ffi::Error::InvalidArgument(std::string("learner: attr ") + k);
  }
  for (const char* k : {"tau", "priority_eps", "low", "high", "actor_lr", "critic_lr", "b1",
                        "b2", "eps"}) {
    if (f(k).has_error()) return ffi::Error::InvalidArgument(std::string("learner: attr ") + k);
  }
  const int64_t d = *i("obs_dim"), m = *i("actions"), hidden = *i("hidden");
  const int64_t w[3] = {*i("w0"), *i("w1"), *i("w2")};
  const int actor_out[1] = {int(m)}, critic_out[1] = {1};
  if (auto e = ln::MakeCheckedNet(d, w, hidden, actor_out, 1, pa, batch, &nets->actor);
      e.failure()) {
    return e;
  }
  if (auto e = ln::MakeCheckedNet(d + m, w, hidden, critic_out, 1, pc, batch, &nets->critic);
      e.failure()) {
    return e;
  }
  cfg->critics = int(*i("critics"));
  cfg->td3 = *i("td3") != 0;
  cfg->policy_delay = int32_t(*i("policy_delay"));
  if (cfg->critics < 1 || cfg->critics > 2 || cfg->policy_delay < 1) {
    return ffi::Error::InvalidArgument("learner: critics must be 1 or 2, policy_delay >= 1");
  }
  cfg->tau = *f("tau");
  cfg->priority_eps = *f("priority_eps");
  cfg->low = *f("low");
  cfg->high = *f("high");
  for (ln::Adam* opt : {&cfg->actor_opt, &cfg->critic_opt}) {
    opt->b1 = *f("b1");
    opt->b2 = *f("b2");
    opt->eps = *f("eps");
    opt->clip = false;
  }
  cfg->actor_opt.lr = *f("actor_lr");
  cfg->critic_opt.lr = *f("critic_lr");
  return ffi::Error::Success();
}

ffi::Error DdpgImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, ffi::Dictionary attrs) {
  if (args.size() != kInputs || rets.size() != kMemories + kCounts + 2) {
    return ffi::Error::InvalidArgument("learner: drlhet_learner_ddpg takes 18 operands");
  }
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::Result<ffi::AnyBuffer>> out;
  for (size_t k = 0; k < args.size(); ++k) in.push_back(*args.get<ffi::AnyBuffer>(k));
  for (size_t k = 0; k < rets.size(); ++k) out.push_back(*rets.get<ffi::AnyBuffer>(k));
  for (int k = 0; k < kInputs; ++k) {  // the counts and steps are int32, the rest float32
    const bool count = k >= kMemories && k < kMemories + kCounts + 1;
    if (in[size_t(k)].element_type() != (count ? ffi::DataType::S32 : ffi::DataType::F32)) {
      return ffi::Error::InvalidArgument("learner: operand " + std::to_string(k) +
                                         " has the wrong type");
    }
  }
  const int64_t v_count = in[8].element_count();
  if (v_count < 1) return ffi::Error::Success();
  const int64_t critics = *attrs.get<int64_t>("critics");
  const int64_t pa = in[0].element_count() / v_count;
  const int64_t pc = in[1].element_count() / (v_count * (critics > 0 ? critics : 1));
  const int64_t b = in[13].element_count() / v_count;
  ln::DdpgNets nets;
  ln::DdpgConfig cfg;
  if (auto e = Configure(attrs, pa, pc, b, &nets, &cfg); e.failure()) return e;
  const int64_t d = nets.actor.layer[0].in, m = nets.actor.layer[nets.actor.hidden].out;
  // every operand holds what the step reads of it (the memories: V x P_actor or V x n x P_critic;
  // the batch: B rows of each field), checked before anything is written
  const int64_t want[kInputs] = {v_count * pa, v_count * critics * pc, v_count * pa,
                                 v_count * critics * pc, v_count * pa, v_count * pa,
                                 v_count * critics * pc, v_count * critics * pc, v_count,
                                 v_count, v_count, v_count * b * d, v_count * b * m, v_count * b,
                                 v_count * b, v_count * b * d, v_count * b, v_count * b * m};
  for (int k = 0; k < kInputs; ++k) {
    if (in[size_t(k)].element_count() != want[k]) {
      return ffi::Error::InvalidArgument(
          "learner: operand " + std::to_string(k) + " holds " +
          std::to_string(in[size_t(k)].element_count()) + " values, the step reads " +
          std::to_string(want[k]) + " (B " + std::to_string(b) + ", D " + std::to_string(d) +
          ", M " + std::to_string(m) + ")");
    }
  }
  for (int k = 0; k < kMemories + kCounts; ++k) {
    ln::CopyIfMoved(static_cast<const char*>(in[size_t(k)].untyped_data()),
                    static_cast<char*>(out[size_t(k)]->untyped_data()),
                    int64_t(in[size_t(k)].size_bytes()));
  }
  auto f32 = [&](int k) { return static_cast<float*>(out[size_t(k)]->untyped_data()); };
  auto arg = [&](int k) { return static_cast<const float*>(in[size_t(k)].untyped_data()); };
  auto s32 = [&](int k) { return static_cast<int32_t*>(out[size_t(k)]->untyped_data()); };
  const int32_t* steps = static_cast<const int32_t*>(in[10].untyped_data());
  float* priorities = f32(10);
  float* metrics = f32(11);
  for (int64_t v = 0; v < v_count; ++v) {
    const int64_t ca = v * pa, cc = v * critics * pc;
    const ln::DdpgFlat mem{f32(0) + ca, f32(1) + cc, f32(2) + ca, f32(3) + cc,
                             f32(4) + ca, f32(5) + ca, f32(6) + cc, f32(7) + cc};
    const ln::DdpgFlatBatch batch{arg(11) + v * b * d, arg(12) + v * b * m, arg(13) + v * b,
                              arg(14) + v * b,     arg(15) + v * b * d, arg(16) + v * b,
                              arg(17) + v * b * m, int(b)};
    const ln::DdpgStepOut o = ln::DdpgStepFlat(nets, cfg, mem, s32(8)[v], s32(9)[v], steps[v], batch,
                                           priorities + v * b, Scratch());
    s32(8)[v] = o.actor_count;
    s32(9)[v] = o.critic_count;
    metrics[3 * v] = o.loss;
    metrics[3 * v + 1] = o.actor_loss;
    metrics[3 * v + 2] = o.abs_td;
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetLearnerDdpg, DdpgImpl,
                              ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs());
