/* shepherd/procs.c — the processes of the jobs: killing a job's tree (its
 * group, and escapees found in /proc), orphans reparented to us, reaping.
 *
 * Thread: the shepherd's only thread.
 *
 * Rules that keep signals safe from pid reuse (see main.c): a job's group is
 * signalled only while its leader is unreaped; any other process only
 * through a pidfd opened after checking it is the process seen in /proc.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/idmap.h"
#include "shepherd/shepherd.h"

int pr_shep_hunt_pending;

/* ---- /proc scanning ------------------------------------------------------ */

typedef struct {
  pid_t pid, ppid, pgid, sid;
  unsigned long long start; /* start time in clock ticks since boot */
  int mark;
} proc_t;

/* Parse /proc/<pid>/stat. Returns 0 on success. */
static int read_stat(pid_t pid, proc_t *p) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *rp = strrchr(buf, ')'); /* comm may contain spaces and parens */
  if (rp == NULL) return -1;
  char state;
  int ppid, pgid, sid;
  unsigned long long start;
  /* fields after comm: state ppid pgrp session tty_nr tpgid flags minflt cminflt
   * majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime */
  if (sscanf(rp + 2,
             "%c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &state, &ppid, &pgid, &sid, &start) != 5)
    return -1;
  p->pid = pid;
  p->ppid = ppid;
  p->pgid = pgid;
  p->sid = sid;
  p->start = start;
  p->mark = 0;
  return 0;
}

/* The job id in a process's PROCTOR_JOB tag when it belongs to this shepherd, else 0. */
static uint64_t read_tag(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap + 1);
  if (buf == NULL) { close(fd); return 0; }
  ssize_t n;
  while (len < cap && (n = read(fd, buf + len, cap - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = 0;
  uint64_t id = 0;
  size_t plen = strlen(pr_shep_tag_prefix);
  for (size_t i = 0; i < len;) {
    char *s = buf + i;
    size_t sl = strnlen(s, len - i);
    if (sl > plen && memcmp(s, pr_shep_tag_prefix, plen) == 0) id = strtoull(s + plen, NULL, 10);
    i += sl + 1;
  }
  free(buf);
  return id;
}

/* Signal one process through a pidfd, after checking the pid still names the
 * process we saw in /proc (same start time). Returns 0 if signalled. */
static int signal_verified(const proc_t *p, int sig) {
  int pfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (pfd < 0) return -1;
  proc_t now;
  int rc = -1;
  if (read_stat(p->pid, &now) == 0 && now.start == p->start)
    rc = (int)syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0);
  close(pfd);
  return rc;
}

/* Snapshot every process visible in /proc into *out (malloc'd). */
static size_t scan_proc(proc_t **out) {
  size_t n = 0, cap = 512;
  proc_t *v = malloc(cap * sizeof(*v));
  DIR *d = opendir("/proc");
  if (v == NULL || d == NULL) {
    free(v);
    if (d) closedir(d);
    *out = NULL;
    return 0;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid == pr_shep_self) continue;
    if (n == cap) {
      proc_t *nv = realloc(v, cap * 2 * sizeof(*v));
      if (nv == NULL) break;
      v = nv;
      cap *= 2;
    }
    if (read_stat(pid, &v[n]) == 0) n++;
  }
  closedir(d);
  *out = v;
  return n;
}

/* The job a process belongs to, if any: its group or session is a job's, or
 * it is an orphan of ours tagged with a live job. */
static job_t *direct_owner(const proc_t *p) {
  job_t *j = pr_shep_find_pid(p->pgid);
  if (j == NULL) j = pr_shep_find_pid(p->sid);
  if (j == NULL && p->ppid == pr_shep_self && pr_shep_find_pid(p->pid) == NULL) {
    uint64_t tag = read_tag(p->pid);
    if (tag) j = pr_shep_find_id(tag);
  }
  return j;
}

/* Send every signal owed to escapees (job->deep) with ONE scan of /proc for
 * all jobs: descendants of a job's group and session by parent links, and
 * tagged orphans with theirs. Members of a job's own group were signalled
 * with kill(-pgid) already and are skipped. Cheap when nothing is owed. */
void pr_shep_hunt(void) {
  if (!pr_shep_hunt_pending) return;
  pr_shep_hunt_pending = 0;
  proc_t *v;
  size_t n = scan_proc(&v);
  pr_idmap_t bypid; /* pid -> its proc_t in v */
  pr_idmap_init(&bypid);
  job_t **own = calloc(n ? n : 1, sizeof(*own));
  if (v == NULL || own == NULL) goto done;
  for (size_t i = 0; i < n; i++) {
    if (pr_idmap_put(&bypid, (uint64_t)v[i].pid, &v[i]) != 0) goto done;
    own[i] = direct_owner(&v[i]);
  }
  /* Inherit owners down parent links; the tree is shallow: a few passes. */
  for (int changed = 1, pass = 0; changed && pass < 64; pass++) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (own[i]) continue;
      proc_t *parent = pr_idmap_get(&bypid, (uint64_t)v[i].ppid);
      if (parent && own[parent - v]) {
        own[i] = own[parent - v];
        changed = 1;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    job_t *j = own[i];
    if (j == NULL || j->deep == 0 || v[i].pgid == j->pid) continue;
    for (int sig = 1; sig < 64; sig++)
      if (j->deep & (1ull << sig)) signal_verified(&v[i], sig);
  }
done:
  for (size_t at = 0;;) {
    job_t *k = pr_shep_next_job(&at);
    if (k == NULL) break;
    k->deep = 0;
  }
  pr_idmap_destroy(&bypid);
  free(v);
  free(own);
}

/* Signal the whole job: its process group now (safe: the leader is
 * unreaped), and with `deep` also its escapees at the next pr_shep_hunt(). */
void pr_shep_kill_job(job_t *j, int sig, int deep) {
  kill(-j->pid, sig);
  if (sig == SIGTERM || sig == SIGHUP) kill(-j->pid, SIGCONT);
  if (deep && sig > 0 && sig < 64) {
    j->deep |= 1ull << sig;
    if (sig == SIGTERM || sig == SIGHUP) j->deep |= 1ull << SIGCONT;
    pr_shep_hunt_pending = 1;
  }
}

/* Read our direct children from /proc. Returns a malloc'd array. */
size_t pr_shep_list_children(pid_t **out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pr_shep_self, (int)pr_shep_self);
  size_t n = 0, cap = 256;
  pid_t *v = malloc(cap * sizeof(*v));
  *out = v;
  if (v == NULL) return 0;
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  int pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (n == cap) {
      pid_t *nv = realloc(v, cap * 2 * sizeof(*v));
      if (nv == NULL) break;
      v = nv;
      cap *= 2;
      *out = v;
    }
    v[n++] = pid;
  }
  fclose(f);
  return n;
}

