// SPDX-License-Identifier: MIT
/*
 * tests/test_registry.c - the registry's directory in-process: tenants and
 * quotas (persisted in a temporary state directory), donors and their
 * states, placement, reservations, tickets and the admin requests. Clocks
 * are explicit: nothing here depends on timing.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "memd/registry.h"
#include "tests/testutil.h"

#define MiB (1024ull * 1024ull)
#define SLAB MiB
#define REPORT_MS 1000u
#define TICKET_TTL_MS 30000u
#define PASS_TTL_MS 600000u
#define T0 1000000ull	    /* monotonic ms at the start of a test */
#define U0 1700000000000ull /* unix ms */
/* Member k of JSON object o, as an integer or a string. */
#define JINT(o, k) json_integer_value(json_object_get(o, k))
#define JSTR(o, k) json_string_value(json_object_get(o, k))

static char dir[64];
static char path[128];
static struct auth_cluster_keys keys;
static uint8_t session_key[AUTH_KEY_LEN];
static struct memd_registry *r;
static char err[256];
static char out[65536];

static struct memd_registry_opts opts(void)
{
	struct memd_registry_opts o = { .state_dir = dir,
					.slab_bytes = SLAB,
					.report_ms = REPORT_MS,
					.ticket_ttl_ms = TICKET_TTL_MS,
					.pass_ttl_ms = PASS_TTL_MS,
					.keys = &keys };
	return o;
}

static void reg_open(void)
{
	struct memd_registry_opts o = opts();
	int rc = memd_registry_open(&o, T0, &r, err, sizeof(err));

	ck_assert_msg(rc == 0, "open: %d %s", rc, err);
}

static void reg_reopen(void)
{
	memd_registry_close(r);
	r = NULL;
	reg_open();
}

static void setup(void)
{
	ck_assert_int_eq(auth_init(), 0);
	ck_assert_int_eq(tu_scratch_dir(dir, sizeof(dir), "registry"), 0);
	snprintf(path, sizeof(path), "%s/registry.json", dir);
	for (int i = 0; i < AUTH_KEY_LEN; i++) {
		keys.admin[i] = (uint8_t)(0x10 + i);
		keys.donor[i] = (uint8_t)(0x40 + i);
		keys.ticket[i] = (uint8_t)(0x80 + i);
		keys.pass[i] = (uint8_t)(0xc0 + i);
		session_key[i] = (uint8_t)(0xa5 ^ i);
	}
	reg_open();
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void teardown(void)
{
	memd_registry_close(r);
	r = NULL;
	chmod(dir, 0700);
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- helpers ------------------------------------------------------------ */

/* A tenant's key, derived from its name. */
static void tenant_key_of(const char *name, uint8_t key[AUTH_KEY_LEN])
{
	uint8_t seed = 0;

	for (const char *p = name; *p; p++)
		seed = (uint8_t)(seed * 31 + (uint8_t)*p);
	for (int i = 0; i < AUTH_KEY_LEN; i++)
		key[i] = (uint8_t)(seed + 7 * i);
}

/* As memd's server does: parse (duplicate keys refused), then ask. */
static int admin_cap(const char *json, size_t cap)
{
	json_t *req = json_loads(json, JSON_REJECT_DUPLICATES, NULL);
	int rc;

	err[0] = '\0';
	rc = memd_registry_admin(r, req, session_key, T0, U0, out, cap, err,
				 sizeof(err));
	json_decref(req);
	return rc;
}

static int admin(const char *json)
{
	return admin_cap(json, sizeof(out));
}

static int admin_f(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int admin_f(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return admin(buf);
}

static int tenant_add_rc(const char *name, uint64_t quota)
{
	uint8_t key[AUTH_KEY_LEN], box[AUTH_SEAL_OVERHEAD + AUTH_KEY_LEN];
	char hex[2 * sizeof(box) + 1];

	tenant_key_of(name, key);
	ck_assert_int_eq(
		auth_seal(session_key, key, sizeof(key), box, sizeof(box)),
		(int)sizeof(box));
	auth_hex(box, sizeof(box), hex);
	return admin_f("{\"cmd\":\"tenant-add\",\"name\":\"%s\","
		       "\"quota_bytes\":%llu,\"key_box\":\"%s\"}",
		       name, (unsigned long long)quota, hex);
}

static uint32_t tenant_add(const char *name, uint64_t quota)
{
	uint32_t id;
	int rc = tenant_add_rc(name, quota);

	ck_assert_msg(rc > 0, "tenant-add %s: %d %s", name, rc, err);
	ck_assert_int_eq(memd_registry_tenant_key(r, name, &id, NULL), 0);
	return id;
}

/* A JSON reply's integer member. */
static long long reply_int(const char *json, const char *key)
{
	json_t *o = json_loads(json, 0, NULL);
	long long v;

	ck_assert_ptr_nonnull(o);
	ck_assert_msg(json_is_integer(json_object_get(o, key)), "%s in %s", key,
		      json);
	v = JINT(o, key);
	json_decref(o);
	return v;
}

static void quota_get(const char *name, uint64_t *quota, uint64_t *used,
		      uint64_t *reserved)
{
	ck_assert_int_gt(
		admin_f("{\"cmd\":\"quota-get\",\"name\":\"%s\"}", name), 0);
	if (quota)
		*quota = (uint64_t)reply_int(out, "quota_bytes");
	if (used)
		*used = (uint64_t)reply_int(out, "used_bytes");
	if (reserved)
		*reserved = (uint64_t)reply_int(out, "reserved_bytes");
}

static struct wire_donor_join join_msg(const char *name, uint64_t epoch,
				       uint32_t total)
{
	struct wire_donor_join j;

	memset(&j, 0, sizeof(j));
	snprintf(j.name, sizeof(j.name), "%s", name);
	snprintf(j.addr, sizeof(j.addr), "%s.example:7070", name);
	j.epoch = epoch;
	j.slab_bytes = SLAB;
	j.slabs_total = total;
	return j;
}

/* The membership of the last JOIN_OK or REPORT_OK. */
static uint64_t last_membership;

static uint32_t join_at(const char *name, uint64_t epoch, uint32_t total,
			uint64_t now, uint32_t *flags)
{
	struct wire_donor_join j = join_msg(name, epoch, total);
	struct wire_donor_join_ok ok;
	int rc;

	memset(&ok, 0, sizeof(ok));
	rc = memd_registry_donor_join(r, &j, now, &ok, err, sizeof(err));
	ck_assert_msg(rc == 0, "join %s: %d %s", name, rc, err);
	ck_assert_uint_eq(ok.registry_epoch, memd_registry_epoch(r));
	ck_assert_uint_eq(ok.report_ms, REPORT_MS);
	/* protocol 5: the membership, always (membership_names_one_list) */
	ck_assert(ok.flags & WIRE_DONOR_MEMBERSHIP);
	ck_assert_uint_ge(ok.membership, 1);
	last_membership = ok.membership;
	if (flags)
		*flags = ok.flags & ~WIRE_DONOR_MEMBERSHIP;
	return ok.donor_id;
}

struct usage {
	uint32_t tenant_id, slabs;
};

static int report_full(uint32_t id, uint64_t epoch, uint32_t nfree,
		       const struct usage *u, int nu, const uint64_t *redeemed,
		       int nr, uint64_t now, uint32_t *flags)
{
	static struct wire_donor_report rep;
	struct wire_donor_report_ok ok;
	int rc;

	memset(&rep, 0, sizeof(rep));
	rep.donor_id = id;
	rep.epoch = epoch;
	rep.slabs_free = nfree;
	rep.bytes_read = 1000u * id;
	rep.bytes_written = 2000u * id;
	for (int i = 0; i < nu; i++) {
		rep.tenant[i].tenant_id = u[i].tenant_id;
		rep.tenant[i].slabs = u[i].slabs;
		rep.tenant[i].sessions = 1;
		rep.slabs_leased += u[i].slabs;
	}
	rep.ntenants = (uint16_t)nu;
	for (int i = 0; i < nr; i++)
		rep.redeemed[i] = redeemed[i];
	rep.nredeemed = (uint16_t)nr;
	memset(&ok, 0, sizeof(ok));
	err[0] = '\0';
	rc = memd_registry_donor_report(r, &rep, now, &ok, err, sizeof(err));
	if (!rc) {
		ck_assert_uint_eq(ok.registry_epoch, memd_registry_epoch(r));
		/* every tenant is listed, each below next_tenant_id, so
		 * the donor can tell a removed one */
		ck_assert(ok.flags & WIRE_DONOR_TENANTS);
		for (uint16_t i = 0; i < ok.nkv; i++)
			ck_assert_uint_lt(ok.kv[i].tenant_id,
					  ok.next_tenant_id);
		ck_assert(ok.flags & WIRE_DONOR_MEMBERSHIP);
		last_membership = ok.membership;
		if (flags)
			*flags = ok.flags &
				 ~(WIRE_DONOR_TENANTS | WIRE_DONOR_MEMBERSHIP);
	}
	return rc;
}

static int report(uint32_t id, uint64_t epoch, uint32_t nfree, uint64_t now)
{
	return report_full(id, epoch, nfree, NULL, 0, NULL, 0, now, NULL);
}

/* A donor that joined and reported nfree free slabs at T0. */
static uint32_t donor_up(const char *name, uint64_t epoch, uint32_t nfree)
{
	uint32_t id = join_at(name, epoch, nfree + 10, T0, NULL);

	ck_assert_int_eq(report(id, epoch, nfree, T0), 0);
	return id;
}

static int place_at(uint32_t tid, uint32_t nslabs, uint32_t flags, int32_t node,
		    uint64_t now, struct wire_place_ok *ok)
{
	struct wire_place req = { .nslabs = nslabs,
				  .flags = flags,
				  .node = node };

	err[0] = '\0';
	return memd_registry_place(r, tid, &req, now, U0, ok, err, sizeof(err));
}

static int place(uint32_t tid, uint32_t nslabs, uint32_t flags,
		 struct wire_place_ok *ok)
{
	return place_at(tid, nslabs, flags, WIRE_NODE_ANY, T0, ok);
}

/* Checks a PLACE_OK's internal consistency: every grant's nslabs is the
 * number of layout entries naming it, primaries and replicas apart. */
static void check_layout(const struct wire_place_ok *ok, uint32_t nslabs,
			 bool replica)
{
	uint32_t per[WIRE_MAX_GRANTS] = { 0 };

	ck_assert_uint_eq(ok->nslabs, nslabs);
	ck_assert_uint_ge(ok->ngrants, 1);
	ck_assert_uint_le(ok->ngrants, WIRE_MAX_GRANTS);
	ck_assert_uint_eq(ok->registry_epoch, memd_registry_epoch(r));
	for (uint32_t k = 0; k < nslabs; k++) {
		ck_assert_uint_lt(ok->layout[k].primary, ok->ngrants);
		per[ok->layout[k].primary]++;
		if (replica) {
			ck_assert_uint_lt(ok->layout[k].replica, ok->ngrants);
			ck_assert_uint_ne(
				ok->grant[ok->layout[k].primary].donor_id,
				ok->grant[ok->layout[k].replica].donor_id);
			per[ok->layout[k].replica]++;
		} else {
			ck_assert_uint_eq(ok->layout[k].replica, WIRE_NO_GRANT);
		}
	}
	for (uint16_t g = 0; g < ok->ngrants; g++) {
		ck_assert_uint_eq(ok->grant[g].ticket.nslabs, per[g]);
		ck_assert_uint_eq(ok->grant[g].donor_id,
				  ok->grant[g].ticket.donor_id);
		for (uint16_t h = 0; h < g; h++)
			ck_assert_uint_ne(ok->grant[g].donor_id,
					  ok->grant[h].donor_id);
	}
}

static char *read_file(const char *p, size_t *len)
{
	FILE *f = fopen(p, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void write_file(const char *p, const char *s, size_t n)
{
	FILE *f = fopen(p, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(s, 1, n, f), n);
	fclose(f);
}

/* ---- durable state ------------------------------------------------------ */

/*
 * fsync(2) as the registry module (linked into this program) sees it:
 * while fail_dir_fsyncs > 0, an fsync of a directory fails with EIO
 * (and counts down), as on a failing disk.
 */
static int fail_dir_fsyncs;

int fsync(int fd)
{
	static int (*real)(int);
	struct stat st;

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	if (fail_dir_fsyncs > 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		fail_dir_fsyncs--;
		errno = EIO;
		return -1;
	}
	return real(fd);
}

/* A change whose directory fsync fails is reported as failed and is
 * not in registry.json after a restart (it was, before the fix). */
START_TEST(failed_directory_sync_leaves_nothing_behind)
{
	uint64_t quota, used;

	tenant_add("kept", 7 * MiB);
	for (int fails = 1; fails <= 2; fails++) {
		/* 1: the undo's own sync works; 2: it fails too (the file
		 * holds the old state either way) */
		fail_dir_fsyncs = fails;
		ck_assert_int_lt(tenant_add_rc("lost", 5 * MiB), 0);
		ck_assert_int_eq(fail_dir_fsyncs, 0);
		ck_assert_int_eq(
			memd_registry_tenant_key(r, "lost", NULL, NULL),
			-ENOENT);
		reg_reopen();
		ck_assert_int_eq(
			memd_registry_tenant_key(r, "lost", NULL, NULL),
			-ENOENT);
		quota_get("kept", &quota, &used, NULL);
		ck_assert_uint_eq(quota, 7 * MiB);
	}
	/* and the registry goes on working */
	tenant_add("later", 1 * MiB);
	reg_reopen();
	ck_assert_int_eq(memd_registry_tenant_key(r, "later", NULL, NULL), 0);
}
END_TEST

/*
 * tenant-set: a tenant's cost model for capacity reports is durable like
 * its quota, shown by tenants and quota-get, 0 sets a field back to the
 * donors' value, and bad requests change nothing.
 */
/* The cost model the tenants listing shows for name (0: the donors'). */
static void tenant_model(const char *name, long long *tps, long long *bpt)
{
	json_t *o, *t;
	size_t i;
	bool found = false;

	ck_assert_int_gt(admin("{\"cmd\":\"tenants\"}"), 0);
	o = json_loads(out, 0, NULL);
	ck_assert_ptr_nonnull(o);
	json_array_foreach(json_object_get(o, "tenants"), i, t)
	{
		if (strcmp(JSTR(t, "name"), name))
			continue;
		*tps = JINT(t, "prefill_tokens_per_s");
		*bpt = JINT(t, "bytes_per_token");
		found = true;
	}
	json_decref(o);
	ck_assert_msg(found, "no tenant %s in %s", name, out);
}

START_TEST(tenant_cost_model_persists)
{
	long long tps, bpt;

	tenant_add("a", 7 * MiB);
	tenant_add("b", 7 * MiB);
	ck_assert_int_gt(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"prefill_tokens_per_s\":5000,"
			       "\"bytes_per_token\":4096}"),
			 0);
	/* bad requests: nothing changes */
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\"}"),
			 -EINVAL);
	ck_assert_msg(strstr(err, "prefill_tokens_per_s or bytes_per_token"),
		      "%s", err);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"prefill_tokens_per_s\":-1}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"prefill_tokens_per_s\":7,"
			       "\"bytes_per_token\":1073741825}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"bytes_per_token\":\"4K\"}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"quota_bytes\":1}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-set\",\"name\":\"zz\","
			       "\"bytes_per_token\":1}"),
			 -ENOENT);
	reg_reopen();
	tenant_model("a", &tps, &bpt);
	ck_assert_int_eq(tps, 5000);
	ck_assert_int_eq(bpt, 4096);
	tenant_model("b", &tps, &bpt);
	ck_assert_int_eq(tps, 0);
	ck_assert_int_eq(bpt, 0);
	/* one field back to the donors' value, the other kept */
	ck_assert_int_gt(admin("{\"cmd\":\"tenant-set\",\"name\":\"a\","
			       "\"prefill_tokens_per_s\":0}"),
			 0);
	reg_reopen();
	tenant_model("a", &tps, &bpt);
	ck_assert_int_eq(tps, 0);
	ck_assert_int_eq(bpt, 4096);
}
END_TEST

