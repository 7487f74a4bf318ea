/* fence.c — what a tool call may ask for: its arguments checked against the
 * tool's own inputSchema (schemas.h), and the fence around the commands it
 * starts: the cwd (--allow-cwd), the command policy (--deny, --allow), the
 * environment (no variable named like a secret; with --allow, only the
 * --allow-env names) and the secrets the server adds itself. Every refusal
 * answers the call with a clear message.
 *
 * With an allow list (doc/proctor.txt, *proctor-mcp-policy*) a pattern must
 * admit the code that runs, not just a string: the args form is matched as
 * its argv written with shell quoting (one word per element, so a program
 * named "git status" is not `git status`); a shell command holding a
 * metacharacter is refused (`npm test*` would admit `npm test; curl ..|sh`);
 * and `env` may set only the --allow-env names, never PATH, LD_*, BASH_ENV
 * or ENV (any name a program reads to run other code — GIT_CONFIG_*,
 * GIT_SSH_COMMAND, PAGER, MAKEFLAGS — is refused unless allowed by name).
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
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9.007e15;
  if (strcmp(t, "number") == 0) return cJSON_IsNumber(v);
  return 0;
}

int mc_args_check(const cJSON *s, const cJSON *v, const char *path, char *err, size_t errlen) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (cJSON_IsString(t) && !type_ok(v, t->valuestring)) {
    snprintf(err, errlen, "'%s' must be %s %s", path,
             strchr("aeiou", t->valuestring[0]) ? "an" : "a", t->valuestring);
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
  if (cJSON_IsNumber(v) &&
      ((mn && v->valuedouble < mn->valuedouble) || (mx && v->valuedouble > mx->valuedouble))) {
    if (mn && mx)
      snprintf(err, errlen, "'%s' must be between %.0f and %.0f", path, mn->valuedouble,
               mx->valuedouble);
    else snprintf(err, errlen, "'%s' must be at least %.0f", path, mn ? mn->valuedouble : 0);
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
  else if (cJSON_IsString(cw)) snprintf(want, sizeof(want), "%s/%s", mc_opts.cwd, cw->valuestring);
  else snprintf(want, sizeof(want), "%s", mc_opts.cwd);
  char *real = realpath(want, NULL);
  if (real == NULL) {
    mc_call_fail(c, "cwd %s: %s", want, strerror(errno));
    return NULL;
  }
  if (mc_opts.n_allow_cwd == 0) return real;
  for (size_t i = 0; i < mc_opts.n_allow_cwd; i++) {
    const char *d = mc_opts.allow_cwd[i];
    size_t n = strlen(d);
    if (strncmp(real, d, n) == 0 && (real[n] == 0 || real[n] == '/' || (n == 1 && d[0] == '/')))
      return real;
  }
  mc_call_fail(c, "cwd %s is outside the directories this server allows (--allow-cwd)", real);
  free(real);
  return NULL;
}

/* A word needs quoting unless it is made of these alone (and is not empty). */
static int plain_word(const char *w) {
  if (*w == 0) return 0;
  for (; *w; w++)
    if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-", *w))
      return 0;
  return 1;
}

/* The command line the policy sees: the shell string; or program and args
 * joined by spaces, each word shell-quoted when `quoted` (then the line is
 * the argv, unambiguously: 'a b' is one word, `a b` two). */
static char *command_line(const call_t *c, int quoted) {
  const cJSON *cmd = mc_arg(c, "command"), *args = mc_arg(c, "args");
  if (args == NULL) return strdup(cmd->valuestring);
  size_t n = 0;
  for (const cJSON *a = cmd; a; a = a == cmd ? args->child : a->next) {
    const char *w = a->valuestring;
    n += strlen(w) + 1;
    if (quoted)
      for (; *w; w++) n += *w == '\'' ? 4 : 0;
    n += quoted ? 2 : 0;
  }
  char *s = malloc(n + 1), *p = s;
  if (s == NULL) return NULL;
  for (const cJSON *a = cmd; a; a = a == cmd ? args->child : a->next) {
    const char *w = a->valuestring;
    if (a != cmd) *p++ = ' ';
    if (!quoted || plain_word(w)) {
      p = stpcpy(p, w);
      continue;
    }
    *p++ = '\'';
    for (; *w; w++)
      if (*w == '\'') p = stpcpy(p, "'\\''");
      else *p++ = *w;
    *p++ = '\'';
  }
  *p = 0;
  return s;
}

/* The shell metacharacters a shell command may not hold while --allow is in force. */
#define SHELL_META ";|&$`()<>\n\r"

