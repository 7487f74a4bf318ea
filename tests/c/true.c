/* true.c — a program that exits at once: with 0, or with the number its first
 * argument gives (mod 256, as `exit N` in sh). For the stress tests that start
 * thousands of executions (spec_kill's races, spec_burst's bursts, the nvim
 * tier's coexistence of proctor, jobstart and uv.spawn): what they test is
 * the engine, the shepherd, the reapers and Neovim's job control, not the
 * program.
 *
 * Thread: its only one (it has no C library and makes one system call).
 *
 * Built static with no C library (-nostdlib): _start passes the initial stack
 * (argc, then argv) to start(), which calls exit itself. /bin/true and sh are
 * dynamically linked, and loading them and the C library costs about 4 ms of
 * CPU per start on a loaded 2-core machine; this costs about 1 ms (a fork and
 * exec, measured with posix_spawn, 2,000 starts of each). On an architecture
 * this file does not know, make writes a shell script that does the same.
 */
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tcall start\n");
#define EXIT(code) __asm__ volatile("syscall" ::"a"(60), "D"(code))
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n\tmov x0, sp\n\tbl start\n");
#define EXIT(code)                                 \
  do {                                             \
    register long x0 __asm__("x0") = (code);       \
    register long x8 __asm__("x8") = 93;           \
    __asm__ volatile("svc #0" ::"r"(x0), "r"(x8)); \
  } while (0)
#else
#error "no exit system call known for this architecture (make writes a shell script)"
#endif

/* The entry from _start: sp[0] is argc, sp[1..] argv. Never returns. */
__attribute__((noreturn, used)) void start(long *sp) {
  long code = 0;
  if (sp[0] > 1)
    for (const char *p = (const char *)sp[2]; *p >= '0' && *p <= '9'; p++)
      code = code * 10 + (*p - '0');
  for (;;) EXIT(code & 255);
}