START_TEST(tenants_persist_across_reopen)
{
	uint8_t key[AUTH_KEY_LEN], want[AUTH_KEY_LEN];
	char tmp[160];
	uint64_t quota;
	struct stat st;
	uint32_t a, b, c, id;

	a = tenant_add("alpha", 1024 * MiB);
	b = tenant_add("beta.2_x-y", 5 * MiB);
	ck_assert_uint_eq(a, 1);
	ck_assert_uint_eq(b, 2);
	ck_assert_int_gt(admin("{\"cmd\":\"quota-set\",\"name\":\"alpha\","
			       "\"quota_bytes\":2147483648}"),
			 0);
	ck_assert_str_eq(out, "{}");
	tenant_add("c3", 3 * MiB);
	tenant_add("c4", 4 * MiB);
	ck_assert_int_gt(admin("{\"cmd\":\"tenant-remove\",\"name\":"
			       "\"beta.2_x-y\"}"),
			 0);
	ck_assert_int_gt(admin("{\"cmd\":\"tenants\"}"), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"name\":\"alpha\""));
	ck_assert(strstr(out, "\"name\":\"alpha\"") <
		  strstr(out, "\"name\":\"c3\""));
	ck_assert(strstr(out, "\"name\":\"c3\"") <
		  strstr(out, "\"name\":\"c4\""));
	ck_assert_ptr_null(strstr(out, "beta"));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	reg_reopen();
	ck_assert_int_eq(memd_registry_tenant_key(r, "alpha", &id, key), 0);
	tenant_key_of("alpha", want);
	ck_assert_uint_eq(id, a);
	ck_assert_mem_eq(key, want, AUTH_KEY_LEN);
	ck_assert_int_eq(memd_registry_tenant_key(r, "beta.2_x-y", &id, key),
			 -ENOENT);
	quota_get("alpha", &quota, NULL, NULL);
	ck_assert_uint_eq(quota, 2048 * MiB);
	/* ids are never reused, across restarts too */
	c = tenant_add("gamma", 0);
	ck_assert_uint_eq(c, 5);
	reg_reopen();
	ck_assert_int_eq(memd_registry_tenant_key(r, "gamma", &id, NULL), 0);
	ck_assert_uint_eq(id, 5);
	ck_assert_int_eq(memd_registry_tenant_key(r, "c3", &id, NULL), 0);
	ck_assert_uint_eq(id, 3);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ck_assert_int_ne(access(tmp, F_OK), 0);
}
END_TEST

START_TEST(donor_identity_and_drain_persist)
{
	uint32_t flags, d1, d2;

	d1 = join_at("host-a", 11, 100, T0, &flags);
	ck_assert_uint_eq(d1, 1);
	ck_assert_uint_eq(flags, 0);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":true}"),
			 0);
	reg_reopen();
	d2 = join_at("host-b", 12, 100, T0, &flags);
	ck_assert_uint_eq(d2, 2);
	ck_assert_uint_eq(flags, 0);
	ck_assert_uint_eq(join_at("host-a", 13, 100, T0, &flags), d1);
	ck_assert_uint_eq(flags, WIRE_DONOR_DRAIN);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":false}"),
			 0);
	ck_assert_int_eq(report_full(d1, 13, 50, NULL, 0, NULL, 0, T0, &flags),
			 0);
	ck_assert_uint_eq(flags, 0);
}
END_TEST

/* Contents registry.json must refuse, each named for what it breaks. */
static const char *const bad_state[] = {
	"",
	"{",
	"garbage",
	"[]",
	"{\"version\":2,\"next_tenant_id\":1,\"next_donor_id\":1,"
	"\"tenants\":[],\"donors\":[]}",
	"{\"next_tenant_id\":1,\"next_donor_id\":1,\"tenants\":[],"
	"\"donors\":[]}",
	"{\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":1,"
	"\"tenants\":[],\"donors\":[],\"extra\":1}",
	"{\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":1,"
	"\"tenants\":{},\"donors\":[]}",
	/* duplicate ids */
	"{\"version\":1,\"next_tenant_id\":3,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\"" /* 64 hex */
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1},"
	"{\"id\":1,\"name\":\"b\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* duplicate names */
	"{\"version\":1,\"next_tenant_id\":3,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1},"
	"{\"id\":2,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* bad name */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a b\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* key of 63 hex digits */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* key not hex */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* a cost model of 0 tokens/s (unset is absent, not 0) */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1,\"prefill_tokens_per_s\":0}],\"donors\":[]}",
	/* bytes per token above 1 GiB */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1,\"bytes_per_token\":1073741825}],\"donors\":[]}",
	/* negative quota */
	"{\"version\":1,\"next_tenant_id\":2,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":-1}],\"donors\":[]}",
	/* id not below next_tenant_id */
	"{\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":1,\"tenants\":["
	"{\"id\":1,\"name\":\"a\",\"key\":\""
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\","
	"\"quota_bytes\":1}],\"donors\":[]}",
	/* duplicate donors, draining not a bool */
	"{\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":3,\"tenants\":[]"
	","
	"\"donors\":[{\"id\":1,\"name\":\"d\",\"draining\":false},"
	"{\"id\":2,\"name\":\"d\",\"draining\":false}]}",
	"{\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":3,\"tenants\":[]"
	","
	"\"donors\":[{\"id\":1,\"name\":\"d\",\"draining\":0}]}",
	/* duplicate key in an object */
	"{\"version\":1,\"version\":1,\"next_tenant_id\":1,\"next_donor_id\":1,"
	"\"tenants\":[],\"donors\":[]}",
};

