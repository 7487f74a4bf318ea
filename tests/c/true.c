/* true.c — a program that exits 0 at once, for the stress tests that start
 * thousands of executions (spec_kill's races, spec_burst's bursts): what they
 * test is the engine, the shepherd and the reapers, not the program.
 *
 * Thread: its only one (it has no C library and makes one system call).
 *
 * Built static with no C library (-nostdlib): _start calls exit(0) itself.
 * /bin/true is dynamically linked, and loading it and the C library costs
 * about 4 ms of CPU per start on a loaded 2-core machine; this costs about
 * 1 ms (a fork and exec, measured with posix_spawn, 2,000 starts of each).
 * On an architecture this file does not know, make copies /bin/true instead.
 */
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\tmov $60, %eax\n\txor %edi, %edi\n\tsyscall\n");
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n\tmov x8, #93\n\tmov x0, #0\n\tsvc #0\n");
#else
#error "no exit system call known for this architecture (make uses /bin/true)"
#endif
