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
// The runtime is this file and the headers it includes, each one concern:
//   driver.h    the CUDA driver API, opened once per library, and its error texts
//   errors.h    errors raised as simaccel's error kinds, and the texts their messages hold
//   python.h    the route to simaccel's Python runtime (engines, counters, debug word)
//   device.h    the library's kernels loaded on a device (cubin or PTX)
//   call.h      one call as its paths share it, and its kernel launches
//   sizes.h     a symbolic region's call bound to its sizes
//   sanitize.h  the sanitized path (simaccel.debug.sanitize)
//   trace.h     the traced call's record (simaccel.debug.trace)
// It is the same for every library: simaccel.native.build compiles it once per compiler and
// header text, caches the object and links it into each library's object. Everything here is
// hidden: two region libraries in one process each keep their own copy (their own loaded
// modules, memory and counters).
//
// Names shared with simaccel's Python (global functions, error kinds, environment variables)
// are constants the compiled file defines before including this header (kInvokeFunc,
// kDeviceError, ...: simaccel/names.py); no runtime header spells any of them.
#pragma once

#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "call.h"
#include "device.h"
#include "driver.h"
#include "errors.h"
#include "python.h"
#include "sanitize.h"
#include "sizes.h"
#include "tables.h"
#include "trace.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

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
    const int32_t kind = r.kinds[t];  // -4: workspace, -2: constant, -1: a view (launches use its owner), 0: intermediate, 1: input, 2 + k: output k
    if (kind == -1 || kind == -3 || kind == 1 || (kind >= 2 && !c.aliased[n_in + kind - 2])) continue;
    if (c.memory.slots[t] == 0) {
      if (!checked_capture) {
        d.StreamIsCapturing(c.stream, &capturing);
        checked_capture = true;
      }
      CUdeviceptr p = 0;
      size_t bytes = static_cast<size_t>(r.tensors[t].capacity);
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
    if (copy_output(c, o) != 0) return -1;
    *copied += r.tensors[r.outputs[o]].nbytes;
  }
  for (CUdeviceptr p : call_owned) d.MemFreeAsync(p, c.stream);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// One region call: `args` are TVM's tensors, inputs then DPS outputs.

// Share the region's counters with simaccel's ledger where it is installed (once per region).
void share_counters(const Region& r, RegionState& s) {
  std::call_once(s.once, [&] {
    if (TVMFFIObjectHandle f = global_function(kNativeRegionFunc)) {
      TVMFFIAny a[2] = {raw_str(r.key), raw_str(r.program_json)};
      if (int64_t address = call_for_address(f, a, 2)) {
        s.counters = reinterpret_cast<Counters*>(address);
        s.launches = reinterpret_cast<std::atomic<int64_t>*>(address) + 3;
      }
      TVMFFIObjectDecRef(f);
    }
  });
}

