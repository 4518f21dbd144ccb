// simaccel native regions: what a generated region library and the runtime (region.h) share.
//
// Where it sits: simaccel.native.source writes one C++ file per TVM library, holding each
// region's tables (tensors, kernel launches with their argument words, cubins) and the state
// beside them, and one TVM-FFI function per region that calls `run_region`. The runtime,
// region.h, is the same for every library: it is compiled once per compiler and header text
// (simaccel.native.build caches its object) and linked into each library's object.
//
// Both halves are hidden (not exported from the model's shared library): two region libraries
// in one process each keep their own copy (their own loaded modules, memory and counters).
#pragma once

#include <tvm/ffi/c_api.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#pragma GCC visibility push(hidden)
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
  int64_t capacity;   // bytes the region allocates for it: nbytes, or at the upper bounds of a symbolic region's sizes
  int64_t alignment;  // bytes its data pointer must be aligned to: element size or the profile's
  const uint32_t* value;  // a constant's bits (one word, two for 8 bytes), nullptr for other tensors
};

// A compute capability as the tables hold it: major * 10 + minor (sm_90 -> 90, sm_120 -> 120).
struct Cubin {
  int32_t arch;
  const unsigned char* image;  // an ELF image: it knows its size
  const char* entry;           // the kernel's mangled name in this image
  uint32_t shared_bytes;       // dynamic shared memory this image needs besides a launch's own
};

struct Kernel {
  const Cubin* cubins;  // one per architecture the library was built for, lowest first
  int32_t num_cubins;
  const char* ptx;      // the kernel as PTX for `ptx_arch` (the lowest built), JIT-compiled
  int32_t ptx_arch;     // where no cubin fits the GPU
  const char* ptx_entry;
  uint32_t ptx_shared_bytes;  // dynamic shared memory the PTX's code needs besides a launch's own
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

struct OpSpec {  // for the sanitizer's and the trace's messages
  const char* name;       // the Program op, "simaccel.dense_bias"
  int32_t output;         // its output tensor (a view's: kind -1, never launched)
  int32_t num_inputs;
  const int32_t* inputs;  // the tensors it reads, views as their owners
};

// A symbolic region's sizes (simaccel.size_plans), evaluated per call by sizes.h: expressions
// over its size vars as postfix code (the Op codes below), and its launches as plans, each
// valid where its guards hold.
constexpr int64_t kSizeConst = 0;  // int64: a constant (the next word)
constexpr int64_t kSizeVar = 1;  // a var's value (its index: the next word)
constexpr int64_t kSizeAdd = 2;
constexpr int64_t kSizeMul = 3;
constexpr int64_t kSizeFloorDiv = 4;  // by the next word (> 0), as Python's //
constexpr int64_t kSizeMod = 5;  // by the next word (> 0), as Python's %
constexpr int64_t kSizeNeg = 6;
constexpr int64_t kSizeEq0 = 7;  // guards: 1 where the relation to 0 holds
constexpr int64_t kSizeNe0 = 8;
constexpr int64_t kSizeLt0 = 9;
constexpr int64_t kSizeLe0 = 10;
constexpr int64_t kSizeGt0 = 11;
constexpr int64_t kSizeGe0 = 12;
constexpr int64_t kSizeFloat = 13;  // float64, as its bits: a constant (the next word)
constexpr int64_t kSizeToFloat = 14;  // an int64 as a float64
constexpr int64_t kSizeFAdd = 15;
constexpr int64_t kSizeFSub = 16;
constexpr int64_t kSizeFMul = 17;
constexpr int64_t kSizeFDiv = 18;
constexpr int64_t kSizeFNeg = 19;

struct Expr {
  int32_t start, length;  // in Sizes::code; kSizeConst, kSizeVar, kSizeFloorDiv, kSizeMod, kSizeFloat take the next word
};

struct SizeVarSpec {
  const char* name;
  int64_t lower, upper;
  int32_t arg;    // the argument of TVM's call it is read from (its position)
  int32_t dim;    // that tensor's dim, or that shape's element
  int32_t shape;  // 1: the argument is a shape (R.shape([...])), 0: a tensor
};

struct SizedLaunch {  // a Launch whose numbers are expressions
  int32_t op;
  int32_t kernel;
  Expr grid[3];
  Expr block[3];
  Expr shared_bytes;
  int32_t num_words;
  const Expr* words;
  int32_t num_patches;
  const int32_t* patch_word;
  const int32_t* patch_tensor;
};

struct SizePlanSpec {
  int32_t num_guards;
  const Expr* guards;
  int32_t num_launches;
  const SizedLaunch* launches;
};

struct Sizes {
  int32_t num_vars;
  const SizeVarSpec* vars;
  const int64_t* code;
  const Expr* dims;                // every tensor's dims, tensor after tensor
  const int32_t* first_dim;        // per tensor: where its dims start in `dims`
  const char* const* shape_texts;  // per tensor: its shape as text, "(n, s*2, 8)"
  int32_t num_shape_args;
  const int32_t* shape_arg_positions;  // ascending
  const Expr* shape_arg_dims;          // every shape argument's elements, one after another
  const int32_t* shape_arg_first;      // per shape argument: where its elements start; one more entry: the end
  int32_t num_plans;
  const SizePlanSpec* plans;
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
  const int8_t* kinds;          // per tensor: -4 workspace, -3 fused value, -2 constant, -1 view, 0 intermediate, 1 input, 2 + k output k
  int32_t num_ops;
  const OpSpec* ops;
  int32_t sanitize;  // 1: built with sanitize=True (Program.sanitize): every call is sanitized
  // The launches a sanitized call runs: every op on its own (no fused groups, so each op's
  // output is stored and checked); the same as `launches` where nothing fused.
  int32_t num_checked_launches;
  const Launch* checked_launches;
  const Sizes* sizes;  // a symbolic region's; nullptr for a static one
};

// ---------------------------------------------------------------------------------------------
// The CUDA driver's types, as far as the state below needs them (region.h opens the driver).

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef unsigned long long CUdeviceptr;

constexpr int kMaxDevices = 64;

// ---------------------------------------------------------------------------------------------
// Per-library state: kernels loaded per device, memory per region, counters.

// Shared with simaccel's Python runtime when it is installed (simaccel.tvm_integration.backend.bridge),
// followed there by one count of kernel launches per op of the Program; else kept here, without them.
struct Counters {
  std::atomic<int64_t> calls{0}, nanoseconds{0}, copied_bytes{0};
};
static_assert(sizeof(Counters) == 3 * sizeof(int64_t), "counters are read as three int64 by Python");
static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t), "launch counts are read as int64 by Python");

