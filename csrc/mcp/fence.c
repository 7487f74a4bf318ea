/* fence.c — what a tool call may ask for: its arguments checked against the
 * tool's own inputSchema (schemas.h), and the fence around the commands it
 * starts: the cwd (--allow-cwd), the command policy (--deny, --allow), the
 * environment (no variable named like a secret) and the secrets the server
 * adds itself. Every refusal answers the call with a clear message.
 *
 * Thread: main.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"

/* ---- argument checks (against the tool's own inputSchema) ---------------------------------- */

static int type_ok(const cJSON *v, const char *t) {
  if (strcmp(t, "string") == 0) return cJSON_IsString(v);
  if (strcmp(t, "boolean") == 0) return cJSON_IsBool(v);
  if (strcmp(t, "object") == 0) return cJSON_IsObject(v);
  if (strcmp(t, "array") == 0) return cJSON_IsArray(v);
  if (strcmp(t, "null") == 0) return cJSON_IsNull(v);
  if (strcmp(t, "integer") == 0)
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9.007e15;
  if (strcmp(t, "number") == 0) return cJSON_IsNumber(v);
  return 0;
}

int mc_args_check(const cJSON *s, const cJSON *v, const char *path, char *err, size_t errlen) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (cJSON_IsString(t) && !type_ok(v, t->valuestring)) {
    snprintf(err, errlen, "'%s' must be %s %s", path, strchr("aeiou", t->valuestring[0]) ? "an" : "a",
             t->valuestring);
    return -1;
  }
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (cJSON_IsArray(e)) {
    int hit = 0;
    for (const cJSON *x = e->child; x; x = x->next)
      hit |= cJSON_IsString(x) && cJSON_IsString(v) && strcmp(x->valuestring, v->valuestring) == 0;
    if (!hit) {
      char *opts = cJSON_PrintUnformatted(e);
      snprintf(err, errlen, "'%s' must be one of %s", path, opts ? opts : "the listed values");
      free(opts);
      return -1;
    }
  }
  const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum"),
              *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum"),
              *ml = cJSON_GetObjectItemCaseSensitive(s, "minLength");
  if (cJSON_IsNumber(v) && ((mn && v->valuedouble < mn->valuedouble) || (mx && v->valuedouble > mx->valuedouble))) {
    if (mn && mx)
      snprintf(err, errlen, "'%s' must be between %.0f and %.0f", path, mn->valuedouble, mx->valuedouble);
    else
      snprintf(err, errlen, "'%s' must be at least %.0f", path, mn ? mn->valuedouble : 0);
    return -1;
  }
  if (ml && cJSON_IsString(v) && strlen(v->valuestring) < (size_t)ml->valuedouble) {
    snprintf(err, errlen, "'%s' must not be empty", path);
    return -1;
  }
  char sub[256];
  if (cJSON_IsArray(v)) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int i = 0;
    for (const cJSON *x = v->child; items && x; x = x->next, i++) {
      snprintf(sub, sizeof(sub), "%s[%d]", path, i);
      if (mc_args_check(items, x, sub, err, errlen)) return -1;
    }
  }
  if (cJSON_IsObject(v)) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
      if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) {
        snprintf(err, errlen, "'%s' is required", r->valuestring);
        return -1;
      }
    for (const cJSON *x = v->child; x; x = x->next) {
      const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, x->string) : NULL;
      snprintf(sub, sizeof(sub), "%s%s%s", path[0] ? path : "", path[0] ? "." : "", x->string);
      if (ps == NULL) ps = cJSON_IsObject(addl) ? addl : NULL;
      if (ps == NULL && cJSON_IsFalse(addl)) {
        snprintf(err, errlen, "unknown argument '%s'", sub);
        return -1;
      }
      if (ps && mc_args_check(ps, x, sub, err, errlen)) return -1;
    }
  }
  return 0;
}

/* ---- the fence: cwd and command policy ------------------------------------------------------ */

/* Resolve the requested cwd (relative to ours) and check --allow-cwd. Returns
 * a malloc'd absolute path, or NULL after failing the call. */
static char *resolve_cwd(call_t *c) {
  const cJSON *cw = mc_arg(c, "cwd");
  char want[PATH_MAX * 2];
  if (cJSON_IsString(cw) && cw->valuestring[0] == '/')
    snprintf(want, sizeof(want), "%s", cw->valuestring);
  else if (cJSON_IsString(cw))
    snprintf(want, sizeof(want), "%s/%s", mc_opts.cwd, cw->valuestring);
  else
    snprintf(want, sizeof(want), "%s", mc_opts.cwd);
  char *real = realpath(want, NULL);
  if (real == NULL) {
    mc_call_fail(c, "cwd %s: %s", want, strerror(errno));
    return NULL;
  }
  if (mc_opts.n_allow_cwd == 0) return real;
  for (size_t i = 0; i < mc_opts.n_allow_cwd; i++) {
    const char *d = mc_opts.allow_cwd[i];
    size_t n = strlen(d);
    if (strncmp(real, d, n) == 0 && (real[n] == 0 || real[n] == '/' || (n == 1 && d[0] == '/'))) return real;
  }
  mc_call_fail(c, "cwd %s is outside the directories this server allows (--allow-cwd)", real);
  free(real);
  return NULL;
}

