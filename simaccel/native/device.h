// simaccel native regions: the library's kernels loaded on a device (once per device and
// library: the cubin that fits the GPU, else the PTX), and the device's context made current
// for a call.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "driver.h"
#include "errors.h"
#include "tables.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

std::string arch_text(int32_t arch) { return "sm_" + std::to_string(arch / 10) + std::to_string(arch % 10); }

// The cubin of `kernel` a GPU of compute capability `arch` runs: the same major version and the
// highest minor not above the GPU's (a cubin runs on no other major); nullptr where none fits.
const Cubin* fitting_cubin(const Kernel& kernel, int32_t arch) {
  const Cubin* best = nullptr;
  for (int32_t c = 0; c < kernel.num_cubins; ++c) {
    const Cubin& cubin = kernel.cubins[c];
    if (cubin.arch / 10 == arch / 10 && cubin.arch <= arch && (best == nullptr || cubin.arch > best->arch)) best = &cubin;
  }
  return best;
}

// $SIMACCEL_NATIVE_LOG=1 (kNativeLogEnv): say on stderr, once per library and device, which
// kernel images were loaded.
bool log_loads() {
  const char* value = std::getenv(kNativeLogEnv);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

// Kernel `k` of the library loaded for a GPU of compute capability `arch` (its cubin that fits,
// else its PTX) into `state`; what went wrong, or nothing.
std::string load_kernel(const Library& lib, int32_t k, CUdevice dev, int32_t arch, DeviceState* state,
                        int32_t* from_cubins) {
  const Driver& d = driver();
  const Kernel& kernel = lib.kernels[k];
  CUmodule module = nullptr;
  const char* entry = nullptr;
  uint32_t shared = 0;
  std::string tried;
  if (const Cubin* cubin = fitting_cubin(kernel, arch)) {
    CUresult loaded = d.ModuleLoadData(&module, cubin->image);
    if (loaded == 0) entry = cubin->entry, shared = cubin->shared_bytes, ++*from_cubins;
    else tried = "its cubin for " + arch_text(cubin->arch) + ": " + cuda_error(loaded) + "; ";
  }
  if (entry == nullptr && kernel.ptx_arch <= arch) {
    CUresult loaded = d.ModuleLoadData(&module, kernel.ptx);
    if (loaded == 0) entry = kernel.ptx_entry, shared = kernel.ptx_shared_bytes;
    else tried += "its PTX for " + arch_text(kernel.ptx_arch) + ": " + cuda_error(loaded) +
                  " (the driver must be " + kMinDriver + " or newer); ";
  }
  if (entry == nullptr) {
    return std::string("kernel ") + kernel.name + " cannot run on this " + arch_text(arch) + " GPU: " + tried +
           "the library holds " + lib.held + " (build with cuda_archs including " + arch_text(arch) + ")";
  }
  CUfunction function = nullptr;
  CUresult rc = d.ModuleGetFunction(&function, module, entry);
  if (rc != 0) return std::string("kernel ") + kernel.name + ": no entry " + entry + ": " + cuda_error(rc);
  // A kernel with stage buffers in dynamic shared memory may use all a block can have here.
  int most = 0;
  if (shared > kStaticSharedLimit && ((rc = d.DeviceGetAttribute(&most, kSharedOptIn, dev)) != 0 ||
                                      static_cast<uint32_t>(most) < shared ||
                                      (rc = d.FuncSetAttribute(function, kMaxDynamicShared, most)) != 0)) {
    return std::string("kernel ") + kernel.name + " needs " + std::to_string(shared) +
           " bytes of shared memory per block; this " + arch_text(arch) + " GPU gives at most " +
           std::to_string(most) + (rc ? ": " + cuda_error(rc) : std::string());
  }
  state->functions.push_back(function);
  state->shared_bytes.push_back(shared);
  return std::string();
}

// The library's kernels loaded on `device` (once per device and library), or an error.
int load_kernels(const Region& r, Library& lib, int32_t device, DeviceState** out) {
  DeviceState* state = lib.devices[device].load(std::memory_order_acquire);
  if (state != nullptr) {
    *out = state;
    return 0;
  }
  std::lock_guard<std::mutex> guard(lib.lock);
  state = lib.devices[device].load(std::memory_order_relaxed);
  if (state == nullptr) {
    const Driver& d = driver();
    std::string where = std::string("region ") + r.symbol + " on cuda:" + std::to_string(device);
    CUdevice dev;
    CUcontext context;
    CUresult rc = d.DeviceGet(&dev, device);
    if (rc == 0) rc = d.PrimaryCtxRetain(&context, dev);
    if (rc != 0) return fail(kDeviceError, where + ": cannot use the device: " + cuda_error(rc));
    if ((rc = d.CtxPushCurrent(context)) != 0) return fail(kDeviceError, where + ": " + cuda_error(rc));
    auto* fresh = new DeviceState();
    fresh->context = context;
    int major = 0, minor = 0;
    d.DeviceGetAttribute(&major, kComputeMajor, dev);
    d.DeviceGetAttribute(&minor, kComputeMinor, dev);
    const int32_t arch = major * 10 + minor;
    int32_t from_cubins = 0;
    std::string problem;
    for (int32_t k = 0; k < lib.num_kernels && problem.empty(); ++k) problem = load_kernel(lib, k, dev, arch, fresh, &from_cubins);
    if (problem.empty() && log_loads()) {
      std::fprintf(stderr, "simaccel: %s GPU (%s): %d of %d kernels from cubins, %d JIT-compiled from PTX; the library holds %s\n",
                   where.c_str(), arch_text(arch).c_str(), from_cubins, lib.num_kernels, lib.num_kernels - from_cubins, lib.held);
    }
    CUcontext ignored;
    d.CtxPopCurrent(&ignored);
    if (!problem.empty()) {
      delete fresh;
      return fail(kEngineError, where + ": " + problem);
    }
    lib.devices[device].store(fresh, std::memory_order_release);
    state = fresh;
  }
  *out = state;
  return 0;
}

// Makes the device's primary context current for a call, where TVM has not already.
struct ContextGuard {
  bool pushed = false;
  ~ContextGuard() {
    if (pushed) {
      CUcontext ignored;
      driver().CtxPopCurrent(&ignored);
    }
  }
};

}  // namespace simaccel_native
#pragma GCC visibility pop
