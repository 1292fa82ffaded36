/*
 * dispatch/resolve.c — a connection string's host names resolved off the
 * workers (design and contract in dispatch/resolve.h).
 */
#include "dispatch/resolve.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libpq-fe.h>

void dresolve_init(struct dresolve *c, const char *conninfo)
{
    memset(c, 0, sizeof(*c));
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    const char *host = NULL, *hostaddr = NULL, *port = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (!strcmp(o->keyword, "host"))
            host = o->val;
        else if (!strcmp(o->keyword, "hostaddr"))
            hostaddr = o->val;
        else if (!strcmp(o->keyword, "port"))
            port = o->val;
    }
    if (host && host[0] && !(hostaddr && hostaddr[0]))
        for (const char *h = host; *h; h += strcspn(h, ","), h += *h == ',')
            if (h[0] != '/' && h[0] != '@' && h[0] != ',' && !c->hosts) /* a name */
                c->hosts = strdup(host);
    if (c->hosts && port && strchr(port, ','))
        c->ports = strdup(port); /* one port per host: filtered with them */
    PQconninfoFree(opts);
}

/* Appends the n-th entry of a comma list (or nothing) to out. */
static size_t list_append(char *out, size_t cap, size_t used, const char *list, unsigned n)
{
    const char *e = list;
    for (unsigned i = 0; i < n && e; i++)
        e = (e = strchr(e, ',')) ? e + 1 : NULL;
    size_t len = e ? strcspn(e, ",") : 0;
    return used + (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%s%.*s", used ? "," : "", (int)len,
                                   e ? e : "");
}

int dresolve_run(struct dresolve *c)
{
    size_t nh = 0, na = 0, np = 0, kept = 0;
    unsigned k = 0;
    c->err[0] = '\0';
    for (const char *h = c->hosts; *h; k++) {
        size_t n = strcspn(h, ",");
        char name[256], addr[64] = "";
        snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), h);
        h += n + (h[n] == ',');
        if (name[0] && name[0] != '/' && name[0] != '@') {
            struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
            int err = getaddrinfo(name, NULL, &hints, &ai);
            if (err || !ai || getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof(addr), NULL, 0, NI_NUMERICHOST)) {
                snprintf(c->err, sizeof(c->err), "could not resolve host \"%.120s\": %.100s", name,
                         err ? gai_strerror(err) : "no address");
                if (ai)
                    freeaddrinfo(ai);
                continue;
            }
            freeaddrinfo(ai);
        }
        nh = list_append(c->hostlist, sizeof(c->hostlist), nh, c->hosts, k);
        na += (size_t)snprintf(c->hostaddr + na, na < sizeof(c->hostaddr) ? sizeof(c->hostaddr) - na : 0, "%s%s",
                               na || kept ? "," : "", addr);
        if (c->ports)
            np = list_append(c->portlist, sizeof(c->portlist), np, c->ports, k);
        kept++;
    }
    if (nh >= sizeof(c->hostlist) || na >= sizeof(c->hostaddr) || np >= sizeof(c->portlist)) {
        snprintf(c->err, sizeof(c->err), "the host list is too long (%zu bytes at most)",
                 sizeof(c->hostlist) - 1);
        return -1;
    }
    return kept ? 0 : -1;
}

static int64_t dresolve_body(void *arg)
{
    return dresolve_run(arg);
}

int dresolve_submit(struct dresolve *r, urt_runtime *rt, struct urt_blocking *b, urt_blocking_done_fn *done)
{
    urt_blocking_init(b, dresolve_body, done, r);
    return urt_blocking_submit(rt, b, 0);
}

void dresolve_params(const struct dresolve *r, bool resolved, const char *conninfo, const char **keys,
                     const char **vals)
{
    static const char *const all[] = {"dbname", "fallback_application_name", "host", "hostaddr", "port", NULL};
    const char *v[] = {conninfo, "urt-dispatch", r->hostlist, r->hostaddr, r->portlist, NULL};
    int n = !resolved ? 2 : r->ports ? 5 : 4;
    for (int i = 0; i < 6; i++) {
        keys[i] = i < n ? all[i] : NULL;
        vals[i] = i < n ? v[i] : NULL;
    }
}

void dresolve_fini(struct dresolve *r)
{
    free(r->hosts);
    free(r->ports);
    r->hosts = r->ports = NULL;
}
