// The FPGA learner module's C-simulation as an XLA FFI handler: the HLS sources
// (hls/learner/dqn.h, through host.h's flat layout) compiled with g++, so backend "fpga" runs the learner step inside jit on
// a CPU device.
//
//   drlhet_learner_dqn (params f32[V, P], target f32[V, P], mu f32[V, P], nu f32[V, P],
//                       count s32[V], steps s32[V], obs f32[V, B, D], action s32[V, B],
//                       reward f32[V, B], discount f32[V, B], next_obs f32[V, B, D],
//                       weights f32[V, B])
//                   -> (params, target, mu, nu, count   (aliased: written in place),
//                       priorities f32[V, B], metrics f32[V, 2] (loss, mean |td|))
//
// P is the parameter memory's size (hls/learner/memory.h's flat layout: layer after layer, kernel [in][out]
// then bias), V any number of independent learners (leading dimensions, from vmap). `steps`
// is the learner's step count after this step. Attributes: the network (obs_dim, hidden,
// widths w0..w2, actions, dueling) and the step's hyper-parameters (see DqnConfig).
#include <cstdint>
#include <memory>
#include <string>

#include "host.h"
#include "learner_common.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace ln = drlhet::learner;

namespace {

ln::DqnHost* Scratch() {
  thread_local std::unique_ptr<ln::DqnHost> scratch(new ln::DqnHost);
  return scratch.get();
}

using ln::CopyIfMoved;

ffi::Error DqnImpl(ffi::Buffer<ffi::F32> params, ffi::Buffer<ffi::F32> target,
                   ffi::Buffer<ffi::F32> mu, ffi::Buffer<ffi::F32> nu,
                   ffi::Buffer<ffi::S32> count, ffi::Buffer<ffi::S32> steps,
                   ffi::Buffer<ffi::F32> obs, ffi::Buffer<ffi::S32> action,
                   ffi::Buffer<ffi::F32> reward, ffi::Buffer<ffi::F32> discount,
                   ffi::Buffer<ffi::F32> next_obs, ffi::Buffer<ffi::F32> weights,
                   ffi::ResultBuffer<ffi::F32> params_out, ffi::ResultBuffer<ffi::F32> target_out,
                   ffi::ResultBuffer<ffi::F32> mu_out, ffi::ResultBuffer<ffi::F32> nu_out,
                   ffi::ResultBuffer<ffi::S32> count_out, ffi::ResultBuffer<ffi::F32> priorities,
                   ffi::ResultBuffer<ffi::F32> metrics, int64_t obs_dim, int64_t hidden,
                   int64_t w0, int64_t w1, int64_t w2, int64_t actions, int64_t dueling,
                   int64_t double_q, int64_t period, int64_t sgd, double huber_delta,
                   double priority_eps, double tau, double lr, double b1, double b2, double eps,
                   double max_norm) {
  const int64_t v_count = count.element_count();
  if (v_count < 1) return ffi::Error::Success();
  const int64_t p = params.element_count() / v_count;
  const int64_t b = reward.element_count() / v_count;
  ln::Net net;
  const int64_t widths[3] = {w0, w1, w2};
  const int outs[2] = {dueling ? 1 : int(actions), int(actions)};
  if (auto err = ln::MakeCheckedNet(obs_dim, widths, hidden, outs, dueling ? 2 : 1, p, b, &net);
      err.failure()) {
    return err;
  }
  if (obs.element_count() != v_count * b * obs_dim) {
    return ffi::Error::InvalidArgument("learner: observations are not [B, obs_dim]");
  }
  // every operand holds what the step reads of it, checked before anything is written
  const int64_t sizes[] = {target.element_count(), mu.element_count(), nu.element_count(),
                           steps.element_count(),  action.element_count(),
                           discount.element_count(), next_obs.element_count(),
                           weights.element_count()};
  const int64_t want[] = {v_count * p, v_count * p, v_count * p, v_count, v_count * b,
                          v_count * b, v_count * b * obs_dim, v_count * b};
  const char* names[] = {"target", "mu", "nu", "steps", "action", "discount", "next_obs",
                         "weights"};
  for (int k = 0; k < 8; ++k) {
    if (sizes[k] != want[k]) {
      return ffi::Error::InvalidArgument(std::string("learner: ") + names[k] + " holds " +
                                         std::to_string(sizes[k]) + " values, the step reads " +
                                         std::to_string(want[k]));
    }
  }
  ln::DqnConfig cfg;
  cfg.dueling = dueling != 0;
  cfg.double_q = double_q != 0;
  cfg.huber_delta = huber_delta;
  cfg.priority_eps = priority_eps;
  cfg.tau = tau;
  cfg.period = int32_t(period);
  cfg.opt.lr = lr;
  cfg.opt.b1 = b1;
  cfg.opt.b2 = b2;
  cfg.opt.eps = eps;
  cfg.opt.max_norm = max_norm;
  cfg.opt.sgd = sgd != 0;
  const int32_t* act = action.typed_data();
  for (int64_t j = 0; j < v_count * b; ++j) {  // checked before anything is written
    if (act[j] < 0 || act[j] >= actions) {
      return ffi::Error::InvalidArgument("learner: action " + std::to_string(act[j]) +
                                         " outside 0.." + std::to_string(actions - 1));
    }
  }
  CopyIfMoved(params.typed_data(), params_out->typed_data(), params.element_count());
  CopyIfMoved(target.typed_data(), target_out->typed_data(), target.element_count());
  CopyIfMoved(mu.typed_data(), mu_out->typed_data(), mu.element_count());
  CopyIfMoved(nu.typed_data(), nu_out->typed_data(), nu.element_count());
  for (int64_t v = 0; v < v_count; ++v) {
    const int32_t* act = action.typed_data() + v * b;
    const ln::DqnStepOut out = ln::DqnStepFlat(
        net, cfg, params_out->typed_data() + v * p, target_out->typed_data() + v * p,
        mu_out->typed_data() + v * p, nu_out->typed_data() + v * p, count.typed_data()[v],
        steps.typed_data()[v], obs.typed_data() + v * b * obs_dim, act,
        reward.typed_data() + v * b, discount.typed_data() + v * b,
        next_obs.typed_data() + v * b * obs_dim, weights.typed_data() + v * b, int(b),
        priorities->typed_data() + v * b, Scratch());
    count_out->typed_data()[v] = out.count;
    metrics->typed_data()[2 * v] = out.loss;
    metrics->typed_data()[2 * v + 1] = out.abs_td;
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetLearnerDqn, DqnImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // params
                                  .Arg<ffi::Buffer<ffi::F32>>()  // target
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mu
                                  .Arg<ffi::Buffer<ffi::F32>>()  // nu
                                  .Arg<ffi::Buffer<ffi::S32>>()  // count
                                  .Arg<ffi::Buffer<ffi::S32>>()  // steps
                                  .Arg<ffi::Buffer<ffi::F32>>()  // obs
                                  .Arg<ffi::Buffer<ffi::S32>>()  // action
                                  .Arg<ffi::Buffer<ffi::F32>>()  // reward
                                  .Arg<ffi::Buffer<ffi::F32>>()  // discount
                                  .Arg<ffi::Buffer<ffi::F32>>()  // next_obs
                                  .Arg<ffi::Buffer<ffi::F32>>()  // weights
                                  .Ret<ffi::Buffer<ffi::F32>>()  // params (aliased)
                                  .Ret<ffi::Buffer<ffi::F32>>()  // target (aliased)
                                  .Ret<ffi::Buffer<ffi::F32>>()  // mu (aliased)
                                  .Ret<ffi::Buffer<ffi::F32>>()  // nu (aliased)
                                  .Ret<ffi::Buffer<ffi::S32>>()  // count (aliased)
                                  .Ret<ffi::Buffer<ffi::F32>>()  // priorities
                                  .Ret<ffi::Buffer<ffi::F32>>()  // metrics
                                  .Attr<int64_t>("obs_dim")
                                  .Attr<int64_t>("hidden")
                                  .Attr<int64_t>("w0")
                                  .Attr<int64_t>("w1")
                                  .Attr<int64_t>("w2")
                                  .Attr<int64_t>("actions")
                                  .Attr<int64_t>("dueling")
                                  .Attr<int64_t>("double_q")
                                  .Attr<int64_t>("period")
                                  .Attr<int64_t>("sgd")
                                  .Attr<double>("huber_delta")
                                  .Attr<double>("priority_eps")
                                  .Attr<double>("tau")
                                  .Attr<double>("lr")
                                  .Attr<double>("b1")
                                  .Attr<double>("b2")
                                  .Attr<double>("eps")
                                  .Attr<double>("max_norm"));
