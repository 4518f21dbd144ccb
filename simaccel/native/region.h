// simaccel native regions: the run-time half, shared by every generated region library.
//
// Where it sits: simaccel.native.source writes one C++ file per TVM library. That file holds
// each region's tables (tensors, kernel launches with their argument words, cubins: tables.h)
// and one TVM-FFI function per region, which calls `run_region`, defined here: check the tensors
// TVM passes, take TVM's current stream for the device, and launch the region's kernels there
// through the CUDA driver, opened at run time with dlopen. The library links no CUDA library,
// so it builds and exports on a machine without a GPU, and it needs neither Python nor numba
// to run.
//
// This file is the same for every library: simaccel.native.build compiles it once per compiler
// and header text, caches the object and links it into each library's object. Everything here
// is hidden: two region libraries in one process each keep their own copy (their own loaded
// modules, memory and counters).
//
// Names shared with simaccel's Python (global functions, error kinds, environment variables)
// are constants the compiled file defines before including this header (kInvokeFunc,
// kDeviceError, ...: simaccel/names.py); this file spells none of them.
#pragma once

#include <dlfcn.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tables.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

// ---------------------------------------------------------------------------------------------
// The CUDA driver API, the few entry points used, opened once per library.

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

// ---------------------------------------------------------------------------------------------
// Errors: raised as TVM-FFI errors whose kind is a simaccel error class, so a caller with
// simaccel installed gets the same SimAccelError subclass the Python engines raise.

int fail(const char* kind, const std::string& message) {
  TVMFFIErrorSetRaisedFromCStr(kind, message.c_str());
  return -1;
}

std::string shape_text(int32_t ndim, const int64_t* shape) {
  std::string s = "(";
  for (int32_t i = 0; i < ndim; ++i) {
    s += std::to_string(shape[i]);
    if (ndim == 1 || i + 1 < ndim) s += ",";
    if (i + 1 < ndim) s += " ";
  }
  return s + ")";
}

std::string dtype_text(uint8_t code, uint8_t bits, uint16_t lanes) {
  const char* base = code == 0 ? "int" : code == 1 ? "uint" : code == 2 ? "float" : code == 4 ? "bfloat" : code == 6 ? "bool" : "dtype";
  std::string s = code == 6 ? std::string(base) : std::string(base) + std::to_string(bits);
  if (lanes != 1) s += "x" + std::to_string(lanes);
  return s;
}

std::string device_text(const DLDevice& d) {
  const char* kind = d.device_type == kDLCPU ? "cpu" : d.device_type == kDLCUDA ? "cuda" : nullptr;
  std::string s = kind ? kind : "device type " + std::to_string(d.device_type);
  return s + ":" + std::to_string(d.device_id);
}

std::string hex(uint64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// The route to the Python engines and the counters (tables.h), both shared with simaccel's
// Python runtime when it is installed (simaccel.tvm_integration.backend.bridge); else kept here.

// A global function of simaccel's Python runtime, or nullptr where simaccel is not installed.
TVMFFIObjectHandle global_function(const char* name) {
  TVMFFIByteArray bytes{name, std::strlen(name)};
  TVMFFIObjectHandle f = nullptr;
  if (TVMFFIFunctionGetGlobal(&bytes, &f) != 0) {
    TVMFFIErrorMoveFromRaised(&f);  // lookup failed: drop the error
    if (f) TVMFFIObjectDecRef(f);
    return nullptr;
  }
  return f;
}

int64_t call_for_address(TVMFFIObjectHandle f, TVMFFIAny* args, int32_t n) {
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.v_int64 = 0;
  if (TVMFFIFunctionCall(f, args, n, &result) != 0) {
    TVMFFIObjectHandle err = nullptr;
    TVMFFIErrorMoveFromRaised(&err);
    if (err) TVMFFIObjectDecRef(err);
    return 0;
  }
  return result.type_index == kTVMFFIInt ? result.v_int64 : 0;
}

TVMFFIAny raw_str(const char* s) {
  TVMFFIAny a;
  a.type_index = kTVMFFIRawStr;
  a.zero_padding = 0;
  a.v_c_str = s;
  return a;
}

// An int32 that simaccel's Python runtime owns, its address asked once of the global function
// `name`; a zero of this library's own where simaccel is not installed.
const std::atomic<int32_t>* python_word(const char* name) {
  static std::atomic<int32_t> zero{0};
  TVMFFIObjectHandle f = global_function(name);
  if (f == nullptr) return &zero;
  int64_t address = call_for_address(f, nullptr, 0);
  TVMFFIObjectDecRef(f);
  return address ? reinterpret_cast<const std::atomic<int32_t>*>(address) : &zero;
}

// Nonzero while simaccel's Python runtime wants every region call (a Python engine or the
// host-staged mode is chosen): the region then forwards its tensors to the runtime (kInvokeFunc).
const std::atomic<int32_t>* route_flag() {
  static const std::atomic<int32_t>* flag = python_word(kNativeRouteFunc);
  return flag;
}

// The debugging tools on now (simaccel.debug.flags: bit 1 sanitize, bit 2 trace), read on
// every call; always zero where simaccel is not installed.
const std::atomic<int32_t>* debug_word() {
  static const std::atomic<int32_t>* word = python_word(kNativeDebugFunc);
  return word;
}


// The tensor a TVM-FFI argument holds, or nullptr.
DLTensor* as_tensor(const TVMFFIAny& a) {
  if (a.type_index == kTVMFFIDLTensorPtr) return static_cast<DLTensor*>(a.v_ptr);
  if (a.type_index == kTVMFFITensor) return TVMFFITensorGetDLTensorPtr(a.v_obj);
  return nullptr;
}

// Row-major without gaps; a tensor with no elements is compact whatever its strides.
bool compact(const DLTensor* t) {
  if (t->strides == nullptr) return true;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] == 0) return true;
  }
  int64_t step = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != step) return false;
    step *= t->shape[i];
  }
  return true;
}

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
    for (int32_t k = 0; k < lib.num_kernels && problem.empty(); ++k) {
      const Kernel& kernel = lib.kernels[k];
      CUmodule module = nullptr;
      const char* entry = nullptr;
      uint32_t shared = 0;
      std::string tried;
      if (const Cubin* cubin = fitting_cubin(kernel, arch)) {
        CUresult loaded = d.ModuleLoadData(&module, cubin->image);
        if (loaded == 0) entry = cubin->entry, shared = cubin->shared_bytes, ++from_cubins;
        else tried = "its cubin for " + arch_text(cubin->arch) + ": " + cuda_error(loaded) + "; ";
      }
      if (entry == nullptr && kernel.ptx_arch <= arch) {
        CUresult loaded = d.ModuleLoadData(&module, kernel.ptx);
        if (loaded == 0) entry = kernel.ptx_entry, shared = kernel.ptx_shared_bytes;
        else tried += "its PTX for " + arch_text(kernel.ptx_arch) + ": " + cuda_error(loaded) +
                      " (the driver must be " + kMinDriver + " or newer); ";
      }
      if (entry == nullptr) {
        problem = std::string("kernel ") + kernel.name + " cannot run on this " + arch_text(arch) + " GPU: " + tried +
                  "the library holds " + lib.held + " (build with cuda_archs including " + arch_text(arch) + ")";
        break;
      }
      CUfunction function = nullptr;
      if ((rc = d.ModuleGetFunction(&function, module, entry)) != 0) {
        problem = std::string("kernel ") + kernel.name + ": no entry " + entry + ": " + cuda_error(rc);
        break;
      }
      // A kernel with stage buffers in dynamic shared memory may use all a block can have here.
      int most = 0;
      if (shared > kStaticSharedLimit && ((rc = d.DeviceGetAttribute(&most, kSharedOptIn, dev)) != 0 ||
                                          static_cast<uint32_t>(most) < shared ||
                                          (rc = d.FuncSetAttribute(function, kMaxDynamicShared, most)) != 0)) {
        problem = std::string("kernel ") + kernel.name + " needs " + std::to_string(shared) +
                  " bytes of shared memory per block; this " + arch_text(arch) + " GPU gives at most " +
                  std::to_string(most) + (rc ? ": " + cuda_error(rc) : std::string());
        break;
      }
      fresh->functions.push_back(function);
      fresh->shared_bytes.push_back(shared);
    }
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

