/* fuzz_worker.c — libFuzzer target over the worker protocol parsers (JSON
 * lines and msgpack-rpc) and the output masker, with secrets set.
 *
 * Thread: the fuzzer's own; the parsers and the masker touch only their
 * arguments (no engine, no loop).
 *
 * Input: one control byte (bit 0: 0 = JSON lines, 1 = msgpack-rpc; bits 1-6:
 * feed chunk size - 1; bit 7: all at once), then the bytes a worker writes
 * on stdout. They go to the parser and, as read() would, through the masker.
 * The oracles abort on:
 *   - an ok or chunk message that is not JSON text, or a reply, chunk or
 *     error whose decoded strings, keys or numbers hold a secret;
 *   - masked output that holds a secret, or the way JSON spells it.
 * The secrets hold no '*': a secret can then never be made of "***" and
 * what is around it.
 *
 *   make fuzz                          libFuzzer on both targets, FUZZ_SECONDS each
 *   build/fuzz_worker FILE...          replay inputs (make test: tests/fuzz/corpus-worker/)
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/proctor_test.h"

static const char *const secrets[] = {
    "TA=hunter2-Zq9", "TB=q\"u\\o\te", "TC=multi\nline\nkey", "TD=\xc3\xa9t\xc3\xa9-\xf0\x9f\x98\x80",
    "TE=1234567", "TF=a/b</c>"};
enum { NSECRETS = sizeof(secrets) / sizeof(secrets[0]) };

static char *spelled[NSECRETS]; /* each secret as JSON writes it, without the quotes */

static const char *value_of(int i) { return strchr(secrets[i], '=') + 1; }

static int holds_secret(const char *s, size_t n) {
  for (int i = 0; i < NSECRETS; i++) {
    const char *v = value_of(i);
    if (memmem(s, n, v, strlen(v)) || memmem(s, n, spelled[i], strlen(spelled[i]))) return 1;
  }
  return 0;
}

static void check_value(const cJSON *j, int depth) {
  for (; j; j = j->next) {
    if (j->string && holds_secret(j->string, strlen(j->string))) abort();
    if (cJSON_IsString(j) && holds_secret(j->valuestring, strlen(j->valuestring))) abort();
    if (cJSON_IsNumber(j)) {
      char num[64];
      snprintf(num, sizeof(num), "%.17g", j->valuedouble);
      if (holds_secret(num, strlen(num))) abort();
    }
    check_value(j->child, depth + 1);
  }
}

static void on_message(void *arg, int kind, uint64_t rid, char *text, size_t len) {
  (void)arg;
  (void)rid;
  if (kind == PR_TEST_WM_OK || kind == PR_TEST_WM_CHUNK) {
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (j == NULL) abort(); /* a reply that is not JSON text */
    check_value(j, 0);
    cJSON_Delete(j);
  } else if (kind == PR_TEST_WM_ERROR) {
    /* a message, or the JSON text of a value that is not a string */
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (j && (cJSON_IsArray(j) || cJSON_IsObject(j))) check_value(j, 0);
    else if (text == NULL || holds_secret(text, len)) abort();
    cJSON_Delete(j);
  } else if (text != NULL) {
    abort(); /* only results carry text */
  }
  free(text);
}

static void setup(void) {
  /* cJSON's own malloc may not be the sanitizer's in this binary; the core
   * frees what cJSON prints with free(): make them one allocator. */
  cJSON_Hooks hooks = {malloc, free};
  cJSON_InitHooks(&hooks);
  for (int i = 0; i < NSECRETS; i++) {
    cJSON *str = cJSON_CreateString(value_of(i));
    char *t = str ? cJSON_PrintUnformatted(str) : NULL;
    if (t == NULL) abort();
    size_t n = strlen(t);
    memmove(t, t + 1, n - 2); /* drop the quotes */
    t[n - 2] = 0;
    spelled[i] = t;
    cJSON_Delete(str);
  }
}

/* Append the masker's output to the growing buffer `out`. */
static void keep(char **out, size_t *len, size_t *cap, const char *p, size_t n) {
  if (p == NULL || n == 0) return;
  if (*len + n > *cap) {
    *cap = (*len + n) * 2;
    *out = realloc(*out, *cap);
    if (*out == NULL) abort();
  }
  memcpy(*out + *len, p, n);
  *len += n;
}

static int ready;

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
  if (!ready) setup(), ready = 1;
  if (n == 0) return 0;
  size_t chunk = (d[0] & 0x80) ? n : (size_t)((d[0] >> 1) & 0x3f) + 1;
  pr_test_wparse_t *t = pr_test_wparse_new(d[0] & 1, secrets, NSECRETS, on_message, NULL);
  if (t == NULL) abort();
  char *out = NULL;
  size_t olen = 0, ocap = 0;
  for (size_t off = 1; off < n;) {
    size_t k = n - off < chunk ? n - off : chunk, m = k;
    const char *masked = pr_test_wparse_feed(t, (const char *)d + off, &m);
    keep(&out, &olen, &ocap, masked, m);
    off += k;
  }
  size_t m = 0;
  const char *rest = pr_test_wparse_feed(t, NULL, &m); /* the end of the stream */
  keep(&out, &olen, &ocap, rest, m);
  if (out && holds_secret(out, olen)) abort();
  free(out);
  pr_test_wparse_free(t);
  return 0;
}
