// SPDX-License-Identifier: MIT
/*
 * memd/registry_state.c - the registry's durable state (registry.h,
 * docs/cluster.md): tenants with their keys, quotas and cost models,
 * donor identities with their drain flags, and the id counters, as one
 * JSON document, in STATE_DIR/registry.json or in etcd's PREFIX/state
 * (each tenant key sealed with a key derived from the cluster secret,
 * the whole document under a MAC). A change is a state_edit: the
 * document is written as the current state changed by it, and the
 * caller applies it in memory only once that write succeeded. Also
 * memd --migrate-registry and --seal-registry, and the checked readers
 * of JSON members that admin requests use too.
 *
 * Threads: memd-ctl writes (donor joins, admin requests) under r->lock;
 * memd-etcd reads PREFIX/state when it is elected (registry_leader.c),
 * under the lock; open reads registry.json before any thread runs.
 *
 * Invariants: registry.json always holds a whole document that callers
 * were told of (tmp, fsync, rename, fsync of the directory; a failed
 * directory fsync writes the old state back). An etcd write succeeds
 * only at the revision this registry read (else -EAGAIN and this leader
 * steps down); state without a MAC that verifies is never used.
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_VERSION 1
#define STATE_MAX_BYTES (64u << 20) /* a bigger registry.json is corrupt */

/* ---- durable state ----------------------------------------------------- */