// Write a constant's value into its memory, on the stream (a memset: legal while capturing).
CUresult fill_constant(const Driver& d, const TensorSpec& t, CUdeviceptr p, CUstream stream) {
  switch (t.nbytes) {
    case 1: return d.MemsetD8Async(p, static_cast<unsigned char>(t.value[0]), 1, stream);
    case 2: return d.MemsetD16Async(p, static_cast<unsigned short>(t.value[0]), 1, stream);
    case 4: return d.MemsetD32Async(p, t.value[0], 1, stream);
    case 8: {
      CUresult rc = d.MemsetD32Async(p, t.value[0], 1, stream);
      return rc != 0 ? rc : d.MemsetD32Async(p + 4, t.value[1], 1, stream);
    }
    default: return 1;  // CUDA_ERROR_INVALID_VALUE: the generator writes 0-d constants only
  }
}

// ---------------------------------------------------------------------------------------------
// One call, as its paths share it: plain (the default), sanitized, and either one traced.

struct Trace {  // while the debug word's trace bit is on: events around each launch
  int64_t host_start_ns = 0;      // CLOCK_REALTIME at the call's start, as Python's time.time_ns()
  std::vector<int32_t> launched;  // the launches recorded, in order; launch i's events: 2i, 2i + 1
};

struct Call {
  const Region& r;
  const Library& lib;
  const DeviceState& state;
  Memory& memory;  // its lock is held
  CUstream stream;
  int32_t device;
  const uint64_t* address;  // the boundary tensors' data pointers, inputs then outputs
  const bool* aliased;      // per boundary tensor: an output sharing memory with an input
  uint64_t* data;           // per Program tensor: the device address launches use
  Trace* trace;             // nullptr unless tracing
  const Launch* launches;   // the region's launches this call runs: plain (fused) or checked
  int32_t num_launches;
  std::string where() const { return std::string("region ") + r.symbol + " on cuda:" + std::to_string(device); }
};

// A per-call array of `n` elements, each `fill`: on the stack up to N, else on the heap (the
// sizes come from the library's tables, so the runtime is compiled once for every library).
template <typename T, int N>
struct CallArray {
  CallArray(int32_t n, T fill) : heap(n > N ? new T[n] : nullptr), data(n > N ? heap.get() : stack) {
    std::fill(data, data + std::max<int32_t>(n, 0), fill);
  }
  CallArray(const CallArray&) = delete;
  CallArray& operator=(const CallArray&) = delete;
  T stack[N];
  std::unique_ptr<T[]> heap;
  T* const data;
};

// The shared memory launch `launch` runs with: its own and what its kernel's image needs.
uint32_t shared_bytes(const Call& c, const Launch& launch) { return launch.shared_bytes + c.state.shared_bytes[launch.kernel]; }

