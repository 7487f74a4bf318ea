/* engine/keyring.c — one Secret Service lookup through a dlopen'ed
 * libsecret, on a thread of its own. See keyring.h.
 *
 * Thread: see keyring.h. The library is loaded once per process
 * (pthread_once, RTLD_NODELETE) and its symbols kept in `lib`.
 */
#include "engine/keyring.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/locked.h"
#include "engine/secrets.h"

typedef struct {
  uint32_t domain;
  int code;
  char *message;
} gerror_t; /* GError: a stable part of GLib's ABI */

static struct {
  int ok;
  char why[160];
  char *(*lookup)(const void *schema, void *attrs, void *cancellable, gerror_t **error);
  void (*password_free)(char *password);
  void *(*table_new)(unsigned (*hash)(const void *), int (*equal)(const void *, const void *));
  unsigned (*str_hash)(const void *);
  int (*str_equal)(const void *, const void *);
  int (*table_insert)(void *table, void *key, void *value);
  void (*table_unref)(void *table);
  void *(*cancellable_new)(void);
  void (*cancellable_cancel)(void *cancellable);
  void (*object_unref)(void *object);
  void (*error_free)(gerror_t *error);
} lib;

static pthread_once_t loaded = PTHREAD_ONCE_INIT;

#define SYM(field, name)                                                   \
  if ((*(void **)&lib.field = dlsym(h, name)) == NULL) {                   \
    snprintf(lib.why, sizeof(lib.why), "libsecret-1.so.0 lacks %s", name); \
    return;                                                                \
  }

static void load(void) {
  void *h = dlopen("libsecret-1.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == NULL) {
    snprintf(lib.why, sizeof(lib.why), "libsecret is not installed (Debian: libsecret-1-0)");
    return;
  }
  /* dlsym on the handle also searches its dependencies (GLib, GObject, GIO) */
  SYM(lookup, "secret_password_lookupv_sync");
  SYM(password_free, "secret_password_free");
  SYM(table_new, "g_hash_table_new");
  SYM(str_hash, "g_str_hash");
  SYM(str_equal, "g_str_equal");
  SYM(table_insert, "g_hash_table_insert");
  SYM(table_unref, "g_hash_table_unref");
  SYM(cancellable_new, "g_cancellable_new");
  SYM(cancellable_cancel, "g_cancellable_cancel");
  SYM(object_unref, "g_object_unref");
  SYM(error_free, "g_error_free");
  lib.ok = 1;
}

/* A session bus GLib can reach without spawning dbus-launch to find one. */
static int have_bus(void) {
  const char *a = getenv("DBUS_SESSION_BUS_ADDRESS");
  if (a && *a) return 1;
  const char *rt = getenv("XDG_RUNTIME_DIR");
  char path[4096];
  struct stat st;
  if (rt == NULL || snprintf(path, sizeof(path), "%s/bus", rt) >= (int)sizeof(path)) return 0;
  return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static void *run(void *arg) {
  pr_keyring_t *k = arg;
  void *table = lib.table_new(lib.str_hash, lib.str_equal);
  for (size_t i = 0; table && i < k->nattrs; i++)
    lib.table_insert(table, k->attrs[2 * i], k->attrs[2 * i + 1]); /* borrowed, not freed by it */
  gerror_t *err = NULL;
  char *pw = table ? lib.lookup(NULL, table, k->cancellable, &err) : NULL;
  if (table) lib.table_unref(table);
  if (pw) {
    size_t n = strlen(pw);
    if (n == 0 || n > PR_SECRET_MAX) {
      snprintf(k->why, sizeof(k->why), "the item's secret is %s",
               n ? "longer than 4096 bytes" : "empty");
    } else if ((k->value = pr_locked_alloc(n + 1)) == NULL) {
      snprintf(k->why, sizeof(k->why), "cannot lock memory for it (RLIMIT_MEMLOCK)");
    } else {
      memcpy(k->value, pw, n);
      k->len = n;
    }
    lib.password_free(pw); /* wipes it */
  } else if (err) {
    snprintf(k->why, sizeof(k->why), "the Secret Service answered: %s",
             err->message ? err->message : "error");
    lib.error_free(err);
  } else if (table) {
    snprintf(k->why, sizeof(k->why), "no such item in the Secret Service");
  } else {
    snprintf(k->why, sizeof(k->why), "out of memory");
  }
  uv_async_send(&k->async);
  return NULL;
}

int pr_keyring_start(pr_keyring_t *k, char **attrs, size_t n) {
  k->value = NULL;
  k->len = 0;
  k->why[0] = 0;
  k->attrs = attrs;
  k->nattrs = n;
  pthread_once(&loaded, load);
  if (!lib.ok) {
    snprintf(k->why, sizeof(k->why), "%s", lib.why);
    return -1;
  }
  if (!have_bus()) {
    snprintf(k->why, sizeof(k->why), "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)");
    return -1;
  }
  if ((k->cancellable = lib.cancellable_new()) == NULL ||
      pthread_create(&k->thread, NULL, run, k) != 0) {
    if (k->cancellable) lib.object_unref(k->cancellable);
    k->cancellable = NULL;
    snprintf(k->why, sizeof(k->why), "cannot start a thread for the lookup");
    return -1;
  }
  k->running = 1;
  return 0;
}

void pr_keyring_cancel(pr_keyring_t *k) {
  if (k->running && k->cancellable) lib.cancellable_cancel(k->cancellable); /* thread-safe in GIO */
}

void pr_keyring_finish(pr_keyring_t *k) {
  if (!k->running) return;
  pthread_join(k->thread, NULL);
  k->running = 0;
  lib.object_unref(k->cancellable);
  k->cancellable = NULL;
}

void pr_keyring_clear(pr_keyring_t *k) {
  if (k->value) pr_locked_free(k->value, k->len + 1);
  k->value = NULL;
  k->len = 0;
}