static json_t *tenant_state_json(const struct tenant *t)
{
	char hex[2 * AUTH_KEY_LEN + 1];
	json_t *o;

	auth_hex(t->key, AUTH_KEY_LEN, hex);
	o = json_pack("{s:I, s:s, s:s, s:I}", "id", (json_int_t)t->id, "name",
		      t->name, "key", hex, "quota_bytes",
		      (json_int_t)t->quota_bytes);
	memset(hex, 0, sizeof(hex));
	/* only when set: a file without them is what older memds wrote */
	if (o && t->prefill_tokens_per_s &&
	    json_object_set_new(o, "prefill_tokens_per_s",
				json_integer(t->prefill_tokens_per_s))) {
		json_decref(o);
		return NULL;
	}
	if (o && t->bytes_per_token &&
	    json_object_set_new(o, "bytes_per_token",
				json_integer((json_int_t)t->bytes_per_token))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *donor_state_json(const struct donor *d)
{
	return json_pack("{s:I, s:s, s:b}", "id", (json_int_t)d->id, "name",
			 d->name, "draining", (int)d->draining);
}

static json_t *state_json_locked(struct memd_registry *r,
				 const struct state_edit *e)
{
	json_t *doc, *ts, *ds;
	bool put = false;
	int rc = 0;

	doc = json_pack("{s:i, s:I, s:I, s:[], s:[]}", "version", STATE_VERSION,
			"next_tenant_id", (json_int_t)e->next_tenant_id,
			"next_donor_id", (json_int_t)e->next_donor_id,
			"tenants", "donors");
	if (!doc)
		return NULL;
	/* only once there is one: a file without it is what older memds
	 * wrote, and reads as 0 */
	if (e->membership) {
		json_t *ms = json_array();

		for (size_t i = 0; ms && i < e->nmembers; i++)
			if (json_array_append_new(
				    ms, json_integer(e->members[i]))) {
				json_decref(ms);
				ms = NULL;
			}
		if (!ms || json_object_set_new(doc, "members", ms) ||
		    json_object_set_new(
			    doc, "membership",
			    json_integer((json_int_t)e->membership))) {
			json_decref(doc);
			return NULL;
		}
	}
	ts = json_object_get(doc, "tenants");
	ds = json_object_get(doc, "donors");
	for (size_t i = 0; i < r->ntenants && !rc; i++) {
		const struct tenant *t = &r->tenant[i];

		if (t->id == e->tenant_del)
			continue;
		if (e->tenant_put && e->tenant_put->id == t->id) {
			t = e->tenant_put;
			put = true;
		}
		rc = json_array_append_new(ts, tenant_state_json(t));
	}
	if (!rc && e->tenant_put && !put)
		rc = json_array_append_new(ts,
					   tenant_state_json(e->tenant_put));
	put = false;
	for (size_t i = 0; i < r->ndonors && !rc; i++) {
		const struct donor *d = &r->donor[i];

		if (e->donor_put && e->donor_put->id == d->id) {
			d = e->donor_put;
			put = true;
		}
		rc = json_array_append_new(ds, donor_state_json(d));
	}
	if (!rc && e->donor_put && !put)
		rc = json_array_append_new(ds, donor_state_json(e->donor_put));
	if (rc) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

struct state_edit reg_state_now(const struct memd_registry *r)
{
	struct state_edit e = { .next_tenant_id = r->next_tenant_id,
				.next_donor_id = r->next_donor_id,
				.membership = r->membership,
				.members = r->pub,
				.nmembers = r->pub_valid ? r->npub : 0 };
	return e;
}

/*
 * Writes the durable state as the current one changed by e: the whole
 * file to registry.json.tmp (0600), fsync, rename over registry.json,
 * fsync of the directory. 0, or -EIO (-ENOMEM) with err naming the file
 * and the step that failed; *renamed says whether the new file had
 * replaced registry.json before the failure (only the directory fsync
 * comes after that).
 */
static int state_file_put(struct memd_registry *r, const struct state_edit *e,
			  bool *renamed, char *err, size_t errlen)
{
	const char *step = "encode";
	json_t *doc = state_json_locked(r, e);
	char *text = NULL;
	int fd = -1, dfd = -1, rc = 0;

	*renamed = false;
	if (!doc || !(text = json_dumps(doc, JSON_INDENT(2)))) {
		json_decref(doc);
		set_err(err, errlen, "%s: out of memory", r->path);
		return -ENOMEM;
	}
	json_decref(doc);
	fd = open(r->tmp_path,
		  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		step = "open";
		goto fail;
	}
	step = "write";
	if (fchmod(fd, 0600) < 0 || (rc = write_all(fd, text, strlen(text))) ||
	    (rc = write_all(fd, "\n", 1))) {
		rc = rc ? rc : -errno;
		goto fail;
	}
	step = "fsync";
	if (fsync(fd) < 0) {
		rc = -errno;
		goto fail;
	}
	step = "close";
	rc = close(fd);
	fd = -1;
	if (rc < 0) {
		rc = -errno;
		goto fail;
	}
	step = "rename";
	if (rename(r->tmp_path, r->path) < 0) {
		rc = -errno;
		goto fail;
	}
	*renamed = true;
	step = "fsync of the directory";
	dfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		rc = -errno;
		if (dfd >= 0)
			close(dfd);
		set_err(err, errlen, "%s: %s: %s", r->dir, step, strerror(-rc));
		memset(text, 0, strlen(text));
		free(text);
		return -EIO;
	}
	close(dfd);
	memset(text, 0, strlen(text)); /* it holds tenant keys */
	free(text);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(r->tmp_path);
	set_err(err, errlen, "%s: %s: %s", r->tmp_path, step, strerror(-rc));
	memset(text, 0, strlen(text));
	free(text);
	return -EIO;
}

/*
 * Writes the durable state as the current one changed by e. 0: written
 * and synced, apply e. -EIO (-ENOMEM) with err: nothing may be applied,
 * and registry.json holds what it held before, so that a restart reads
 * what callers were told. When only the directory fsync failed, the new
 * file is already in place: the old state is written back over it (its
 * own directory fsync may fail too; the file then holds the old state,
 * which is what callers see). Should even that write fail before its
 * rename, the file keeps the new state: e is applied (0), with an error
 * logged that a crash may lose it.
 */
static int etcd_state_put_locked(struct memd_registry *r,
				 const struct state_edit *e, char *err,
				 size_t errlen);

static int state_write_locked(struct memd_registry *r,
			      const struct state_edit *e, char *err,
			      size_t errlen)
{
	struct state_edit now = reg_state_now(r);
	char err2[256];
	bool renamed, back;
	int rc;

	if (r->etcd)
		return etcd_state_put_locked(r, e, err, errlen);
	rc = state_file_put(r, e, &renamed, err, errlen);

	if (!rc || !renamed)
		return rc;
	if (state_file_put(r, &now, &back, err2, sizeof(err2)) && !back) {
		memd_log(LOG_ERR,
			 "registry: the change is applied but may not survive "
			 "a crash: %s; undoing it failed too: %s",
			 err && errlen ? err : "", err2);
		return 0;
	}
	memd_log(LOG_WARNING,
		 "registry: %s: the change was undone (registry.json holds "
		 "the state before it)",
		 err && errlen ? err : "");
	return -EIO;
}

int reg_state_write_logged(struct memd_registry *r, const struct state_edit *e,
			   char *err, size_t errlen)
{
	int rc = state_write_locked(r, e, err, errlen);

	if (rc)
		memd_log(LOG_ERR, "registry: state not saved: %s",
			 err && errlen ? err : "");
	return rc;
}

/*
 * o's member key where it is there and of type (JSON_TRUE: true or
 * false), what naming the type in err ("an integer"); NULL with err where
 * not.
 */
static json_t *json_member(json_t *o, const char *key, json_type type,
			   const char *what, const char *where, char *err,
			   size_t errlen)
{
	json_t *x = json_object_get(o, key);

	if (!x) {
		set_err(err, errlen, "%smissing field '%s'", where, key);
		return NULL;
	}
	if (json_typeof(x) != type &&
	    !(type == JSON_TRUE && json_typeof(x) == JSON_FALSE)) {
		set_err(err, errlen, "%sfield '%s' is not %s", where, key,
			what);
		return NULL;
	}
	return x;
}

/* Reads an integer member in [min, max]. 0, or -EINVAL with err. */
int reg_json_get_uint(json_t *o, const char *key, uint64_t min, uint64_t max,
		      uint64_t *v, const char *where, char *err, size_t errlen)
{
	json_t *x = json_member(o, key, JSON_INTEGER, "an integer", where, err,
				errlen);
	json_int_t i;

	if (!x)
		return -EINVAL;
	i = json_integer_value(x);
	if (i < 0 || (uint64_t)i < min || (uint64_t)i > max) {
		set_err(err, errlen,
			"%sfield '%s' is %lld, not %" PRIu64 "..%" PRIu64,
			where, key, (long long)i, min, max);
		return -EINVAL;
	}
	*v = (uint64_t)i;
	return 0;
}

int reg_json_get_name(json_t *o, const char *key, char out[WIRE_NAME_MAX],
		      const char *where, char *err, size_t errlen)
{
	json_t *x = json_member(o, key, JSON_STRING, "a string", where, err,
				errlen);
	const char *s;

	if (!x)
		return -EINVAL;
	s = json_string_value(x);
	if (strlen(s) != json_string_length(x) || !wire_name_is_valid(s)) {
		set_err(err, errlen,
			"%sfield '%s': '%.64s' is not a name "
			"([A-Za-z0-9_.-], 1 to %d characters)",
			where, key, s, WIRE_NAME_MAX - 1);
		return -EINVAL;
	}
	strcpy(out, s);
	return 0;
}

int reg_json_get_bool(json_t *o, const char *key, bool *v, const char *where,
		      char *err, size_t errlen)
{
	json_t *x = json_member(o, key, JSON_TRUE, "true or false", where, err,
				errlen);

	if (!x)
		return -EINVAL;
	*v = json_is_true(x);
	return 0;
}

/* Forgets the membership and what was published and shown of it. */
static void membership_forget(struct memd_registry *r)
{
	r->membership = 0;
	r->npub = 0;
	r->pub_valid = r->pub_restored = false;
	r->restored_until_ms = 0;
	r->shown = 0;
	r->nshown = 0;
	r->members_dirty = false;
}

/* Every member of o is one of the NULL-terminated keys. */
static int json_only(json_t *o, const char *const *keys, const char *where,
		     char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		size_t i;

		for (i = 0; keys[i] && strcmp(keys[i], k); i++)
			;
		if (!keys[i]) {
			set_err(err, errlen, "%sunknown field '%.64s'", where,
				k);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * What every row of a table (table[idx]) starts with: where for its
 * errors ("tenants[3]: "), then o an object with no member but keys.
 * 0, or -EINVAL with err.
 */
static int load_row(json_t *o, const char *const *keys, const char *table,
		    size_t idx, char where[48], char *err, size_t errlen)
{
	snprintf(where, 48, "%s[%zu]: ", table, idx);
	if (!json_is_object(o)) {
		set_err(err, errlen, "%snot an object", where);
		return -EINVAL;
	}
	return json_only(o, keys, where, err, errlen);
}

/*
 * Room in a table (*arr, *cap) of n rows of elem bytes for one more row,
 * id and name, no more than max (what: "tenants"); twice: the table has
 * that id or name already. 0, or -EINVAL or -ENOMEM with err.
 */
static int load_room(void **arr, size_t *cap, size_t n, size_t max, size_t elem,
		     const char *what, bool twice, const char *where,
		     uint32_t id, const char *name, char *err, size_t errlen)
{
	if (twice) {
		set_err(err, errlen, "%sid %u or name '%s' appears twice",
			where, id, name);
		return -EINVAL;
	}
	if (n >= max) {
		set_err(err, errlen, "more than %zu %s", max, what);
		return -EINVAL;
	}
	if (reg_grow(arr, cap, n + 1, elem)) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static int load_tenant(struct memd_registry *r, json_t *o, size_t idx,
		       char *err, size_t errlen)
{
	static const char *const keys[] = { "id",
					    "name",
					    "key",
					    "quota_bytes",
					    "prefill_tokens_per_s",
					    "bytes_per_token",
					    NULL };
	struct tenant t = { 0 };
	char where[48];
	json_t *k;
	int rc;
	uint64_t v;

	if (load_row(o, keys, "tenants", idx, where, err, errlen) ||
	    reg_json_get_uint(o, "id", 1, r->next_tenant_id - 1, &v, where, err,
			      errlen))
		return -EINVAL;
	t.id = (uint32_t)v;
	if (reg_json_get_name(o, "name", t.name, where, err, errlen) ||
	    reg_json_get_uint(o, "quota_bytes", 0, INT64_MAX, &t.quota_bytes,
			      where, err, errlen))
		return -EINVAL;
	if (json_object_get(o, "prefill_tokens_per_s")) {
		if (reg_json_get_uint(o, "prefill_tokens_per_s", 1,
				      TENANT_TPS_MAX, &v, where, err, errlen))
			return -EINVAL;
		t.prefill_tokens_per_s = (uint32_t)v;
	}
	if (json_object_get(o, "bytes_per_token") &&
	    reg_json_get_uint(o, "bytes_per_token", 1, TENANT_BPT_MAX,
			      &t.bytes_per_token, where, err, errlen))
		return -EINVAL;
	k = json_object_get(o, "key");
	if (!json_is_string(k) || json_string_length(k) != 2 * AUTH_KEY_LEN ||
	    auth_unhex(json_string_value(k), t.key, AUTH_KEY_LEN) !=
		    AUTH_KEY_LEN) {
		set_err(err, errlen, "%sfield 'key' is not %d hex digits",
			where, 2 * AUTH_KEY_LEN);
		return -EINVAL;
	}
	rc = load_room((void **)&r->tenant, &r->tenant_cap, r->ntenants,
		       MAX_TENANTS, sizeof(t), "tenants",
		       reg_tenant_by_id(r, t.id) ||
			       reg_tenant_by_name(r, t.name),
		       where, t.id, t.name, err, errlen);
	if (rc)
		return rc;
	r->tenant[r->ntenants++] = t;
	memset(&t, 0, sizeof(t));
	return 0;
}

static int load_donor(struct memd_registry *r, json_t *o, size_t idx, char *err,
		      size_t errlen)
{
	static const char *const keys[] = { "id", "name", "draining", NULL };
	struct donor d = { 0 };
	char where[48];
	uint64_t v;
	int rc;

	if (load_row(o, keys, "donors", idx, where, err, errlen) ||
	    reg_json_get_uint(o, "id", 1, r->next_donor_id - 1, &v, where, err,
			      errlen) ||
	    reg_json_get_name(o, "name", d.name, where, err, errlen) ||
	    reg_json_get_bool(o, "draining", &d.draining, where, err, errlen))
		return -EINVAL;
	d.id = (uint32_t)v;
	rc = load_room((void **)&r->donor, &r->donor_cap, r->ndonors,
		       MAX_DONORS, sizeof(d), "donors",
		       reg_donor_by_id(r, d.id) || reg_donor_by_name(r, d.name),
		       where, d.id, d.name, err, errlen);
	if (rc)
		return rc;
	snprintf(d.reason, sizeof(d.reason),
		 "not joined since the registry started");
	d.since_unix_ms = r->open_unix_ms;
	r->donor[r->ndonors++] = d;
	return 0;
}

static int load_doc(struct memd_registry *r, json_t *doc, char *err,
		    size_t errlen)
{
	static const char *const keys[] = { "version",	     "next_tenant_id",
					    "next_donor_id", "tenants",
					    "donors",	     "membership",
					    "members",	     NULL };
	json_t *ts, *ds, *x;
	uint64_t v;
	size_t i;
	int rc;

	if (!json_is_object(doc)) {
		set_err(err, errlen, "not a JSON object");
		return -EINVAL;
	}
	if (json_only(doc, keys, "", err, errlen))
		return -EINVAL;
	x = json_object_get(doc, "version");
	if (!json_is_integer(x) || json_integer_value(x) != STATE_VERSION) {
		set_err(err, errlen, "version is not %d (this memd reads %d)",
			STATE_VERSION, STATE_VERSION);
		return -EINVAL;
	}
	if (reg_json_get_uint(doc, "next_tenant_id", 1, UINT32_MAX, &v, "", err,
			      errlen))
		return -EINVAL;
	r->next_tenant_id = (uint32_t)v;
	if (reg_json_get_uint(doc, "next_donor_id", 1, UINT32_MAX, &v, "", err,
			      errlen))
		return -EINVAL;
	r->next_donor_id = (uint32_t)v;
	membership_forget(r);
	if (json_object_get(doc, "membership")) {
		json_t *ms = json_object_get(doc, "members");
		uint32_t *ids;

		if (reg_json_get_uint(doc, "membership", 1, INT64_MAX, &v, "",
				      err, errlen))
			return -EINVAL;
		r->membership = v;
		if (!json_is_array(ms) || json_array_size(ms) > MAX_DONORS) {
			set_err(err, errlen,
				"'members' is not an array of at most %d donor "
				"ids",
				MAX_DONORS);
			return -EINVAL;
		}
		ids = malloc((json_array_size(ms) + 1) * sizeof(*ids));
		if (!ids) {
			set_err(err, errlen, "out of memory");
			return -ENOMEM;
		}
		json_array_foreach(ms, i, x)
		{
			json_int_t id =
				json_is_integer(x) ? json_integer_value(x) : 0;

			/* ascending: the order the registry writes */
			if (id < 1 || id >= r->next_donor_id ||
			    (i && (uint32_t)id <= ids[i - 1])) {
				set_err(err, errlen,
					"members[%zu]: not a donor id above "
					"the one before it",
					i);
				free(ids);
				return -EINVAL;
			}
			ids[i] = (uint32_t)id;
		}
		free(r->pub);
		r->pub = ids;
		r->npub = json_array_size(ms);
		r->pub_valid = r->pub_restored = true;
	} else if (json_object_get(doc, "members")) {
		set_err(err, errlen, "'members' without 'membership'");
		return -EINVAL;
	}
	ts = json_object_get(doc, "tenants");
	ds = json_object_get(doc, "donors");
	if (!json_is_array(ts) || !json_is_array(ds)) {
		set_err(err, errlen, "'tenants' or 'donors' is not an array");
		return -EINVAL;
	}
	json_array_foreach(ts, i, x)
	{
		if ((rc = load_tenant(r, x, i, err, errlen)))
			return rc;
	}
	json_array_foreach(ds, i, x)
	{
		if ((rc = load_donor(r, x, i, err, errlen)))
			return rc;
	}
	return 0;
}

/* Loads registry.json; a missing one is an empty registry. */
int reg_state_load(struct memd_registry *r, char *err, size_t errlen)
{
	char msg[200];
	json_error_t je;
	struct stat st;
	json_t *doc;
	char *buf;
	size_t got = 0;
	int fd, rc;

	fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		rc = -errno;
		set_err(err, errlen, "%s: %s", r->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > STATE_MAX_BYTES) {
		close(fd);
		set_err(err, errlen,
			"%s: not a regular file of at most %u bytes", r->path,
			STATE_MAX_BYTES);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		set_err(err, errlen, "%s: out of memory", r->path);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			close(fd);
			free(buf);
			set_err(err, errlen, "%s: read: %s", r->path,
				strerror(-rc));
			return rc;
		}
		got += (size_t)n;
	}
	close(fd);
	doc = json_loadb(buf, got, JSON_REJECT_DUPLICATES, &je);
	memset(buf, 0, got);
	free(buf);
	if (!doc) {
		set_err(err, errlen, "%s: corrupt: line %d: %s", r->path,
			je.line, je.text);
		return -EINVAL;
	}
	rc = load_doc(r, doc, msg, sizeof(msg));
	json_decref(doc);
	if (rc) {
		set_err(err, errlen, "%s: %s%s", r->path,
			rc == -EINVAL ? "corrupt: " : "", msg);
		return rc;
	}
	return 0;
}

/* ---- the etcd backend -------------------------------------------------- */

/*
 * PREFIX/state holds what registry.json holds, but each tenant's "key"
 * is "key_sealed": hex of auth_seal(seal, key), the seal key derived from
 * the cluster secret (docs/cluster.md, "What etcd learns"). seal true:
 * key -> key_sealed; false: back. 0, or -EINVAL with err.
 */
static int doc_seal(struct memd_registry *r, json_t *doc, bool seal, char *err,
		    size_t errlen)
{
	json_t *ts = json_object_get(doc, "tenants"), *t;
	size_t i;

	json_array_foreach(ts, i, t)
	{
		uint8_t key[AUTH_KEY_LEN],
			box[AUTH_SEAL_OVERHEAD + AUTH_KEY_LEN];
		char hex[2 * sizeof(box) + 1];
		json_t *x = json_object_get(t, seal ? "key" : "key_sealed");
		int n = -EINVAL;

		if (json_is_string(x) && seal)
			n = auth_unhex(json_string_value(x), key, sizeof(key));
		else if (json_is_string(x))
			n = auth_unhex(json_string_value(x), box, sizeof(box));
		if (n == (seal ? AUTH_KEY_LEN : (int)sizeof(box))) {
			if (seal) {
				n = auth_seal(r->seal, key, sizeof(key), box,
					      sizeof(box));
				auth_hex(box, sizeof(box), hex);
			} else {
				n = auth_open(r->seal, box, sizeof(box), key,
					      sizeof(key));
				auth_hex(key, sizeof(key), hex);
			}
		}
		if (n < 0 ||
		    json_object_set_new(t, seal ? "key_sealed" : "key",
					json_string(hex)) ||
		    json_object_del(t, seal ? "key" : "key_sealed")) {
			sodium_memzero(key, sizeof(key));
			sodium_memzero(hex, sizeof(hex));
			set_err(err, errlen, "tenants[%zu]: %s", i,
				seal ? "cannot seal its key"
				     : "'key_sealed' does not open with this "
				       "cluster's secret");
			return -EINVAL;
		}
		sodium_memzero(key, sizeof(key));
		sodium_memzero(hex, sizeof(hex));
	}
	return 0;
}

/*
 * The MAC of PREFIX/state (docs/cluster.md, "What etcd learns"): BLAKE2b
 * keyed with the state MAC key (derived from the cluster secret) over
 * "tidepool registry state mac v1", the length (u32, little endian) and
 * bytes of the etcd key, and the document without "mac" as jansson
 * writes it compact with sorted keys (tenant keys sealed). So it covers
 * every tenant's id, name, quota, cost model and sealed key together,
 * the donors, the counters, and which pool (prefix) it is for: a writer
 * to etcd cannot move a sealed key to another tenant, change an id or a
 * quota, or copy another prefix's state. 0, or -ENOMEM.
 */
static int doc_mac(const struct memd_registry *r, json_t *doc,
		   uint8_t out[AUTH_KEY_LEN])
{
	static const char label[] = "tidepool registry state mac v1";
	crypto_generichash_state st;
	uint32_t klen = (uint32_t)strlen(r->state_key);
	uint8_t le[4] = { (uint8_t)klen, (uint8_t)(klen >> 8),
			  (uint8_t)(klen >> 16), (uint8_t)(klen >> 24) };
	char *canon = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);

	if (!canon)
		return -ENOMEM;
	crypto_generichash_init(&st, r->mac, sizeof(r->mac), AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)label,
				  sizeof(label) - 1);
	crypto_generichash_update(&st, le, sizeof(le));
	crypto_generichash_update(&st, (const uint8_t *)r->state_key, klen);
	crypto_generichash_update(&st, (const uint8_t *)canon, strlen(canon));
	crypto_generichash_final(&st, out, AUTH_KEY_LEN);
	free(canon);
	return 0;
}

/*
 * Checks and removes doc's "mac". 0: it verifies; -ENOENT: there is none
 * (state of a memd before the MAC, or written by hand); -EPERM: it does
 * not verify (or is malformed), err says so.
 */
static int doc_verify(const struct memd_registry *r, json_t *doc, char *err,
		      size_t errlen)
{
	uint8_t got[AUTH_KEY_LEN], want[AUTH_KEY_LEN];
	json_t *x = json_object_get(doc, "mac");
	int bad;

	if (!x)
		return -ENOENT;
	bad = !json_is_string(x) || auth_unhex(json_string_value(x), got,
					       sizeof(got)) != (int)sizeof(got);
	json_object_del(doc, "mac");
	if (bad) {
		set_err(err, errlen, "its \"mac\" is not %d hex digits",
			2 * AUTH_KEY_LEN);
		return -EPERM;
	}
	if (doc_mac(r, doc, want)) {
		set_err(err, errlen, "out of memory");
		return -EPERM;
	}
	if (sodium_memcmp(got, want, sizeof(got))) {
		set_err(err, errlen,
			"it does not verify with this cluster's secret: it "
			"was changed outside the registries (a tenant's "
			"sealed key, id or quota edited, records swapped, "
			"another prefix's state copied) or written with "
			"another cluster secret; never used. Restore a good "
			"revision (etcdctl get --rev=N %s, then put it back)",
			r->state_key);
		return -EPERM;
	}
	return 0;
}
/* The state as the current one changed by e, written to etcd if it is
 * still at the revision we read. */
static int etcd_state_put_locked(struct memd_registry *r,
				 const struct state_edit *e, char *err,
				 size_t errlen)
{
	json_t *doc = state_json_locked(r, e);
	char *text = NULL;
	int64_t rev = 0;
	int rc;

	uint8_t mac[AUTH_KEY_LEN];
	char hex[2 * AUTH_KEY_LEN + 1];

	if (!doc || doc_seal(r, doc, true, err, errlen) ||
	    doc_mac(r, doc, mac) ||
	    (auth_hex(mac, sizeof(mac), hex),
	     json_object_set_new(doc, "mac", json_string(hex))) ||
	    !(text = json_dumps(doc, JSON_COMPACT))) {
		json_decref(doc);
		set_err(err, errlen, "registry: cannot encode the state");
		return -ENOMEM;
	}
	json_decref(doc);
	rc = memd_etcd_put_if(r->etcd, r->state_key, text, strlen(text),
			      r->state_rev, 0, &rev, err, errlen);
	sodium_memzero(text, strlen(text));
	free(text);
	if (rc == -ECANCELED) {
		/* Another writer: we were not the only leader, or the state
		 * was migrated in. Stop serving until we read it again. */
		if (r->leader)
			memd_log(LOG_ERR,
				 "registry: %s: stepping down to read it "
				 "again",
				 err);
		r->leader = false;
		r->resign = true; /* its lease still holds PREFIX/leader */
		r->serve_until_ms = 0;
		set_err(err, errlen,
			"registry: the state in etcd (%s) changed under this "
			"registry; nothing was changed: retry",
			r->state_key);
		return -EAGAIN;
	}
	if (rc) {
		reg_etcd_note_locked(r, err);
		return rc == -ENOMEM ? rc : -EIO;
	}
	r->state_rev = rev;
	return 0;
}

/* Forgets every tenant, donor and grant (before a fresh read). */
static void registry_reset_locked(struct memd_registry *r)
{
	for (size_t i = 0; i < r->ndonors; i++)
		free(r->donor[i].usage);
	if (r->tenant)
		sodium_memzero(r->tenant, r->tenant_cap * sizeof(*r->tenant));
	r->ntenants = r->ndonors = r->ngrants = 0;
	r->next_tenant_id = r->next_donor_id = 1;
	membership_forget(r);
	r->grant_next_deadline_ms = UINT64_MAX;
	r->state_rev = 0;
}

/* Reads PREFIX/state afresh (none: an empty registry). 0 or -errno with
 * err; on failure the registry is empty. State without a MAC is refused
 * (-EPERM) unless *unsigned_ok, which then says whether it had none
 * (memd --seal-registry). */
int reg_etcd_state_load_locked(struct memd_registry *r, char *err,
			       size_t errlen, bool *unsigned_ok)
{
	char msg[600];
	json_error_t je;
	json_t *doc;
	char *text;
	size_t len;
	int64_t rev;
	int rc;

	registry_reset_locked(r);
	rc = memd_etcd_get(r->etcd, r->state_key, &text, &len, &rev, NULL, err,
			   errlen);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	sodium_memzero(text, len);
	free(text);
	rc = doc ? doc_verify(r, doc, msg, sizeof(msg)) : -EINVAL;
	if (rc == -ENOENT && unsigned_ok && *unsigned_ok) {
		rc = 0;
	} else if (rc == -ENOENT) {
		json_decref(doc);
		registry_reset_locked(r);
		set_err(err, errlen,
			"etcd %s (revision %" PRId64 "): not authenticated "
			"(no \"mac\": written by a memd before the state was "
			"authenticated, or by hand); never used. Once every "
			"registry runs this release, check it and run `memd "
			"--seal-registry` with this pool's config "
			"(docs/cluster.md, \"Migration\")",
			r->state_key, rev);
		return -EPERM;
	} else if (unsigned_ok) {
		*unsigned_ok = false;
	}
	if (rc == -EPERM) {
		json_decref(doc);
		registry_reset_locked(r);
		set_err(err, errlen, "etcd %s (revision %" PRId64 "): %s",
			r->state_key, rev, msg);
		return -EPERM;
	}
	if (!rc)
		rc = doc_seal(r, doc, false, msg, sizeof(msg));
	if (!doc)
		snprintf(msg, sizeof(msg), "line %d: %s", je.line, je.text);
	if (!rc)
		rc = load_doc(r, doc, msg, sizeof(msg));
	json_decref(doc);
	if (rc) {
		registry_reset_locked(r);
		set_err(err, errlen, "etcd %s: corrupt: %s", r->state_key, msg);
		return -EINVAL;
	}
	r->state_rev = rev;
	return 0;
}

int memd_registry_migrate(const struct memd_registry_opts *o, size_t *ntenants,
			  size_t *ndonors, char *err, size_t errlen)
{
	struct memd_registry_opts fo;
	struct memd_registry *r;
	struct state_edit e;
	int rc;

	if (!o || !o->etcd || !o->state_dir) {
		set_err(err, errlen, "migrate: needs state_dir and etcd");
		return -EINVAL;
	}
	fo = *o;
	fo.etcd = NULL;
	rc = memd_registry_open(&fo, 0, &r, err, errlen);
	if (rc)
		return rc;
	rc = reg_etcd_attach(r, o, err, errlen);
	if (!rc) {
		pthread_mutex_lock(&r->lock);
		e = reg_state_now(r);
		r->state_rev = 0; /* create only */
		rc = etcd_state_put_locked(r, &e, err, errlen);
		*ntenants = r->ntenants;
		*ndonors = r->ndonors;
		pthread_mutex_unlock(&r->lock);
		if (rc == -EAGAIN) {
			set_err(err, errlen,
				"migrate: etcd already holds registry state at "
				"%s: not overwritten",
				r->state_key);
			rc = -EEXIST;
		}
	}
	memd_registry_close(r);
	return rc;
}

int memd_registry_seal_etcd(const struct memd_registry_opts *o, bool *already,
			    char **listing, char *err, size_t errlen)
{
	struct memd_registry *r;
	struct state_edit e;
	bool unsigned_ok = true;
	char *out = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	*already = false;
	*listing = NULL;
	if (!o || !o->etcd) {
		set_err(err, errlen, "seal: needs registry = etcd");
		return -EINVAL;
	}
	rc = memd_registry_open(o, 0, &r, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->lock);
	rc = reg_etcd_state_load_locked(r, err, errlen, &unsigned_ok);
	if (!rc && !r->state_rev) {
		set_err(err, errlen, "etcd holds no registry state at %s",
			r->state_key);
		rc = -ENOENT;
	}
	if (!rc && !unsigned_ok) {
		*already = true;
	} else if (!rc) {
		e = reg_state_now(r);
		rc = etcd_state_put_locked(r, &e, err, errlen);
		if (rc == -EAGAIN)
			set_err(err, errlen,
				"%s changed while it was being sealed: "
				"nothing written; run this again",
				r->state_key);
	}
	if (!rc && (f = open_memstream(&out, &len))) {
		for (size_t i = 0; i < r->ntenants; i++)
			fprintf(f,
				"  tenant %s id %u quota_bytes %" PRIu64 "\n",
				r->tenant[i].name, r->tenant[i].id,
				r->tenant[i].quota_bytes);
		for (size_t i = 0; i < r->ndonors; i++)
			fprintf(f, "  donor %s id %u%s\n", r->donor[i].name,
				r->donor[i].id,
				r->donor[i].draining ? " draining" : "");
		fclose(f);
		*listing = out;
	}
	pthread_mutex_unlock(&r->lock);
	memd_registry_close(r);
	return rc;
}
