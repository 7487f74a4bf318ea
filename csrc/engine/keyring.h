/* engine/keyring.h — reading one secret from the desktop keyring (the
 * freedesktop Secret Service) through libsecret, off the engine thread.
 *
 * Thread: pr_keyring_start / pr_keyring_cancel / pr_keyring_finish on the
 * ENGINE thread; the lookup itself on a short-lived thread of its own.
 *
 *   engine: pr_keyring_start ─► thread: libsecret lookup (sync, cancellable)
 *              ◄── uv_async_send ◄── value in locked memory, or why not
 *   engine: the async callback (the owner's) ─► pr_keyring_finish (joins)
 *
 * Why a thread: the sync lookup blocks on D-Bus (and on an unlock prompt),
 * and the engine thread never waits. Why libsecret is dlopen'ed: the core
 * does not depend on it; without it a store secret fails with a reason.
 * GLib in the host: the lookup runs its own GMainContext on its thread;
 * GDBus starts its shared worker thread, which GLib keeps for the life of
 * the process (so libsecret is never unloaded). No GLib main loop, signal
 * handler or child process is added to the host: a lookup is refused when
 * no session bus address is known (GLib would otherwise spawn
 * dbus-launch to find one).
 */
#ifndef PR_KEYRING_H
#define PR_KEYRING_H

#include <pthread.h>
#include <stddef.h>
#include <uv.h>

typedef struct pr_keyring {
  uv_async_t async; /* the owner's handle: data and close callback are its own */
  pthread_t thread;
  int running;       /* a thread was started and not joined yet */
  void *cancellable; /* GCancellable, while the thread runs */
  char **attrs;      /* key, value, key, value, ... (borrowed from the owner) */
  size_t nattrs;     /* pairs */
  /* results, read by the owner after pr_keyring_finish */
  char *value; /* pr_locked_alloc'ed, NUL-terminated; NULL when not read */
  size_t len;
  char why[256]; /* when value is NULL */
} pr_keyring_t;

/* pr_keyring_start: look up the item with attributes attrs[0..2n) (pairs,
 * borrowed until pr_keyring_finish) in a new thread; k->async must be
 * initialised on the engine's loop by the owner: the thread sends it once,
 * when done. Returns 0, or -1 with k->why set (nothing started, nothing
 * sent). */
int pr_keyring_start(pr_keyring_t *k, char **attrs, size_t n);

/* pr_keyring_cancel: ask a running lookup to stop (it ends soon, "canceled"). */
void pr_keyring_cancel(pr_keyring_t *k);

/* pr_keyring_finish: join the thread (after its async arrived, or after a
 * cancel: it blocks until the thread ends). The results stay in k. */
void pr_keyring_finish(pr_keyring_t *k);

/* pr_keyring_clear: wipe and free the value. */
void pr_keyring_clear(pr_keyring_t *k);

#endif
