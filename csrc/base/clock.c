/* base/clock.c — wall and monotonic clocks.
 *
 * Thread: any.
 */
#include "base/clock.h"

#include <time.h>
#include <uv.h>

#include "include/proctor.h"

uint64_t pr_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t pr_hrtime(void) { return uv_hrtime(); }
