// simaccel native regions: a symbolic region's call, bound to its sizes with no Python.
//
// Where it sits: region.h's `run_sized` calls these for a region whose tables hold `Sizes`
// (tables.h; written by simaccel.native.source from simaccel.size_plans). `read_sizes` reads
// each size var from the call's arguments (a tensor's dim, or an element of a shape TVM
// passes, `R.shape([...])`) and checks its bounds; `bound_region` finds the region bound to
// those sizes: a static Region whose shapes, grids, blocks, shared memory and kernel
// parameters are the expressions evaluated, from the first plan whose guards hold;
// `same_shapes` compares the call's tensors and shape arguments with it, and `check_shapes`
// says, from the expressions, which differs. Bound regions are kept per distinct sizes (up to
// kMaxBound per region; past that each call binds its own), so a warm call evaluates nothing.
// Intermediates are sized for the upper bounds (`capacity`), once per device and stream, as
// TVM's memory planning does with tir_var_upper_bound, so every size shares them.
// A runtime header: compiled only in the runtime's file, after the names shared with Python (region.h).
#pragma once

#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "call.h"
#include "errors.h"
#include "tables.h"

#pragma GCC visibility push(hidden)
namespace simaccel_native {

constexpr size_t kMaxBound = 64;  // bound regions kept per region
constexpr int kSizeStack = 64;    // the generator refuses deeper expressions

int64_t floor_div(int64_t a, int64_t c) {  // c > 0, as Python's //
  int64_t q = a / c;
  return (a % c != 0 && a < 0) ? q - 1 : q;
}

double as_float(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

int64_t float_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

// Expression `e` where the size vars have `values`: an int64, a guard's 0 or 1, or a float64's bits.
int64_t evaluate(const Sizes& z, Expr e, const int64_t* values) {
  int64_t stack[kSizeStack];
  int sp = 0;
  const int64_t* code = z.code;
  for (int32_t i = e.start; i < e.start + e.length; ++i) {
    int64_t a, b;
    switch (code[i]) {
      case kSizeConst: stack[sp++] = code[++i]; break;
      case kSizeVar: stack[sp++] = values[code[++i]]; break;
      case kSizeFloat: stack[sp++] = code[++i]; break;
      case kSizeAdd: b = stack[--sp]; stack[sp - 1] += b; break;
      case kSizeMul: b = stack[--sp]; stack[sp - 1] *= b; break;
      case kSizeFloorDiv: stack[sp - 1] = floor_div(stack[sp - 1], code[++i]); break;
      case kSizeMod: a = stack[sp - 1]; stack[sp - 1] = a - floor_div(a, code[i + 1]) * code[i + 1]; ++i; break;
      case kSizeNeg: stack[sp - 1] = -stack[sp - 1]; break;
      case kSizeEq0: stack[sp - 1] = stack[sp - 1] == 0; break;
      case kSizeNe0: stack[sp - 1] = stack[sp - 1] != 0; break;
      case kSizeLt0: stack[sp - 1] = stack[sp - 1] < 0; break;
      case kSizeLe0: stack[sp - 1] = stack[sp - 1] <= 0; break;
      case kSizeGt0: stack[sp - 1] = stack[sp - 1] > 0; break;
      case kSizeGe0: stack[sp - 1] = stack[sp - 1] >= 0; break;
      case kSizeToFloat: stack[sp - 1] = float_bits(static_cast<double>(stack[sp - 1])); break;
      case kSizeFNeg: stack[sp - 1] = float_bits(-as_float(stack[sp - 1])); break;
      default: {  // the float operators
        const double y = as_float(stack[--sp]), x = as_float(stack[sp - 1]);
        const int64_t op = code[i];
        stack[sp - 1] = float_bits(op == kSizeFAdd ? x + y : op == kSizeFSub ? x - y : op == kSizeFMul ? x * y : x / y);
      }
    }
  }
  return stack[0];
}

std::string sizes_text(const Sizes& z, const int64_t* values) {
  std::string text;
  for (int32_t v = 0; v < z.num_vars; ++v) {
    text += (v ? ", " : "") + std::string(z.vars[v].name) + " = " + std::to_string(values[v]);
  }
  return text;
}

// Region `r` bound to `values`: its tensors' shapes and its launches evaluated, from the first
// plan whose guards hold. False where none holds.
bool bind_region(const Region& r, const int64_t* values, BoundRegion* b) {
  const Sizes& z = *r.sizes;
  const SizePlanSpec* plan = nullptr;
  for (int32_t p = 0; p < z.num_plans && plan == nullptr; ++p) {
    bool holds = true;
    for (int32_t g = 0; g < z.plans[p].num_guards && holds; ++g) holds = evaluate(z, z.plans[p].guards[g], values) != 0;
    if (holds) plan = &z.plans[p];
  }
  if (plan == nullptr) return false;
  b->values.assign(values, values + z.num_vars);
  b->shapes.resize(r.num_tensors);
  b->tensors.assign(r.tensors, r.tensors + r.num_tensors);
  for (int32_t t = 0; t < r.num_tensors; ++t) {
    TensorSpec& spec = b->tensors[t];
    std::vector<int64_t>& shape = b->shapes[t];
    shape.resize(spec.ndim);
    int64_t elements = 1;
    for (int32_t k = 0; k < spec.ndim; ++k) elements *= (shape[k] = evaluate(z, z.dims[z.first_dim[t] + k], values));
    spec.shape = shape.data();
    spec.nbytes = elements * (spec.bits / 8);
  }
  b->words.resize(plan->num_launches);
  b->launches.resize(plan->num_launches);
  for (int32_t l = 0; l < plan->num_launches; ++l) {
    const SizedLaunch& s = plan->launches[l];
    std::vector<int64_t>& words = b->words[l];
    words.resize(s.num_words);
    for (int32_t w = 0; w < s.num_words; ++w) words[w] = evaluate(z, s.words[w], values);
    Launch& launch = b->launches[l];
    launch.op = s.op;
    launch.kernel = s.kernel;
    for (int k = 0; k < 3; ++k) {
      launch.grid[k] = static_cast<uint32_t>(evaluate(z, s.grid[k], values));
      launch.block[k] = static_cast<uint32_t>(evaluate(z, s.block[k], values));
    }
    launch.shared_bytes = static_cast<uint32_t>(evaluate(z, s.shared_bytes, values));
    launch.num_words = s.num_words;
    launch.words = words.data();
    launch.num_patches = s.num_patches;
    launch.patch_word = s.patch_word;
    launch.patch_tensor = s.patch_tensor;
  }
  b->shape_args.resize(z.shape_arg_first[z.num_shape_args]);
  for (size_t e = 0; e < b->shape_args.size(); ++e) b->shape_args[e] = evaluate(z, z.shape_arg_dims[e], values);
  b->region = r;
  b->region.tensors = b->tensors.data();
  b->region.num_launches = b->region.num_checked_launches = plan->num_launches;
  b->region.launches = b->region.checked_launches = b->launches.data();
  b->region.sizes = nullptr;
  return true;
}

// The argument a boundary tensor or shape is: TVM's call holds the shapes at their positions
// and the tensors, inputs then outputs, in the others.
int32_t tensor_position(const Sizes& z, int32_t i) {
  for (int32_t k = 0; k < z.num_shape_args && z.shape_arg_positions[k] <= i; ++k) ++i;
  return i;
}

const int64_t* shape_argument(const TVMFFIAny& a, int64_t* size) {
  if (a.type_index != kTVMFFIShape) return nullptr;
  const TVMFFIShapeCell* cell = TVMFFIShapeGetCellPtr(a.v_obj);
  *size = static_cast<int64_t>(cell->size);
  return cell->data;
}

std::string argument_shape_text(const TVMFFIAny& a) {
  int64_t size = 0;
  if (const int64_t* data = shape_argument(a, &size)) return shape_text(static_cast<int32_t>(size), data);
  const DLTensor* t = as_tensor(a);
  return t ? shape_text(t->ndim, t->shape) : std::string("(none)");
}

// The size vars' values read from the call's arguments, each checked against its bounds.
int read_sizes(const Region& r, const TVMFFIAny* args, int64_t* values) {
  const Sizes& z = *r.sizes;
  for (int32_t v = 0; v < z.num_vars; ++v) {
    const SizeVarSpec& var = z.vars[v];
    const TVMFFIAny& a = args[var.arg];
    const std::string where = std::string("region ") + r.symbol + ": size var " + var.name;
    int64_t size = 0;
    const int64_t* dims = nullptr;
    if (var.shape) {
      dims = shape_argument(a, &size);
      if (dims == nullptr) {
        return fail(kProgramError, where + " is read from argument " + std::to_string(var.arg) +
                                       ", a shape, but the call passed TVM-FFI type index " + std::to_string(a.type_index));
      }
    } else {
      const DLTensor* t = as_tensor(a);
      if (t == nullptr) {
        return fail(kDeviceError, where + " is read from argument " + std::to_string(var.arg) +
                                      ", which is not a tensor (TVM-FFI type index " + std::to_string(a.type_index) + ")");
      }
      dims = t->shape;
      size = t->ndim;
    }
    if (var.dim >= size) {
      return fail(kShapeError, where + " is dim " + std::to_string(var.dim) + " of argument " + std::to_string(var.arg) +
                                   ", whose shape is " + shape_text(static_cast<int32_t>(size), dims));
    }
    values[v] = dims[var.dim];
    if (values[v] < var.lower || values[v] > var.upper) {
      return fail(kShapeError, std::string("region ") + r.symbol + ": size var " + var.name + " = " + std::to_string(values[v]) +
                                   " (from argument " + std::to_string(var.arg) + ", dim " + std::to_string(var.dim) + " of " +
                                   shape_text(static_cast<int32_t>(size), dims) + ") is outside its bounds [" +
                                   std::to_string(var.lower) + ", " + std::to_string(var.upper) + "]");
    }
  }
  return 0;
}

// Whether every boundary tensor and shape argument of the call has the shape `b` is bound to:
// a warm call's check, which evaluates nothing (check_shapes says what differs).
bool same_shapes(const Region& r, const BoundRegion& b, const TVMFFIAny* args) {
  const Sizes& z = *r.sizes;
  for (int32_t i = 0; i < r.num_inputs + r.num_outputs; ++i) {
    const TensorSpec& spec = b.tensors[i < r.num_inputs ? r.inputs[i] : r.outputs[i - r.num_inputs]];
    const DLTensor* got = as_tensor(args[tensor_position(z, i)]);
    if (got == nullptr) continue;  // the static checks name it
    if (got->ndim != spec.ndim || std::memcmp(got->shape, spec.shape, sizeof(int64_t) * spec.ndim) != 0) return false;
  }
  for (int32_t k = 0; k < z.num_shape_args; ++k) {
    int64_t size = 0;
    const int64_t* got = shape_argument(args[z.shape_arg_positions[k]], &size);
    const int32_t first = z.shape_arg_first[k], count = z.shape_arg_first[k + 1] - first;
    if (got == nullptr || size != count || std::memcmp(got, &b.shape_args[first], sizeof(int64_t) * count) != 0) return false;
  }
  return true;
}

// Every boundary tensor's shape and every shape argument is what its expressions give: a
// ShapeError naming the first that differs, its expression, the values and the sizes.
int check_shapes(const Region& r, const TVMFFIAny* args, const int64_t* values) {
  const Sizes& z = *r.sizes;
  const int32_t n = r.num_inputs + r.num_outputs;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = i < r.num_inputs ? r.inputs[i] : r.outputs[i - r.num_inputs];
    const DLTensor* got = as_tensor(args[tensor_position(z, i)]);
    if (got == nullptr) continue;  // the static checks name it
    const int32_t ndim = r.tensors[t].ndim;
    bool same = got->ndim == ndim;
    std::vector<int64_t> want(ndim);
    for (int32_t k = 0; k < ndim; ++k) {
      want[k] = evaluate(z, z.dims[z.first_dim[t] + k], values);
      same = same && got->shape[k] == want[k];
    }
    if (!same) {
      return fail(kShapeError, std::string("region ") + r.symbol + ": " + (i < r.num_inputs ? "input" : "output") + " '" +
                                   r.tensors[t].name + "' has shape " + shape_text(got->ndim, got->shape) + ", but " +
                                   z.shape_texts[t] + " is " + shape_text(ndim, want.data()) + " where " + sizes_text(z, values));
    }
  }
  for (int32_t k = 0; k < z.num_shape_args; ++k) {
    int64_t size = 0;
    const int64_t* got = shape_argument(args[z.shape_arg_positions[k]], &size);
    const int32_t first = z.shape_arg_first[k], count = z.shape_arg_first[k + 1] - first;
    bool same = got != nullptr && size == count;
    std::vector<int64_t> want(count);
    for (int32_t e = 0; e < count; ++e) {
      want[e] = evaluate(z, z.shape_arg_dims[first + e], values);
      same = same && got[e] == want[e];
    }
    if (!same) {
      return fail(kShapeError, std::string("region ") + r.symbol + ": shape argument " + std::to_string(z.shape_arg_positions[k]) +
                                   " is " + argument_shape_text(args[z.shape_arg_positions[k]]) + ", but it should be " +
                                   shape_text(count, want.data()) + " where " + sizes_text(z, values));
    }
  }
  return 0;
}

// The region bound to `values`: one kept in `s`, or made (and kept while fewer than kMaxBound
// are), or made in `scratch`. nullptr where no plan's guards hold.
const BoundRegion* bound_region(const Region& r, RegionState& s, const int64_t* values,
                                std::unique_ptr<BoundRegion>* scratch) {
  const size_t n = static_cast<size_t>(r.sizes->num_vars);
  std::lock_guard<std::mutex> guard(s.bound_lock);
  for (const BoundRegion& b : s.bound) {
    if (std::memcmp(b.values.data(), values, n * sizeof(int64_t)) == 0) return &b;
  }
  BoundRegion* b;
  if (s.bound.size() < kMaxBound) {
    b = &s.bound.emplace_back();
  } else {
    scratch->reset(new BoundRegion());
    b = scratch->get();
  }
  if (!bind_region(r, values, b)) {
    if (b != scratch->get()) s.bound.pop_back();
    return nullptr;
  }
  return b;
}

}  // namespace simaccel_native
#pragma GCC visibility pop
