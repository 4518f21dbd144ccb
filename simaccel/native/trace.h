// simaccel native regions: the trace, bit kDebugTrace of the debug word (simaccel.debug.trace).
// Only then is any event API called. After the call the last event is waited for, each
// launch's start and end are read against the first event, and the record goes to Python as
// JSON (kNativeTraceFunc, simaccel.debug.native_events), after the Memory's lock is released.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "call.h"
#include "driver.h"
#include "python.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

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

}  // namespace simaccel_native
#pragma GCC visibility pop