/* Kill orphans of ours (non-leader children) whose job is gone: tagged with a
 * job no longer held, or — when no job is left at all — untagged ones too.
 * Returns how many were signalled. */
int pr_shep_sweep_orphans(void) {
  pid_t *c;
  size_t n = pr_shep_list_children(&c);
  int hit = 0;
  for (size_t i = 0; i < n; i++) {
    if (pr_shep_find_pid(c[i])) continue;
    uint64_t tag = read_tag(c[i]);
    if ((tag != 0 && pr_shep_find_id(tag) == NULL) || (tag == 0 && pr_shep_njobs() == 0)) {
      /* An unreaped child of ours: its pid (and group, if it leads one) is safe. */
      if (getpgid(c[i]) == c[i]) kill(-c[i], SIGKILL);
      kill(c[i], SIGKILL);
      hit++;
    }
  }
  free(c);
  return hit;
}

/* ---- reaping -------------------------------------------------------------- */

static void leader_exited(job_t *j, const siginfo_t *si) {
  j->exited = 1;
  uint32_t flags = 0;
  int64_t b = si->si_status;
  if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) flags |= PR_WF_SIGNALED;
  if (j->stopping) pr_shep_kill_job(j, SIGKILL, 1); /* leader gone while stopping: rest dies now */
  if (j->handshake) { /* SPAWNED (or FAILED) must go first */
    j->exit_pending = 1;
    j->exit_flags = flags;
    j->exit_value = b;
    return;
  }
  pr_shep_send(PR_W_EXITED, flags, j->id, 0, b, NULL, 0);
}

void pr_shep_reap(void) {
  int blocked = 0;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) break;
    job_t *j = pr_shep_find_pid(si.si_pid);
    if (j == NULL) { /* orphan or escapee: reap it for real */
      waitpid(si.si_pid, NULL, WNOHANG);
      continue;
    }
    if (!j->exited) leader_exited(j, &si);
    blocked = 1; /* a held zombie sits first in line: look at each child instead */
    break;
  }
  if (!blocked) return;
  pid_t *c;
  size_t n = pr_shep_list_children(&c);
  for (size_t i = 0; i < n; i++) {
    job_t *j = pr_shep_find_pid(c[i]);
    if (j == NULL) {
      waitpid(c[i], NULL, WNOHANG);
    } else if (!j->exited) {
      siginfo_t si;
      memset(&si, 0, sizeof(si));
      if (waitid(P_PID, (id_t)c[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid)
        leader_exited(j, &si);
    }
  }
  free(c);
}

