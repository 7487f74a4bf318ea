/* include/proctor_test.h — what the C tests and the fuzzer may reach beyond
 * the public API: the leaf modules they unit-test (base/) and a few hooks
 * into a running engine. Never included by the core itself or the binding.
 *
 * Thread: as each declaration says.
 */
#ifndef PR_PROCTOR_TEST_H
#define PR_PROCTOR_TEST_H

#include "base/buf.h"
#include "base/idmap.h"
#include "base/ring.h"
#include "include/proctor.h"

#endif /* PR_PROCTOR_TEST_H */
