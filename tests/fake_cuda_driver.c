/* A stand-in for libcuda.so.1 that records kernel launches, for testing native regions on a
 * machine without a GPU ($SIMACCEL_CUDA_DRIVER points the region library at it).
 *
 * It is not a GPU: it runs no kernel. Each device says it has compute capability 10.0 unless
 * a test sets another (fake_set_compute), so a library built for sm_90 alone has no cubin
 * that fits and loads its kernels' PTX, which the stand-in reads to learn each entry's
 * parameter count. A cubin it is given is recorded (its architecture, from the ELF header)
 * and launches from it carry no parameter words. It hands out host memory as "device"
 * memory, copies and sets memory for real (cuMemcpy*, cuMemset*), and keeps every launch (entry,
 * grid, block, shared bytes, stream, parameter words) for the test to read through ctypes. As a
 * GPU does, it refuses a launch of more than 48 KiB of shared memory unless cuFuncSetAttribute
 * allowed the function that much (its devices offer 227 KiB, an H100's, unless
 * fake_set_shared_limit says less).
 *
 * For the sanitizer and the trace of native regions it also has: events on a fake clock (each
 * record advances it 1 us, each launch 10 us); hooks that make launches "write" their output
 * (fake_set_launch_fill: the first array argument, nitems * itemsize bytes of one value), one
 * launch misbehave (fake_set_launch_defect: write the array whose data pointer is parameter
 * word `data_word`, with `extra` bytes more or fewer than its size, of byte `value`, or where
 * that is -1 of the fill value's complement), synchronisation fail as
 * after an illegal address (fake_set_fault_after), a stream belong to another context
 * (fake_set_foreign_stream); and a counter per entry point the default path must not call.
 */
#define _GNU_SOURCE /* memmem */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAUNCHES 4096
#define MAX_WORDS 256
#define MAX_FUNCTIONS 1024
#define MAX_DEVICES 8

typedef struct {
  char entry[1024];
  int num_words;
  int max_dynamic_shared; /* cuFuncSetAttribute's, 0 where never set */
} Function;

typedef struct {
  char entry[1024];
  unsigned grid[3], block[3], shared;
  void* stream;
  int num_words;
  int64_t words[MAX_WORDS];
} LaunchRecord;

static Function functions[MAX_FUNCTIONS];
static int num_functions;
static LaunchRecord launches[MAX_LAUNCHES];
static int num_launches;
static int allocations, async_allocations, async_frees, copies, memsets, capturing, ptx_loads, reject_ptx, context_pushes;
static int cubin_loads, cubin_arch, shared_opt_ins;  /* how many cubins were loaded, and the last one's architecture (90: sm_90) */
/* Calls of the entry points only the sanitizer and the trace use (memsets: also constants' first fill). */
static int host_copies, stream_syncs, stream_contexts, events_created, event_records, event_syncs, elapsed_queries;
static int fill_on, fill_value, defect_launch = -1, defect_word, defect_value = -1, fault_after = -1, foreign_on;
static long long defect_extra;
static void* foreign_stream;
static double clock_us;  /* the fake GPU clock events read */
static int compute[MAX_DEVICES] = {100, 100, 100, 100, 100, 100, 100, 100};
static int shared_limit = 232448; /* the shared memory a block may opt in to: an H100's 227 KiB */
static __thread int current_context;  /* 0: none current, else device + 1 */
static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- what the tests read and set ---- */
int fake_num_launches(void) { return num_launches; }
const LaunchRecord* fake_launch(int i) { return &launches[i]; }
int fake_counter(const char* name) {
  if (!strcmp(name, "allocations")) return allocations;
  if (!strcmp(name, "async_allocations")) return async_allocations;
  if (!strcmp(name, "async_frees")) return async_frees;
  if (!strcmp(name, "copies")) return copies;
  if (!strcmp(name, "memsets")) return memsets;
  if (!strcmp(name, "ptx_loads")) return ptx_loads;
  if (!strcmp(name, "context_pushes")) return context_pushes;
  if (!strcmp(name, "cubin_loads")) return cubin_loads;
  if (!strcmp(name, "cubin_arch")) return cubin_arch;
  if (!strcmp(name, "shared_opt_ins")) return shared_opt_ins;
  if (!strcmp(name, "host_copies")) return host_copies;
  if (!strcmp(name, "stream_syncs")) return stream_syncs;
  if (!strcmp(name, "stream_contexts")) return stream_contexts;
  if (!strcmp(name, "events_created")) return events_created;
  if (!strcmp(name, "event_records")) return event_records;
  if (!strcmp(name, "event_syncs")) return event_syncs;
  if (!strcmp(name, "elapsed_queries")) return elapsed_queries;
  return -1;
}
void fake_reset(void) {
  num_launches = allocations = async_allocations = async_frees = copies = context_pushes = cubin_loads = cubin_arch = 0;
  shared_opt_ins = 0;
  memsets = host_copies = stream_syncs = stream_contexts = events_created = event_records = event_syncs = elapsed_queries = 0;
  fill_on = fill_value = defect_word = foreign_on = 0;
  defect_launch = defect_value = fault_after = -1;
  defect_extra = 0;
  for (int d = 0; d < MAX_DEVICES; ++d) compute[d] = 100;
  shared_limit = 232448;
}
void fake_set_launch_fill(int on, int value) { fill_on = on, fill_value = value; }
void fake_set_launch_defect(int launch, int data_word, long long extra, int value) {
  defect_launch = launch, defect_word = data_word, defect_extra = extra, defect_value = value;
}
void fake_set_fault_after(int launches) { fault_after = launches; }
void fake_set_foreign_stream(int on, void* stream) { foreign_on = on, foreign_stream = stream; }
void fake_set_compute(int device, int arch) { compute[device] = arch; }
void fake_set_shared_limit(int bytes) { shared_limit = bytes; }
void fake_set_capturing(int on) { capturing = on; }
void fake_set_reject_ptx(int on) { reject_ptx = on; }