START_TEST(corrupt_state_is_refused_and_kept)
{
	struct memd_registry_opts o = opts();
	struct memd_registry *x = (void *)1;
	size_t n, len;
	char *before, *after, tmp[160];

	memd_registry_close(r);
	r = NULL;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	for (size_t i = 0; i < sizeof(bad_state) / sizeof(bad_state[0]); i++) {
		write_file(path, bad_state[i], strlen(bad_state[i]));
		err[0] = '\0';
		ck_assert_msg(memd_registry_open(&o, T0, &x, err,
						 sizeof(err)) == -EINVAL,
			      "bad_state[%zu] accepted", i);
		ck_assert_ptr_null(x);
		ck_assert_msg(strstr(err, path), "bad_state[%zu]: %s", i, err);
		after = read_file(path, &len);
		ck_assert_uint_eq(len, strlen(bad_state[i]));
		ck_assert_mem_eq(after, bad_state[i], len);
		free(after);
		ck_assert_int_ne(access(tmp, F_OK), 0);
	}
	/* a good file, truncated */
	unlink(path);
	reg_open();
	tenant_add("alpha", 1024 * MiB);
	tenant_add("beta", 1024 * MiB);
	memd_registry_close(r);
	r = NULL;
	before = read_file(path, &n);
	ck_assert_ptr_nonnull(before);
	for (size_t cut = 1; cut < n - 1; cut += 7) {
		write_file(path, before, cut);
		ck_assert_int_eq(
			memd_registry_open(&o, T0, &x, err, sizeof(err)),
			-EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "corrupt"));
	}
	/* wrong version says so */
	write_file(path, bad_state[4], strlen(bad_state[4]));
	ck_assert_int_eq(memd_registry_open(&o, T0, &x, err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "version"));
	write_file(path, before, n);
	free(before);
	reg_open();
	ck_assert_int_eq(memd_registry_tenant_key(r, "beta", NULL, NULL), 0);
}
END_TEST

START_TEST(state_dir_errors)
{
	struct memd_registry_opts o = opts();
	struct memd_registry *x = (void *)1;
	char sub[160];

	snprintf(sub, sizeof(sub), "%s/missing", dir);
	o.state_dir = sub;
	ck_assert_int_eq(memd_registry_open(&o, T0, &x, err, sizeof(err)),
			 -ENOENT);
	ck_assert_ptr_null(x);
	ck_assert_ptr_nonnull(strstr(err, sub));
	write_file(sub, "x", 1);
	ck_assert_int_eq(memd_registry_open(&o, T0, &x, err, sizeof(err)),
			 -ENOTDIR);
	o.state_dir = dir;
	o.slab_bytes = 0;
	ck_assert_int_eq(memd_registry_open(&o, T0, &x, err, sizeof(err)),
			 -EINVAL);
}
END_TEST

static void count_donor(void *arg, const struct memd_registry_donor_info *d)
{
	(void)d;
	(*(int *)arg)++;
}

START_TEST(unwritable_state_changes_nothing)
{
	char tmp[160], *before, *after;
	uint64_t quota;
	size_t n, m;
	uint32_t d;
	int ndonors = 0;
	struct wire_donor_join j = join_msg("newhost", 5, 10);
	struct wire_donor_join_ok ok;

	tenant_add("alpha", 8 * MiB);
	d = donor_up("host-a", 1, 100);
	before = read_file(path, &n);
	/* The temporary file's name taken by a directory: open fails,
	 * whoever we run as (root ignores a read-only directory). */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ck_assert_int_eq(mkdir(tmp, 0700), 0);

	ck_assert_int_eq(tenant_add_rc("beta", MiB), -EIO);
	ck_assert_ptr_nonnull(strstr(err, "registry.json.tmp"));
	ck_assert_int_eq(memd_registry_tenant_key(r, "beta", NULL, NULL),
			 -ENOENT);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"alpha\","
			       "\"quota_bytes\":1}"),
			 -EIO);
	quota_get("alpha", &quota, NULL, NULL);
	ck_assert_uint_eq(quota, 8 * MiB);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-remove\",\"name\":"
			       "\"alpha\"}"),
			 -EIO);
	ck_assert_int_eq(memd_registry_tenant_key(r, "alpha", NULL, NULL), 0);
	ck_assert_int_eq(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":true}"),
			 -EIO);
	ck_assert_int_eq(
		memd_registry_donor_join(r, &j, T0, &ok, err, sizeof(err)),
		-EIO);
	memd_registry_foreach_donor(r, count_donor, &ndonors);
	ck_assert_int_eq(ndonors, 1);
	/* known donors rejoin without writing */
	ck_assert_uint_eq(join_at("host-a", 2, 100, T0, NULL), d);
	ck_assert_int_eq(report(d, 2, 100, T0), 0);
	ck_assert_int_gt(admin("{\"cmd\":\"status\"}"), 0);
	ck_assert_int_eq(reply_int(out, "free_bytes"), 100 * MiB);
	after = read_file(path, &m);
	ck_assert_uint_eq(m, n);
	ck_assert_mem_eq(after, before, n);
	free(after);
	free(before);

	ck_assert_int_eq(rmdir(tmp), 0);
	tenant_add("beta", MiB);
	reg_reopen();
	ck_assert_int_eq(memd_registry_tenant_key(r, "beta", NULL, NULL), 0);
}
END_TEST

/* ---- quotas and placement ---------------------------------------------- */

START_TEST(edquot_exact_boundary)
{
	struct wire_place_ok ok;
	uint32_t a, b, c;

	a = tenant_add("a", 8 * MiB);
	b = tenant_add("b", 8 * MiB - 1);
	c = tenant_add("c", 8 * MiB);
	donor_up("host-a", 1, 1000);
	donor_up("host-b", 2, 1000);

	ck_assert_int_eq(place(a, 9, 0, &ok), -EDQUOT);
	ck_assert_str_eq(err, "tenant 'a': quota 8.0 MiB, used 0 B, reserved "
			      "0 B, asked 9.0 MiB");
	ck_assert_int_eq(place(a, 8, 0, &ok), 0);
	check_layout(&ok, 8, false);
	ck_assert_int_eq(place(a, 1, 0, &ok), -EDQUOT);
	ck_assert_str_eq(err, "tenant 'a': quota 8.0 MiB, used 0 B, reserved "
			      "8.0 MiB, asked 1.0 MiB");

	ck_assert_int_eq(place(b, 8, 0, &ok), -EDQUOT);
	ck_assert_int_eq(place(b, 7, 0, &ok), 0);
	ck_assert_int_eq(place(b, 1, 0, &ok), -EDQUOT);

	/* replicas count */
	ck_assert_int_eq(place(c, 5, WIRE_PLACE_REPLICA, &ok), -EDQUOT);
	ck_assert_str_eq(err, "tenant 'c': quota 8.0 MiB, used 0 B, reserved "
			      "0 B, asked 10 MiB");
	ck_assert_int_eq(place(c, 4, WIRE_PLACE_REPLICA, &ok), 0);
	check_layout(&ok, 4, true);
	ck_assert_int_eq(place(c, 1, 0, &ok), -EDQUOT);
}
END_TEST

/* One report of tenant t's slabs (kv of them its KV store's); returns the
 * allowance REPORT_OK gives for tenant want (UINT32_MAX: none listed). */
static uint32_t report_kv_at(uint32_t id, uint32_t t, uint32_t slabs,
			     uint32_t kv, uint32_t want, uint64_t now)
{
	static struct wire_donor_report rep;
	static struct wire_donor_report_ok ok;
	uint32_t got = UINT32_MAX;
	int rc;

	memset(&rep, 0, sizeof(rep));
	rep.donor_id = id;
	rep.epoch = 1;
	rep.slabs_free = 100;
	if (slabs) {
		rep.ntenants = 1;
		rep.tenant[0] =
			(struct wire_tenant_usage){ t, slabs, 1, kv,
						    kv ? WIRE_TENANT_KV : 0 };
	}
	memset(&ok, 0, sizeof(ok));
	rc = memd_registry_donor_report(r, &rep, now, &ok, err, sizeof(err));
	ck_assert_msg(rc == 0, "report: %d %s", rc, err);
	for (uint16_t i = 0; i < ok.nkv; i++)
		if (ok.kv[i].tenant_id == want)
			got = ok.kv[i].kv_slabs_max;
	return got;
}

static uint32_t report_kv(uint32_t id, uint32_t t, uint32_t slabs, uint32_t kv,
			  uint32_t want)
{
	return report_kv_at(id, t, slabs, kv, want, T0);
}

/*
 * KV allowances (docs/cluster.md, "KV memory and quotas"): what a quota
 * leaves after other usage, reservations and KV on draining donors, split
 * evenly over the up donors that are not draining; a draining donor keeps
 * what it holds; every tenant is listed.
 */
START_TEST(kv_allowances_split_what_the_quota_leaves)
{
	struct wire_place_ok ok;
	uint32_t a, b, d1, d2, d3;

	a = tenant_add("a", 10 * MiB);
	b = tenant_add("b", 100 * MiB);
	d1 = donor_up("host-a", 1, 100);
	d2 = donor_up("host-b", 1, 100);
	d3 = donor_up("host-c", 1, 100);
	/* a: 4 slabs on d1, 3 of them KV: 10 - 1 = 9 for KV, 3 each */
	ck_assert_uint_eq(report_kv(d1, a, 4, 3, a), 3);
	/* b: 100 over 3, the first donor by id one more; b is listed on
	 * d2, where it has no usage at all */
	ck_assert_uint_eq(report_kv(d1, a, 4, 3, b), 34);
	ck_assert_uint_eq(report_kv(d2, 0, 0, 0, b), 33);
	/* a reserves 3 slabs for a region: 6 left for KV, 2 each */
	ck_assert_int_eq(place(a, 3, 0, &ok), 0);
	ck_assert_uint_eq(report_kv(d2, 0, 0, 0, a), 2);
	/* d3 drains holding 2 KV slabs of a: it keeps them, the two others
	 * split 10 - 1 - 3 - 2 = 4 */
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-c\","
			       "\"drain\":true}"),
			 0);
	ck_assert_uint_eq(report_kv(d3, a, 2, 2, a), 2);
	ck_assert_uint_eq(report_kv(d1, a, 4, 3, a), 2); /* below its 3 */
	ck_assert_uint_eq(report_kv(d2, 0, 0, 0, a), 2);
	/* a quota below the other usage leaves nothing */
	ck_assert_int_gt(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota_bytes\":3145728}"),
			 0);
	ck_assert_uint_eq(report_kv(d1, a, 4, 3, a), 0);
	ck_assert_uint_eq(report_kv(d1, a, 4, 3, b), 50);
	/* a KV count above the tenant's slabs is refused */
	{
		static struct wire_donor_report rep;
		struct wire_donor_report_ok rok;

		memset(&rep, 0, sizeof(rep));
		rep.donor_id = d1;
		rep.epoch = 1;
		rep.ntenants = 1;
		rep.tenant[0] = (struct wire_tenant_usage){ a, 2, 1, 3,
							    WIRE_TENANT_KV };
		ck_assert_int_eq(memd_registry_donor_report(r, &rep, T0, &rok,
							    err, sizeof(err)),
				 -EINVAL);
		ck_assert_str_eq(err, "donor 1: tenant 1 has 3 KV slabs of 2");
	}
}
END_TEST

/*
 * KV memory yields to a PLACE (docs/cluster.md, "KV memory and quotas"):
 * a PLACE the quota refuses but the tenant's KV slabs could make room for
 * is EAGAIN, and the allowances leave what it asked free (the largest
 * ask) until a PLACE of the tenant's succeeds or the demand expires (2 s
 * + two report intervals after the last ask); a deficit the KV slabs
 * cannot cover is EDQUOT and asks nothing of them.
 */
