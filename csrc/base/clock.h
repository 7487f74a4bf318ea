/* base/clock.h — the wall clock. (The monotonic one, pr_hrtime, is public:
 * include/proctor.h.)
 *
 * Thread: any.
 */
#ifndef PR_CLOCK_H
#define PR_CLOCK_H

#include <stdint.h>

/* pr_now_ms: wall-clock time in ms since the epoch (record timestamps). */
uint64_t pr_now_ms(void);

#endif
