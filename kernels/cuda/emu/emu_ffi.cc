// The CUDA backend's XLA FFI handlers on the host (platform "cpu"): the handler bodies of the
// GPU's (../handlers.h), their kernels run by the host emulation of the CUDA execution model
// (cuda_emu.h). drlhet/backends/cuda.py registers them under the GPU handlers' custom-call
// targets, so that `cuda.find`, `update`, `weigh`, `weigh_key` and `update_checked` run inside
// XLA programs on a CPU device: the backend's calls, shapes, vmapping, aliasing and workspaces,
// and its kernels, tested wherever `make test` runs. Function, not speed (one call at a time).
#include <mutex>
#include <utility>

#include "cuda_emu.h"
// the kernels, their launches, then the handlers
#include "../sample_kernels.cuh"
#include "../sample_spread.cuh"
#include "../sum_tree_kernels.cuh"
#include "../tag_table.cuh"
#include "../launch.cuh"
#include "../handlers.h"

namespace ffi = xla::ffi;

namespace {

// A GPU handler's body with no stream, one call at a time.
template <auto& Impl>
constexpr auto OnHost = [](auto&&... args) {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  return Impl(cudaStream_t{}, std::forward<decltype(args)>(args)...);
};

}  // namespace

extern "C" {
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuFind(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuUpdate(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuUpdateChecked(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuWeigh(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuWeighKey(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuUpdateTagged(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuUpdateCheckedTagged(XLA_FFI_CallFrame* call_frame);
DRLHET_EMU_EXPORT XLA_FFI_Error* DrlhetEmuTagTableInstantiate(XLA_FFI_CallFrame* call_frame);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuFind, OnHost<drlhet_cuda::FindImpl>,
                              drlhet_cuda::FindBinding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuUpdate,
                              OnHost<drlhet_cuda::WithoutTags<drlhet_cuda::UpdateImpl>>,
                              drlhet_cuda::UpdateBinding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuUpdateChecked,
                              OnHost<drlhet_cuda::WithoutTags<drlhet_cuda::UpdateCheckedImpl>>,
                              drlhet_cuda::UpdateCheckedBinding(ffi::Ffi::Bind()));
#define DRLHET_EMU_TAGGED ffi::Ffi::Bind().Ctx<ffi::State<drlhet_cuda::TagTableState>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuUpdateTagged, OnHost<drlhet_cuda::UpdateImpl>,
                              drlhet_cuda::UpdateBinding(DRLHET_EMU_TAGGED));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuUpdateCheckedTagged,
                              OnHost<drlhet_cuda::UpdateCheckedImpl>,
                              drlhet_cuda::UpdateCheckedBinding(DRLHET_EMU_TAGGED));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuTagTableInstantiate, drlhet_cuda::TagTableInstantiate,
                              ffi::Ffi::BindInstantiate());
extern "C" {
DRLHET_EMU_EXPORT void* DrlhetEmuTagTableTypeId() { return &drlhet_cuda::TagTableState::id; }
DRLHET_EMU_EXPORT const void* DrlhetEmuTagTableTypeInfo() {
  return &drlhet_cuda::kTagTableInfo;
}
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuWeigh, OnHost<drlhet_cuda::WeighImpl>,
                              drlhet_cuda::WeighBinding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetEmuWeighKey, OnHost<drlhet_cuda::WeighKeyImpl>,
                              drlhet_cuda::WeighKeyBinding(ffi::Ffi::Bind()));