START_TEST(place_makes_kv_yield)
{
	const uint64_t hold = 2000 + 2 * REPORT_MS;
	struct wire_place_ok ok;
	uint32_t a, d1, d2;

	a = tenant_add("a", 10 * MiB);
	d1 = donor_up("host-a", 1, 100);
	d2 = donor_up("host-b", 1, 100);
	/* a's KV stores fill its quota: 6 + 4 slabs, 5 each allowed */
	ck_assert_uint_eq(report_kv(d1, a, 6, 6, a), 5);
	ck_assert_uint_eq(report_kv(d2, a, 4, 4, a), 5);
	ck_assert_int_eq(place(a, 3, 0, &ok), -EAGAIN);
	ck_assert_str_eq(err, "tenant 'a': quota 10 MiB full of KV cache; KV "
			      "stores are yielding 3.0 MiB: place again");
	ck_assert_uint_eq(ok.ngrants, 0);
	/* 10 - 3 for KV: 4 and 3 */
	ck_assert_uint_eq(report_kv(d1, a, 6, 6, a), 4);
	ck_assert_uint_eq(report_kv(d2, a, 4, 4, a), 3);
	/* 11 slabs: not even with no KV memory; the demand stays 3 */
	ck_assert_int_eq(place(a, 11, 0, &ok), -EDQUOT);
	ck_assert_str_eq(err, "tenant 'a': quota 10 MiB, used 10 MiB, "
			      "reserved 0 B, asked 11 MiB");
	ck_assert_uint_eq(report_kv(d2, a, 4, 4, a), 3);
	/* a larger ask: the demand is the largest */
	ck_assert_int_eq(place(a, 4, 0, &ok), -EAGAIN);
	ck_assert_uint_eq(report_kv(d1, a, 6, 6, a), 3);
	ck_assert_int_eq(place(a, 2, 0, &ok), -EAGAIN);
	ck_assert_uint_eq(report_kv(d1, a, 6, 6, a), 3);
	/* it holds while asked, and lapses after (the donors report at
	 * least every 3 report intervals, or are down) */
	ck_assert_uint_eq(report_kv_at(d1, a, 6, 6, a, T0 + 2000), 3);
	ck_assert_uint_eq(report_kv_at(d2, a, 4, 4, a, T0 + 2000), 3);
	ck_assert_uint_eq(report_kv_at(d1, a, 6, 6, a, T0 + hold - 1), 3);
	ck_assert_uint_eq(report_kv_at(d2, a, 4, 4, a, T0 + hold - 1), 3);
	ck_assert_uint_eq(report_kv_at(d1, a, 6, 6, a, T0 + hold), 5);
	ck_assert_uint_eq(report_kv_at(d2, a, 4, 4, a, T0 + hold), 5);
	/* asked again; the stores trim, and the PLACE succeeds: what it
	 * reserved replaces the demand (10 - 4 reserved: 3 each) */
	ck_assert_int_eq(place_at(a, 4, 0, WIRE_NODE_ANY, T0 + hold, &ok),
			 -EAGAIN);
	ck_assert_uint_eq(report_kv_at(d1, a, 3, 3, a, T0 + hold + 10), 3);
	ck_assert_uint_eq(report_kv_at(d2, a, 3, 3, a, T0 + hold + 10), 3);
	ck_assert_int_eq(place_at(a, 4, 0, WIRE_NODE_ANY, T0 + hold + 20, &ok),
			 0);
	ck_assert_uint_eq(report_kv_at(d1, a, 3, 3, a, T0 + hold + 30), 3);
	ck_assert_uint_eq(report_kv_at(d2, a, 3, 3, a, T0 + hold + 30), 3);
	/* KV on a draining donor does not yield: a, at its quota again
	 * with 4 reserved, 3 KV on d1 and 3 on d2; d2 drains and a asks 2
	 * more (6 + 4 + 2 - 10 = 2 <= 3 on d1: EAGAIN), then 4 more (4 >
	 * 3 on d1: EDQUOT) */
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-b\","
			       "\"drain\":true}"),
			 0);
	ck_assert_int_eq(place_at(a, 2, 0, WIRE_NODE_ANY, T0 + hold + 40, &ok),
			 -EAGAIN);
	ck_assert_int_eq(place_at(a, 4, 0, WIRE_NODE_ANY, T0 + hold + 40, &ok),
			 -EDQUOT);
}
END_TEST

START_TEST(quota_counts_used_and_lowering_blocks)
{
	struct wire_place_ok ok;
	struct usage u[1];
	uint32_t a, d;

	a = tenant_add("a", 10 * MiB);
	d = donor_up("host-a", 1, 1000);
	u[0].tenant_id = a;
	u[0].slabs = 6;
	ck_assert_int_eq(report_full(d, 1, 994, u, 1, NULL, 0, T0, NULL), 0);
	ck_assert_int_eq(place(a, 5, 0, &ok), -EDQUOT);
	ck_assert_str_eq(err, "tenant 'a': quota 10 MiB, used 6.0 MiB, "
			      "reserved 0 B, asked 5.0 MiB");
	ck_assert_int_eq(place(a, 4, 0, &ok), 0);
	ck_assert_int_gt(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota_bytes\":1048576}"),
			 0);
	ck_assert_int_eq(place(a, 1, 0, &ok), -EDQUOT);
	ck_assert_int_eq(memd_registry_tenant_key(r, "a", NULL, NULL), 0);
}
END_TEST

struct racer {
	uint32_t tid;
	uint32_t flags;
	uint64_t now;
	int seed;
	uint64_t granted; /* slabs, replicas included */
	int unexpected;
};

static void *race(void *arg)
{
	struct racer *x = arg;
	struct wire_place_ok ok;
	struct wire_place req = { .flags = x->flags, .node = WIRE_NODE_ANY };
	char e[256];
	uint32_t k = 1 + (uint32_t)x->seed % 3;

	for (;;) {
		int rc;

		req.nslabs = k;
		rc = memd_registry_place(r, x->tid, &req, x->now, U0, &ok, e,
					 sizeof(e));
		if (rc == 0) {
			uint64_t n = 0;

			for (uint16_t g = 0; g < ok.ngrants; g++)
				n += ok.grant[g].ticket.nslabs;
			x->granted += n;
			if (n != k * (x->flags ? 2u : 1u))
				x->unexpected++;
		} else if (rc == -EDQUOT) {
			if (k == 1)
				break;
			k = 1;
		} else {
			x->unexpected++;
			break;
		}
	}
	return NULL;
}

START_TEST(concurrent_places_never_overshoot)
{
	enum { NTHREADS = 8, ROUNDS = 60, QUOTA_SLABS = 301 };
	struct racer x[NTHREADS];
	pthread_t th[NTHREADS];
	uint64_t now = T0, reserved;
	uint32_t a, d[4];

	a = tenant_add("racer", QUOTA_SLABS * MiB);
	for (int i = 0; i < 4; i++) {
		char name[16];

		snprintf(name, sizeof(name), "host-%d", i);
		d[i] = donor_up(name, 100 + (uint64_t)i, 100000);
	}
	for (int round = 0; round < ROUNDS; round++) {
		uint32_t flags = round % 3 == 2 ? WIRE_PLACE_REPLICA : 0;
		uint64_t sum = 0;

		for (int i = 0; i < NTHREADS; i++) {
			x[i] = (struct racer){ .tid = a,
					       .flags = flags,
					       .now = now,
					       .seed = round * NTHREADS + i };
			ck_assert_int_eq(
				pthread_create(&th[i], NULL, race, &x[i]), 0);
		}
		for (int i = 0; i < NTHREADS; i++) {
			pthread_join(th[i], NULL);
			ck_assert_int_eq(x[i].unexpected, 0);
			sum += x[i].granted;
		}
		/* never over; and with single slabs asked last, nothing
		 * left that fits either */
		if (flags)
			ck_assert_uint_eq(sum, QUOTA_SLABS - 1);
		else
			ck_assert_uint_eq(sum, QUOTA_SLABS);
		quota_get("racer", NULL, NULL, &reserved);
		ck_assert_uint_eq(reserved, sum * MiB);
		/* the grants expire unredeemed while the donors keep
		 * reporting */
		for (uint64_t end = now + 100000; now < end; now += 2000) {
			for (int i = 0; i < 4; i++)
				ck_assert_int_eq(report(d[i], 100 + (uint64_t)i,
							100000, now),
						 0);
			memd_registry_tick(r, now);
		}
		quota_get("racer", NULL, NULL, &reserved);
		ck_assert_uint_eq(reserved, 0);
	}
}
END_TEST

START_TEST(striping_spreads_evenly)
{
	struct wire_place_ok ok;
	uint32_t a, d[3];

	a = tenant_add("a", 1024 * MiB);
	d[0] = donor_up("host-a", 1, 100);
	d[1] = donor_up("host-b", 2, 100);
	d[2] = donor_up("host-c", 3, 100);
	ck_assert_int_eq(place(a, 12, 0, &ok), 0);
	check_layout(&ok, 12, false);
	ck_assert_uint_eq(ok.ngrants, 3);
	for (int g = 0; g < 3; g++) {
		ck_assert_uint_eq(ok.grant[g].donor_id, d[g]);
		ck_assert_uint_eq(ok.grant[g].ticket.nslabs, 4);
	}
	/* equal free: lowest id first, round robin */
	for (int k = 0; k < 12; k++)
		ck_assert_uint_eq(ok.layout[k].primary, k % 3);
	ck_assert_str_eq(ok.grant[1].addr, "host-b.example:7070");

	/* free minus reserved decides: host-a and host-b have 96 left,
	 * host-c reports 200 */
	ck_assert_int_eq(report(d[2], 3, 200, T0), 0);
	ck_assert_int_eq(place(a, 4, 0, &ok), 0);
	ck_assert_uint_eq(ok.ngrants, 1);
	ck_assert_uint_eq(ok.grant[0].donor_id, d[2]);
}
END_TEST

START_TEST(at_most_16_donors_the_freest)
{
	struct wire_place_ok ok;
	bool seen[21] = { false };
	uint32_t a;

	a = tenant_add("a", 4096 * MiB);
	for (uint32_t i = 1; i <= 20; i++) {
		char name[16];

		snprintf(name, sizeof(name), "host-%02u", i);
		ck_assert_uint_eq(donor_up(name, i, 10 + i), i);
	}
	ck_assert_int_eq(place(a, 256, 0, &ok), 0);
	check_layout(&ok, 256, false);
	ck_assert_uint_eq(ok.ngrants, 16);
	for (int g = 0; g < 16; g++)
		seen[ok.grant[g].donor_id] = true;
	for (uint32_t i = 1; i <= 20; i++)
		ck_assert_int_eq(seen[i], i >= 5);
	/* what is left on the 16 (360 - 256) is less than asked */
	ck_assert_int_eq(place(a, 250, 0, &ok), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err, "slabs free"));
}
END_TEST