// Launch `l` with the call's data pointers patched into its parameters (and, when tracing and
// `traced`, an event recorded before and after it on the stream).
CUresult launch_kernel(const Call& c, int32_t l, bool traced = true) {
  const Driver& d = driver();
  const Launch& launch = c.launches[l];
  CallArray<int64_t, 256> word_array(launch.num_words, 0);
  CallArray<void*, 256> param_array(launch.num_words, nullptr);
  int64_t* words = word_array.data;
  void** params = param_array.data;
  std::memcpy(words, launch.words, sizeof(int64_t) * launch.num_words);
  for (int32_t p = 0; p < launch.num_patches; ++p) words[launch.patch_word[p]] = static_cast<int64_t>(c.data[launch.patch_tensor[p]]);
  for (int32_t w = 0; w < launch.num_words; ++w) params[w] = &words[w];
  traced = traced && c.trace && c.trace->launched.size() < static_cast<size_t>(c.num_launches);  // two events each
  const CUevent* events = traced ? &c.memory.events[2 * c.trace->launched.size()] : nullptr;
  if (events) d.EventRecord(events[0], c.stream);
  CUresult rc = d.LaunchKernel(c.state.functions[launch.kernel], launch.grid[0], launch.grid[1], launch.grid[2],
                               launch.block[0], launch.block[1], launch.block[2], shared_bytes(c, launch), c.stream, params,
                               nullptr);
  if (events && rc == 0) {
    d.EventRecord(events[1], c.stream);
    c.trace->launched.push_back(l);
  }
  return rc;
}

bool launches_nothing(const Launch& launch) { return launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0; }

int launch_failed(const Call& c, int32_t l, CUresult rc) {
  const Launch& launch = c.launches[l];
  return fail(kEngineError, c.where() + ": launch " + std::to_string(l) + " (op " + std::to_string(launch.op) + ", kernel " +
                                c.lib.kernels[launch.kernel].name + ") failed: " + cuda_error(rc));
}

// The default path: intermediates kept per device and stream, the kernels queued, aliased
// outputs copied into place. Nothing synchronises.
int run_plain(const Call& c, int64_t* copied) {
  const Driver& d = driver();
  const Region& r = c.r;
  const int32_t n_in = r.num_inputs, n_out = r.num_outputs;
  std::vector<CUdeviceptr> call_owned;  // allocated on the stream for this call only (capture)
  int capturing = 0;
  bool checked_capture = false;
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    const int32_t kind = r.kinds[t];  // -2: constant, -1: a view (launches use its owner), 0: intermediate, 1: input, 2 + k: output k
    if (kind == -1 || kind == -3 || kind == 1 || (kind >= 2 && !c.aliased[n_in + kind - 2])) continue;
    if (c.memory.slots[t] == 0) {
      if (!checked_capture) {
        d.StreamIsCapturing(c.stream, &capturing);
        checked_capture = true;
      }
      CUdeviceptr p = 0;
      size_t bytes = static_cast<size_t>(r.tensors[t].nbytes);
      if (bytes == 0) continue;
      // cuMemAlloc is illegal while the stream is captured into a CUDA graph: there the
      // memory is allocated and freed on the stream, and so becomes part of the graph.
      CUresult rc = capturing ? d.MemAllocAsync(&p, bytes, c.stream) : d.MemAlloc(&p, bytes);
      if (rc != 0) return fail(kEngineError, c.where() + ": cannot allocate " + std::to_string(bytes) + " bytes for '" +
                                                  r.tensors[t].name + "': " + cuda_error(rc));
      if (kind == -2 && (rc = fill_constant(d, r.tensors[t], p, c.stream)) != 0) {
        return fail(kEngineError, c.where() + ": cannot write constant '" + r.tensors[t].name + "': " + cuda_error(rc));
      }
      if (capturing) {
        call_owned.push_back(p);
        c.data[t] = p;
        continue;
      }
      c.memory.slots[t] = p;
    }
    c.data[t] = c.memory.slots[t];
  }
  // Launch the kernels, in order.
  for (int32_t l = 0; l < c.num_launches; ++l) {
    if (launches_nothing(c.launches[l])) continue;  // no elements
    if (CUresult rc = launch_kernel(c, l)) return launch_failed(c, l, rc);
  }
  for (int32_t o = 0; o < n_out; ++o) {
    if (!c.aliased[n_in + o]) continue;
    const int32_t t = r.outputs[o];
    CUresult rc = d.MemcpyDtoDAsync(c.address[n_in + o], c.data[t], static_cast<size_t>(r.tensors[t].nbytes), c.stream);
    if (rc != 0) return fail(kEngineError, c.where() + ": copying output '" + r.tensors[t].name + "' into place failed: " + cuda_error(rc));
    *copied += r.tensors[t].nbytes;
  }
  for (CUdeviceptr p : call_owned) d.MemFreeAsync(p, c.stream);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The sanitizer: bit kDebugSanitize of the debug word (simaccel.debug.sanitize), or a library
// built with sanitize=True. Every op writes into scratch of its own with guard bands of canary
// bytes around it, poisoned before the op; after each launch the stream is synchronised and
// its error state read; after each op its output is read back (still poisoned: unwritten),
// every guard band is read back (changed: out of bounds) and its inputs are compared with their
// host copies (changed: an input written). Then the scratch is copied to TVM's outputs. All
// of it costs a synchronisation and host copies per op: it is for finding bugs, not for speed.

constexpr size_t kGuardBytes = 256;  // before each tensor; after it, as many plus the rest of its last 256 bytes

size_t tail_guard(int64_t nbytes) { return static_cast<size_t>((nbytes + 255) / 256 * 256 - nbytes) + kGuardBytes; }

// A finding: the message names region, op and tensor, and ends with the tag SanitizerError
// reads its attributes back from ("[sanitizer: kind=K region=R op=OP tensor=T]").
int sanitizer_fail(const Call& c, const char* kind, int32_t op, int32_t tensor, const std::string& what) {
  std::string text = c.where() + ": ";
  if (op >= 0) text += "op " + std::to_string(op) + " (" + c.r.ops[op].name + ") ";
  std::string tag = std::string(" [sanitizer: kind=") + kind + " region=" + c.r.symbol;
  if (op >= 0) tag += std::string(" op=") + c.r.ops[op].name;
  if (tensor >= 0) tag += std::string(" tensor=") + c.r.tensors[tensor].name;
  return fail(kSanitizerError, text + what + tag + "]");
}

