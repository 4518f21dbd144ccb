/* A stand-in for libcuda.so.1 that records kernel launches, for testing native regions on a
 * machine without a GPU ($SIMACCEL_CUDA_DRIVER points the region library at it).
 *
 * It is not a GPU: it runs no kernel. Each device says it has compute capability 10.0 unless
 * a test sets another (fake_set_compute), so a library built for sm_90 alone has no cubin
 * that fits and loads its kernels' PTX, which the stand-in reads to learn each entry's
 * parameter count. A cubin it is given is recorded (its architecture, from the ELF header)
 * and launches from it carry no parameter words. It hands out host memory as "device"
 * memory, copies for real in cuMemcpyDtoDAsync, and keeps every launch (entry, grid, block,
 * shared bytes, stream, parameter words) for the test to read through ctypes.
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
static int cubin_loads, cubin_arch;  /* how many cubins were loaded, and the last one's architecture (90: sm_90) */
static int compute[MAX_DEVICES] = {100, 100, 100, 100, 100, 100, 100, 100};
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
  return -1;
}
void fake_reset(void) {
  num_launches = allocations = async_allocations = async_frees = copies = memsets = context_pushes = cubin_loads = cubin_arch = 0;
  for (int d = 0; d < MAX_DEVICES; ++d) compute[d] = 100;
}
void fake_set_compute(int device, int arch) { compute[device] = arch; }
void fake_set_capturing(int on) { capturing = on; }
void fake_set_reject_ptx(int on) { reject_ptx = on; }

/* ---- the driver API the region library uses ---- */
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGet(int* device, int ordinal) { *device = ordinal; return ordinal < 0 || ordinal > 7 ? 101 : 0; }
int cuDeviceGetAttribute(int* value, int attribute, int device) {
  int arch = device >= 0 && device < MAX_DEVICES ? compute[device] : 100;
  *value = attribute == 75 ? arch / 10 : attribute == 76 ? arch % 10 : 0;
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
  if (!is_elf(module)) {
    const char* end = strchr(at, ')');
    for (const char* p = strstr(at, ".param"); p != NULL && p < end; p = strstr(p + 1, ".param")) ++f->num_words;
  }
  *function = f;
  return 0;
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
  LaunchRecord* r = &launches[num_launches++];
  strcpy(r->entry, f->entry);
  r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz;
  r->block[0] = bx, r->block[1] = by, r->block[2] = bz;
  r->shared = shared;
  r->stream = stream;
  r->num_words = f->num_words;
  for (int i = 0; i < f->num_words && i < MAX_WORDS; ++i) r->words[i] = *(const int64_t*)params[i];
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
  *name = error == 209 ? "CUDA_ERROR_NO_BINARY_FOR_GPU" : error == 222 ? "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int error, const char** text) {
  (void)error;
  *text = "reported by the stand-in driver";
  return 0;
}