START_TEST(replica_on_another_donor)
{
	struct wire_place_ok ok;
	uint32_t a, b, d1;

	a = tenant_add("a", 1024 * MiB);
	b = tenant_add("b", 1024 * MiB);
	d1 = donor_up("host-a", 1, 100);
	ck_assert_int_eq(place(a, 1, WIRE_PLACE_REPLICA, &ok), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err, "replica"));
	ck_assert_int_eq(place(a, 3, 0, &ok), 0);

	donor_up("host-b", 2, 2);
	donor_up("host-c", 3, 100);
	ck_assert_int_eq(place(b, 10, WIRE_PLACE_REPLICA, &ok), 0);
	check_layout(&ok, 10, true);
	/* host-c (100) takes every primary, host-a (97) every replica:
	 * the second most free, never the primary's own donor */
	ck_assert_uint_eq(ok.ngrants, 2);
	ck_assert_uint_eq(ok.grant[0].donor_id, 3);
	ck_assert_uint_eq(ok.grant[1].donor_id, d1);
	for (int k = 0; k < 10; k++) {
		ck_assert_uint_eq(ok.layout[k].primary, 0);
		ck_assert_uint_eq(ok.layout[k].replica, 1);
	}
	/* two donors with room and one with none left: a replica pair
	 * needs two */
	ck_assert_int_eq(report(1, 1, 0, T0), 0);
	ck_assert_int_eq(report(2, 2, 0, T0), 0);
	ck_assert_int_eq(place(b, 1, WIRE_PLACE_REPLICA, &ok), -ENOSPC);
	ck_assert_int_eq(place(b, 1, 0, &ok), 0);
	ck_assert_uint_eq(ok.grant[0].donor_id, 3);
}
END_TEST

START_TEST(only_up_reported_donors_get_slabs)
{
	struct wire_place_ok ok;
	uint32_t a, da, db, dc;

	a = tenant_add("a", 1024 * MiB);
	da = donor_up("host-a", 1, 10);
	db = donor_up("host-b", 2, 100);
	dc = join_at("host-c", 3, 100, T0, NULL); /* never reported */
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-b\","
			       "\"drain\":true}"),
			 0);
	ck_assert_int_eq(place(a, 5, 0, &ok), 0);
	ck_assert_uint_eq(ok.ngrants, 1);
	ck_assert_uint_eq(ok.grant[0].donor_id, da);
	memd_registry_donor_lost(r, da, 1, T0, "link closed");
	ck_assert_int_eq(place(a, 1, 0, &ok), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err, "0 slabs free on 0 up donors"));
	ck_assert_int_eq(report(dc, 3, 100, T0), 0);
	ck_assert_int_eq(place(a, 1, 0, &ok), 0);
	ck_assert_uint_eq(ok.grant[0].donor_id, dc);
	(void)db;
}
END_TEST

START_TEST(node_filter)
{
	struct wire_place_ok ok;
	struct wire_donor_join j;
	struct wire_donor_join_ok jok;
	uint32_t a, ids[3];

	a = tenant_add("a", 1024 * MiB);
	for (int i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof(name), "host-%d", i);
		j = join_msg(name, 1, 100);
		if (i < 2) {
			j.nnodes = 1;
			j.node[0].node = i;
			j.node[0].slabs_total = 100;
			j.node[0].slabs_free = 100;
		}
		ck_assert_int_eq(memd_registry_donor_join(r, &j, T0, &jok, err,
							  sizeof(err)),
				 0);
		ids[i] = jok.donor_id;
		ck_assert_int_eq(report(ids[i], 1, 100, T0), 0);
	}
	ck_assert_int_eq(place_at(a, 6, 0, 1, T0, &ok), 0);
	ck_assert_uint_eq(ok.ngrants, 1);
	ck_assert_uint_eq(ok.grant[0].donor_id, ids[1]);
	ck_assert_int_eq(ok.grant[0].ticket.node, 1);
	ck_assert_int_eq(place_at(a, 1, 0, 0, T0, &ok), 0);
	ck_assert_uint_eq(ok.grant[0].donor_id, ids[0]);
	ck_assert_int_eq(place_at(a, 1, 0, 7, T0, &ok), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "node 7"));
	ck_assert_int_eq(place_at(a, 1, 0, WIRE_NODE_MAX, T0, &ok), -EINVAL);
	/* any node: host-2 (100), then host-0 (99, lower id than host-2's
	 * 99), then host-2 again; host-1 (94) gets nothing */
	ck_assert_int_eq(place_at(a, 3, 0, WIRE_NODE_ANY, T0, &ok), 0);
	ck_assert_uint_eq(ok.ngrants, 2);
	ck_assert_uint_eq(ok.grant[0].donor_id, ids[2]);
	ck_assert_uint_eq(ok.grant[0].ticket.nslabs, 2);
	ck_assert_uint_eq(ok.grant[1].donor_id, ids[0]);
	/* one node, no replica elsewhere */
	ck_assert_int_eq(place_at(a, 1, WIRE_PLACE_REPLICA, 1, T0, &ok),
			 -ENOSPC);
}
END_TEST

START_TEST(place_rejects_bad_requests)
{
	struct wire_place_ok ok;
	uint32_t a = tenant_add("a", 1024 * MiB);

	donor_up("host-a", 1, 100);
	ck_assert_int_eq(place(a, 1, 0x2, &ok), -EINVAL);
	ck_assert_int_eq(place(a, 0, 0, &ok), -EINVAL);
	ck_assert_int_eq(place(a, WIRE_MAX_LEASES + 1, 0, &ok), -EINVAL);
	ck_assert_int_eq(place(a + 1, 1, 0, &ok), -ENOENT);
	ck_assert_int_eq(place(a, WIRE_MAX_LEASES, 0, &ok), -ENOSPC);
	ck_assert_str_eq(err, "tenant 'a': 100 slabs free on 1 up donors (a "
			      "place uses at most 16), asked 256");
}
END_TEST

/* ---- donors ------------------------------------------------------------- */

struct donor_seen {
	int n;
	struct memd_registry_donor_info d[8];
};

static void keep_donor(void *arg, const struct memd_registry_donor_info *d)
{
	struct donor_seen *s = arg;

	if (s->n < 8)
		s->d[s->n++] = *d;
}

static struct memd_registry_donor_info donor_info(uint32_t id)
{
	struct donor_seen s = { 0 };

	memd_registry_foreach_donor(r, keep_donor, &s);
	for (int i = 0; i < s.n; i++)
		if (s.d[i].id == id)
			return s.d[i];
	ck_abort_msg("no donor %u", id);
	return s.d[0];
}

START_TEST(down_after_three_missed_reports)
{
	struct memd_registry_donor_info i;
	struct wire_place_ok ok;
	uint32_t a = tenant_add("a", 1024 * MiB);
	uint32_t d = donor_up("host-a", 7, 100);

	memd_registry_tick(r, T0 + 3 * REPORT_MS);
	ck_assert_int_eq(donor_info(d).state, MEMD_DONOR_UP);
	ck_assert_int_eq(report(d, 7, 100, T0 + 2500), 0);
	memd_registry_tick(r, T0 + 2500 + 3 * REPORT_MS);
	ck_assert_int_eq(donor_info(d).state, MEMD_DONOR_UP);
	memd_registry_tick(r, T0 + 2501 + 3 * REPORT_MS);
	i = donor_info(d);
	ck_assert_int_eq(i.state, MEMD_DONOR_DOWN);
	ck_assert_str_eq(i.reason, "no report for 3001 ms");
	ck_assert_str_eq(memd_donor_state_name(i.state), "down");
	/* a report now is stale: join again */
	ck_assert_int_eq(report(d, 7, 100, T0 + 6000), -ESTALE);
	ck_assert_ptr_nonnull(strstr(err, "join again"));
	ck_assert_uint_eq(join_at("host-a", 7, 110, T0 + 6000, NULL), d);
	i = donor_info(d);
	ck_assert_int_eq(i.state, MEMD_DONOR_UP);
	ck_assert_int_eq(report(d, 7, 100, T0 + 6100), 0);
	/* no tick between: now_ms alone decides, for places too */
	ck_assert_int_eq(place_at(a, 1, 0, WIRE_NODE_ANY,
				  T0 + 6100 + 3 * REPORT_MS, &ok),
			 0);
	ck_assert_int_eq(place_at(a, 1, 0, WIRE_NODE_ANY,
				  T0 + 6100 + 3 * REPORT_MS + 1, &ok),
			 -ENOSPC);
	ck_assert_int_eq(report(d, 7, 100, T0 + 6100 + 3 * REPORT_MS + 1),
			 -ESTALE);
}
END_TEST

/* The published donor list at now: 0 and its membership, or -errno. */
static int members_at(uint64_t now, uint32_t *count, uint64_t *membership)
{
	static struct wire_donors_ok l;
	uint32_t n;
	int rc;

	err[0] = '\0';
	rc = memd_registry_members(r, now, false, &l, &n, err, sizeof(err));
	if (!rc) {
		ck_assert_uint_eq(n, l.count);
		*count = n;
		*membership = l.membership;
	}
	return rc;
}

/*
 * The membership (docs/kv.md, "Donors that come and go"): a sequence
 * that names one list of the donors up and not draining, grows at every
 * change of it (join, down, drain, undrain), is durable, and after a
 * restart stays the same when the same donors join again: the registry
 * publishes no list until they have (EAGAIN), for MISSED_REPORTS + 1
 * report intervals and 3 s at most, and then without the ones that did
 * not, under a new sequence.
 */