std::string tensor_text(const Region& r, int32_t t) {
  const TensorSpec& s = r.tensors[t];
  return std::string("'") + s.name + "' " + shape_text(s.ndim, s.shape) + " " + dtype_text(s.code, s.bits, 1);
}

std::string dims_text(const uint32_t* v) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) + ")";
}

// `bytes` at device address `from` copied to `host`, once the stream's work so far is done.
CUresult to_host(const Call& c, void* host, CUdeviceptr from, size_t bytes) {
  const Driver& d = driver();
  CUresult rc = d.MemcpyDtoHAsync(host, from, bytes, c.stream);
  return rc != 0 ? rc : d.StreamSynchronize(c.stream);
}

// The poison (simaccel.debug.flags): a NaN with a payload for float16/32/64, else bytes; where
// any bit pattern is a value (`ambiguous`), a second pass over other bytes tells them apart.
bool is_float(const TensorSpec& s) { return s.code == kDLFloat && (s.bits == 16 || s.bits == 32 || s.bits == 64); }
bool ambiguous(const TensorSpec& s) { return !is_float(s) && s.code != kDLBool; }

std::string poison_element(const TensorSpec& spec, bool again) {
  std::string e(static_cast<size_t>(spec.bits / 8), static_cast<char>(again ? kPoisonByteAgain : kPoisonByte));
  if (!is_float(spec)) return e;
  if (spec.bits == 16) std::memcpy(&e[0], &kPoisonFloat16, 2);
  if (spec.bits == 32) std::memcpy(&e[0], &kPoisonFloat32, 4);
  if (spec.bits == 64) {
    std::memcpy(&e[0], &kPoisonFloat64Low, 4);
    std::memcpy(&e[4], &kPoisonFloat64High, 4);
  }
  return e;
}

CUresult poison(const Call& c, CUdeviceptr p, const TensorSpec& spec, bool again) {
  const Driver& d = driver();
  const size_t n = static_cast<size_t>(spec.nbytes);
  if (!is_float(spec)) return d.MemsetD8Async(p, again ? kPoisonByteAgain : kPoisonByte, n, c.stream);
  if (spec.bits == 16) return d.MemsetD16Async(p, kPoisonFloat16, n / 2, c.stream);
  if (spec.bits == 32) return d.MemsetD32Async(p, kPoisonFloat32, n / 4, c.stream);
  // float64: each element's two 4-byte words, as two columns 8 bytes apart
  CUresult rc = d.MemsetD2D32Async(p, 8, kPoisonFloat64Low, 1, n / 8, c.stream);
  return rc != 0 ? rc : d.MemsetD2D32Async(p + 4, 8, kPoisonFloat64High, 1, n / 8, c.stream);
}

// Which elements of `got` (a tensor of `spec`) hold the poison.
std::vector<bool> poisoned(const std::vector<unsigned char>& got, const TensorSpec& spec, bool again) {
  const std::string element = poison_element(spec, again);
  const size_t size = element.size();
  std::vector<bool> out(got.size() / size);
  for (size_t e = 0; e < out.size(); ++e) out[e] = std::memcmp(&got[e * size], element.data(), size) == 0;
  return out;
}

// Scratch with guard bands for every op output (views share their owner's), allocated once per
// device and stream; the canaries written again on every call (a failed call may have left them
// changed). The region's constants: their memory of the plain path, allocated and filled once.
int guard_outputs(const Call& c) {
  const Driver& d = driver();
  const Region& r = c.r;
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    if (r.kinds[t] != -2 || r.tensors[t].nbytes == 0) continue;
    if (c.memory.slots[t] == 0) {
      CUdeviceptr p = 0;
      CUresult rc = d.MemAlloc(&p, static_cast<size_t>(r.tensors[t].nbytes));
      if (rc == 0) rc = fill_constant(d, r.tensors[t], p, c.stream);
      if (rc != 0) return fail(kEngineError, c.where() + ": cannot write constant '" + r.tensors[t].name + "': " + cuda_error(rc));
      c.memory.slots[t] = p;
    }
    c.data[t] = c.memory.slots[t];
  }
  std::vector<CUdeviceptr>& guarded = c.memory.guarded;
  if (guarded.empty()) guarded.assign(static_cast<size_t>(r.num_tensors), 0);
  for (int32_t k = 0; k < r.num_ops; ++k) {
    const int32_t t = r.ops[k].output;
    const int64_t nbytes = r.tensors[t].nbytes;
    if ((r.kinds[t] < 0 && r.kinds[t] != -3) || nbytes == 0) continue;  // a fused value is stored here
    if (guarded[t] == 0) {
      const size_t bytes = kGuardBytes + static_cast<size_t>(nbytes) + tail_guard(nbytes);
      if (CUresult rc = d.MemAlloc(&guarded[t], bytes)) {
        guarded[t] = 0;
        return fail(kEngineError, c.where() + ": the sanitizer cannot allocate " + std::to_string(bytes) + " bytes for '" +
                                      r.tensors[t].name + "': " + cuda_error(rc));
      }
    }
    CUresult rc = d.MemsetD8Async(guarded[t], kCanary, kGuardBytes, c.stream);
    if (rc == 0) rc = d.MemsetD8Async(guarded[t] + kGuardBytes + nbytes, kCanary, tail_guard(nbytes), c.stream);
    if (rc != 0) return fail(kEngineError, c.where() + ": the sanitizer cannot write guard bands: " + cuda_error(rc));
    c.data[t] = guarded[t] + kGuardBytes;
  }
  return 0;
}

