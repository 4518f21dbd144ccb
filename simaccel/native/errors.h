// simaccel native regions: errors raised as TVM-FFI errors whose kind is a simaccel error class,
// so a caller with simaccel installed gets the same SimAccelError subclass the Python engines
// raise; and the texts of shapes, dtypes, devices and addresses their messages hold.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <cstdio>
#include <string>

#pragma GCC visibility push(hidden)
namespace simaccel_native {

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

}  // namespace simaccel_native
#pragma GCC visibility pop