START_TEST(membership_names_one_list)
{
	uint64_t grace = 4 * REPORT_MS + 3000, m0, m1, m2, m3, m4, m;
	uint32_t a, b, n;

	ck_assert_int_eq(members_at(T0, &n, &m0), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_ge(m0, 1);
	a = join_at("host-a", 1, 100, T0, NULL);
	m1 = last_membership;
	ck_assert_uint_gt(m1, m0);
	b = join_at("host-b", 2, 100, T0, NULL);
	m2 = last_membership;
	ck_assert_uint_gt(m2, m1);
	ck_assert_int_eq(members_at(T0, &n, &m), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(m, m2);
	/* no change, no new sequence: a report, a join of the same
	 * incarnation */
	ck_assert_int_eq(report(a, 1, 90, T0), 0);
	ck_assert_uint_eq(last_membership, m2);
	ck_assert_uint_eq(join_at("host-a", 1, 100, T0, NULL), a);
	ck_assert_uint_eq(last_membership, m2);
	/* a new incarnation under the same name while the old one counts
	 * up (restarted quicker than its loss was noticed): a new sequence
	 * for the same list, so the spill files it brought, written under
	 * m2, are not kept (before, it joined under m2 and kept them) */
	ck_assert_uint_eq(join_at("host-a", 3, 100, T0, NULL), a);
	ck_assert_uint_gt(last_membership, m2);
	m2 = last_membership;
	ck_assert_int_eq(members_at(T0, &n, &m), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(m, m2);
	/* a drain and an undrain: two lists */
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-b\","
			       "\"drain\":true}"),
			 0);
	ck_assert_int_eq(members_at(T0, &n, &m3), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_gt(m3, m2);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-b\","
			       "\"drain\":false}"),
			 0);
	ck_assert_int_eq(members_at(T0, &n, &m4), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_gt(m4, m3);

	/* restarted: no list until both are back, then the same one */
	reg_reopen();
	ck_assert_int_eq(members_at(T0, &n, &m), -EAGAIN);
	ck_assert_msg(strstr(err, "join again"), "%s", err);
	ck_assert_uint_eq(join_at("host-a", 3, 100, T0, NULL), a);
	ck_assert_uint_eq(last_membership, m4);
	ck_assert_int_eq(members_at(T0 + 10, &n, &m), -EAGAIN);
	ck_assert_uint_eq(join_at("host-b", 2, 100, T0 + 20, NULL), b);
	ck_assert_uint_eq(last_membership, m4);
	ck_assert_int_eq(members_at(T0 + 30, &n, &m), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(m, m4);

	/* restarted again, and b never comes back: a new list once the
	 * wait is over; a reported all along */
	reg_reopen();
	ck_assert_uint_eq(join_at("host-a", 3, 100, T0, NULL), a);
	ck_assert_uint_eq(last_membership, m4);
	for (uint64_t t = T0; t < T0 + grace; t += REPORT_MS / 2) {
		ck_assert_int_eq(report(a, 3, 90, t), 0);
		ck_assert_int_eq(members_at(t, &n, &m), -EAGAIN);
	}
	ck_assert_int_eq(report(a, 3, 90, T0 + grace), 0);
	ck_assert_int_eq(members_at(T0 + grace, &n, &m), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_gt(m, m4);
	ck_assert_uint_eq(last_membership, m);

	/* a donor marked down: a new list at once */
	m4 = m;
	ck_assert_uint_eq(join_at("host-b", 4, 100, T0 + grace, NULL), b);
	ck_assert_uint_gt(last_membership, m4);
	m4 = last_membership;
	memd_registry_donor_lost(r, b, 4, T0 + grace, "link closed");
	ck_assert_int_eq(members_at(T0 + grace, &n, &m), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_gt(m, m4);
}
END_TEST

/* A report that confirms membership m (protocol 6, WIRE_REPORT_HEARD). */
static int report_heard(uint32_t id, uint64_t epoch, uint64_t m, uint64_t now)
{
	static struct wire_donor_report rep;
	struct wire_donor_report_ok ok;

	memset(&rep, 0, sizeof(rep));
	rep.donor_id = id;
	rep.epoch = epoch;
	rep.slabs_free = 90;
	rep.flags = WIRE_REPORT_HEARD;
	rep.membership = m;
	memset(&ok, 0, sizeof(ok));
	err[0] = '\0';
	return memd_registry_donor_report(r, &rep, now, &ok, err, sizeof(err));
}

/*
 * Protocol 6 (docs/kv.md, "Donors that come and go", 7.): a new sequence
 * goes to clients only once every donor up whose link hears has
 * confirmed it; a donor's link gets the newest at once; a donor that
 * does not confirm within 3 report intervals and 5 s is marked down.
 */
START_TEST(membership_given_out_once_confirmed)
{
	static struct wire_donors_ok l;
	uint32_t a, b, c, n, nl;
	uint64_t m1, m2, m;

	a = join_at("host-a", 1, 100, T0, NULL);
	memd_registry_donor_hears(r, a, 1);
	b = join_at("host-b", 2, 100, T0, NULL);
	memd_registry_donor_hears(r, b, 2);
	m1 = last_membership;
	/* a confirmed nothing since b joined: the list before b */
	ck_assert_int_eq(members_at(T0, &n, &m), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_lt(m, m1);
	/* a donor's link is given the newest */
	ck_assert_int_eq(
		memd_registry_members(r, T0, true, &l, &nl, err, sizeof(err)),
		0);
	ck_assert_uint_eq(l.membership, m1);
	ck_assert_uint_eq(nl, 2);
	/* a report that confirms an older one changes nothing */
	ck_assert_int_eq(report_heard(a, 1, m1 - 1, T0 + 10), 0);
	ck_assert_int_eq(members_at(T0 + 10, &n, &m), 0);
	ck_assert_uint_lt(m, m1);
	ck_assert_int_eq(report_heard(a, 1, m1, T0 + 20), 0);
	ck_assert_int_eq(members_at(T0 + 20, &n, &m), 0);
	ck_assert_uint_eq(m, m1);
	ck_assert_uint_eq(n, 2);

	/* c joins; b confirms, a does not: c is not given out, and after
	 * 3 report intervals and 5 s a (reporting all along, unconfirmed) is
	 * marked down, and the list without it goes out once b and c
	 * confirm that one */
	c = join_at("host-c", 3, 100, T0 + 30, NULL);
	memd_registry_donor_hears(r, c, 3);
	m2 = last_membership;
	ck_assert_uint_gt(m2, m1);
	ck_assert_int_eq(report_heard(b, 2, m2, T0 + 40), 0);
	for (uint64_t t = T0 + 40; t <= T0 + 30 + 3 * REPORT_MS + 5000;
	     t += REPORT_MS / 2) {
		ck_assert_int_eq(report_heard(a, 1, m1, t), 0);
		ck_assert_int_eq(report_heard(b, 2, m2, t), 0);
		ck_assert_int_eq(report_heard(c, 3, m2, t), 0);
		ck_assert_int_eq(members_at(t, &n, &m), 0);
		ck_assert_uint_eq(m, m1);
	}
	ck_assert_int_eq(members_at(T0 + 5031 + 3 * REPORT_MS, &n, &m), 0);
	ck_assert_uint_eq(m, m1); /* b and c have not confirmed the new one */
	ck_assert_int_eq(report_heard(a, 1, m1, T0 + 5031 + 3 * REPORT_MS),
			 -ESTALE);
	ck_assert_msg(strstr(err, "did not confirm"), "%s", err);
	ck_assert_int_eq(memd_registry_members(r, T0 + 5031 + 3 * REPORT_MS,
					       true, &l, &nl, err, sizeof(err)),
			 0);
	ck_assert_uint_gt(l.membership, m2);
	ck_assert_uint_eq(nl, 2);
	ck_assert_int_eq(
		report_heard(b, 2, l.membership, T0 + 5032 + 3 * REPORT_MS), 0);
	ck_assert_int_eq(
		report_heard(c, 3, l.membership, T0 + 5032 + 3 * REPORT_MS), 0);
	ck_assert_int_eq(members_at(T0 + 5032 + 3 * REPORT_MS, &n, &m), 0);
	ck_assert_uint_eq(m, l.membership);
	ck_assert_uint_eq(n, 2);
}
END_TEST

START_TEST(donor_lost_marks_down)
{
	struct memd_registry_donor_info i;
	struct wire_place_ok ok;
	uint32_t a = tenant_add("a", 1024 * MiB);
	uint32_t d = donor_up("host-a", 7, 100);

	memd_registry_donor_lost(r, d, 8, T0, "wrong epoch");
	memd_registry_donor_lost(r, d + 1, 7, T0, "no such donor");
	ck_assert_int_eq(donor_info(d).state, MEMD_DONOR_UP);
	memd_registry_donor_lost(r, d, 7, T0, "control link closed");
	i = donor_info(d);
	ck_assert_int_eq(i.state, MEMD_DONOR_DOWN);
	ck_assert_str_eq(i.reason, "control link closed");
	ck_assert_int_eq(place(a, 1, 0, &ok), -ENOSPC);
	ck_assert_int_eq(report(d, 7, 100, T0), -ESTALE);
	ck_assert_int_eq(report(d + 5, 7, 100, T0), -ESTALE);
}
END_TEST

START_TEST(rejoin_new_epoch_keeps_id_drops_usage)
{
	struct wire_donor_join j = join_msg("host-a", 1, 100);
	struct wire_donor_join_ok jok;
	struct wire_place_ok ok;
	struct usage u[1];
	uint64_t used, reserved;
	uint32_t a, d, flags;

	a = tenant_add("a", 1024 * MiB);
	d = donor_up("host-a", 1, 100);
	u[0].tenant_id = a;
	u[0].slabs = 5;
	ck_assert_int_eq(report_full(d, 1, 95, u, 1, NULL, 0, T0, NULL), 0);
	quota_get("a", NULL, &used, NULL);
	ck_assert_uint_eq(used, 5 * MiB);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":true}"),
			 0);
	ck_assert_int_eq(donor_info(d).state, MEMD_DONOR_DRAINING);
	quota_get("a", NULL, &used, NULL); /* draining still counts */
	ck_assert_uint_eq(used, 5 * MiB);
	ck_assert_int_eq(report_full(d, 1, 95, u, 1, NULL, 0, T0, &flags), 0);
	ck_assert_uint_eq(flags, WIRE_DONOR_DRAIN);

	/* same epoch again (its link came back): usage and grants stay */
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":false}"),
			 0);
	ck_assert_int_eq(place(a, 3, 0, &ok), 0);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-a\","
			       "\"drain\":true}"),
			 0);
	ck_assert_uint_eq(join_at("host-a", 1, 100, T0 + 10, NULL), d);
	quota_get("a", NULL, &used, &reserved);
	ck_assert_uint_eq(used, 5 * MiB);
	ck_assert_uint_eq(reserved, 3 * MiB);

	ck_assert_uint_eq(join_at("host-a", 2, 100, T0 + 20, &flags), d);
	ck_assert_uint_eq(flags, WIRE_DONOR_DRAIN);
	ck_assert_int_eq(donor_info(d).state, MEMD_DONOR_DRAINING);
	ck_assert_uint_eq(donor_info(d).epoch, 2);
	/* the new incarnation refuses the old one's tickets: no longer
	 * reserved */
	quota_get("a", NULL, &used, &reserved);
	ck_assert_uint_eq(used, 0);
	ck_assert_uint_eq(reserved, 0);
	ck_assert_int_eq(report_full(d, 1, 95, u, 1, NULL, 0, T0 + 30, NULL),
			 -ESTALE);
	u[0].slabs = 2;
	ck_assert_int_eq(report_full(d, 2, 98, u, 1, NULL, 0, T0 + 30, NULL),
			 0);
	quota_get("a", NULL, &used, NULL);
	ck_assert_uint_eq(used, 2 * MiB);

	/* a donor whose slab size differs is refused, both sizes named */
	j.slab_bytes = 2 * MiB;
	ck_assert_int_eq(
		memd_registry_donor_join(r, &j, T0, &jok, err, sizeof(err)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "2097152"));
	ck_assert_ptr_nonnull(strstr(err, "1048576"));
	j = join_msg("bad name", 1, 100);
	ck_assert_int_eq(
		memd_registry_donor_join(r, &j, T0, &jok, err, sizeof(err)),
		-EINVAL);
}
END_TEST

