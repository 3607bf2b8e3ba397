// SPDX-License-Identifier: MIT
/*
 * poolctl/status.c - `poolctl status`: the pool (registry) or one
 * standalone memd.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "poolctl/poolctl.h"

/* ---- status ----------------------------------------------------------- */

static void print_status(const json_t *st, bool standalone)
{
	static const char *const keys[] = { "capacity_bytes", "used_bytes",
					    "reserved_bytes", "free_bytes",
					    "slab_bytes" };
	static const char *const labels[] = { "capacity", "used", "reserved",
					      "free", "slab size" };
	const json_t *d = json_object_get(st, "donors");
	const json_t *tenants = json_object_get(st, "tenants");
	char b[32];

	if (standalone)
		printf("%-10s standalone memd (no registry, no tenants)\n",
		       "mode");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		ctl_fmt_size(jnum(st, keys[i]), b, sizeof(b));
		printf("%-10s %s\n", labels[i], b);
	}
	printf("%-10s %" PRIu64 " up, %" PRIu64 " draining, %" PRIu64 " down\n",
	       "donors", jnum(d, "up"), jnum(d, "draining"), jnum(d, "down"));
	if (json_array_size(tenants)) {
		fputc('\n', stdout);
		tenants_table(tenants, false);
	}
}

/* A standalone memd's STATUS in the shape of the registry's status. */
static int standalone_status(struct opts *o, struct conn *c, json_t **out)
{
	const struct wire_status_ok *s;
	bool draining;
	int r;

	memset(c->req, 0, sizeof(*c->req));
	c->req->type = WIRE_STATUS;
	r = rpc_call(c->rpc, c->req, c->rep, WIRE_STATUS_OK, o->timeout_ms,
		     c->text, sizeof(c->text));
	if (r)
		return call_failed(c, "status", r);
	s = &c->rep->u.status_ok;
	draining = s->flags & WIRE_STATUS_DRAINING;
	*out = json_pack(
		"{sI sI sI sI sI s{sI sI sI} s[] sb}", "slab_bytes",
		(json_int_t)s->slab_bytes, "capacity_bytes",
		(json_int_t)((uint64_t)s->slabs_total * s->slab_bytes),
		"used_bytes",
		(json_int_t)((uint64_t)s->slabs_leased * s->slab_bytes),
		"reserved_bytes", (json_int_t)0, "free_bytes",
		(json_int_t)((uint64_t)s->slabs_free * s->slab_bytes), "donors",
		"up", (json_int_t)!draining, "draining", (json_int_t)draining,
		"down", (json_int_t)0, "tenants", "standalone", 1);
	if (!*out) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return 0;
}

int cmd_status(struct opts *o)
{
	struct conn c;
	json_t *st = NULL;
	int r = conn_open(o, o->addr, &c, "status");

	if (r)
		return r;
	if (c.standalone)
		r = standalone_status(o, &c, &st);
	else
		r = admin(o, &c, cmd_json("status"), &st, "status");
	if (!r) {
		if (o->json)
			r = print_json(st);
		else
			print_status(st, c.standalone);
	}
	json_decref(st);
	conn_close(&c);
	return r;
}
