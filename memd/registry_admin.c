// SPDX-License-Identifier: MIT
/*
 * memd/registry_admin.c - the admin requests poolctl sends to the
 * registry (registry.h, memd_registry_admin; docs/cluster.md, "Admin
 * requests"): one table of commands with the fields each takes; the
 * listings (status, donors, tenants, quota-get) and the changes to
 * tenants, quotas, cost models and drain flags, each written to the
 * durable state (registry_state.c) before it is applied.
 *
 * Threads: memd-ctl, for an authenticated "@admin" session, under
 * r->lock (taken once per request, after the request's fields are
 * checked).
 *
 * Invariants: a request that fails changes nothing (durable or in
 * memory); a tenant is removed only when it holds no memory.
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- admin requests ---------------------------------------------------- */

struct admin_ctx {
	struct memd_registry *r;
	json_t *req;
	const uint8_t *session_key;
	json_t *reply; /* set by the handler on success */
	char *err;
	size_t errlen;
};

static json_t *tenant_info_json_base(const struct memd_registry *r,
				     const struct tenant *t,
				     bool with_name_first)
{
	if (with_name_first)
		return json_pack(
			"{s:s, s:I, s:I, s:I, s:I}", "name", t->name, "id",
			(json_int_t)t->id, "quota_bytes",
			(json_int_t)t->quota_bytes, "used_bytes",
			(json_int_t)reg_mul_sat(t->used_slabs, r->slab_bytes),
			"reserved_bytes",
			(json_int_t)reg_mul_sat(t->reserved_slabs,
						r->slab_bytes));
	return json_pack(
		"{s:I, s:s, s:I, s:I, s:I}", "id", (json_int_t)t->id, "name",
		t->name, "quota_bytes", (json_int_t)t->quota_bytes,
		"used_bytes",
		(json_int_t)reg_mul_sat(t->used_slabs, r->slab_bytes),
		"reserved_bytes",
		(json_int_t)reg_mul_sat(t->reserved_slabs, r->slab_bytes));
}

/* A tenant as admin replies show it: with its cost model (0: the
 * donors'). */