START_TEST(reservations_released)
{
	struct wire_place_ok ok, ok2;
	struct usage u[1];
	uint64_t used, reserved, ids[3];
	uint32_t a, da, db;

	a = tenant_add("a", 1024 * MiB);
	da = donor_up("host-a", 1, 100);
	ck_assert_int_eq(place(a, 4, 0, &ok), 0);
	quota_get("a", NULL, &used, &reserved);
	ck_assert_uint_eq(used, 0);
	ck_assert_uint_eq(reserved, 4 * MiB);
	/* a report from another donor naming the grant is ignored, and so
	 * are unknown ids */
	db = donor_up("host-b", 2, 100);
	ids[0] = ok.grant[0].ticket.grant_id;
	ids[1] = 999999;
	ck_assert_int_eq(report_full(db, 2, 100, NULL, 0, ids, 1, T0, NULL), 0);
	quota_get("a", NULL, NULL, &reserved);
	ck_assert_uint_eq(reserved, 4 * MiB);
	/* free minus reserved: host-b (100) now beats host-a (96) */
	ck_assert_int_eq(place(a, 1, 0, &ok2), 0);
	ck_assert_uint_eq(ok2.grant[0].donor_id, db);
	ids[2] = ok2.grant[0].ticket.grant_id;
	ck_assert_uint_ne(ids[2], ids[0]);

	u[0].tenant_id = a;
	u[0].slabs = 4;
	ck_assert_int_eq(report_full(da, 1, 96, u, 1, ids, 2, T0, NULL), 0);
	quota_get("a", NULL, &used, &reserved);
	ck_assert_uint_eq(used, 4 * MiB);
	ck_assert_uint_eq(reserved, 1 * MiB);

	/* expiry: not at the ticket's ttl (donors allow skew), well after */
	ck_assert_int_eq(report(db, 2, 100, T0 + 2000), 0);
	ck_assert_int_eq(report(da, 1, 96, T0 + 2000), 0);
	memd_registry_tick(r, T0 + TICKET_TTL_MS);
	quota_get("a", NULL, NULL, &reserved);
	ck_assert_uint_eq(reserved, 1 * MiB);
	memd_registry_tick(r, T0 + TICKET_TTL_MS + 10 * 60 * 1000);
	quota_get("a", NULL, NULL, &reserved);
	ck_assert_uint_eq(reserved, 0);
}
END_TEST

START_TEST(tickets_verify)
{
	struct wire_place_ok ok;
	struct wire_ticket t;
	uint8_t other[AUTH_KEY_LEN];
	uint32_t a, d[2];

	a = tenant_add("a", 1024 * MiB);
	d[0] = donor_up("host-a", 0x1111, 100);
	d[1] = donor_up("host-b", 0x2222, 100);
	ck_assert_int_eq(
		place_at(a, 3, WIRE_PLACE_REPLICA, WIRE_NODE_ANY, T0, &ok), 0);
	check_layout(&ok, 3, true);
	ck_assert_uint_eq(ok.ngrants, 2);
	for (int g = 0; g < 2; g++) {
		t = ok.grant[g].ticket;
		ck_assert(auth_ticket_verify(keys.ticket, &t));
		ck_assert_uint_eq(t.registry_epoch, memd_registry_epoch(r));
		ck_assert_uint_eq(t.tenant_id, a);
		ck_assert_uint_eq(t.donor_id, d[g]);
		ck_assert_uint_eq(t.donor_epoch, g ? 0x2222 : 0x1111);
		ck_assert_uint_eq(ok.grant[g].donor_epoch, t.donor_epoch);
		ck_assert_uint_eq(t.nslabs, 3);
		ck_assert_int_eq(t.node, WIRE_NODE_ANY);
		ck_assert_uint_eq(t.expires_ms, U0 + TICKET_TTL_MS);
		ck_assert_uint_eq(t.grant_id, (uint64_t)g + 1);
		t.nslabs++;
		ck_assert(!auth_ticket_verify(keys.ticket, &t));
		t = ok.grant[g].ticket;
		t.tenant_id++;
		ck_assert(!auth_ticket_verify(keys.ticket, &t));
		memcpy(other, keys.ticket, sizeof(other));
		other[0] ^= 1;
		ck_assert(!auth_ticket_verify(other, &ok.grant[g].ticket));
	}
	ck_assert_int_eq(place(a, 1, 0, &ok), 0);
	ck_assert_uint_eq(ok.grant[0].ticket.grant_id, 3);
}
END_TEST

START_TEST(usage_rebuilt_after_reopen)
{
	struct memd_registry_donor_info i;
	struct usage u[2];
	uint64_t used;
	uint32_t a, b, d;

	a = tenant_add("a", 1024 * MiB);
	b = tenant_add("b", 1024 * MiB);
	d = donor_up("host-a", 1, 100);
	u[0] = (struct usage){ a, 3 };
	u[1] = (struct usage){ b, 7 };
	ck_assert_int_eq(report_full(d, 1, 90, u, 2, NULL, 0, T0, NULL), 0);
	quota_get("b", NULL, &used, NULL);
	ck_assert_uint_eq(used, 7 * MiB);

	reg_reopen();
	quota_get("a", NULL, &used, NULL);
	ck_assert_uint_eq(used, 0);
	i = donor_info(d);
	ck_assert_int_eq(i.state, MEMD_DONOR_DOWN);
	ck_assert_str_eq(i.reason, "not joined since the registry started");
	ck_assert_int_eq(report(d, 1, 90, T0), -ESTALE);
	ck_assert_uint_eq(join_at("host-a", 1, 110, T0, NULL), d);
	ck_assert_int_eq(report_full(d, 1, 90, u, 2, NULL, 0, T0, NULL), 0);
	quota_get("a", NULL, &used, NULL);
	ck_assert_uint_eq(used, 3 * MiB);
	quota_get("b", NULL, &used, NULL);
	ck_assert_uint_eq(used, 7 * MiB);
	/* a report replaces the donor's numbers */
	u[1].slabs = 1;
	ck_assert_int_eq(report_full(d, 1, 96, u, 2, NULL, 0, T0, NULL), 0);
	quota_get("b", NULL, &used, NULL);
	ck_assert_uint_eq(used, 1 * MiB);
	/* down: its usage no longer counts */
	memd_registry_donor_lost(r, d, 1, T0, "gone");
	quota_get("a", NULL, &used, NULL);
	ck_assert_uint_eq(used, 0);
}
END_TEST

/* ---- admin -------------------------------------------------------------- */

START_TEST(admin_status_donors_tenants)
{
	struct wire_place_ok ok;
	struct usage u[1];
	json_t *o, *x, *y;
	uint32_t a, da, db, dc;

	a = tenant_add("a", 100 * MiB);
	tenant_add("b", 50 * MiB);
	da = join_at("host-a", 0xabc, 100, T0, NULL);
	u[0] = (struct usage){ a, 10 };
	ck_assert_int_eq(report_full(da, 0xabc, 90, u, 1, NULL, 0, T0, NULL),
			 0);
	db = join_at("host-b", 2, 200, T0, NULL);
	ck_assert_int_eq(report(db, 2, 200, T0), 0);
	dc = join_at("host-c", 3, 400, T0, NULL);
	ck_assert_int_eq(report(dc, 3, 400, T0), 0);
	ck_assert_int_gt(admin("{\"cmd\":\"drain\",\"donor\":\"host-b\","
			       "\"drain\":true}"),
			 0);
	memd_registry_donor_lost(r, dc, 3, T0, "gone");
	ck_assert_int_eq(place(a, 5, 0, &ok), 0); /* all on host-a */

	ck_assert_int_gt(admin("{\"cmd\":\"status\"}"), 0);
	o = json_loads(out, 0, NULL);
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(JINT(o, "slab_bytes"), MiB);
	ck_assert_int_eq(reply_int(out, "capacity_bytes"), 300 * MiB);
	ck_assert_int_eq(reply_int(out, "used_bytes"), 10 * MiB);
	ck_assert_int_eq(reply_int(out, "reserved_bytes"), 5 * MiB);
	ck_assert_int_eq(reply_int(out, "free_bytes"), 85 * MiB);
	x = json_object_get(o, "donors");
	ck_assert_int_eq(JINT(x, "up"), 1);
	ck_assert_int_eq(JINT(x, "draining"), 1);
	ck_assert_int_eq(JINT(x, "down"), 1);
	x = json_object_get(o, "tenants");
	ck_assert_uint_eq(json_array_size(x), 2);
	y = json_array_get(x, 0);
	ck_assert_str_eq(JSTR(y, "name"), "a");
	ck_assert_int_eq(JINT(y, "id"), a);
	ck_assert_int_eq(JINT(y, "quota_bytes"), 100 * MiB);
	ck_assert_int_eq(JINT(y, "used_bytes"), 10 * MiB);
	ck_assert_int_eq(JINT(y, "reserved_bytes"), 5 * MiB);
	json_decref(o);
	ck_assert_ptr_null(strchr(out, ' ')); /* compact */
	ck_assert_ptr_null(strchr(out, '\n'));

	ck_assert_int_gt(admin("{\"cmd\":\"donors\"}"), 0);
	o = json_loads(out, 0, NULL);
	x = json_object_get(o, "donors");
	ck_assert_uint_eq(json_array_size(x), 3);
	y = json_array_get(x, 0);
	ck_assert_int_eq(JINT(y, "id"), da);
	ck_assert_str_eq(JSTR(y, "name"), "host-a");
	ck_assert_str_eq(JSTR(y, "addr"), "host-a.example:7070");
	ck_assert_str_eq(JSTR(y, "state"), "up");
	ck_assert_str_eq(JSTR(y, "epoch"), "0000000000000abc");
	ck_assert_int_eq(JINT(y, "slabs_total"), 100);
	ck_assert_int_eq(JINT(y, "slabs_free"), 90);
	ck_assert_int_eq(JINT(y, "slabs_leased"), 10);
	ck_assert_int_eq(JINT(y, "capacity_bytes"), 100 * MiB);
	ck_assert_int_eq(JINT(y, "free_bytes"), 85 * MiB);
	ck_assert_int_eq(JINT(y, "bytes_read"), 1000 * da);
	ck_assert_int_eq(JINT(y, "bytes_written"), 2000 * da);
	ck_assert_int_gt(JINT(y, "since_unix_ms"), 0);
	y = json_array_get(json_object_get(y, "tenants"), 0);
	ck_assert_str_eq(JSTR(y, "name"), "a");
	ck_assert_int_eq(JINT(y, "used_bytes"), 10 * MiB);
	ck_assert_int_eq(JINT(y, "sessions"), 1);
	y = json_array_get(x, 1);
	ck_assert_str_eq(JSTR(y, "state"), "draining");
	y = json_array_get(x, 2);
	ck_assert_str_eq(JSTR(y, "state"), "down");
	ck_assert_str_eq(JSTR(y, "reason"), "gone");
	json_decref(o);

	ck_assert_int_gt(admin("{\"cmd\":\"tenants\"}"), 0);
	o = json_loads(out, 0, NULL);
	x = json_object_get(o, "tenants");
	ck_assert_uint_eq(json_array_size(x), 2);
	y = json_array_get(x, 1);
	ck_assert_str_eq(JSTR(y, "name"), "b");
	ck_assert_int_eq(JINT(y, "quota_bytes"), 50 * MiB);
	ck_assert_int_eq(JINT(y, "used_bytes"), 0);
	json_decref(o);

	ck_assert_int_gt(admin("{\"cmd\":\"quota-get\",\"name\":\"a\"}"), 0);
	ck_assert_str_eq(out, "{\"name\":\"a\",\"quota_bytes\":104857600,"
			      "\"used_bytes\":10485760,\"reserved_bytes\":"
			      "5242880}");
	/* reply too big for out */
	ck_assert_int_eq(admin_cap("{\"cmd\":\"status\"}", 8), -ENOSPC);
}
END_TEST

