// simaccel native regions: the run-time half, shared by every generated region library.
//
// Where it sits: simaccel.native.source writes one C++ file per TVM library. That file holds
// each region's tables (tensors, kernel launches with their argument words, cubins) and
// includes this header, which supplies `run_region`: check the tensors TVM passes, take TVM's
// current stream for the device, and launch the region's kernels there through the CUDA
// driver, opened at run time with dlopen. The library links no CUDA library, so it builds
// and exports on a machine without a GPU, and it needs neither Python nor numba to run.
//
// Everything here is in an anonymous namespace: two region libraries in one process each
// keep their own copy (their own loaded modules, memory and counters).
//
// Names shared with simaccel's Python (global functions, error kinds, environment variables)
// are constants the generated file defines before including this header (kInvokeFunc,
// kDeviceError, ...: simaccel/names.py); this file spells none of them.
#pragma once

#include <dlfcn.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace {
namespace simaccel_native {

// ---------------------------------------------------------------------------------------------
// The tables the generator writes (see simaccel/native/source.py).

struct TensorSpec {
  const char* name;
  uint8_t code;   // DLDataTypeCode
  uint8_t bits;
  int32_t ndim;
  const int64_t* shape;
  int64_t nbytes;
  int64_t alignment;  // bytes its data pointer must be aligned to: element size or the profile's
  const uint32_t* value;  // a constant's bits (one word, two for 8 bytes), nullptr for other tensors
};

// A compute capability as the tables hold it: major * 10 + minor (sm_90 -> 90, sm_120 -> 120).
struct Cubin {
  int32_t arch;
  const unsigned char* image;  // an ELF image: it knows its size
  const char* entry;           // the kernel's mangled name in this image
};

struct Kernel {
  const Cubin* cubins;  // one per architecture the library was built for, lowest first
  int32_t num_cubins;
  const char* ptx;      // the kernel as PTX for `ptx_arch` (the lowest built), JIT-compiled
  int32_t ptx_arch;     // where no cubin fits the GPU
  const char* ptx_entry;
  const char* name;  // the Numba kernel's name, for messages
};

struct Launch {
  int32_t op;      // index of the op in the Program
  int32_t kernel;  // index into the library's kernels
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  int32_t num_words;    // 8-byte kernel parameters
  const int64_t* words; // their values; the data pointers are patched in per call
  int32_t num_patches;
  const int32_t* patch_word;    // which word holds a data pointer ...
  const int32_t* patch_tensor;  // ... of which Program tensor
};

struct Region {
  const char* symbol;
  const char* key;           // "symbol:fingerprint", as the Python runtime keys Programs
  const char* program_json;  // for the Python engines and the ledger
  int32_t num_tensors;
  const TensorSpec* tensors;
  int32_t num_inputs;
  const int32_t* inputs;
  int32_t num_outputs;
  const int32_t* outputs;
  int32_t num_launches;
  const Launch* launches;
  const int8_t* kinds;          // per tensor: -2 constant, -1 view, 0 intermediate, 1 input, 2 + k output k
  const char* launches_per_op;  // "1,1,2": for the ledger
};

// ---------------------------------------------------------------------------------------------
// The CUDA driver API, the few entry points used, opened once per library.

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

constexpr int kMaxDevices = 64;
constexpr int kComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeMinor = 76;

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
// Counters and the route to the Python engines, both shared with simaccel's Python runtime
// when it is installed (simaccel.tvm_integration.backend.bridge); else kept here.

struct Counters {
  std::atomic<int64_t> calls{0}, nanoseconds{0}, copied_bytes{0};
};
static_assert(sizeof(Counters) == 3 * sizeof(int64_t), "counters are read as three int64 by Python");

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

// Nonzero while simaccel's Python runtime wants every region call (a Python engine or the
// host-staged mode is chosen): the region then forwards its tensors to the runtime (kInvokeFunc).
const std::atomic<int32_t>* route_flag() {
  static const std::atomic<int32_t>* flag = [] {
    static std::atomic<int32_t> never{0};
    TVMFFIObjectHandle f = global_function(kNativeRouteFunc);
    if (f == nullptr) return static_cast<const std::atomic<int32_t>*>(&never);
    int64_t address = call_for_address(f, nullptr, 0);
    TVMFFIObjectDecRef(f);
    return address ? reinterpret_cast<const std::atomic<int32_t>*>(address) : &never;
  }();
  return flag;
}

// The debugging tools on now (simaccel.debug.flags: bit 1 sanitize, bit 2 trace), read on
// every call; always zero where simaccel is not installed.
const std::atomic<int32_t>* debug_word() {
  static const std::atomic<int32_t>* word = [] {
    static std::atomic<int32_t> none{0};
    TVMFFIObjectHandle f = global_function(kNativeDebugFunc);
    if (f == nullptr) return static_cast<const std::atomic<int32_t>*>(&none);
    int64_t address = call_for_address(f, nullptr, 0);
    TVMFFIObjectDecRef(f);
    return address ? reinterpret_cast<const std::atomic<int32_t>*>(address) : &none;
  }();
  return word;
}

// ---------------------------------------------------------------------------------------------
// Per-library state: kernels loaded per device, memory per region, device and stream.

struct DeviceState {
  CUcontext context = nullptr;
  std::vector<CUfunction> functions;
};

// One region's intermediates (and aliased-output scratch) on one device and stream. Its lock
// is held while a call queues its kernels: calls from several threads on one stream share
// this memory, so each call's launches must reach the stream together, never interleaved.
struct Memory {
  Memory(int32_t device, void* stream, int32_t tensors) : device(device), stream(stream), slots(tensors, 0) {}
  const int32_t device;
  void* const stream;
  std::vector<CUdeviceptr> slots;  // by tensor id; 0 where not allocated
  std::mutex lock;
};

struct RegionState {
  std::once_flag once;
  Counters local;  // used where simaccel's Python runtime is not installed
  Counters* counters = &local;
  std::mutex lock;  // guards `memory`, whose entries never move or go away
  std::deque<Memory> memory;
};

struct Library {  // what one generated library holds besides its regions
  const Kernel* kernels;
  int32_t num_kernels;
  const char* held;  // "cubins for sm_80, sm_90 and PTX for sm_80", for messages
  std::mutex lock;
  std::atomic<DeviceState*> devices[kMaxDevices];
};

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
      std::string tried;
      if (const Cubin* cubin = fitting_cubin(kernel, arch)) {
        CUresult loaded = d.ModuleLoadData(&module, cubin->image);
        if (loaded == 0) entry = cubin->entry, ++from_cubins;
        else tried = "its cubin for " + arch_text(cubin->arch) + ": " + cuda_error(loaded) + "; ";
      }
      if (entry == nullptr && kernel.ptx_arch <= arch) {
        CUresult loaded = d.ModuleLoadData(&module, kernel.ptx);
        if (loaded == 0) entry = kernel.ptx_entry;
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
      fresh->functions.push_back(function);
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

// One region call: `args` are TVM's tensors, inputs then DPS outputs.
int run_region(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
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
  uint64_t address[kMaxBoundary];
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
  bool aliased[kMaxBoundary] = {};
  bool any_aliased = false;
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
      aliased[i] = any_aliased = true;
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
  auto where = [&] { return std::string("region ") + r.symbol + " on cuda:" + std::to_string(device); };

  // Device memory of every tensor: TVM's for the boundary, this region's for the rest.
  uint64_t data[kMaxTensors] = {};
  for (int32_t i = 0; i < n; ++i) data[i < n_in ? r.inputs[i] : r.outputs[i - n_in]] = address[i];
  std::vector<CUdeviceptr> call_owned;  // allocated on the stream for this call only (capture)
  Memory* memory = nullptr;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    for (Memory& m : s.memory) {
      if (m.device == device && m.stream == stream) memory = &m;
    }
    if (memory == nullptr) memory = &s.memory.emplace_back(device, stream, r.num_tensors);
  }
  std::lock_guard<std::mutex> one_call_at_a_time(memory->lock);
  {
    int capturing = 0;
    bool checked_capture = false;
    for (int32_t t = 0; t < r.num_tensors; ++t) {
      const int32_t kind = r.kinds[t];  // -2: constant, -1: a view (launches use its owner), 0: intermediate, 1: input, 2 + k: output k
      if (kind == -1 || kind == 1 || (kind >= 2 && !aliased[n_in + kind - 2])) continue;
      if (memory->slots[t] == 0) {
        if (!checked_capture) {
          d.StreamIsCapturing(stream, &capturing);
          checked_capture = true;
        }
        CUdeviceptr p = 0;
        size_t bytes = static_cast<size_t>(r.tensors[t].nbytes);
        if (bytes == 0) continue;
        // cuMemAlloc is illegal while the stream is captured into a CUDA graph: there the
        // memory is allocated and freed on the stream, and so becomes part of the graph.
        CUresult rc = capturing ? d.MemAllocAsync(&p, bytes, stream) : d.MemAlloc(&p, bytes);
        if (rc != 0) return fail(kEngineError, where() + ": cannot allocate " + std::to_string(bytes) + " bytes for '" +
                                                    r.tensors[t].name + "': " + cuda_error(rc));
        if (kind == -2 && (rc = fill_constant(d, r.tensors[t], p, stream)) != 0) {
          return fail(kEngineError, where() + ": cannot write constant '" + r.tensors[t].name + "': " + cuda_error(rc));
        }
        if (capturing) {
          call_owned.push_back(p);
          data[t] = p;
          continue;
        }
        memory->slots[t] = p;
      }
      data[t] = memory->slots[t];
    }
  }

  // Launch the kernels, in order, with the data pointers patched into their parameters.
  int64_t words[kMaxWords];
  void* params[kMaxWords];
  for (int32_t l = 0; l < r.num_launches; ++l) {
    const Launch& launch = r.launches[l];
    if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0) continue;  // no elements
    std::memcpy(words, launch.words, sizeof(int64_t) * launch.num_words);
    for (int32_t p = 0; p < launch.num_patches; ++p) words[launch.patch_word[p]] = static_cast<int64_t>(data[launch.patch_tensor[p]]);
    for (int32_t w = 0; w < launch.num_words; ++w) params[w] = &words[w];
    CUresult rc = d.LaunchKernel(state->functions[launch.kernel], launch.grid[0], launch.grid[1], launch.grid[2],
                                 launch.block[0], launch.block[1], launch.block[2], launch.shared_bytes, stream, params, nullptr);
    if (rc != 0) {
      return fail(kEngineError, where() + ": launch " + std::to_string(l) + " (op " + std::to_string(launch.op) + ", kernel " +
                                     lib.kernels[launch.kernel].name + ") failed: " + cuda_error(rc));
    }
  }
  int64_t copied = 0;
  if (any_aliased) {
    for (int32_t o = 0; o < n_out; ++o) {
      if (!aliased[n_in + o]) continue;
      const int32_t t = r.outputs[o];
      CUresult rc = d.MemcpyDtoDAsync(address[n_in + o], data[t], static_cast<size_t>(r.tensors[t].nbytes), stream);
      if (rc != 0) return fail(kEngineError, where() + ": copying output '" + r.tensors[t].name + "' into place failed: " + cuda_error(rc));
      copied += r.tensors[t].nbytes;
    }
  }
  for (CUdeviceptr p : call_owned) d.MemFreeAsync(p, stream);
  Counters& c = *s.counters;
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.copied_bytes.fetch_add(copied, std::memory_order_relaxed);
  c.nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
                          std::memory_order_relaxed);
  return 0;
}

}  // namespace simaccel_native
}  // namespace