static json_t *tenant_info_json(const struct memd_registry *r,
				const struct tenant *t, bool with_name_first)
{
	json_t *o = tenant_info_json_base(r, t, with_name_first);

	if (o && (json_object_set_new(o, "prefill_tokens_per_s",
				      json_integer(t->prefill_tokens_per_s)) ||
		  json_object_set_new(
			  o, "bytes_per_token",
			  json_integer((json_int_t)t->bytes_per_token)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int admin_status(struct admin_ctx *x)
{
	struct memd_registry *r = x->r;
	uint64_t cap = 0, used = 0, resv = 0, freeb = 0;
	uint32_t nup = 0, ndrain = 0, ndown = 0;
	json_t *ts = json_array();

	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *d = &r->donor[i];

		switch (reg_donor_state(d)) {
		case MEMD_DONOR_UP:
			nup++;
			if (d->slabs_free > d->reserved_slabs)
				freeb += (d->slabs_free - d->reserved_slabs) *
					 r->slab_bytes;
			break;
		case MEMD_DONOR_DRAINING:
			ndrain++;
			break;
		case MEMD_DONOR_DOWN:
			ndown++;
			continue;
		}
		cap += (uint64_t)d->slabs_total * r->slab_bytes;
	}
	for (size_t i = 0; i < r->ntenants && ts; i++) {
		const struct tenant *t = &r->tenant[i];

		used += t->used_slabs * r->slab_bytes;
		resv += t->reserved_slabs * r->slab_bytes;
		if (json_array_append_new(ts, tenant_info_json(r, t, true))) {
			json_decref(ts);
			ts = NULL;
		}
	}
	if (!ts)
		return -ENOMEM;
	x->reply = json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I}, "
		"s:o}",
		"slab_bytes", (json_int_t)r->slab_bytes, "capacity_bytes",
		(json_int_t)cap, "used_bytes", (json_int_t)used,
		"reserved_bytes", (json_int_t)resv, "free_bytes",
		(json_int_t)freeb, "donors", "up", (json_int_t)nup, "draining",
		(json_int_t)ndrain, "down", (json_int_t)ndown, "tenants", ts);
	return x->reply ? 0 : -ENOMEM;
}

static json_t *donor_info_json(struct memd_registry *r, const struct donor *d)
{
	uint64_t avail = 0;
	char epoch[17];
	json_t *ts = json_array();

	for (uint32_t i = 0; i < d->nusage && ts; i++) {
		const struct tenant *t =
			reg_tenant_by_id(r, d->usage[i].tenant_id);

		if (!t)
			continue; /* removed since the donor counted it */
		if (json_array_append_new(
			    ts,
			    json_pack("{s:s, s:I, s:I}", "name", t->name,
				      "used_bytes",
				      (json_int_t)reg_mul_sat(d->usage[i].slabs,
							      r->slab_bytes),
				      "sessions",
				      (json_int_t)d->usage[i].sessions))) {
			json_decref(ts);
			ts = NULL;
		}
	}
	if (!ts)
		return NULL;
	if (d->up && d->slabs_free > d->reserved_slabs)
		avail = d->slabs_free - d->reserved_slabs;
	snprintf(epoch, sizeof(epoch), "%016" PRIx64, d->epoch);
	return json_pack(
		"{s:I, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, "
		"s:I, s:I, s:I, s:I, s:o}",
		"id", (json_int_t)d->id, "name", d->name, "addr", d->addr,
		"state", memd_donor_state_name(reg_donor_state(d)), "reason",
		d->reason, "since_unix_ms", (json_int_t)d->since_unix_ms,
		"epoch", epoch, "slabs_total", (json_int_t)d->slabs_total,
		"slabs_free", (json_int_t)d->slabs_free, "slabs_leased",
		(json_int_t)d->slabs_leased, "capacity_bytes",
		(json_int_t)((uint64_t)d->slabs_total * r->slab_bytes),
		"free_bytes", (json_int_t)(avail * r->slab_bytes), "bytes_read",
		(json_int_t)d->bytes_read, "bytes_written",
		(json_int_t)d->bytes_written, "reports", (json_int_t)d->reports,
		"tenants", ts);
}

/* Replies {"donors": [...]} or {"tenants": [...]}: every one's info. */
static int admin_list(struct admin_ctx *x, bool donors)
{
	struct memd_registry *r = x->r;
	size_t n = donors ? r->ndonors : r->ntenants;
	json_t *a = json_array();

	for (size_t i = 0; i < n && a; i++)
		if (json_array_append_new(
			    a, donors ? donor_info_json(r, &r->donor[i])
				      : tenant_info_json(r, &r->tenant[i],
							 false))) {
			json_decref(a);
			a = NULL;
		}
	if (!a)
		return -ENOMEM;
	x->reply = json_pack("{s:o}", donors ? "donors" : "tenants", a);
	return x->reply ? 0 : -ENOMEM;
}

static int admin_donors(struct admin_ctx *x)
{
	return admin_list(x, true);
}

static int admin_tenants(struct admin_ctx *x)
{
	return admin_list(x, false);
}

/* The named tenant of the request, or NULL with -EINVAL / -ENOENT. */
static struct tenant *admin_tenant(struct admin_ctx *x, int *rc)
{
	char name[WIRE_NAME_MAX];
	struct tenant *t;

	*rc = reg_json_get_name(x->req, "name", name, "", x->err, x->errlen);
	if (*rc)
		return NULL;
	t = reg_tenant_by_name(x->r, name);
	if (!t) {
		set_err(x->err, x->errlen, "no tenant '%s'", name);
		*rc = -ENOENT;
	}
	return t;
}

static int admin_tenant_add(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct memd_registry *r = x->r;
	struct state_edit e = reg_state_now(r);
	uint8_t box[WIRE_BOX_MAX];
	struct tenant t = { 0 };
	json_t *kb;
	int n, rc;

	if ((rc = reg_json_get_name(x->req, "name", t.name, "", x->err,
				    x->errlen)) ||
	    (rc = reg_json_get_uint(x->req, "quota_bytes", 0, INT64_MAX,
				    &t.quota_bytes, "", x->err, x->errlen)))
		return rc;
	kb = json_object_get(x->req, "key_box");
	if (!kb) {
		set_err(x->err, x->errlen, "missing field 'key_box'");
		return -EINVAL;
	}
	n = json_is_string(kb)
		    ? auth_unhex(json_string_value(kb), box, sizeof(box))
		    : -EINVAL;
	if (n < 0) {
		set_err(x->err, x->errlen,
			"field 'key_box' is not hex of at most %d bytes",
			WIRE_BOX_MAX);
		return -EINVAL;
	}
	if (!x->session_key || auth_open(x->session_key, box, (size_t)n, t.key,
					 AUTH_KEY_LEN) != AUTH_KEY_LEN) {
		memset(&t, 0, sizeof(t));
		set_err(x->err, x->errlen,
			"field 'key_box' does not open to a %d-byte key with "
			"this session's key",
			AUTH_KEY_LEN);
		return -EINVAL;
	}
	if (reg_tenant_by_name(r, t.name)) {
		set_err(x->err, x->errlen, "tenant '%s' exists", t.name);
		rc = -EEXIST;
		goto out;
	}
	if (r->ntenants >= MAX_TENANTS || r->next_tenant_id == UINT32_MAX) {
		set_err(x->err, x->errlen,
			"the registry has %zu tenants, its most", r->ntenants);
		rc = -ENOSPC;
		goto out;
	}
	if (reg_grow((void **)&r->tenant, &r->tenant_cap, r->ntenants + 1,
		     sizeof(t))) {
		rc = -ENOMEM;
		goto out;
	}
	t.id = r->next_tenant_id;
	e.tenant_put = &t;
	e.next_tenant_id = r->next_tenant_id + 1;
	rc = reg_state_write_logged(r, &e, x->err, x->errlen);
	if (rc)
		goto out;
	/* A donor may have counted slabs under this id already (a report
	 * racing the add): the sum must hold from the start. */
	for (size_t i = 0; i < r->ndonors; i++)
		for (uint32_t k = 0; r->donor[i].up && k < r->donor[i].nusage;
		     k++)
			if (r->donor[i].usage[k].tenant_id == t.id)
				t.used_slabs += r->donor[i].usage[k].slabs;
	r->next_tenant_id++;
	r->tenant[r->ntenants++] = t;
	memd_log(LOG_NOTICE,
		 "registry: tenant added name=%s id=%u quota_bytes=%" PRIu64,
		 memd_log_quote(t.name, logq, sizeof(logq)), t.id,
		 t.quota_bytes);
	x->reply = json_pack("{s:I}", "id", (json_int_t)t.id);
	/* The tenant exists now; a reply we cannot build is still -ENOMEM. */
	rc = x->reply ? 0 : -ENOMEM;
out:
	memset(&t, 0, sizeof(t));
	return rc;
}

static int admin_tenant_remove(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct memd_registry *r = x->r;
	struct state_edit e = reg_state_now(r);
	char u[32], s[32];
	struct tenant *t;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	if (t->used_slabs || t->reserved_slabs) {
		memd_log_bytes(reg_mul_sat(t->used_slabs, r->slab_bytes), u,
			       sizeof(u));
		memd_log_bytes(reg_mul_sat(t->reserved_slabs, r->slab_bytes), s,
			       sizeof(s));
		set_err(x->err, x->errlen,
			"tenant '%s' still holds memory: used %s, reserved %s",
			t->name, u, s);
		return -EBUSY;
	}
	e.tenant_del = t->id;
	rc = reg_state_write_logged(r, &e, x->err, x->errlen);
	if (rc)
		return rc;
	memd_log(LOG_NOTICE, "registry: tenant removed name=%s id=%u",
		 memd_log_quote(t->name, logq, sizeof(logq)), t->id);
	/* keep the others in order of id (listings, registry.json) */
	memset(t, 0, sizeof(*t));
	memmove(t, t + 1,
		(size_t)(r->tenant + r->ntenants - (t + 1)) * sizeof(*t));
	memset(&r->tenant[--r->ntenants], 0, sizeof(*t));
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

static int admin_quota_get(struct admin_ctx *x)
{
	struct tenant *t;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	x->reply = json_pack(
		"{s:s, s:I, s:I, s:I}", "name", t->name, "quota_bytes",
		(json_int_t)t->quota_bytes, "used_bytes",
		(json_int_t)reg_mul_sat(t->used_slabs, x->r->slab_bytes),
		"reserved_bytes",
		(json_int_t)reg_mul_sat(t->reserved_slabs, x->r->slab_bytes));
	return x->reply ? 0 : -ENOMEM;
}

static int admin_quota_set(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = reg_state_now(x->r);
	struct tenant *t, nt;
	uint64_t q;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	rc = reg_json_get_uint(x->req, "quota_bytes", 0, INT64_MAX, &q, "",
			       x->err, x->errlen);
	if (rc)
		return rc;
	nt = *t;
	nt.quota_bytes = q;
	e.tenant_put = &nt;
	rc = reg_state_write_logged(x->r, &e, x->err, x->errlen);
	memset(&nt, 0, sizeof(nt));
	if (rc)
		return rc;
	memd_log(LOG_NOTICE,
		 "registry: quota set name=%s quota_bytes=%" PRIu64
		 " was=%" PRIu64,
		 memd_log_quote(t->name, logq, sizeof(logq)), q,
		 t->quota_bytes);
	t->quota_bytes = q;
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

/*
 * tenant-set {"name", "prefill_tokens_per_s"?, "bytes_per_token"?}: the
 * tenant's cost model for capacity reports (docs/capacity.md); 0 sets a
 * field back to the donors' memd.conf value. At least one field.
 */
static int admin_tenant_set(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = reg_state_now(x->r);
	struct tenant *t, nt;
	bool tps = json_object_get(x->req, "prefill_tokens_per_s") != NULL,
	     bpt = json_object_get(x->req, "bytes_per_token") != NULL;
	uint64_t v;
	int rc;

	t = admin_tenant(x, &rc);
	if (!t)
		return rc;
	if (!tps && !bpt) {
		set_err(x->err, x->errlen,
			"tenant-set: give prefill_tokens_per_s or "
			"bytes_per_token (0: the donors' memd.conf value)");
		return -EINVAL;
	}
	nt = *t;
	if (tps) {
		rc = reg_json_get_uint(x->req, "prefill_tokens_per_s", 0,
				       TENANT_TPS_MAX, &v, "", x->err,
				       x->errlen);
		if (rc)
			goto out;
		nt.prefill_tokens_per_s = (uint32_t)v;
	}
	if (bpt) {
		rc = reg_json_get_uint(x->req, "bytes_per_token", 0,
				       TENANT_BPT_MAX, &nt.bytes_per_token, "",
				       x->err, x->errlen);
		if (rc)
			goto out;
	}
	e.tenant_put = &nt;
	rc = reg_state_write_logged(x->r, &e, x->err, x->errlen);
	if (rc)
		goto out;
	memd_log(LOG_NOTICE,
		 "registry: tenant set name=%s prefill_tokens_per_s=%u "
		 "bytes_per_token=%" PRIu64,
		 memd_log_quote(t->name, logq, sizeof(logq)),
		 nt.prefill_tokens_per_s, nt.bytes_per_token);
	t->prefill_tokens_per_s = nt.prefill_tokens_per_s;
	t->bytes_per_token = nt.bytes_per_token;
	x->reply = json_object();
	rc = x->reply ? 0 : -ENOMEM;
out:
	sodium_memzero(&nt, sizeof(nt));
	return rc;
}

static int admin_drain(struct admin_ctx *x)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct state_edit e = reg_state_now(x->r);
	char name[WIRE_NAME_MAX];
	struct donor *d, nd;
	bool drain;
	int rc;

	if ((rc = reg_json_get_name(x->req, "donor", name, "", x->err,
				    x->errlen)) ||
	    (rc = reg_json_get_bool(x->req, "drain", &drain, "", x->err,
				    x->errlen)))
		return rc;
	d = reg_donor_by_name(x->r, name);
	if (!d) {
		set_err(x->err, x->errlen, "no donor '%s'", name);
		return -ENOENT;
	}
	if (d->draining != drain) {
		nd = *d;
		nd.draining = drain;
		e.donor_put = &nd;
		rc = reg_state_write_logged(x->r, &e, x->err, x->errlen);
		if (rc)
			return rc;
		d->draining = drain;
		memd_log(LOG_NOTICE, "registry: donor name=%s id=%u drain=%d",
			 memd_log_quote(d->name, logq, sizeof(logq)), d->id,
			 (int)drain);
		if (d->up)
			reg_donor_set_reason(d, drain ? "drained by an operator"
						      : "drain ended by an "
							"operator");
	}
	x->reply = json_object();
	return x->reply ? 0 : -ENOMEM;
}

struct admin_cmd {
	const char *name;
	int (*fn)(struct admin_ctx *x);
	const char *fields[4]; /* besides "cmd"; NULL-terminated */
};

static const struct admin_cmd admin_cmds[] = {
	{ "status", admin_status, { NULL } },
	{ "donors", admin_donors, { NULL } },
	{ "tenants", admin_tenants, { NULL } },
	{ "tenant-add",
	  admin_tenant_add,
	  { "name", "quota_bytes", "key_box" } },
	{ "tenant-remove", admin_tenant_remove, { "name", NULL } },
	{ "quota-get", admin_quota_get, { "name", NULL } },
	{ "quota-set", admin_quota_set, { "name", "quota_bytes", NULL } },
	{ "tenant-set",
	  admin_tenant_set,
	  { "name", "prefill_tokens_per_s", "bytes_per_token", NULL } },
	{ "drain", admin_drain, { "donor", "drain", NULL } },
};

static int admin_check_fields(json_t *req, const struct admin_cmd *c, char *err,
			      size_t errlen)
{
	const char *k;
	json_t *v;

	json_object_foreach(req, k, v)
	{
		bool known = !strcmp(k, "cmd");

		for (size_t i = 0; !known && i < 4 && c->fields[i]; i++)
			known = !strcmp(k, c->fields[i]);
		if (!known) {
			set_err(err, errlen, "%s: unknown field '%.64s'",
				c->name, k);
			return -EINVAL;
		}
	}
	return 0;
}

int memd_registry_admin(struct memd_registry *r, json_t *req,
			const uint8_t session_key[AUTH_KEY_LEN],
			uint64_t now_ms, uint64_t now_unix_ms, char *out,
			size_t cap, char *err, size_t errlen)
{
	struct admin_ctx x = {
		.r = r, .session_key = session_key, .err = err, .errlen = errlen
	};
	const struct admin_cmd *c = NULL;
	const char *cmd;
	char *text;
	size_t n;
	int rc;

	(void)now_unix_ms;
	if (!req || !out) {
		set_err(err, errlen, "no request");
		return -EINVAL;
	}
	x.req = req;
	if (!json_is_object(x.req)) {
		set_err(err, errlen, "not a JSON object");
		rc = -EINVAL;
		goto out;
	}
	cmd = json_string_value(json_object_get(x.req, "cmd"));
	if (!cmd) {
		set_err(err, errlen, "missing string field 'cmd'");
		rc = -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < sizeof(admin_cmds) / sizeof(admin_cmds[0]); i++)
		if (!strcmp(cmd, admin_cmds[i].name))
			c = &admin_cmds[i];
	if (!c) {
		set_err(err, errlen, "unknown cmd '%.64s'", cmd);
		rc = -EINVAL;
		goto out;
	}
	rc = admin_check_fields(x.req, c, err, errlen);
	if (rc)
		goto out;
	pthread_mutex_lock(&r->lock);
	if (reg_is_serving_locked(r, now_ms, err, errlen)) {
		reg_expire_locked(r, now_ms);
		rc = c->fn(&x);
	} else {
		rc = -EAGAIN;
	}
	pthread_mutex_unlock(&r->lock);
	if (rc) {
		if (rc == -ENOMEM)
			set_err(err, errlen, "registry: out of memory");
		goto out;
	}
	text = json_dumps(x.reply, JSON_COMPACT);
	if (!text) {
		set_err(err, errlen, "registry: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	n = strlen(text);
	if (n >= cap) {
		set_err(err, errlen, "reply of %zu bytes, room for %zu", n,
			cap ? cap - 1 : 0);
		rc = -ENOSPC;
	} else {
		memcpy(out, text, n + 1);
		rc = (int)n;
	}
	free(text);
out:
	json_decref(x.reply);
	return rc;
}
