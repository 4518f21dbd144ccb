// simaccel native regions: the route to the Python engines and the counters (tables.h), both
// shared with simaccel's Python runtime when it is installed
// (simaccel.tvm_integration.backend.bridge); else kept here.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <tvm/ffi/c_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#pragma GCC visibility push(hidden)
namespace simaccel_native {

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

}  // namespace simaccel_native
#pragma GCC visibility pop
