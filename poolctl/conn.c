// SPDX-License-Identifier: MIT
/*
 * poolctl/conn.c - poolctl's connection: HELLO, AUTH as "@admin" with the
 * cluster admin key, ADMIN requests to the registry (trying each of a
 * list) or to one memd.
 */

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "fabric/hostport.h"

#include "poolctl/poolctl.h"

/* ---- the connection ------------------------------------------------- */

void conn_close(struct conn *c)
{
	rpc_close(c->rpc);
	free(c->req);
	free(c->rep);
	explicit_bzero(c->skey, sizeof(c->skey));
	memset(c, 0, sizeof(*c));
}

/* Reports a failed call: memd's text when it gave one, else strerror. */
int call_failed(const struct conn *c, const char *what, int r)
{
	if (c->text[0])
		return fail(ctl_exit_for(r), what, "%s (%s)", c->text,
			    errname(r));
	if (r == -ENOTCONN)
		return fail(EX_UNAVAILABLE, what,
			    "connection to %s lost (ENOTCONN)", c->addr);
	return fail(ctl_exit_for(r), what, "%s: %s (%s)", c->addr, strerror(-r),
		    errname(r));
}

/* The exit code for a secret file auth_read_secret_file refused. */
int secret_file_exit(int err)
{
	switch (err) {
	case -EINVAL:
		return EX_DATAERR; /* too short or too long */
	case -EACCES:
	case -EPERM:
		return EX_NOPERM; /* unreadable, or mode too open */
	default:
		return EX_NOINPUT; /* missing, a directory, ... */
	}
}

/*
 * Reads the cluster secret once and derives the cluster keys. Returns 0
 * or an exit code, with the reason in err (not printed: a standalone memd
 * needs no secret, which only the AUTH that needs it can tell).
 */
static int load_keys(struct opts *o, char *err, size_t errlen)
{
	uint8_t secret[AUTH_SECRET_MAX];
	int n;

	if (o->have_keys)
		return 0;
	n = auth_read_secret_file(o->cluster_secret, secret, err, errlen);
	if (n < 0)
		return secret_file_exit(n);
	auth_cluster_keys(secret, (size_t)n, &o->keys);
	explicit_bzero(secret, sizeof(secret));
	o->have_keys = true;
	return 0;
}

/*
 * HELLO, then AUTH as "@admin" unless memd is standalone (protocol 1, or
 * AUTH answered EOPNOTSUPP: c->standalone). Returns 0 or an exit code
 * (the reason printed).
 */
static int handshake(struct opts *o, struct conn *c, const char *what)
{
	struct wire_hello_ok hello = { 0 };
	char client[WIRE_NAME_MAX], secret_err[256];
	uint8_t probe[AUTH_KEY_LEN];
	int r, code;

	snprintf(client, sizeof(client), "poolctl pid %ld", (long)getpid());
	/* Without the secret, AUTH with a throwaway key still tells a
	 * standalone memd (EOPNOTSUPP), which needs none, from the rest. */
	code = load_keys(o, secret_err, sizeof(secret_err));
	if (code)
		auth_random(probe, sizeof(probe));
	r = rpc_handshake(c->rpc, client, WIRE_PROTO_MIN, "@admin",
			  code ? probe : o->keys.admin, WIRE_ROLE_ADMIN,
			  o->timeout_ms, &hello, NULL, c->skey, c->text,
			  sizeof(c->text));
	if (r && !hello.proto) /* HELLO itself failed */
		return call_failed(c, what, r);
	c->proto = hello.proto;
	if (!r && c->proto < 2) {
		c->standalone = true;
		return 0;
	}
	if (r == -EOPNOTSUPP) {
		c->standalone = true;
		return 0;
	}
	if (code)
		return fail(code, what, "cluster secret: %s", secret_err);
	if (r == -EACCES)
		return fail(EX_NOPERM, what,
			    "%s refused \"@admin\": wrong cluster secret in "
			    "%s? (EACCES)",
			    c->addr, o->cluster_secret);
	if (r == -EPROTO)
		return fail(EX_IOERR, what,
			    "%s did not make this session \"@admin\" (EPROTO)",
			    c->addr);
	if (r)
		return call_failed(c, what, r);
	return 0;
}

