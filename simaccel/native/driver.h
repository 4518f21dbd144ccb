// simaccel native regions: the CUDA driver API, the few entry points the runtime uses, opened
// once per library with dlopen (the library links no CUDA library), and its error texts.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "tables.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

constexpr int kComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeMinor = 76;
constexpr int kSharedOptIn = 97;    // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr uint32_t kStaticSharedLimit = 48 * 1024;  // more per block only where a kernel is allowed

struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*MemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
  CUresult (*StreamIsCapturing)(CUstream, int*);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  std::string missing;  // why the driver could not be used; empty when it can
  // Used only by the sanitizer and the trace, so a driver without them still runs regions.
  CUresult (*MemsetD2D32Async)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamGetCtx)(CUstream, CUcontext*);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  std::string debug_missing;  // why the sanitizer and the trace cannot run; empty when they can
};

template <typename F>
void bind_symbol(void* lib, const char* name, F* slot, std::string* missing) {
  *slot = reinterpret_cast<F>(dlsym(lib, name));
  if (*slot == nullptr && missing->empty()) *missing = std::string("the CUDA driver has no ") + name;
}

// The driver library: $SIMACCEL_CUDA_DRIVER (kCudaDriverEnv: a stand-in that records
// launches, for tests on machines without a GPU), else libcuda.so.1.
const Driver& driver() {
  static Driver d = [] {
    Driver d{};
    const char* path = std::getenv(kCudaDriverEnv);
    if (path == nullptr || *path == '\0') path = "libcuda.so.1";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      d.missing = std::string("cannot open the CUDA driver ") + path + ": " + (why ? why : "unknown error");
      return d;
    }
    std::string* m = &d.missing;
    bind_symbol(lib, "cuInit", &d.Init, m);
    bind_symbol(lib, "cuDeviceGet", &d.DeviceGet, m);
    bind_symbol(lib, "cuDeviceGetAttribute", &d.DeviceGetAttribute, m);
    bind_symbol(lib, "cuDevicePrimaryCtxRetain", &d.PrimaryCtxRetain, m);
    bind_symbol(lib, "cuCtxGetCurrent", &d.CtxGetCurrent, m);
    bind_symbol(lib, "cuCtxPushCurrent_v2", &d.CtxPushCurrent, m);
    bind_symbol(lib, "cuCtxPopCurrent_v2", &d.CtxPopCurrent, m);
    bind_symbol(lib, "cuModuleLoadData", &d.ModuleLoadData, m);
    bind_symbol(lib, "cuModuleGetFunction", &d.ModuleGetFunction, m);
    bind_symbol(lib, "cuFuncSetAttribute", &d.FuncSetAttribute, m);
    bind_symbol(lib, "cuLaunchKernel", &d.LaunchKernel, m);
    bind_symbol(lib, "cuMemAlloc_v2", &d.MemAlloc, m);
    bind_symbol(lib, "cuMemAllocAsync", &d.MemAllocAsync, m);
    bind_symbol(lib, "cuMemFreeAsync", &d.MemFreeAsync, m);
    bind_symbol(lib, "cuMemcpyDtoDAsync_v2", &d.MemcpyDtoDAsync, m);
    bind_symbol(lib, "cuMemsetD8Async", &d.MemsetD8Async, m);
    bind_symbol(lib, "cuMemsetD16Async", &d.MemsetD16Async, m);
    bind_symbol(lib, "cuMemsetD32Async", &d.MemsetD32Async, m);
    bind_symbol(lib, "cuStreamIsCapturing", &d.StreamIsCapturing, m);
    bind_symbol(lib, "cuGetErrorName", &d.GetErrorName, m);
    bind_symbol(lib, "cuGetErrorString", &d.GetErrorString, m);
    std::string* dm = &d.debug_missing;
    bind_symbol(lib, "cuMemsetD2D32Async", &d.MemsetD2D32Async, dm);
    bind_symbol(lib, "cuMemcpyDtoHAsync_v2", &d.MemcpyDtoHAsync, dm);
    bind_symbol(lib, "cuStreamSynchronize", &d.StreamSynchronize, dm);
    bind_symbol(lib, "cuStreamGetCtx", &d.StreamGetCtx, dm);
    bind_symbol(lib, "cuEventCreate", &d.EventCreate, dm);
    bind_symbol(lib, "cuEventRecord", &d.EventRecord, dm);
    bind_symbol(lib, "cuEventSynchronize", &d.EventSynchronize, dm);
    bind_symbol(lib, "cuEventElapsedTime", &d.EventElapsedTime, dm);
    if (d.missing.empty()) {
      CUresult rc = d.Init(0);
      if (rc != 0) d.missing = "cuInit failed with CUDA error " + std::to_string(rc);
    }
    return d;
  }();
  return d;
}

std::string cuda_error(CUresult rc) {
  const Driver& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName) d.GetErrorName(rc, &name);
  if (d.GetErrorString) d.GetErrorString(rc, &text);
  return std::string(name ? name : "CUDA error") + " (" + std::to_string(rc) + "): " + (text ? text : "no description");
}

}  // namespace simaccel_native
#pragma GCC visibility pop