/* ---- the driver API the region library uses ---- */
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGet(int* device, int ordinal) { *device = ordinal; return ordinal < 0 || ordinal > 7 ? 101 : 0; }
int cuDeviceGetAttribute(int* value, int attribute, int device) {
  int arch = device >= 0 && device < MAX_DEVICES ? compute[device] : 100;
  *value = attribute == 75 ? arch / 10 : attribute == 76 ? arch % 10 : attribute == 97 ? shared_limit : 0;
  return 0;
}
int cuDevicePrimaryCtxRetain(void** context, int device) { *context = (void*)(intptr_t)(device + 1); return 0; }
int cuCtxGetCurrent(void** context) { *context = (void*)(intptr_t)current_context; return 0; }
int cuCtxPushCurrent_v2(void* context) { current_context = (int)(intptr_t)context; ++context_pushes; return 0; }
int cuCtxPopCurrent_v2(void** context) { *context = (void*)(intptr_t)current_context; current_context = 0; return 0; }

static int is_elf(const void* image) { return !memcmp(image, "\177ELF", 4); }

/* The size of an ELF64 image: its section headers come last. */
static size_t elf_size(const unsigned char* image) {
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, image + 40, 8);
  memcpy(&shentsize, image + 58, 2);
  memcpy(&shnum, image + 60, 2);
  return shoff + (size_t)shentsize * shnum;
}

int cuModuleLoadData(void** module, const void* image) {
  if (is_elf(image)) {
    uint32_t flags;
    memcpy(&flags, (const unsigned char*)image + 48, 4);
    ++cubin_loads;
    cubin_arch = (flags >> 8) & 0xff; /* EF_CUDA_SM */
    *module = (void*)image;
    return 0;
  }
  if (reject_ptx) return 222; /* CUDA_ERROR_UNSUPPORTED_PTX_VERSION */
  ++ptx_loads;
  *module = (void*)image;
  return 0;
}

int cuModuleGetFunction(void** function, void* module, const char* name) {
  if (num_functions == MAX_FUNCTIONS) return 500; /* CUDA_ERROR_NOT_FOUND */
  const char* at;
  if (is_elf(module)) {
    at = memmem(module, elf_size(module), name, strlen(name) + 1);
  } else {
    at = strstr((const char*)module, name);
  }
  if (at == NULL) return 500;
  Function* f = &functions[num_functions++];
  strncpy(f->entry, name, sizeof(f->entry) - 1);
  f->num_words = 0;
  f->max_dynamic_shared = 0;
  if (!is_elf(module)) {
    const char* end = strchr(at, ')');
    for (const char* p = strstr(at, ".param"); p != NULL && p < end; p = strstr(p + 1, ".param")) ++f->num_words;
  }
  *function = f;
  return 0;
}

/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (8) is the only attribute set; kept per function. */
int cuFuncSetAttribute(void* function, int attribute, int value) {
  if (attribute != 8) return 1; /* CUDA_ERROR_INVALID_VALUE */
  ((Function*)function)->max_dynamic_shared = value;
  ++shared_opt_ins;
  return 0;
}

/* A launch "writes" the array whose data pointer is word `data_word` (numba's layout: nitems
 * and itemsize are the two words before it): its size plus `extra` bytes of `value`. */
static void fill(const LaunchRecord* r, int data_word, long long extra, int value) {
  if (data_word < 2 || data_word >= r->num_words || r->words[data_word] == 0) return;
  long long bytes = r->words[data_word - 2] * r->words[data_word - 1] + extra;
  if (bytes > 0) memset((void*)(uintptr_t)r->words[data_word], value, (size_t)bytes);
}

