/* rpc/ident.c — owner identities: connections that say the same identity in
 * `hello` share one session, so a client that reconnects (a restarted agent,
 * a new proctor-mcp) sees and controls what it started before; and the
 * EPERM answer such a client gets for another session's execution.
 *
 * Thread: engine.
 *
 *   hello [name, {identity}] ─► srv->idents: identity -> session
 *        known: the connection takes that session   new: it records its own
 *
 * The table holds at most PR_RPC_MAX_IDENTS entries; when it is full, an
 * entry whose session has no live connection and no execution left is
 * reused, else the hello fails with EBUSY.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/params.h"

struct pr_rpc_ident {
  char name[PR_RPC_IDENT_MAX + 1];
  uint64_t session;
};

/* Does a connection other than `self` use `session`? */
static int session_live(pr_rpc_t *srv, uint64_t session, const pr_rpc_conn_t *self) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &srv->conns) {
    pr_rpc_conn_t *c = PR_QUEUE_DATA(q, pr_rpc_conn_t, node);
    if (c != self && !c->closing && c->session == session) return 1;
  }
  return 0;
}

/* Does any execution belong to `session`? */
static int session_has_exec(pr_rpc_t *srv, uint64_t session) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &srv->ctl->reg.order)
  if (PR_QUEUE_DATA(q, pr_exec_t, order)->session == session) return 1;
  return 0;
}

int pr_rpc_ident_join(pr_rpc_conn_t *c, const char *ident, char *msg, size_t msglen) {
  pr_rpc_t *srv = c->srv;
  for (size_t i = 0; i < srv->nidents; i++) {
    if (strcmp(srv->idents[i].name, ident) != 0) continue;
    uint64_t s = srv->idents[i].session;
    if (s != c->session && c->started) {
      snprintf(msg, msglen, "an identity must be said before this connection starts anything");
      return PR_EINVAL;
    }
    c->session = s;
    snprintf(c->ident, sizeof(c->ident), "%s", ident);
    return 0;
  }
  size_t slot = srv->nidents;
  if (slot == PR_RPC_MAX_IDENTS) { /* full: reuse one nobody uses any more */
    for (slot = 0; slot < srv->nidents; slot++) {
      uint64_t s = srv->idents[slot].session;
      if (!session_live(srv, s, c) && !session_has_exec(srv, s)) break;
    }
    if (slot == srv->nidents) {
      snprintf(msg, msglen, "%d identities are in use", PR_RPC_MAX_IDENTS);
      return PR_EBUSY;
    }
  } else {
    if (srv->nidents == srv->capidents) {
      size_t cap = srv->capidents ? srv->capidents * 2 : 8;
      if (cap > PR_RPC_MAX_IDENTS) cap = PR_RPC_MAX_IDENTS;
      pr_rpc_ident_t *v = realloc(srv->idents, cap * sizeof(*v));
      if (v == NULL) return PR_ENOMEM;
      srv->idents = v;
      srv->capidents = cap;
    }
    srv->nidents++;
  }
  snprintf(srv->idents[slot].name, sizeof(srv->idents[slot].name), "%s", ident);
  srv->idents[slot].session = c->session;
  snprintf(c->ident, sizeof(c->ident), "%s", ident);
  return 0;
}

int pr_rpc_session_shared(pr_rpc_conn_t *c) { return session_live(c->srv, c->session, c); }

void pr_rpc_ident_free(pr_rpc_t *srv) {
  free(srv->idents);
  srv->idents = NULL;
  srv->nidents = srv->capidents = 0;
}

int pr_rpc_not_yours(pr_rpc_req_t *q, uint64_t id) {
  if (q->c->ident[0] == 0 || id == 0) return 0;
  const pr_exec_t *x = pr_registry_find(&q->ctl->reg, id, 0);
  if (x == NULL || x->session == 0 || x->session == q->c->session) return 0;
  snprintf(q->msg, sizeof(q->msg), "execution %llu belongs to another agent (owner %s)",
           (unsigned long long)id, x->owner ? x->owner : "?");
  return PR_EPERM;
}
