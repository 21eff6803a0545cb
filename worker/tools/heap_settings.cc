#include "heap_settings.h"

#include <cstdlib>  // defines __GLIBC__ where it is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rpcjob::worker {

bool keepFreedHeap() {
#if defined(__GLIBC__)
  return mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1 && mallopt(M_TOP_PAD, 16 << 20) == 1;
#else
  return false;
#endif
}

}  // namespace rpcjob::worker