static int command_allowed(call_t *c) {
  char *raw = command_line(c, 0), *line = command_line(c, 1);
  if (raw == NULL || line == NULL) {
    free(raw);
    free(line);
    mc_call_fail(c, "out of memory");
    return 0;
  }
  int ok = 1;
  /* deny: either spelling matching refuses (the quotes must not hide a word) */
  for (size_t i = 0; i < mc_opts.n_deny && ok; i++)
    if (mc_glob(mc_opts.deny[i], raw) || mc_glob(mc_opts.deny[i], line)) {
      mc_call_fail(c, "refused: the command matches the deny pattern '%s' of this server (--deny)",
                   mc_opts.deny[i]);
      ok = 0;
    }
  if (ok && mc_opts.n_allow) {
    const char *meta = mc_arg(c, "args") ? NULL : strpbrk(line, SHELL_META);
    if (meta) {
      char what[16];
      snprintf(what, sizeof(what),
               *meta == '\n'   ? "a newline"
               : *meta == '\r' ? "a carriage return"
                               : "'%c'",
               *meta);
      mc_call_fail(c,
                   "refused: with an allow list (--allow) a shell command may not hold %s (none of "
                   "; | & $ ` ( ) < > or a newline); pass the program and its args instead",
                   what);
      ok = 0;
    }
    int hit = 0;
    for (size_t i = 0; i < mc_opts.n_allow && ok && !hit; i++)
      hit = mc_glob(mc_opts.allow[i], line);
    if (ok && !hit) {
      mc_call_fail(
          c,
          "refused: the command (%s) matches none of the allow patterns of this server (--allow)",
          line);
      ok = 0;
    }
  }
  free(raw);
  free(line);
  return ok;
}

/* The env argument under the policy: 0, or -1 after failing the call. */
static int env_allowed(call_t *c, const char *name) {
  if (name[0] == 0 || strchr(name, '=')) {
    mc_call_fail(c, "env: '%s' is not a variable name", name);
    return -1;
  }
  for (size_t i = 0; i < mc_opts.n_secrets; i++)
    if (strcmp(name, mc_opts.secrets[i].name) == 0) {
      mc_call_fail(c, "env: %s is a secret this server sets itself; leave it out", name);
      return -1;
    }
  if (mc_opts.n_allow == 0) return 0;
  if (mc_env_never(name)) {
    mc_call_fail(c,
                 "env: refused: %s may never be set while an allow list (--allow) is in force "
                 "(it chooses which code runs)",
                 name);
    return -1;
  }
  for (size_t i = 0; i < mc_opts.n_allow_env; i++)
    if (strcmp(name, mc_opts.allow_env[i]) == 0) return 0;
  mc_call_fail(c,
               "env: refused: %s is not among the names this server lets env set (--allow-env)%s",
               name, mc_opts.n_allow_env ? "" : "; it allows none");
  return -1;
}

/* ---- the start spec ------------------------------------------------------------------------------ */

/* The target argument under --allow-target: 0 (none, or allowed), or -1 after
 * failing the call. On a target the cwd is a path on the far side: kept as
 * given (absolute, without ..), not resolved here. */
static int target_allowed(call_t *c, const char **target, char **cwd) {
  const cJSON *t = mc_arg(c, "target"), *cw = mc_arg(c, "cwd");
  *target = NULL;
  *cwd = NULL;
  if (t == NULL) return 0;
  size_t i = 0;
  while (i < mc_opts.n_allow_target && strcmp(mc_opts.allow_target[i], t->valuestring) != 0) i++;
  if (i == mc_opts.n_allow_target) {
    mc_call_fail(c, "refused: this server allows %s (--allow-target)",
                 mc_opts.n_allow_target ? "other targets" : "no target");
    return -1;
  }
  if (cJSON_IsString(cw)) {
    const char *p = cw->valuestring;
    if (p[0] != '/' || strstr(p, "/../") || (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/.."))) {
      mc_call_fail(c, "cwd on a target: an absolute path without .. expected, got %s", p);
      return -1;
    }
    if ((*cwd = strdup(p)) == NULL) {
      mc_call_fail(c, "out of memory");
      return -1;
    }
  }
  *target = t->valuestring;
  return 0;
}

cJSON *mc_start_spec(call_t *c) {
  if (!command_allowed(c)) return NULL;
  const char *target;
  char *cwd;
  if (target_allowed(c, &target, &cwd) != 0) return NULL;
  if (target == NULL && (cwd = resolve_cwd(c)) == NULL) return NULL;
  cJSON *spec = cJSON_CreateObject();
  const cJSON *cmd = mc_arg(c, "command"), *args = mc_arg(c, "args");
  if (args) {
    cJSON *argv = cJSON_AddArrayToObject(spec, "cmd");
    cJSON_AddItemToArray(argv, cJSON_CreateString(cmd->valuestring));
    for (const cJSON *a = args->child; a; a = a->next)
      cJSON_AddItemToArray(argv, cJSON_CreateString(a->valuestring));
  } else if (strcmp(mc_opts.shell, "/bin/sh") == 0) {
    cJSON_AddStringToObject(spec, "cmd", cmd->valuestring);
  } else { /* [shell, "-c", command]: results show the command and the shell (steps.c) */
    cJSON *argv = cJSON_AddArrayToObject(spec, "cmd");
    cJSON_AddItemToArray(argv, cJSON_CreateString(mc_opts.shell));
    cJSON_AddItemToArray(argv, cJSON_CreateString("-c"));
    cJSON_AddItemToArray(argv, cJSON_CreateString(cmd->valuestring));
  }
  if (target) cJSON_AddStringToObject(spec, "target", target);
  if (cwd) cJSON_AddStringToObject(spec, "cwd", cwd); /* a target without one: its own */
  free(cwd);
  const cJSON *env = mc_arg(c, "env");
  if (env && env->child) {
    for (const cJSON *e = env->child; e; e = e->next)
      if (env_allowed(c, e->string) != 0) {
        cJSON_Delete(spec);
        return NULL;
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