START_TEST(admin_tenant_lifecycle_and_errors)
{
	struct wire_place_ok ok;
	uint8_t key[AUTH_KEY_LEN], box[AUTH_SEAL_OVERHEAD + AUTH_KEY_LEN];
	uint8_t wrong[AUTH_KEY_LEN];
	char hex[2 * sizeof(box) + 1], longname[65];
	uint32_t a;
	int rc;

	rc = tenant_add_rc("a", 10 * MiB);
	ck_assert_int_gt(rc, 0);
	ck_assert_str_eq(out, "{\"id\":1}");
	ck_assert_int_eq(rc, (int)strlen(out));
	a = 1;
	ck_assert_int_eq(tenant_add_rc("a", 10 * MiB), -EEXIST);
	ck_assert_int_eq(tenant_add_rc("bad name", 10 * MiB), -EINVAL);
	ck_assert_int_eq(tenant_add_rc("@admin", 10 * MiB), -EINVAL);
	memset(longname, 'x', 64);
	longname[64] = '\0';
	ck_assert_int_eq(tenant_add_rc(longname, 1), -EINVAL);
	longname[63] = '\0';
	ck_assert_int_gt(tenant_add_rc(longname, 1), 0);

	/* key_box sealed with another key, or not hex, or a short key */
	tenant_key_of("c", key);
	memcpy(wrong, session_key, sizeof(wrong));
	wrong[3] ^= 0x40;
	auth_seal(wrong, key, sizeof(key), box, sizeof(box));
	auth_hex(box, sizeof(box), hex);
	ck_assert_int_eq(admin_f("{\"cmd\":\"tenant-add\",\"name\":\"c\","
				 "\"quota_bytes\":1,\"key_box\":\"%s\"}",
				 hex),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "key_box"));
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-add\",\"name\":\"c\","
			       "\"quota_bytes\":1,\"key_box\":\"xyz\"}"),
			 -EINVAL);
	auth_seal(session_key, key, 16, box, sizeof(box));
	auth_hex(box, AUTH_SEAL_OVERHEAD + 16, hex);
	ck_assert_int_eq(admin_f("{\"cmd\":\"tenant-add\",\"name\":\"c\","
				 "\"quota_bytes\":1,\"key_box\":\"%s\"}",
				 hex),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-add\",\"name\":\"c\","
			       "\"quota_bytes\":1}"),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "key_box"));
	ck_assert_int_eq(memd_registry_tenant_key(r, "c", NULL, NULL), -ENOENT);

	/* bad JSON, unknown cmd, unknown field, missing or bad fields */
	ck_assert_int_eq(admin("{\"cmd\":"), -EINVAL);
	ck_assert_int_eq(admin("not json"), -EINVAL);
	ck_assert_int_eq(admin("[\"status\"]"), -EINVAL);
	ck_assert_int_eq(admin("{}"), -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":7}"), -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"status\"} trailing"), -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"statuz\"}"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "statuz"));
	ck_assert_int_eq(admin("{\"cmd\":\"status\",\"verbose\":true}"),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'verbose'"));
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota\":5}"),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'quota'"));
	ck_assert_int_eq(admin("{\"cmd\":\"quota-get\"}"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'name'"));
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-remove\"}"), -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-get\",\"name\":5}"), -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-get\",\"name\":\"zz\"}"),
			 -ENOENT);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-remove\",\"name\":\"zz\"}"),
			 -ENOENT);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota_bytes\":-1}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota_bytes\":\"1G\"}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"a\","
			       "\"quota_bytes\":1.5}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"quota-set\",\"name\":\"a\"}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"drain\",\"donor\":\"nope\","
			       "\"drain\":true}"),
			 -ENOENT);
	ck_assert_int_eq(admin("{\"cmd\":\"drain\",\"donor\":\"nope\"}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"drain\",\"donor\":\"nope\","
			       "\"drain\":1}"),
			 -EINVAL);
	ck_assert_int_eq(admin("{\"cmd\":\"status\",\"cmd\":\"donors\"}"),
			 -EINVAL);

	/* remove: busy while reserved or used */
	donor_up("host-a", 1, 100);
	ck_assert_int_eq(place(a, 2, 0, &ok), 0);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-remove\",\"name\":\"a\"}"),
			 -EBUSY);
	ck_assert_str_eq(err, "tenant 'a' still holds memory: used 0 B, "
			      "reserved 2.0 MiB");
	memd_registry_tick(r, T0 + 3 * REPORT_MS - 1);
	ck_assert_int_eq(report(1, 1, 98, T0 + 3 * REPORT_MS - 1), 0);
	memd_registry_tick(r, T0 + TICKET_TTL_MS + 10 * 60 * 1000);
	ck_assert_int_eq(admin("{\"cmd\":\"tenant-remove\",\"name\":\"a\"}"),
			 2);
	ck_assert_str_eq(out, "{}");
	ck_assert_int_eq(memd_registry_tenant_key(r, "a", NULL, NULL), -ENOENT);
	ck_assert_int_eq(place(a, 1, 0, &ok), -ENOENT);
	/* a new tenant gets a new id */
	ck_assert_uint_eq(tenant_add("a", MiB), 3);
}
END_TEST

/* ---- snapshots and passes ----------------------------------------------- */

struct tenant_seen {
	int n;
	int keys_found; /* the callback may call the registry */
	struct memd_registry_tenant_info t[4];
};

static void keep_tenant(void *arg, const struct memd_registry_tenant_info *t)
{
	struct tenant_seen *s = arg;

	if (memd_registry_tenant_key(r, t->name, NULL, NULL) == 0)
		s->keys_found++;
	if (s->n < 4)
		s->t[s->n++] = *t;
}

START_TEST(foreach_snapshots)
{
	struct tenant_seen s = { 0 };
	struct memd_registry_donor_info d;
	struct wire_place_ok ok;
	struct usage u[1];
	uint32_t a, b, da;

	memd_registry_foreach_tenant(r, keep_tenant, &s);
	ck_assert_int_eq(s.n, 0);
	a = tenant_add("a", 100 * MiB);
	b = tenant_add("b", 200 * MiB);
	da = join_at("host-a", 9, 64, T0, NULL);
	u[0] = (struct usage){ b, 3 };
	ck_assert_int_eq(report_full(da, 9, 61, u, 1, NULL, 0, T0, NULL), 0);
	ck_assert_int_eq(place(a, 2, 0, &ok), 0);

	memd_registry_foreach_tenant(r, keep_tenant, &s);
	ck_assert_int_eq(s.n, 2);
	ck_assert_int_eq(s.keys_found, 2);
	ck_assert_uint_eq(s.t[0].id, a);
	ck_assert_str_eq(s.t[0].name, "a");
	ck_assert_uint_eq(s.t[0].quota_bytes, 100 * MiB);
	ck_assert_uint_eq(s.t[0].used_bytes, 0);
	ck_assert_uint_eq(s.t[0].reserved_bytes, 2 * MiB);
	ck_assert_uint_eq(s.t[1].id, b);
	ck_assert_uint_eq(s.t[1].used_bytes, 3 * MiB);
	ck_assert_uint_eq(s.t[1].reserved_bytes, 0);

	d = donor_info(da);
	ck_assert_str_eq(d.name, "host-a");
	ck_assert_str_eq(d.addr, "host-a.example:7070");
	ck_assert_int_eq(d.state, MEMD_DONOR_UP);
	ck_assert_str_eq(d.reason, "joined");
	ck_assert_uint_eq(d.epoch, 9);
	ck_assert_uint_eq(d.slabs_total, 64);
	ck_assert_uint_eq(d.slabs_free, 61);
	ck_assert_uint_eq(d.slabs_leased, 3);
	ck_assert_uint_eq(d.bytes_read, 1000 * da);
	ck_assert_uint_eq(d.bytes_written, 2000 * da);
	ck_assert_uint_gt(d.since_unix_ms, 0);
	ck_assert_str_eq(memd_donor_state_name(MEMD_DONOR_DRAINING),
			 "draining");
	ck_assert_str_eq(memd_donor_state_name(MEMD_DONOR_UP), "up");
}
END_TEST

START_TEST(make_pass_fields)
{
	struct auth_pass p, q;
	uint32_t a = tenant_add("alpha", MiB);
	static const uint8_t zero[AUTH_KEY_LEN];

	ck_assert_int_eq(memd_registry_make_pass(r, a, U0, &p), 0);
	ck_assert_uint_eq(p.tenant_id, a);
	ck_assert_str_eq(p.tenant, "alpha");
	ck_assert_uint_eq(p.registry_epoch, memd_registry_epoch(r));
	ck_assert_uint_ne(p.registry_epoch, 0);
	ck_assert_uint_eq(p.expires_ms, U0 + PASS_TTL_MS);
	ck_assert_mem_ne(p.key, zero, AUTH_KEY_LEN);
	ck_assert_int_eq(memd_registry_make_pass(r, a, U0, &q), 0);
	ck_assert_mem_ne(p.key, q.key, AUTH_KEY_LEN);
	ck_assert_int_eq(memd_registry_make_pass(r, a + 1, U0, &q), -ENOENT);
}
END_TEST

static Suite *registry_suite(void)
{
	Suite *s = suite_create("registry");
	TCase *tc = tcase_create("registry");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, tenants_persist_across_reopen);
	tcase_add_test(tc, tenant_cost_model_persists);
	tcase_add_test(tc, failed_directory_sync_leaves_nothing_behind);
	tcase_add_test(tc, donor_identity_and_drain_persist);
	tcase_add_test(tc, corrupt_state_is_refused_and_kept);
	tcase_add_test(tc, state_dir_errors);
	tcase_add_test(tc, unwritable_state_changes_nothing);
	tcase_add_test(tc, edquot_exact_boundary);
	tcase_add_test(tc, quota_counts_used_and_lowering_blocks);
	tcase_add_test(tc, kv_allowances_split_what_the_quota_leaves);
	tcase_add_test(tc, place_makes_kv_yield);
	tcase_add_test(tc, concurrent_places_never_overshoot);
	tcase_add_test(tc, striping_spreads_evenly);
	tcase_add_test(tc, at_most_16_donors_the_freest);
	tcase_add_test(tc, replica_on_another_donor);
	tcase_add_test(tc, only_up_reported_donors_get_slabs);
	tcase_add_test(tc, node_filter);
	tcase_add_test(tc, place_rejects_bad_requests);
	tcase_add_test(tc, down_after_three_missed_reports);
	tcase_add_test(tc, donor_lost_marks_down);
	tcase_add_test(tc, membership_names_one_list);
	tcase_add_test(tc, membership_given_out_once_confirmed);
	tcase_add_test(tc, rejoin_new_epoch_keeps_id_drops_usage);
	tcase_add_test(tc, reservations_released);
	tcase_add_test(tc, tickets_verify);
	tcase_add_test(tc, usage_rebuilt_after_reopen);
	tcase_add_test(tc, admin_status_donors_tenants);
	tcase_add_test(tc, admin_tenant_lifecycle_and_errors);
	tcase_add_test(tc, foreach_snapshots);
	tcase_add_test(tc, make_pass_fields);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(registry_suite());
}
