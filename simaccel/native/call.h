// simaccel native regions: one call, as its paths share it (plain, sanitized, and either one
// traced): what it runs on, and its kernels launched with the call's data pointers.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "driver.h"
#include "errors.h"
#include "tables.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

// The tensor a TVM-FFI argument holds, or nullptr.
DLTensor* as_tensor(const TVMFFIAny& a) {
  if (a.type_index == kTVMFFIDLTensorPtr) return static_cast<DLTensor*>(a.v_ptr);
  if (a.type_index == kTVMFFITensor) return TVMFFITensorGetDLTensorPtr(a.v_obj);
  return nullptr;
}

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

// Output `o`, computed where the call's data pointer says, copied into TVM's tensor on the stream.
int copy_output(const Call& c, int32_t o) {
  const int32_t t = c.r.outputs[o];
  CUresult rc = driver().MemcpyDtoDAsync(c.address[c.r.num_inputs + o], c.data[t], static_cast<size_t>(c.r.tensors[t].nbytes),
                                         c.stream);
  if (rc != 0) return fail(kEngineError, c.where() + ": copying output '" + c.r.tensors[t].name + "' into place failed: " + cuda_error(rc));
  return 0;
}

}  // namespace simaccel_native
#pragma GCC visibility pop
