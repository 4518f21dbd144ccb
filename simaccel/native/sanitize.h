// simaccel native regions: the sanitizer, bit kDebugSanitize of the debug word
// (simaccel.debug.sanitize), or a library built with sanitize=True. Every op writes into
// scratch of its own with guard bands of canary bytes around it, poisoned before the op; after
// each launch the stream is synchronised and its error state read; after each op its output is
// read back (still poisoned: unwritten), every guard band is read back (changed: out of bounds)
// and its inputs are compared with their host copies (changed: an input written). Then the
// scratch is copied to TVM's outputs. All of it costs a synchronisation and host copies per
// op: it is for finding bugs, not for speed.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "call.h"
#include "driver.h"
#include "errors.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

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

// The poison (simaccel.debug.flags): a NaN with a payload for float16/32/64 and bfloat16, else bytes; where
// any bit pattern is a value (`ambiguous`), a second pass over other bytes tells them apart.
bool is_bfloat16(const TensorSpec& s) { return s.code == kDLBfloat && s.bits == 16; }
bool is_float(const TensorSpec& s) {
  return (s.code == kDLFloat && (s.bits == 16 || s.bits == 32 || s.bits == 64)) || is_bfloat16(s);
}
bool ambiguous(const TensorSpec& s) { return !is_float(s) && s.code != kDLBool; }

std::string poison_element(const TensorSpec& spec, bool again) {
  std::string e(static_cast<size_t>(spec.bits / 8), static_cast<char>(again ? kPoisonByteAgain : kPoisonByte));
  if (!is_float(spec)) return e;
  if (spec.bits == 16) std::memcpy(&e[0], is_bfloat16(spec) ? &kPoisonBfloat16 : &kPoisonFloat16, 2);
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
  if (spec.bits == 16) return d.MemsetD16Async(p, is_bfloat16(spec) ? kPoisonBfloat16 : kPoisonFloat16, n / 2, c.stream);
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

// Scratch with guard bands for every op output (views share their owner's) and the workspace,
// allocated once per device and stream; the canaries written again on every call (a failed call
// may have left them changed). The region's constants: their memory of the plain path, allocated and filled once.
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
  // Every op's output, then the workspace (kind -4: the launches' shared scratch).
  std::vector<int32_t> targets;
  for (int32_t k = 0; k < r.num_ops; ++k) targets.push_back(r.ops[k].output);
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    if (r.kinds[t] == -4) targets.push_back(t);
  }
  for (const int32_t t : targets) {
    const int64_t nbytes = r.tensors[t].nbytes;
    if ((r.kinds[t] < 0 && r.kinds[t] != -3 && r.kinds[t] != -4) || nbytes == 0) continue;  // a fused value is stored here
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
      if (r.kinds[t] == -4) {
        what += " (the region's workspace, which every op's launches share)";
      } else if (writer[t] >= 0 && writer[t] != op) {
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

// A sanitized call synchronises: its stream must not be captured into a CUDA graph, and must
// be of the context of the region's device.
int check_stream(const Call& c) {
  const Driver& d = driver();
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
  return 0;
}

// Host copies of what ops read (`host`, by tensor): the region's inputs and constants now,
// each op's output once it is checked.
int copy_inputs(const Call& c, std::vector<std::vector<unsigned char>>& host) {
  const Region& r = c.r;
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    if (r.kinds[t] != 1 && r.kinds[t] != -2) continue;
    host[t].resize(static_cast<size_t>(r.tensors[t].nbytes));
    if (host[t].empty()) continue;
    if (CUresult rc = to_host(c, host[t].data(), c.data[t], host[t].size())) {
      return sanitizer_fail(c, kSanitizeFault, -1, t, "reading " + tensor_text(r, t) + " before the first kernel failed: " +
                                                          cuda_error(rc) + " (a fault of work queued before this region)");
    }
  }
  return 0;
}

// Op `k`, launches [begin, end), run and checked: its output poisoned before and read back
// after (unwritten elements), every guard band, and the inputs it read against their copies.
int check_op(const Call& c, int32_t k, int32_t begin, int32_t end, const std::vector<int32_t>& writer,
             std::vector<std::vector<unsigned char>>& host) {
  const Region& r = c.r;
  const OpSpec& op = r.ops[k];
  const TensorSpec& out = r.tensors[op.output];
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
  return 0;
}

int run_sanitized(const Call& c, int64_t* copied) {
  const Driver& d = driver();
  const Region& r = c.r;
  const int32_t n_in = r.num_inputs, n_out = r.num_outputs;
  if (!d.debug_missing.empty()) return fail(kEngineError, c.where() + ": the sanitizer cannot run: " + d.debug_missing);
  if (check_stream(c) != 0 || guard_outputs(c) != 0) return -1;
  std::vector<int32_t> writer(static_cast<size_t>(r.num_tensors), -1);
  for (int32_t k = 0; k < r.num_ops; ++k) writer[r.ops[k].output] = k;
  std::vector<std::vector<unsigned char>> host(static_cast<size_t>(r.num_tensors));
  if (copy_inputs(c, host) != 0) return -1;
  std::vector<bool> read(static_cast<size_t>(r.num_tensors), false);
  for (int32_t k = 0, begin = 0; k < r.num_ops; ++k) {
    int32_t end = begin;
    while (end < c.num_launches && c.launches[end].op == k) ++end;
    for (int32_t i = 0; i < r.ops[k].num_inputs; ++i) read[r.ops[k].inputs[i]] = true;
    if (check_op(c, k, begin, end, writer, host) != 0) return -1;
    begin = end;
  }
  for (int32_t i = 0; i < n_in; ++i) {  // inputs no op reads: written by some op, none to name
    const int32_t t = r.inputs[i];
    if (!read[t] && !host[t].empty() && check_unchanged(c, -1, t, host[t]) != 0) return -1;
  }
  for (int32_t o = 0; o < n_out; ++o) {
    const int32_t t = r.outputs[o];
    if (r.tensors[t].nbytes == 0) continue;
    if (copy_output(c, o) != 0) return -1;
    if (c.aliased[n_in + o]) *copied += r.tensors[t].nbytes;  // the ledger counts what the plain path copies
  }
  return 0;
}

}  // namespace simaccel_native
#pragma GCC visibility pop