/*
 * rpc_connect reports a host name that does not resolve as EHOSTUNREACH
 * (libpool(3) documents it so) and other resolver failures as EINVAL:
 * resolve the host again to tell "no such name" from "no route". Returns
 * an exit code with the reason printed, or 0 when the name resolves.
 */
static int resolve_failed(const char *addr, const char *what)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char host[256];
	uint16_t port;
	int r;

	if (wire_split_hostport(addr, host, sizeof(host), &port))
		return 0;
	r = getaddrinfo(host, NULL, &hints, &ai);
	if (!r) {
		freeaddrinfo(ai);
		return 0;
	}
	return fail(EX_UNAVAILABLE, what, "cannot resolve %s: %s", host,
		    r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
}

static int conn_open_one(struct opts *o, const char *addr, struct conn *c,
			 const char *what);

/*
 * Connects to addr and authenticates. 0 or an exit code. addr may be a
 * list of registries ("a:p,b:p": several on one etcd, one of which
 * leads): each is tried in turn, and the first that accepts us serves;
 * when none does, the last one's failure is printed.
 */
int conn_open(struct opts *o, const char *addr, struct conn *c,
	      const char *what)
{
	static char one[16][WIRE_HOSTPORT_MAX];
	const char *p = addr;
	int n = 0, r = EX_UNAVAILABLE;

	if (!strchr(addr, ','))
		return conn_open_one(o, addr, c, what);
	while (*p && n < 16) {
		size_t len = strcspn(p, ",");

		snprintf(one[n++], sizeof(one[0]), "%.*s",
			 (int)(len < sizeof(one[0]) ? len : 0), p);
		p += len;
		if (*p)
			p++;
	}
	fail_held[0] = '\0';
	for (int i = 0; i < n; i++) {
		json_error_t jerr;
		json_t *st = NULL;

		fail_hold = true;
		r = conn_open_one(o, one[i], c, what);
		fail_hold = false;
		if (r)
			continue;
		/* A standby lets @admin in (its own donor part answers
		 * "leases") but serves no registry request: ask. */
		if (c->standalone || admin_quiet(o, c, cmd_json("status"), &st,
						 &jerr) != -EAGAIN) {
			json_decref(st);
			return 0;
		}
		snprintf(fail_held, sizeof(fail_held), "%.127s: %.800s", one[i],
			 c->text);
		r = EX_TEMPFAIL;
		conn_close(c);
	}
	return fail(r, what, "no registry of %s serves; the last said: %s",
		    addr, fail_held);
}

static int conn_open_one(struct opts *o, const char *addr, struct conn *c,
			 const char *what)
{
	int r;

	memset(c, 0, sizeof(*c));
	c->addr = addr;
	r = rpc_connect(addr, o->timeout_ms, &c->rpc, NULL, 0);
	if (r == -EHOSTUNREACH || r == -EINVAL) {
		int code = resolve_failed(addr, what);

		if (code)
			return code;
	}
	if (r == -EINVAL)
		return fail(EX_UNAVAILABLE, what,
			    "cannot connect to %s: not a usable HOST:PORT",
			    addr);
	if (r)
		return fail(EX_UNAVAILABLE, what, "cannot connect to %s: %s",
			    addr, strerror(-r));
	c->req = xcalloc(1, sizeof(*c->req));
	c->rep = xcalloc(1, sizeof(*c->rep));
	r = handshake(o, c, what);
	if (r)
		conn_close(c);
	return r;
}

json_t *cmd_json(const char *cmd)
{
	json_t *o = json_pack("{ss}", "cmd", cmd);

	if (!o) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return o;
}