/* The command line the policy sees: the shell string, or program and args joined by spaces. */
static char *command_line(const call_t *c) {
  const cJSON *cmd = mc_arg(c, "command"), *args = mc_arg(c, "args");
  size_t n = strlen(cmd->valuestring) + 1;
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next)
    n += strlen(a->valuestring) + 1;
  char *s = malloc(n);
  if (s == NULL) return NULL;
  char *p = s + sprintf(s, "%s", cmd->valuestring);
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next)
    p += sprintf(p, " %s", a->valuestring);
  return s;
}

static int command_allowed(call_t *c) {
  char *line = command_line(c);
  if (line == NULL) {
    mc_call_fail(c, "out of memory");
    return 0;
  }
  for (size_t i = 0; i < mc_opts.n_deny; i++)
    if (mc_glob(mc_opts.deny[i], line)) {
      mc_call_fail(c, "refused: the command matches the deny pattern '%s' of this server (--deny)", mc_opts.deny[i]);
      free(line);
      return 0;
    }
  int ok = mc_opts.n_allow == 0;
  for (size_t i = 0; i < mc_opts.n_allow && !ok; i++)
    ok = mc_glob(mc_opts.allow[i], line);
  free(line);
  if (!ok) mc_call_fail(c, "refused: the command matches none of the allow patterns of this server (--allow)");
  return ok;
}

/* ---- the start spec ------------------------------------------------------------------------------ */

cJSON *mc_start_spec(call_t *c) {
  if (!command_allowed(c)) return NULL;
  char *cwd = resolve_cwd(c);
  if (cwd == NULL) return NULL;
  cJSON *spec = cJSON_CreateObject();
  const cJSON *cmd = mc_arg(c, "command"), *args = mc_arg(c, "args");
  if (args) {
    cJSON *argv = cJSON_AddArrayToObject(spec, "cmd");
    cJSON_AddItemToArray(argv, cJSON_CreateString(cmd->valuestring));
    for (const cJSON *a = args->child; a; a = a->next)
      cJSON_AddItemToArray(argv, cJSON_CreateString(a->valuestring));
  } else {
    cJSON_AddStringToObject(spec, "cmd", cmd->valuestring);
  }
  cJSON_AddStringToObject(spec, "cwd", cwd);
  free(cwd);
  const cJSON *env = mc_arg(c, "env");
  if (env && env->child) {
    for (const cJSON *e = env->child; e; e = e->next) {
      if (e->string[0] == 0 || strchr(e->string, '=')) {
        mc_call_fail(c, "env: '%s' is not a variable name", e->string);
        cJSON_Delete(spec);
        return NULL;
      }
      for (size_t i = 0; i < mc_opts.n_secrets; i++)
        if (strcmp(e->string, mc_opts.secrets[i].name) == 0) {
          mc_call_fail(c, "env: %s is a secret this server sets itself; leave it out", e->string);
          cJSON_Delete(spec);
          return NULL;
        }
    }
    cJSON_AddItemToObject(spec, "env", cJSON_Duplicate(env, 1));
  }
  if (mc_opts.n_secrets) {
    cJSON *sec = cJSON_AddObjectToObject(spec, "secrets");
    for (size_t i = 0; i < mc_opts.n_secrets; i++)
      cJSON_AddStringToObject(sec, mc_opts.secrets[i].name, mc_opts.secrets[i].value);
  }
  int pty = mc_flag(c, "pty", 0);
  cJSON_AddBoolToObject(spec, "pty", pty);
  if (pty) {
    cJSON_AddNumberToObject(spec, "cols", 120);
    cJSON_AddNumberToObject(spec, "rows", 30);
  } else {
    cJSON_AddBoolToObject(spec, "stdin", mc_flag(c, "stdin", c->tool == T_START));
  }
  const cJSON *to = mc_arg(c, "timeout_ms"), *label = mc_arg(c, "label");
  if (to) cJSON_AddNumberToObject(spec, "timeout_ms", to->valuedouble);
  if (label) cJSON_AddStringToObject(spec, "label", label->valuestring);
  if (mc_opts.kill_on_exit) cJSON_AddTrueToObject(spec, "kill_on_disconnect");
  return spec;
}