struct DeviceState {
  CUcontext context = nullptr;
  std::vector<CUfunction> functions;
  std::vector<uint32_t> shared_bytes;  // per function: the dynamic shared memory its image needs
};

// One region's intermediates (and aliased-output scratch) on one device and stream. Its lock
// is held while a call queues its kernels: calls from several threads on one stream share
// this memory, so each call's launches must reach the stream together, never interleaved.
struct Memory {
  Memory(int32_t device, void* stream, int32_t tensors) : device(device), stream(stream), slots(tensors, 0) {}
  const int32_t device;
  void* const stream;
  std::vector<CUdeviceptr> slots;  // by tensor id; 0 where not allocated
  std::vector<CUdeviceptr> guarded;  // sanitizer: by tensor id, its scratch with guard bands (base)
  std::vector<CUevent> events;       // trace: two per launch, created on the first traced call
  std::mutex lock;
};

// A symbolic region bound to one call's sizes: a static Region (its shapes, launches and
// argument words evaluated), kept per distinct sizes (sizes.h).
struct BoundRegion {
  std::vector<int64_t> values;  // the size vars' values it is bound to
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorSpec> tensors;
  std::vector<std::vector<int64_t>> words;
  std::vector<Launch> launches;
  std::vector<int64_t> shape_args;  // every shape argument's elements, one after another
  Region region;
};

struct RegionState {
  std::once_flag once;
  Counters local;  // used where simaccel's Python runtime is not installed
  Counters* counters = &local;
  std::atomic<int64_t>* launches = nullptr;  // per op, after the Python runtime's counters; none locally
  std::mutex lock;  // guards `memory`, whose entries never move or go away
  std::deque<Memory> memory;
  std::mutex bound_lock;  // guards `bound`, whose entries never move or go away
  std::deque<BoundRegion> bound;
};

struct Library {  // what one generated library holds besides its regions
  const Kernel* kernels;
  int32_t num_kernels;
  const char* held;  // "cubins for sm_80, sm_90 and PTX for sm_80", for messages
  std::mutex lock;
  std::atomic<DeviceState*> devices[kMaxDevices];
};

// Run region `r` of library `lib` on the tensors TVM passed (inputs, then outputs): region.h.
int run_region(const Region& r, RegionState& s, Library& lib, const TVMFFIAny* args, int32_t num_args);

}  // namespace simaccel_native
#pragma GCC visibility pop
