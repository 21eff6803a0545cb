// LD_PRELOAD shim: records when each process submits GPU work or waits for it
// through the CUDA runtime (kernel launches, copies, memsets, event records,
// stream waits, synchronizations, frees), in RPCJOB_TRACE's format, so that
// benchmarks/profile/trace_timeline.py shows them among the runtime's own
// steps. Why: two processes that share one GPU pay ~140 us each time the GPU
// passes from one's context to the other's (2026-11-24-h200x1-session7.md), so
// a stray command from the process that waits costs the computing one two
// such switches; this shows which commands each process issues, and when.
//
// Build (on the GPU machine): gcc -O2 -shared -fPIC -I$CUDA/include
//   benchmarks/profile/cuda_submits.c -o cuda_submits.so -ldl -lpthread
// Use: RPCJOB_TRACE=DIR LD_PRELOAD=$PWD/cuda_submits.so program...
// Writes DIR/trace-cuda-PID.txt at exit: "ns pid tid what ident" lines,
// CLOCK_MONOTONIC like the runtime's trace. Only calls that go through the
// shared libcudart are seen (cuBLAS launches its kernels on its own).
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kMax = 1 << 20 };
struct Entry {
  uint64_t ns;
  uint32_t tid;
  const char* what;
  uint64_t ident;
};
static struct Entry entries[kMax];
static atomic_uint count;

static void dump(void);

static void note(const char* what, uint64_t ident) {
  const unsigned i = atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
  if (i >= kMax) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  entries[i].ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  entries[i].tid = (uint32_t)syscall(SYS_gettid);
  entries[i].ident = ident;
  atomic_thread_fence(memory_order_release);
  entries[i].what = what;
  if ((i + 1) % 64 == 0) dump();
}

// Writes the entries recorded since the last call. Called every 64 entries
// too: a worker that ends with _exit runs no destructor.
static pthread_mutex_t dumpMu = PTHREAD_MUTEX_INITIALIZER;
static unsigned dumped;
static void dump(void) {
  const char* dir = getenv("RPCJOB_TRACE");
  if (dir == NULL) return;
  pthread_mutex_lock(&dumpMu);
  char path[4096];
  snprintf(path, sizeof(path), "%s/trace-cuda-%d.txt", dir, (int)getpid());
  FILE* f = fopen(path, "a");
  if (f == NULL) {
    pthread_mutex_unlock(&dumpMu);
    return;
  }
  unsigned n = atomic_load(&count);
  if (n > kMax) n = kMax;
  for (unsigned i = dumped; i < n; ++i) {
    while (*(const char* volatile*)&entries[i].what == NULL) {
    }  // claimed, being filled in
    fprintf(f, "%llu %d %u %s %llu\n", (unsigned long long)entries[i].ns, (int)getpid(),
            entries[i].tid, entries[i].what, (unsigned long long)entries[i].ident);
  }
  dumped = n;
  fclose(f);
  pthread_mutex_unlock(&dumpMu);
}
__attribute__((destructor)) static void dumpAtExit(void) { dump(); }

#define NEXT(name) \
  static __typeof__(&name) real; \
  if (real == NULL) real = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

// The stream's low bits name it (0: the legacy default stream).
static uint64_t sid(cudaStream_t s) { return (uint64_t)(uintptr_t)s & 0xFFFFFF; }

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                             cudaStream_t stream) {
  NEXT(cudaLaunchKernel);
  note("cuda.launch", sid(stream));
  return real(func, grid, block, args, shmem, stream);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  NEXT(cudaLaunchKernelExC);
  note("cuda.launchEx", config != NULL ? sid(config->stream) : 0);
  return real(config, func, args);
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  NEXT(cudaEventRecord);
  note("cuda.record", sid(stream));
  return real(event, stream);
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned flags) {
  NEXT(cudaEventRecordWithFlags);
  note("cuda.record", sid(stream));
  return real(event, stream, flags);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  NEXT(cudaStreamWaitEvent);
  note("cuda.wait", sid(stream));
  return real(stream, event, flags);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  NEXT(cudaMemcpyAsync);
  note("cuda.memcpy", count);
  return real(dst, src, count, kind, stream);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  NEXT(cudaMemcpy);
  note("cuda.memcpy.sync", count);
  return real(dst, src, count, kind);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  NEXT(cudaMemsetAsync);
  note("cuda.memset", count);
  return real(ptr, value, count, stream);
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  NEXT(cudaStreamSynchronize);
  note("cuda.streamsync", sid(stream));
  return real(stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  NEXT(cudaEventSynchronize);
  note("cuda.eventsync", 0);
  return real(event);
}
cudaError_t cudaDeviceSynchronize(void) {
  NEXT(cudaDeviceSynchronize);
  note("cuda.devicesync", 0);
  return real();
}
cudaError_t cudaFree(void* ptr) {
  NEXT(cudaFree);
  note("cuda.free", 0);
  return real(ptr);
}
cudaError_t cudaMalloc(void** ptr, size_t size) {
  NEXT(cudaMalloc);
  note("cuda.malloc", size);
  return real(ptr, size);
}