// The guard bands of every guarded tensor, read back after op `op`: a changed byte is that
// op's write outside a tensor. `writer[t]`: the op whose output tensor t is.
int check_guards(const Call& c, int32_t op, const std::vector<int32_t>& writer) {
  const Region& r = c.r;
  std::vector<unsigned char> band;
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    const CUdeviceptr base = c.memory.guarded[t];
    if (base == 0) continue;
    const int64_t nbytes = r.tensors[t].nbytes;
    for (int side = 0; side < 2; ++side) {
      const size_t size = side == 0 ? kGuardBytes : tail_guard(nbytes);
      band.resize(size);
      if (CUresult rc = to_host(c, band.data(), side == 0 ? base : base + kGuardBytes + nbytes, size)) {
        return sanitizer_fail(c, kSanitizeFault, op, t,
                              "failed: reading back the guard bands of " + tensor_text(r, t) + ": " + cuda_error(rc));
      }
      int64_t changed = 0, first = -1, last = -1;
      for (size_t i = 0; i < size; ++i) {
        if (band[i] == kCanary) continue;
        ++changed;
        if (first < 0) first = static_cast<int64_t>(i);
        last = static_cast<int64_t>(i);
      }
      if (changed == 0) continue;
      std::string what = "wrote outside " + tensor_text(r, t) + ", " + std::to_string(nbytes) + " bytes: " +
                         std::to_string(changed) + " canary bytes changed ";
      if (side == 0) {
        what += "before its start (bytes -" + std::to_string(static_cast<int64_t>(size) - first) + " to -" +
                std::to_string(static_cast<int64_t>(size) - last) + ")";
      } else {
        what += "after its end (bytes +" + std::to_string(first) + " to +" + std::to_string(last) + " past it)";
      }
      if (writer[t] != op) {
        what += "; '" + std::string(r.tensors[t].name) + "' is the output of op " + std::to_string(writer[t]) + " (" +
                r.ops[writer[t]].name + ")";
      }
      return sanitizer_fail(c, kSanitizeOutOfBounds, op, t, what);
    }
  }
  return 0;
}

// Tensor t's contents compared with its host copy `before`: an op that changed it wrote into
// it. `op` < 0: a region input no op reads, checked after the last op.
int check_unchanged(const Call& c, int32_t op, int32_t t, const std::vector<unsigned char>& before) {
  std::vector<unsigned char> now(before.size());
  if (CUresult rc = to_host(c, now.data(), c.data[t], now.size())) {
    return sanitizer_fail(c, kSanitizeFault, op, t, "failed: reading back " + tensor_text(c.r, t) + ": " + cuda_error(rc));
  }
  int64_t changed = 0, first = -1;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] == before[i]) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++changed;
  }
  if (changed == 0) return 0;
  const std::string differ = std::to_string(changed) + " of " + std::to_string(now.size()) + " bytes differ (first at byte " +
                             std::to_string(first) + ")";
  if (op < 0) {
    return sanitizer_fail(c, kSanitizeInputWritten, -1, t, "region input " + tensor_text(c.r, t) +
                                                               ", which no op reads, was changed by one of its ops: " + differ);
  }
  return sanitizer_fail(c, kSanitizeInputWritten, op, t, "changed its input " + tensor_text(c.r, t) +
                                                             (c.r.kinds[t] == 1    ? " (an input of the region): "
                                                              : c.r.kinds[t] == -2 ? " (a constant of the region): "
                                                                                   : ": ") +
                                                             differ);
}

// Op `k`'s launches [begin, end), one at a time, each followed by a synchronisation whose
// error is the fault of that launch; `again`: the second pass, not traced.
int launch_op(const Call& c, int32_t k, int32_t begin, int32_t end, bool again = false) {
  const Driver& d = driver();
  const Region& r = c.r;
  for (int32_t l = begin; l < end; ++l) {
    const Launch& launch = c.launches[l];
    if (launches_nothing(launch)) continue;
    if (CUresult rc = launch_kernel(c, l, !again)) return launch_failed(c, l, rc);
    if (CUresult rc = d.StreamSynchronize(c.stream)) {
      std::string args;
      for (int32_t p = 0; p < launch.num_patches; ++p) {
        const int32_t t = launch.patch_tensor[p];
        args += (p ? ", " : "") + tensor_text(r, t) + " at " + hex(c.data[t]);
      }
      return sanitizer_fail(c, kSanitizeFault, k, -1, "faulted: launch " + std::to_string(l) + " of the region (kernel " +
                                                          c.lib.kernels[launch.kernel].name + ", grid " + dims_text(launch.grid) +
                                                          ", block " + dims_text(launch.block) + ", shared " +
                                                          std::to_string(shared_bytes(c, launch)) + " bytes, arguments " + args +
                                                          ", " + std::to_string(launch.num_words) + " parameter words) failed: " +
                                                          cuda_error(rc) + "; the CUDA context is unusable from here on");
    }
  }
  return 0;
}

// Op `k`'s output `t` after the op: which elements still hold the poison (after a second pass
// over other bytes where the dtype makes the poison a value), read back into `got`.
int unwritten(const Call& c, int32_t k, int32_t begin, int32_t end, std::vector<unsigned char>& got, std::vector<bool>* left) {
  const int32_t t = c.r.ops[k].output;
  const TensorSpec& spec = c.r.tensors[t];
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      if (CUresult rc = poison(c, c.data[t], spec, true)) return fail(kEngineError, c.where() + ": poisoning failed: " + cuda_error(rc));
      if (launch_op(c, k, begin, end, true) != 0) return -1;
    }
    if (CUresult rc = to_host(c, got.data(), c.data[t], got.size())) {
      return sanitizer_fail(c, kSanitizeFault, k, t, "failed: reading back " + tensor_text(c.r, t) + ": " + cuda_error(rc));
    }
    std::vector<bool> now = poisoned(got, spec, pass == 1);
    if (pass == 1) {
      for (size_t e = 0; e < now.size(); ++e) now[e] = now[e] && (*left)[e];
    }
    *left = std::move(now);
    bool any = false;
    for (bool b : *left) any = any || b;
    if (!any || !ambiguous(spec)) break;
  }
  return 0;
}