// The call forwarded to simaccel's Python runtime (kInvokeFunc), whose engine is chosen.
int forward_to_python(const Region& r, const TVMFFIAny* args, int32_t num_args) {
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

// Every tensor TVM passed checked against the Program: `address` gets each one's data pointer
// (inputs then outputs), `device` the CUDA device they are all on.
int check_tensors(const Region& r, const TVMFFIAny* args, uint64_t* address, int32_t* device_out) {
  const int32_t n_in = r.num_inputs, n = n_in + r.num_outputs;
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
  *device_out = device;
  return 0;
}

// An output sharing memory with an input is computed into scratch and copied at the end
// (`aliased`); two outputs sharing memory are refused.
int find_aliases(const Region& r, const uint64_t* address, bool* aliased) {
  const int32_t n_in = r.num_inputs, n = n_in + r.num_outputs;
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
  return 0;
}

// The region's memory on `device` and `stream` (made on the first call there).
Memory& memory_for(const Region& r, RegionState& s, int32_t device, CUstream stream) {
  std::lock_guard<std::mutex> guard(s.lock);
  for (Memory& m : s.memory) {
    if (m.device == device && m.stream == stream) return m;
  }
  return s.memory.emplace_back(device, stream, r.num_tensors);
}

int run_static(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args);

// A symbolic region's call: its sizes read and checked (sizes.h), then the region bound to
// them runs as a static one. A sanitized or traced call, or one whose sizes no plan covers,
// goes to simaccel's Python runtime, which binds the same Program.
int run_sized(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args) {
  share_counters(r, s);
  const Sizes& z = *r.sizes;
  if (route_flag()->load(std::memory_order_relaxed) || debug_word()->load(std::memory_order_relaxed)) {
    return forward_to_python(r, args, num_args);
  }
  const int32_t n = r.num_inputs + r.num_outputs;
  if (num_args != n + z.num_shape_args) {
    return fail(kProgramError, std::string("region ") + r.symbol + " takes " + std::to_string(r.num_inputs) + " inputs, " +
                                    std::to_string(r.num_outputs) + " outputs and " + std::to_string(z.num_shape_args) +
                                    " shapes, got " + std::to_string(num_args) + " arguments");
  }
  CallArray<int64_t, 16> value_array(z.num_vars, 0);
  int64_t* values = value_array.data;
  if (read_sizes(r, args, values) != 0) return -1;
  std::unique_ptr<BoundRegion> scratch;
  const BoundRegion* bound = bound_region(r, s, values, &scratch);
  // The call's shapes against those the sizes give: compared with the bound region's, and only
  // where they differ (or no plan covers the sizes) evaluated again, for the error's words.
  if ((bound == nullptr || !same_shapes(r, *bound, args)) && check_shapes(r, args, values) != 0) return -1;
  if (bound == nullptr) {
    if (TVMFFIObjectHandle f = global_function(kInvokeFunc)) {
      TVMFFIObjectDecRef(f);
      return forward_to_python(r, args, num_args);
    }
    return fail(kEngineError, std::string("region ") + r.symbol + ": no launch plan of this library covers " +
                                   sizes_text(z, values) + ", and simaccel's Python runtime, which would run it, is not installed");
  }
  CallArray<TVMFFIAny, 64> tensor_array(n, TVMFFIAny{});
  for (int32_t i = 0; i < n; ++i) tensor_array.data[i] = args[tensor_position(z, i)];
  return run_static(bound->region, s, lib, tensor_array.data, n);
}

int run_region(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args) {
  return r.sizes ? run_sized(r, s, lib, args, num_args) : run_static(r, s, lib, args, num_args);
}

int run_static(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const int32_t debug = debug_word()->load(std::memory_order_relaxed);
  Trace trace;
  if (debug & kDebugTrace) {
    trace.host_start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch()).count();
  }
  share_counters(r, s);
  const int32_t n_in = r.num_inputs, n_out = r.num_outputs, n = n_in + n_out;
  if (route_flag()->load(std::memory_order_relaxed)) return forward_to_python(r, args, num_args);  // a Python engine is chosen
  if (num_args != n) {
    return fail(kProgramError, std::string("region ") + r.symbol + " takes " + std::to_string(n_in) + " inputs and " +
                                    std::to_string(n_out) + " outputs, got " + std::to_string(num_args) + " tensors");
  }
  CallArray<uint64_t, 64> address_array(n, 0);
  CallArray<bool, 64> aliased_array(n, false);
  uint64_t* address = address_array.data;
  bool* aliased = aliased_array.data;
  int32_t device = -1;
  if (check_tensors(r, args, address, &device) != 0 || find_aliases(r, address, aliased) != 0) return -1;

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
  Memory& memory = memory_for(r, s, device, stream);
  std::unique_lock<std::mutex> one_call_at_a_time(memory.lock);
  const bool tracing = (debug & kDebugTrace) && trace_begin(memory, r, stream);
  const bool sanitizing = r.sanitize || (debug & kDebugSanitize);
  const Call call{r, lib, *state, memory, stream, device, address, aliased, data, tracing ? &trace : nullptr,
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
  if (s.launches) {  // this call's plan's launches (a symbolic region's differ with its sizes)
    for (int32_t l = 0; l < r.num_launches; ++l) s.launches[r.launches[l].op].fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}


}  // namespace simaccel_native
#pragma GCC visibility pop