int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
  (void)extra;
  pthread_mutex_lock(&record_lock);
  if (num_launches == MAX_LAUNCHES) {
    pthread_mutex_unlock(&record_lock);
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  }
  Function* f = (Function*)function;
  if (shared > 48 * 1024 && (int)shared > f->max_dynamic_shared) { /* as a GPU: more only where allowed */
    pthread_mutex_unlock(&record_lock);
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  }
  LaunchRecord* r = &launches[num_launches++];
  strcpy(r->entry, f->entry);
  r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz;
  r->block[0] = bx, r->block[1] = by, r->block[2] = bz;
  r->shared = shared;
  r->stream = stream;
  r->num_words = f->num_words;
  for (int i = 0; i < f->num_words && i < MAX_WORDS; ++i) r->words[i] = *(const int64_t*)params[i];
  clock_us += 10;
  if (fill_on) {
    int defective = num_launches - 1 == defect_launch;
    if (!(defective && defect_word == 4)) fill(r, 4, 0, fill_value);
    if (defective) fill(r, defect_word, defect_extra, defect_value >= 0 ? defect_value : fill_value ^ 0xff);
  }
  pthread_mutex_unlock(&record_lock);
  return 0;
}

int cuMemAlloc_v2(uint64_t* pointer, size_t bytes) {
  if (capturing) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
  ++allocations;
  *pointer = (uint64_t)(uintptr_t)aligned_alloc(256, (bytes + 255) / 256 * 256);
  return 0;
}
int cuMemAllocAsync(uint64_t* pointer, size_t bytes, void* stream) {
  (void)stream;
  ++async_allocations;
  *pointer = (uint64_t)(uintptr_t)aligned_alloc(256, (bytes + 255) / 256 * 256);
  return 0;
}
int cuMemFreeAsync(uint64_t pointer, void* stream) {
  (void)stream;
  ++async_frees;
  free((void*)(uintptr_t)pointer);
  return 0;
}
int cuMemcpyDtoDAsync_v2(uint64_t to, uint64_t from, size_t bytes, void* stream) {
  (void)stream;
  ++copies;
  memmove((void*)(uintptr_t)to, (const void*)(uintptr_t)from, bytes);
  return 0;
}
int cuMemsetD8Async(uint64_t to, unsigned char value, size_t count, void* stream) {
  (void)stream;
  ++memsets;
  memset((void*)(uintptr_t)to, value, count);
  return 0;
}
int cuMemsetD16Async(uint64_t to, unsigned short value, size_t count, void* stream) {
  (void)stream;
  ++memsets;
  for (size_t i = 0; i < count; ++i) ((unsigned short*)(uintptr_t)to)[i] = value;
  return 0;
}
int cuMemsetD32Async(uint64_t to, unsigned int value, size_t count, void* stream) {
  (void)stream;
  ++memsets;
  for (size_t i = 0; i < count; ++i) ((unsigned int*)(uintptr_t)to)[i] = value;
  return 0;
}
int cuStreamIsCapturing(void* stream, int* status) { (void)stream; *status = capturing; return 0; }
int cuGetErrorName(int error, const char** name) {
  *name = error == 209   ? "CUDA_ERROR_NO_BINARY_FOR_GPU"
          : error == 222 ? "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
          : error == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS"
                         : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int error, const char** text) {
  (void)error;
  *text = "reported by the stand-in driver";
  return 0;
}

/* ---- used only by the sanitizer and the trace ---- */
int cuMemsetD2D32Async(uint64_t pointer, size_t pitch, unsigned int value, size_t width, size_t height, void* stream) {
  (void)stream;
  ++memsets;
  for (size_t y = 0; y < height; ++y)
    for (size_t x = 0; x < width; ++x) memcpy((char*)(uintptr_t)pointer + y * pitch + 4 * x, &value, 4);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void* to, uint64_t from, size_t bytes, void* stream) {
  (void)stream;
  ++host_copies;
  memmove(to, (const void*)(uintptr_t)from, bytes);
  return 0;
}
int cuStreamSynchronize(void* stream) {
  (void)stream;
  ++stream_syncs;
  return fault_after >= 0 && num_launches >= fault_after ? 700 : 0; /* CUDA_ERROR_ILLEGAL_ADDRESS, sticky */
}
int cuStreamGetCtx(void* stream, void** context) {
  ++stream_contexts;
  *context = foreign_on && stream == foreign_stream ? (void*)(intptr_t)99 : (void*)(intptr_t)current_context;
  return 0;
}
int cuEventCreate(void** event, unsigned flags) {
  (void)flags;
  ++events_created;
  *event = calloc(1, sizeof(double));
  return 0;
}
int cuEventRecord(void* event, void* stream) {
  (void)stream;
  pthread_mutex_lock(&record_lock);
  ++event_records;
  clock_us += 1;
  *(double*)event = clock_us;
  pthread_mutex_unlock(&record_lock);
  return 0;
}
int cuEventSynchronize(void* event) { (void)event; ++event_syncs; return 0; }
int cuEventElapsedTime(float* ms, void* start, void* end) {
  ++elapsed_queries;
  *ms = (float)((*(double*)end - *(double*)start) / 1000.0);
  return 0;
}