int run_sanitized(const Call& c, int64_t* copied) {
  const Driver& d = driver();
  const Region& r = c.r;
  const int32_t n_in = r.num_inputs, n_out = r.num_outputs;
  if (!d.debug_missing.empty()) return fail(kEngineError, c.where() + ": the sanitizer cannot run: " + d.debug_missing);
  int capturing = 0;
  d.StreamIsCapturing(c.stream, &capturing);
  if (capturing) {
    return sanitizer_fail(c, kSanitizeCapture, -1, -1,
                          "called while its stream " + hex(reinterpret_cast<uint64_t>(c.stream)) +
                              " is captured into a CUDA graph; a sanitized call synchronises after every kernel, which "
                              "capture forbids: sanitize the calls before capturing, not during");
  }
  CUcontext owner = nullptr;
  if (d.StreamGetCtx(c.stream, &owner) == 0 && owner != c.state.context) {
    return sanitizer_fail(c, kSanitizeStream, -1, -1, "TVM's current stream " + hex(reinterpret_cast<uint64_t>(c.stream)) +
                                                          " belongs to another CUDA context than cuda:" + std::to_string(c.device) +
                                                          "'s, where the region's tensors are: set the stream of this device "
                                                          "(tvm_ffi.use_raw_stream(device, stream))");
  }
  if (guard_outputs(c) != 0) return -1;
  std::vector<int32_t> writer(static_cast<size_t>(r.num_tensors), -1);
  for (int32_t k = 0; k < r.num_ops; ++k) writer[r.ops[k].output] = k;
  // Host copies of what ops read: the region's inputs and constants now, each op's output once
  // it is checked.
  std::vector<std::vector<unsigned char>> host(static_cast<size_t>(r.num_tensors));
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    if (r.kinds[t] != 1 && r.kinds[t] != -2) continue;
    host[t].resize(static_cast<size_t>(r.tensors[t].nbytes));
    if (host[t].empty()) continue;
    if (CUresult rc = to_host(c, host[t].data(), c.data[t], host[t].size())) {
      return sanitizer_fail(c, kSanitizeFault, -1, t, "reading " + tensor_text(r, t) + " before the first kernel failed: " +
                                                          cuda_error(rc) + " (a fault of work queued before this region)");
    }
  }
  std::vector<bool> read(static_cast<size_t>(r.num_tensors), false);
  for (int32_t k = 0, begin = 0; k < r.num_ops; ++k) {
    const OpSpec& op = r.ops[k];
    const TensorSpec& out = r.tensors[op.output];
    int32_t end = begin;
    while (end < c.num_launches && c.launches[end].op == k) ++end;
    for (int32_t i = 0; i < op.num_inputs; ++i) read[op.inputs[i]] = true;
    // a view is its owner: nothing launched; a fused value is stored on this path
    const bool checked = (r.kinds[op.output] >= 0 || r.kinds[op.output] == -3) && out.nbytes > 0;
    if (checked) {
      if (CUresult rc = poison(c, c.data[op.output], out, false)) {
        return fail(kEngineError, c.where() + ": poisoning failed: " + cuda_error(rc));
      }
    }
    if (launch_op(c, k, begin, end) != 0) return -1;
    if (checked) {
      std::vector<unsigned char>& got = host[op.output];
      got.resize(static_cast<size_t>(out.nbytes));
      std::vector<bool> left;
      if (unwritten(c, k, begin, end, got, &left) != 0) return -1;
      int64_t count = 0, first = -1;
      for (size_t e = 0; e < left.size(); ++e) {
        if (!left[e]) continue;
        if (first < 0) first = static_cast<int64_t>(e);
        ++count;
      }
      if (count > 0) {
        return sanitizer_fail(c, kSanitizeUnwritten, k, op.output, "left " + std::to_string(count) + " of " +
                                                                     std::to_string(left.size()) + " elements of its output " +
                                                                     tensor_text(r, op.output) + " unwritten (first at element " +
                                                                     std::to_string(first) + "; they still hold the sanitizer's poison)");
      }
      if (check_guards(c, k, writer) != 0) return -1;
    }
    for (int32_t i = 0; i < op.num_inputs; ++i) {
      const int32_t t = op.inputs[i];
      if (t != op.output && !host[t].empty() && check_unchanged(c, k, t, host[t]) != 0) return -1;
    }
    begin = end;
  }
  for (int32_t i = 0; i < n_in; ++i) {  // inputs no op reads: written by some op, none to name
    const int32_t t = r.inputs[i];
    if (!read[t] && !host[t].empty() && check_unchanged(c, -1, t, host[t]) != 0) return -1;
  }
  for (int32_t o = 0; o < n_out; ++o) {
    const int32_t t = r.outputs[o];
    if (r.tensors[t].nbytes == 0) continue;
    CUresult rc = d.MemcpyDtoDAsync(c.address[n_in + o], c.data[t], static_cast<size_t>(r.tensors[t].nbytes), c.stream);
    if (rc != 0) return fail(kEngineError, c.where() + ": copying output '" + r.tensors[t].name + "' into place failed: " + cuda_error(rc));
    if (c.aliased[n_in + o]) *copied += r.tensors[t].nbytes;  // the ledger counts what the plain path copies
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The trace: bit kDebugTrace of the debug word (simaccel.debug.trace). Only then is any event
// API called. After the call the last event is waited for, each launch's start and end are
// read against the first event, and the record goes to Python as JSON (kNativeTraceFunc,
// simaccel.debug.native_events), after the Memory's lock is released.

// Events for the call (the Memory's, created once), or false where the call is not traced:
// a driver without the event API, or a stream being captured (its events cannot be waited for).
bool trace_begin(Memory& memory, const Region& r, CUstream stream) {
  const Driver& d = driver();
  if (!d.debug_missing.empty()) return false;
  int capturing = 0;
  d.StreamIsCapturing(stream, &capturing);
  if (capturing) return false;
  while (memory.events.size() < 2 * static_cast<size_t>(std::max(r.num_launches, r.num_checked_launches))) {
    CUevent e = nullptr;
    if (d.EventCreate(&e, 0) != 0) return false;
    memory.events.push_back(e);
  }
  return true;
}

std::string json_string(const char* s) {
  std::string out = "\"";
  for (; *s; ++s) {
    const unsigned char ch = static_cast<unsigned char>(*s);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string dims_json(const uint32_t* v) {
  return "[" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) + "]";
}

// The call's record as JSON, its events waited for (under the Memory's lock).
std::string trace_record(const Call& c) {
  const Driver& d = driver();
  const Trace& t = *c.trace;
  const std::vector<CUevent>& events = c.memory.events;
  if (!t.launched.empty()) d.EventSynchronize(events[2 * t.launched.size() - 1]);
  std::string json = "{\"region\": " + json_string(c.r.symbol) + ", \"key\": " + json_string(c.r.key) +
                     ", \"device\": " + std::to_string(c.device) +
                     ", \"stream\": " + std::to_string(reinterpret_cast<uint64_t>(c.stream)) +
                     ", \"host_start_ns\": " + std::to_string(t.host_start_ns) + ", \"launches\": [";
  for (size_t i = 0; i < t.launched.size(); ++i) {
    const Launch& launch = c.launches[t.launched[i]];
    float start = 0, end = 0;
    d.EventElapsedTime(&start, events[0], events[2 * i]);
    d.EventElapsedTime(&end, events[0], events[2 * i + 1]);
    char times[96];
    std::snprintf(times, sizeof(times), "\"start_us\": %.3f, \"end_us\": %.3f", start * 1000.0, end * 1000.0);
    json += std::string(i ? ", " : "") + "{\"launch\": " + std::to_string(t.launched[i]) + ", \"op\": " + std::to_string(launch.op) +
            ", \"op_name\": " + json_string(c.r.ops[launch.op].name) + ", \"kernel\": " + json_string(c.lib.kernels[launch.kernel].name) +
            ", \"grid\": " + dims_json(launch.grid) + ", \"block\": " + dims_json(launch.block) +
            ", \"shared\": " + std::to_string(shared_bytes(c, launch)) + ", " + times + "}";
  }
  return json + "]}";
}

void trace_send(const std::string& json) {
  TVMFFIObjectHandle f = global_function(kNativeTraceFunc);
  if (f == nullptr) return;  // simaccel is not installed: nobody to tell
  TVMFFIAny a = raw_str(json.c_str());
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.v_int64 = 0;
  if (TVMFFIFunctionCall(f, &a, 1, &result) != 0) {  // a trace never fails the call
    TVMFFIObjectHandle err = nullptr;
    TVMFFIErrorMoveFromRaised(&err);
    if (err) TVMFFIObjectDecRef(err);
  } else if (result.type_index >= kTVMFFIStaticObjectBegin && result.v_obj) {
    TVMFFIObjectDecRef(result.v_obj);
  }
  TVMFFIObjectDecRef(f);
}

// ---------------------------------------------------------------------------------------------
// One region call: `args` are TVM's tensors, inputs then DPS outputs.
int run_region(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const int32_t debug = debug_word()->load(std::memory_order_relaxed);
  Trace trace;
  if (debug & kDebugTrace) {
    trace.host_start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch()).count();
  }
  std::call_once(s.once, [&] {  // share counters with simaccel's ledger where it is installed
    if (TVMFFIObjectHandle f = global_function(kNativeRegionFunc)) {
      TVMFFIAny a[3] = {raw_str(r.key), raw_str(r.program_json), raw_str(r.launches_per_op)};
      if (int64_t address = call_for_address(f, a, 3)) s.counters = reinterpret_cast<Counters*>(address);
      TVMFFIObjectDecRef(f);
    }
  });
  const int32_t n_in = r.num_inputs, n_out = r.num_outputs, n = n_in + n_out;
  if (route_flag()->load(std::memory_order_relaxed)) {  // a Python engine is chosen: forward
    TVMFFIObjectHandle f = global_function(kInvokeFunc);
    if (f == nullptr) return fail(kEngineError, std::string("region ") + r.symbol + ": " + kInvokeFunc + " is not registered");
    std::vector<TVMFFIAny> forwarded = {raw_str(r.key), raw_str(r.program_json)};
    forwarded.insert(forwarded.end(), args, args + num_args);
    TVMFFIAny result;
    result.type_index = kTVMFFINone;
    result.v_int64 = 0;
    int rc = TVMFFIFunctionCall(f, forwarded.data(), static_cast<int32_t>(forwarded.size()), &result);
    TVMFFIObjectDecRef(f);
    return rc;
  }
  if (num_args != n) {
    return fail(kProgramError, std::string("region ") + r.symbol + " takes " + std::to_string(n_in) + " inputs and " +
                                    std::to_string(n_out) + " outputs, got " + std::to_string(num_args) + " tensors");
  }

  // Check every tensor TVM passed against the Program.
  CallArray<uint64_t, 64> address_array(n, 0);
  uint64_t* address = address_array.data;
  int32_t device = -1;
  for (int32_t i = 0; i < n; ++i) {
    const TensorSpec& spec = r.tensors[i < n_in ? r.inputs[i] : r.outputs[i - n_in]];
    auto where = [&] {  // built only for an error message: the checks run on every call
      return std::string("region ") + r.symbol + ": " + (i < n_in ? "input" : "output") + " '" + spec.name + "'";
    };
    DLTensor* t = as_tensor(args[i]);
    if (t == nullptr) return fail(kDeviceError, where() + " is not a tensor (TVM-FFI type index " + std::to_string(args[i].type_index) + ")");
    if (t->device.device_type != kDLCUDA) {
      return fail(kDeviceError, where() + " is on " + device_text(t->device) + "; this region was compiled for CUDA GPUs");
    }
    if (device >= 0 && t->device.device_id != device) {
      return fail(kDeviceError, std::string("region ") + r.symbol + ": tensors are on mixed devices (cuda:" +
                                     std::to_string(device) + " and " + device_text(t->device) + " for '" + spec.name + "')");
    }
    device = t->device.device_id;
    if (t->dtype.code != spec.code || t->dtype.bits != spec.bits || t->dtype.lanes != 1) {
      return fail(kDtypeError, where() + " expects dtype " + dtype_text(spec.code, spec.bits, 1) + ", got " +
                                    dtype_text(t->dtype.code, t->dtype.bits, t->dtype.lanes) + " (shape " +
                                    shape_text(t->ndim, t->shape) + ", on " + device_text(t->device) + ")");
    }
    if (t->ndim != spec.ndim || std::memcmp(t->shape, spec.shape, sizeof(int64_t) * spec.ndim) != 0) {
      return fail(kShapeError, where() + " expects shape " + shape_text(spec.ndim, spec.shape) + ", got " +
                                    shape_text(t->ndim, t->shape) + " (" + dtype_text(spec.code, spec.bits, 1) +
                                    ", on " + device_text(t->device) + ")");
    }
    if (!compact(t)) {
      return fail(kLayoutError, where() + " " + shape_text(spec.ndim, spec.shape) + " must be compact row-major, got element strides " +
                                     shape_text(t->ndim, t->strides));
    }
    address[i] = reinterpret_cast<uint64_t>(t->data) + t->byte_offset;
    if (address[i] % spec.alignment && spec.nbytes > 0) {  // no elements: no address is read
      return fail(kLayoutError, where() + " data pointer " + hex(address[i]) + " (byte_offset included) is not aligned to " +
                                     std::to_string(spec.alignment) + " bytes");
    }
    if (address[i] == 0 && spec.nbytes > 0) return fail(kLayoutError, where() + " has a null data pointer");
  }
  if (device < 0 || device >= kMaxDevices) {
    return fail(kDeviceError, std::string("region ") + r.symbol + ": no tensor on a CUDA device below cuda:" + std::to_string(kMaxDevices));
  }
  // An output sharing memory with an input is computed into scratch and copied at the end;
  // two outputs sharing memory are refused.
  CallArray<bool, 64> aliased_array(n, false);
  bool* aliased = aliased_array.data;
  for (int32_t i = n_in; i < n; ++i) {
    const int64_t bytes_i = r.tensors[r.outputs[i - n_in]].nbytes;
    if (bytes_i == 0) continue;
    for (int32_t j = 0; j < n; ++j) {
      const int64_t bytes_j = r.tensors[j < n_in ? r.inputs[j] : r.outputs[j - n_in]].nbytes;
      if (j == i || bytes_j == 0 || !(address[j] < address[i] + bytes_i && address[i] < address[j] + bytes_j)) continue;
      if (j >= n_in) {
        return fail(kLayoutError, std::string("region ") + r.symbol + ": outputs '" + r.tensors[r.outputs[i - n_in]].name +
                                       "' and '" + r.tensors[r.outputs[j - n_in]].name + "' share memory (" + hex(address[i]) +
                                       ", " + hex(address[j]) + "); each output needs a buffer of its own");
      }
      aliased[i] = true;
    }
  }

  const Driver& d = driver();
  if (!d.missing.empty()) return fail(kEngineError, std::string("region ") + r.symbol + ": " + d.missing);
  DeviceState* state = nullptr;
  if (load_kernels(r, lib, device, &state) != 0) return -1;
  ContextGuard context;
  CUcontext current = nullptr;
  d.CtxGetCurrent(&current);
  if (current != state->context) {
    CUresult rc = d.CtxPushCurrent(state->context);
    if (rc != 0) return fail(kDeviceError, std::string("region ") + r.symbol + ": " + cuda_error(rc));
    context.pushed = true;
  }
  CUstream stream = static_cast<CUstream>(TVMFFIEnvGetStream(kDLCUDA, device));

  // Device memory of every tensor: TVM's for the boundary, this region's for the rest.
  CallArray<uint64_t, 128> data_array(r.num_tensors, 0);
  uint64_t* data = data_array.data;
  for (int32_t i = 0; i < n; ++i) data[i < n_in ? r.inputs[i] : r.outputs[i - n_in]] = address[i];
  Memory* memory = nullptr;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    for (Memory& m : s.memory) {
      if (m.device == device && m.stream == stream) memory = &m;
    }
    if (memory == nullptr) memory = &s.memory.emplace_back(device, stream, r.num_tensors);
  }
  std::unique_lock<std::mutex> one_call_at_a_time(memory->lock);
  const bool tracing = (debug & kDebugTrace) && trace_begin(*memory, r, stream);
  const bool sanitizing = r.sanitize || (debug & kDebugSanitize);
  const Call call{r, lib, *state, *memory, stream, device, address, aliased, data, tracing ? &trace : nullptr,
                  sanitizing ? r.checked_launches : r.launches, sanitizing ? r.num_checked_launches : r.num_launches};
  int64_t copied = 0;
  if ((sanitizing ? run_sanitized(call, &copied) : run_plain(call, &copied)) != 0) return -1;
  std::string record;
  if (tracing) record = trace_record(call);
  one_call_at_a_time.unlock();
  if (tracing) trace_send(record);
  Counters& c = *s.counters;
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.copied_bytes.fetch_add(copied, std::memory_order_relaxed);
  c.nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
                          std::memory_order_relaxed);
  return 0;
}

}  // namespace simaccel_native
#pragma GCC visibility pop