/*
 * One ADMIN request, printing nothing: req (consumed) as compact JSON;
 * *out the reply, which must be a JSON object. Returns 0, rpc_call's
 * -errno, or 1: the reply is not a JSON object (jerr says why).
 */
int admin_quiet(struct opts *o, struct conn *c, json_t *req, json_t **out,
		json_error_t *jerr)
{
	char *text = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
	int r;

	json_decref(req);
	*out = NULL;
	if (!text) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	memset(c->req, 0, sizeof(*c->req));
	c->req->type = WIRE_ADMIN;
	c->req->u.admin.json = text;
	c->req->u.admin.json_len = (uint32_t)strlen(text);
	r = rpc_call(c->rpc, c->req, c->rep, WIRE_ADMIN_OK, o->timeout_ms,
		     c->text, sizeof(c->text));
	explicit_bzero(text, strlen(text)); /* may hold a sealed key */
	free(text);
	if (r)
		return r;
	*out = json_loadb(c->rep->u.admin.json, c->rep->u.admin.json_len, 0,
			  jerr);
	if (!*out || !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return 1;
	}
	return 0;
}

/* admin_quiet, with the reason printed: 0 or an exit code. */
int admin(struct opts *o, struct conn *c, json_t *req, json_t **out,
	  const char *what)
{
	json_error_t jerr = { 0 };
	int r = admin_quiet(o, c, req, out, &jerr);

	if (r == 1)
		return fail(EX_IOERR, what,
			    "%s answered with malformed JSON: %s", c->addr,
			    jerr.text[0] ? jerr.text : "not an object");
	if (r)
		return call_failed(c, what, r);
	return 0;
}

/*
 * Warns when a quota is more than the pool's whole capacity: accepted
 * (donors may join later) but most likely a slip of the unit. Asks the
 * registry for its status on c; when that fails, says nothing.
 */
void warn_above_capacity(struct opts *o, struct conn *c, const char *what,
			 uint64_t quota)
{
	json_error_t jerr;
	json_t *st = NULL;
	const json_t *cap;
	char qb[32], cb[32];

	if (admin_quiet(o, c, cmd_json("status"), &st, &jerr))
		return;
	cap = json_object_get(st, "capacity_bytes");
	if (json_is_integer(cap) && json_integer_value(cap) >= 0 &&
	    quota > (uint64_t)json_integer_value(cap)) {
		ctl_fmt_size(quota, qb, sizeof(qb));
		ctl_fmt_size((uint64_t)json_integer_value(cap), cb, sizeof(cb));
		fprintf(stderr,
			"poolctl: %s: warning: quota %s is more than the "
			"pool's capacity %s; accepted\n",
			what, qb, cb);
	}
	json_decref(st);
}

/*
 * Connects to the registry (not a standalone memd). 0 or an exit code
 * (reason printed; nothing to close).
 */
int registry_open(struct opts *o, struct conn *c, const char *what)
{
	int r = conn_open(o, o->addr, c, what);

	if (r)
		return r;
	if (c->standalone) {
		conn_close(c);
		return fail(EXIT_REFUSED, what,
			    "memd at %s is standalone: it has no registry, "
			    "tenants or quotas (EOPNOTSUPP)",
			    o->addr);
	}
	return 0;
}

/* Connects to the registry and runs one command there (not standalone). */
int registry_call(struct opts *o, json_t *req, json_t **out, const char *what)
{
	struct conn c;
	int r = registry_open(o, &c, what);

	if (r) {
		json_decref(req);
		return r;
	}
	r = admin(o, &c, req, out, what);
	conn_close(&c);
	return r;
}

/*
 * registry_call, then the reply: as JSON with --json, else through show.
 * 0 or an exit code.
 */
int registry_show(struct opts *o, json_t *req, const char *what,
		  void (*show)(const json_t *rep))
{
	json_t *rep;
	int r = registry_call(o, req, &rep, what);

	if (r)
		return r;
	if (o->json)
		r = print_json(rep);
	else
		show(rep);
	json_decref(rep);
	return r;
}
