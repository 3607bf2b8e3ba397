// SPDX-License-Identifier: MIT
/*
 * tests/test_cluster_auth.c - authentication and tenant isolation at a
 * registry memd on loopback (docs/cluster.md): wrong secret, unknown
 * tenant, replayed handshake, requests before authentication, forged,
 * foreign and replayed tickets, another tenant's lease reference, donor
 * passes, quotas. Every refusal must leave memd serving.
 *
 * One registry memd (which also donates: its own donor part "r0" joins
 * it) is started once for the whole suite by an unchecked fixture.
 */
#include <check.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"
#include "tests/testutil.h"

#define SLAB (16ull << 20)
#define TMO 5000

static struct tu_memd reg;
static char dir[64], cluster[256], sec_a[256], sec_b[256], state[300];

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Waits until the registry lists its own donor r0 as up. */
static int wait_r0_up(void)
{
	char out[8192];
	int r = tu_admin_until(reg.addr, cluster, "{\"cmd\":\"donors\"}", 20000,
			       out, sizeof(out), "\"r0\"", "\"up\"", NULL);

	if (r)
		fprintf(stderr, "r0 never came up: %s\n", out);
	return r;
}

static void suite_setup(void)
{
	const char *args[] = { "--set", "report_interval=100ms", "--donate",
			       "128M", NULL };
	int r;

	auth_init();
	if (tu_pool_dir(dir, sizeof(dir), "cauth", state, sizeof(state),
			cluster) ||
	    tu_secret_file(dir, "a.secret", sec_a) ||
	    tu_secret_file(dir, "b.secret", sec_b))
		abort();
	r = tu_registry_start(&reg, cluster, state, NULL, args);
	if (r) {
		fprintf(stderr, "registry memd did not start: %s\n",
			strerror(-r));
		abort();
	}
	if (wait_r0_up() ||
	    tu_tenant_add(reg.addr, cluster, "a", sec_a, 64 * SLAB) ||
	    tu_tenant_add(reg.addr, cluster, "b", sec_b, 2 * SLAB))
		abort();
}

static void suite_teardown(void)
{
	tu_memd_stop(&reg, SIGTERM);
	tu_sh("rm -rf %s", dir);
}

/* A connection with HELLO done; hello filled. */
static struct rpc *hello(struct wire_hello_ok *h)
{
	char local[64], err[256];
	struct rpc *c;
	int r = rpc_connect(reg.addr, TMO, &c, local, sizeof(local));

	ck_assert_msg(r == 0, "connect: %s", strerror(-r));
	r = rpc_hello(c, "test_cluster_auth", 2, TMO, h, err, sizeof(err));
	ck_assert_msg(r == 0, "hello: %s %s", strerror(-r), err);
	ck_assert_uint_eq(h->proto, WIRE_PROTO_MAX);
	return c;
}

/* An authenticated tenant session; key from the secret file. */
static struct rpc *tenant(const char *name, const char *secret,
			  struct wire_auth_ok *ok, uint8_t skey[32])
{
	struct wire_hello_ok h;
	uint8_t key[AUTH_KEY_LEN];
	char err[256];
	struct rpc *c = hello(&h);
	int r;

	tu_tenant_key(secret, key);
	r = rpc_auth(c, &h, name, key, NULL, 0, TMO, ok, skey, err,
		     sizeof(err));
	ck_assert_msg(r == 0, "auth %s: %s %s", name, strerror(-r), err);
	ck_assert_uint_eq(ok->role, WIRE_ROLE_TENANT);
	ck_assert(ok->flags & WIRE_AUTH_REGISTRY);
	return c;
}

static int call(struct rpc *c, struct wire_msg *req, struct wire_msg *rep,
		int expect, char *err, size_t errlen)
{
	return rpc_call(c, req, rep, expect, TMO, err, errlen);
}

/* memd still answers a fresh, correct session. */
static void assert_memd_serves(void)
{
	struct wire_auth_ok ok;
	uint8_t skey[32];
	struct rpc *c = tenant("a", sec_a, &ok, skey);
	struct wire_msg req = { .type = WIRE_STATUS }, rep;
	char err[256];

	ck_assert_int_eq(call(c, &req, &rep, WIRE_STATUS_OK, err, sizeof(err)),
			 0);
	rpc_close(c);
}

static struct wire_msg *msg(void)
{
	struct wire_msg *m = calloc(1, sizeof(*m));

	ck_assert_ptr_nonnull(m);
	return m;
}

START_TEST(wrong_secret_and_unknown_tenant)
{
	char path[256], err[256];
	struct wire_hello_ok h;
	struct wire_auth_ok ok;
	uint8_t key[32], skey[32];
	struct wire_msg req = { .type = WIRE_STATUS }, rep;
	struct rpc *c;
	int r;

	ck_assert_int_eq(tu_secret_file(dir, "wrong.secret", path), 0);
	tu_tenant_key(path, key);
	c = hello(&h);
	r = rpc_auth(c, &h, "a", key, NULL, 0, TMO, &ok, skey, err,
		     sizeof(err));
	ck_assert_int_eq(r, -EACCES);
	ck_assert_str_eq(err, "authentication failed");
	/* memd closed the connection. */
	ck_assert_int_ne(call(c, &req, &rep, WIRE_STATUS_OK, NULL, 0), 0);
	rpc_close(c);

	/* An unknown tenant gets the very same answer. */
	c = hello(&h);
	r = rpc_auth(c, &h, "nobody", key, NULL, 0, TMO, &ok, skey, err,
		     sizeof(err));
	ck_assert_int_eq(r, -EACCES);
	ck_assert_str_eq(err, "authentication failed");
	rpc_close(c);
	assert_memd_serves();
}
END_TEST

START_TEST(replayed_handshake)
{
	struct wire_msg *req = msg(), *rep = msg();
	uint8_t key[32], cn[WIRE_NONCE_LEN] = { 7 }, proof[WIRE_MAC_LEN];
	struct wire_hello_ok h;
	char err[256];
	struct rpc *c;

	tu_tenant_key(sec_a, key);
	/* A good handshake, recorded as an eavesdropper would. */
	c = hello(&h);
	req->type = WIRE_AUTH;
	strcpy(req->u.auth.principal, "a");
	memcpy(req->u.auth.cnonce, cn, sizeof(cn));
	ck_assert_int_eq(
		call(c, req, rep, WIRE_AUTH_CHALLENGE, err, sizeof(err)), 0);
	auth_client_proof(key, "a", h.session_id, h.epoch, cn,
			  rep->u.auth_challenge.snonce, proof);
	memset(req, 0, sizeof(*req));
	req->type = WIRE_AUTH_PROOF;
	memcpy(req->u.auth_proof.mac, proof, sizeof(proof));
	ck_assert_int_eq(call(c, req, rep, WIRE_AUTH_OK, err, sizeof(err)), 0);
	rpc_close(c);

	/* Replayed on a new connection: same AUTH, same proof. */
	c = hello(&h);
	memset(req, 0, sizeof(*req));
	req->type = WIRE_AUTH;
	strcpy(req->u.auth.principal, "a");
	memcpy(req->u.auth.cnonce, cn, sizeof(cn));
	ck_assert_int_eq(
		call(c, req, rep, WIRE_AUTH_CHALLENGE, err, sizeof(err)), 0);
	memset(req, 0, sizeof(*req));
	req->type = WIRE_AUTH_PROOF;
	memcpy(req->u.auth_proof.mac, proof, sizeof(proof));
	ck_assert_int_eq(call(c, req, rep, WIRE_AUTH_OK, err, sizeof(err)),
			 -EACCES);
	rpc_close(c);
	/* A proof without AUTH is out of sequence. */
	c = hello(&h);
	ck_assert_int_eq(call(c, req, rep, WIRE_AUTH_OK, err, sizeof(err)),
			 -EPROTO);
	rpc_close(c);
	free(req);
	free(rep);
	assert_memd_serves();
}
END_TEST

START_TEST(requests_before_auth)
{
	static const uint8_t types[] = { WIRE_STATUS, WIRE_LEASE,
					 WIRE_PLACE,  WIRE_HEARTBEAT,
					 WIRE_ADMIN,  WIRE_DONOR_REPORT };
	struct wire_msg *req = msg(), *rep = msg();
	struct wire_hello_ok h;
	char err[256];

	for (size_t i = 0; i < sizeof(types); i++) {
		struct rpc *c = hello(&h);

		memset(req, 0, sizeof(*req));
		req->type = types[i];
		if (types[i] == WIRE_LEASE)
			req->u.lease.nslabs = 1, req->u.lease.node = -1;
		if (types[i] == WIRE_PLACE)
			req->u.place.nslabs = 1, req->u.place.node = -1;
		if (types[i] == WIRE_ADMIN)
			req->u.admin.json = "{\"cmd\":\"status\"}",
			req->u.admin.json_len = 16;
		if (types[i] == WIRE_DONOR_REPORT)
			req->u.donor_report.epoch = 1;
		err[0] = '\0';
		ck_assert_int_eq(
			call(c, req, rep, types[i] | 0x80, err, sizeof(err)),
			-EACCES);
		ck_assert_msg(strstr(err, "before authentication"), "%s", err);
		rpc_close(c);
	}
	/* A client that only speaks protocol 1 cannot join a pool. */
	{
		char local[64];
		struct rpc *c;

		ck_assert_int_eq(
			rpc_connect(reg.addr, TMO, &c, local, sizeof(local)),
			0);
		memset(req, 0, sizeof(*req));
		req->type = WIRE_HELLO;
		req->u.hello.proto_min = 1;
		req->u.hello.proto_max = 1;
		ck_assert_int_eq(
			call(c, req, rep, WIRE_HELLO_OK, err, sizeof(err)),
			-EPROTONOSUPPORT);
		rpc_close(c);
	}
	free(req);
	free(rep);
	assert_memd_serves();
}
END_TEST

/* PLACE nslabs for a session; the first grant's ticket. */
static int place(struct rpc *c, uint32_t nslabs, struct wire_ticket *t,
		 char *err, size_t errlen)
{
	struct wire_msg *req = msg(), *rep = msg();
	int r;

	req->type = WIRE_PLACE;
	req->u.place.nslabs = nslabs;
	req->u.place.node = -1;
	r = call(c, req, rep, WIRE_PLACE_OK, err, errlen);
	if (!r && t)
		*t = rep->u.place_ok.grant[0].ticket;
	free(req);
	free(rep);
	return r;
}

/* tenant(), and the pass key its AUTH_OK (in *ok) carries, in pk (64
 * bytes). */
static struct rpc *tenant_pass(const char *name, const char *secret,
			       struct wire_auth_ok *ok, uint8_t *pk)
{
	uint8_t skey[32];
	struct rpc *c = tenant(name, secret, ok, skey);

	ck_assert_int_eq(auth_open(skey, ok->box, ok->box_len, pk, 64),
			 AUTH_KEY_LEN);
	return c;
}

/* A new tenant name with a quota of one slab; its secret file (made
 * here, in dir) in sec. */
static void tenant_new(const char *name, char *sec)
{
	char file[64];

	snprintf(file, sizeof(file), "%s.secret", name);
	ck_assert_int_eq(tu_secret_file(dir, file, sec), 0);
	ck_assert_int_eq(tu_tenant_add(reg.addr, cluster, name, sec, SLAB), 0);
}

/* A tenant session at the donor (the registry's own donor part) with the
 * pass its registry session got. */
static struct rpc *donor_session(const char *name, const char *secret,
				 const char *as)
{
	struct wire_auth_ok ok, ok2;
	uint8_t pkey[64], skey2[32];
	struct wire_hello_ok h;
	char err[256];
	struct rpc *rc = tenant_pass(name, secret, &ok, pkey), *c;
	int r;

	ck_assert_uint_gt(ok.pass_len, 0);
	rpc_close(rc);
	c = hello(&h);
	r = rpc_auth(c, &h, as, pkey, ok.pass, ok.pass_len, TMO, &ok2, skey2,
		     err, sizeof(err));
	if (r) {
		rpc_close(c);
		return NULL;
	}
	ck_assert_uint_eq(ok2.role, WIRE_ROLE_TENANT);
	ck_assert_uint_eq(ok2.tenant_id, ok.tenant_id);
	return c;
}

static int lease_grant(struct rpc *c, const struct wire_ticket *t,
		       struct wire_msg *rep, char *err, size_t errlen)
{
	struct wire_msg *req = msg();
	int r;

	req->type = WIRE_LEASE_GRANT;
	req->u.lease_grant.ticket = *t;
	r = call(c, req, rep, WIRE_LEASE_GRANT_OK, err, errlen);
	free(req);
	return r;
}

START_TEST(tickets_forged_foreign_replayed)
{
	struct wire_msg *rep = msg();
	struct wire_auth_ok ok;
	struct wire_ticket t, bad;
	uint8_t skey[32];
	char err[256];
	struct rpc *ra = tenant("a", sec_a, &ok, skey);
	struct rpc *da = donor_session("a", sec_a, "a");
	struct rpc *db = donor_session("b", sec_b, "b");

	ck_assert_ptr_nonnull(da);
	ck_assert_ptr_nonnull(db);
	ck_assert_int_eq(place(ra, 1, &t, err, sizeof(err)), 0);

	/* Tenant b presents a's ticket. */
	ck_assert_int_eq(lease_grant(db, &t, rep, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "another tenant"), "%s", err);
	/* Forged: any field changed, or the MAC. */
	bad = t;
	bad.nslabs = 8;
	ck_assert_int_eq(lease_grant(da, &bad, rep, err, sizeof(err)), -EACCES);
	bad = t;
	bad.mac[5] ^= 1;
	ck_assert_int_eq(lease_grant(da, &bad, rep, err, sizeof(err)), -EACCES);
	bad = t;
	bad.tenant_id = ok.tenant_id + 1;
	ck_assert_int_eq(lease_grant(db, &bad, rep, err, sizeof(err)), -EACCES);
	/* The real one works once, and only once. */
	ck_assert_int_eq(lease_grant(da, &t, rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep->u.lease_ok.count, 1);
	ck_assert_int_eq(lease_grant(da, &t, rep, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "already redeemed"), "%s", err);
	rpc_close(ra);
	rpc_close(da);
	rpc_close(db);
	free(rep);
	assert_memd_serves();
}
END_TEST

START_TEST(foreign_lease_reference)
{
	struct wire_msg *rep = msg(), *req = msg();
	struct wire_auth_ok ok;
	struct wire_ticket t;
	struct wire_lease l;
	uint8_t skey[32];
	char err[256];
	struct rpc *ra = tenant("a", sec_a, &ok, skey);
	struct rpc *da = donor_session("a", sec_a, "a");
	struct rpc *db = donor_session("b", sec_b, "b");

	ck_assert_int_eq(place(ra, 1, &t, err, sizeof(err)), 0);
	ck_assert_int_eq(lease_grant(da, &t, rep, err, sizeof(err)), 0);
	l = rep->u.lease_ok.lease[0];
	/* b names a's lease: refused, and a's lease lives on. */
	req->type = WIRE_RELEASE;
	req->u.release.count = 1;
	req->u.release.ref[0] = (struct wire_lease_ref){
		.epoch = l.epoch, .slab = l.slab, .generation = l.generation
	};
	ck_assert_int_eq(call(db, req, rep, WIRE_RELEASE_OK, err, sizeof(err)),
			 -EPERM);
	memset(req, 0, sizeof(*req));
	req->type = WIRE_HEARTBEAT;
	ck_assert_int_eq(
		call(da, req, rep, WIRE_HEARTBEAT_OK, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep->u.heartbeat_ok.nleases, 1);
	/* A pass is bound to its tenant: a's pass presented as b fails. */
	ck_assert_ptr_null(donor_session("a", sec_a, "b"));
	/* Leases without a ticket are refused in a pool. */
	memset(req, 0, sizeof(*req));
	req->type = WIRE_LEASE;
	req->u.lease.nslabs = 1;
	req->u.lease.node = -1;
	ck_assert_int_eq(call(db, req, rep, WIRE_LEASE_OK, err, sizeof(err)),
			 -EOPNOTSUPP);
	rpc_close(ra);
	rpc_close(da);
	rpc_close(db);
	free(req);
	free(rep);
	assert_memd_serves();
}
END_TEST

START_TEST(quota_edquot)
{
	struct wire_auth_ok ok;
	uint8_t skey[32];
	char err[256];
	struct rpc *rb = tenant("b", sec_b, &ok, skey);

	/* b's quota is 2 slabs; tickets count as reserved until redeemed or
	 * expired, so a third slab is over quota at once. */
	ck_assert_int_eq(place(rb, 2, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(place(rb, 1, NULL, err, sizeof(err)), -EDQUOT);
	ck_assert_msg(strstr(err, "quota"), "%s", err);
	rpc_close(rb);
	assert_memd_serves();
}
END_TEST

struct racer {
	uint32_t granted;
};

static void *race(void *arg)
{
	struct racer *rc = arg;
	struct wire_auth_ok ok;
	uint8_t skey[32];
	char err[256];
	struct rpc *c = tenant("a", sec_a, &ok, skey);

	for (int i = 0; i < 40; i++)
		if (place(c, 1, NULL, err, sizeof(err)) == 0)
			rc->granted++;
	rpc_close(c);
	return NULL;
}

START_TEST(quota_concurrent_places_never_overshoot)
{
	struct racer rc[6] = { 0 };
	pthread_t th[6];
	uint32_t total = 0;

	/* a's quota is 64 slabs; 6 x 40 asks, each 1 slab (tickets stay
	 * reserved for their TTL, so nothing is given back meanwhile). */
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, race, &rc[i]), 0);
	for (int i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		total += rc[i].granted;
	}
	ck_assert_uint_le(total, 64);
	ck_assert_uint_gt(total, 0);
	assert_memd_serves();
}
END_TEST

/* ADMIN's JSON, read once by memd's server and handed to the registry:
 * each way of being malformed is refused with its reason, "leases" is
 * served, and memd goes on serving. */
START_TEST(admin_json_refusals)
{
	char out[8192];

	ck_assert_int_eq(
		tu_admin(reg.addr, cluster, "{\"cmd\":", out, sizeof(out)),
		-EINVAL);
	ck_assert_msg(strstr(out, "malformed JSON"), "%s", out);
	ck_assert_int_eq(tu_admin(reg.addr, cluster,
				  "{\"cmd\":\"status\",\"cmd\":\"status\"}",
				  out, sizeof(out)),
			 -EINVAL);
	ck_assert_msg(strstr(out, "malformed JSON"), "%s", out);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, "[1]", out, sizeof(out)),
			 -EINVAL);
	ck_assert_msg(strstr(out, "not a JSON object"), "%s", out);
	ck_assert_int_eq(
		tu_admin(reg.addr, cluster, "{\"cmd\":7}", out, sizeof(out)),
		-EINVAL);
	ck_assert_msg(strstr(out, "missing string field 'cmd'"), "%s", out);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, "{\"cmd\":\"nope\"}", out,
				  sizeof(out)),
			 -EINVAL);
	ck_assert_msg(strstr(out, "unknown cmd 'nope'"), "%s", out);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, "{\"cmd\":\"leases\"}",
				  out, sizeof(out)),
			 0);
	ck_assert_msg(strstr(out, "\"leases\":["), "%s", out);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, "{\"cmd\":\"status\"}",
				  out, sizeof(out)),
			 0);
	assert_memd_serves();
}
END_TEST

/* A tenant session at addr (a donor) with pass and its key. NULL when
 * refused (*err set, the error's -errno in *rc). */
static struct rpc *pass_session(const char *addr, const char *name,
				const struct wire_auth_ok *ok,
				const uint8_t pkey[AUTH_KEY_LEN], int *rc,
				char *err, size_t errlen)
{
	struct wire_auth_ok ok2;
	struct wire_hello_ok h;
	uint8_t skey2[32];
	struct rpc *c;
	int r = rpc_connect(addr, TMO, &c, NULL, 0);

	ck_assert_msg(r == 0, "connect %s: %s", addr, strerror(-r));
	r = rpc_hello(c, "test_cluster_auth", 2, TMO, &h, err, errlen);
	ck_assert_msg(r == 0, "hello: %s %s", strerror(-r), err);
	r = rpc_auth(c, &h, name, pkey, ok->pass, ok->pass_len, TMO, &ok2,
		     skey2, err, errlen);
	*rc = r;
	if (r) {
		rpc_close(c);
		return NULL;
	}
	return c;
}

/*
 * Starts d, a donor of the registry named name that donates donate, with
 * metrics, and waits until the registry lists it.
 */
static void donor_joined(struct tu_memd *d, const char *name,
			 const char *donate)
{
	char a1[300], a2[300], a3[64], want[64], out[8192];
	const char *args[] = { "--set",	   a1,
			       "--set",	   a2,
			       "--set",	   a3,
			       "--set",	   "report_interval=100ms",
			       "--set",	   "metrics_listen=127.0.0.1:0",
			       "--donate", donate,
			       NULL };

	snprintf(a1, sizeof(a1), "registry=%s", reg.addr);
	snprintf(a2, sizeof(a2), "cluster_secret_file=%s", cluster);
	snprintf(a3, sizeof(a3), "donor_name=%s", name);
	snprintf(want, sizeof(want), "\"%s\"", name);
	ck_assert_int_eq(tu_memd_start_args(d, NULL, args), 0);
	ck_assert_msg(!tu_admin_until(reg.addr, cluster, "{\"cmd\":\"donors\"}",
				      10000, out, sizeof(out), want, NULL),
		      "%s never joined: %s", name, out);
}

/*
 * poolctl tenant remove revokes the tenant's donor passes at the donors
 * (not when they expire, up to pass_ttl later): a donor d1 closes the
 * removed tenant's session there and refuses its unexpired pass, while
 * another tenant's pass keeps working.
 */
START_TEST(removed_tenant_pass_revoked_at_donors)
{
	struct tu_memd d1;
	char err[256], out[8192], sec_c[256];
	struct wire_auth_ok okc, oka;
	uint8_t pkc[64], pka[64];
	struct wire_msg req = { .type = WIRE_STATUS }, rep;
	struct rpc *rc, *ra, *dc, *da, *again;
	int i, r;

	donor_joined(&d1, "d1", "64M");
	tenant_new("c", sec_c);

	/* c and a each get a pass at the registry and a session at d1 */
	rc = tenant_pass("c", sec_c, &okc, pkc);
	rpc_close(rc);
	ra = tenant_pass("a", sec_a, &oka, pka);
	rpc_close(ra);
	dc = pass_session(d1.addr, "c", &okc, pkc, &r, err, sizeof(err));
	ck_assert_msg(dc, "c at d1: %s %s", strerror(-r), err);
	da = pass_session(d1.addr, "a", &oka, pka, &r, err, sizeof(err));
	ck_assert_msg(da, "a at d1: %s %s", strerror(-r), err);
	ck_assert_int_eq(call(dc, &req, &rep, WIRE_STATUS_OK, err, sizeof(err)),
			 0);

	ck_assert_int_eq(tu_admin(reg.addr, cluster,
				  "{\"cmd\":\"tenant-remove\",\"name\":\"c\"}",
				  out, sizeof(out)),
			 0);
	/* d1 learns it from its next report (polled: no timing asserted):
	 * c's session there is closed ... */
	for (i = 0; i < 500; i++) {
		if (call(dc, &req, &rep, WIRE_STATUS_OK, err, sizeof(err)))
			break;
		sleep_ms(20);
	}
	ck_assert_msg(i < 500, "d1 kept the removed tenant's session");
	rpc_close(dc);
	/* ... and c's pass, 10 minutes from expiry, opens nothing there */
	again = pass_session(d1.addr, "c", &okc, pkc, &r, err, sizeof(err));
	ck_assert_ptr_null(again);
	ck_assert_int_eq(r, -EACCES);
	ck_assert_int_eq(tu_metric(&d1, "tidepool_memd_sessions_revoked_total"),
			 1);
	/* the other tenant is not affected */
	ck_assert_int_eq(call(da, &req, &rep, WIRE_STATUS_OK, err, sizeof(err)),
			 0);
	rpc_close(da);
	da = pass_session(d1.addr, "a", &oka, pka, &r, err, sizeof(err));
	ck_assert_msg(da, "a at d1 again: %s %s", strerror(-r), err);
	rpc_close(da);
	tu_memd_stop_ok(&d1);
}
END_TEST

/* reserved_bytes of tenant name at the registry (-1: no answer). */
static long long reserved_of(const char *name)
{
	char json[128], out[4096];
	const char *at;

	snprintf(json, sizeof(json), "{\"cmd\":\"quota-get\",\"name\":\"%s\"}",
		 name);
	if (tu_admin(reg.addr, cluster, json, out, sizeof(out)))
		return -1;
	at = strstr(out, "\"reserved_bytes\":");
	return at ? atoll(at + strlen("\"reserved_bytes\":")) : -1;
}

/*
 * issue 32, item 3: a donor that refuses a ticket for good reports it,
 * and the registry drops its reservation at once; before, it held the
 * tenant's quota until the ticket expired (ticket_ttl + 60 s + a report
 * interval: the chaos run saw EDQUOT for 77 s after a registry restart).
 * The refusal here: the donor is draining. The ticket is then spent for
 * good: the same ticket is refused after the drain too.
 */
/* Drains d2 (whose log is at d2log) or ends its drain, and waits until
 * d2 heard it from the registry. */
static void drain(const char *d2log, bool on)
{
	char out[8192], said[64];

	ck_assert_int_eq(tu_admin(reg.addr, cluster,
				  on ? "{\"cmd\":\"drain\",\"donor\":\"d2\","
				       "\"drain\":true}"
				     : "{\"cmd\":\"drain\",\"donor\":\"d2\","
				       "\"drain\":false}",
				  out, sizeof(out)),
			 0);
	snprintf(said, sizeof(said), "registry says drain=%d", on);
	ck_assert(tu_file_wait(d2log, said, 10000));
}

START_TEST(refused_ticket_releases_its_reservation)
{
	struct tu_memd d2;
	char d2log[300], err[256], sec_e[256];
	struct wire_msg *rep = msg();
	struct wire_auth_ok oke;
	struct wire_ticket t;
	uint8_t pke[64];
	struct rpc *re, *de;
	long long res = -1;
	int i, r;

	donor_joined(&d2, "d2", "512M");
	snprintf(d2log, sizeof(d2log), "%s/memd.log", d2.dir);
	tenant_new("e", sec_e);
	re = tenant_pass("e", sec_e, &oke, pke);
	/* d2 has the most free slabs: the grant is there (placement waits
	 * for d2's first report, which the "donors" poll above may beat:
	 * ENOSPC is retried) */
	for (i = 0; i < 500; i++) {
		r = call(re,
			 &(struct wire_msg){
				 .type = WIRE_PLACE,
				 .u.place = { .nslabs = 1, .node = -1 } },
			 rep, WIRE_PLACE_OK, err, sizeof(err));
		if (r != -ENOSPC)
			break;
		sleep_ms(20);
	}
	ck_assert_msg(!r, "place: %s", err);
	ck_assert_str_eq(rep->u.place_ok.grant[0].addr, d2.addr);
	t = rep->u.place_ok.grant[0].ticket;
	ck_assert_int_eq(reserved_of("e"), (long long)SLAB);
	/* quota 1 slab: full */
	r = call(re,
		 &(struct wire_msg){ .type = WIRE_PLACE,
				     .u.place = { .nslabs = 1, .node = -1 } },
		 rep, WIRE_PLACE_OK, err, sizeof(err));
	ck_assert_int_eq(r, -EDQUOT);

	drain(d2log, true);
	de = pass_session(d2.addr, "e", &oke, pke, &r, err, sizeof(err));
	ck_assert_msg(de, "e at d2: %s %s", strerror(-r), err);
	ck_assert_int_eq(lease_grant(de, &t, rep, err, sizeof(err)), -EBUSY);
	/* the refusal reaches the registry with d2's next report */
	for (i = 0; i < 500 && (res = reserved_of("e")) != 0; i++)
		sleep_ms(20);
	ck_assert_msg(res == 0, "e's refused grant is still reserved: %lld",
		      res);
	ck_assert_int_eq(tu_metric(&d2, "tidepool_memd_tickets_burnt_total"),
			 1);
	/* the ticket is spent: refused after the drain as well */
	drain(d2log, false);
	ck_assert_int_eq(lease_grant(de, &t, rep, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "already redeemed"), "%s", err);
	rpc_close(de);
	rpc_close(re);
	free(rep);
	tu_memd_stop_ok(&d2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("cluster_auth");
	TCase *tc = tu_tcase(s, "auth", 120);

	tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
	TU_ADD_TESTS(tc, wrong_secret_and_unknown_tenant, replayed_handshake,
		     requests_before_auth, tickets_forged_foreign_replayed,
		     foreign_lease_reference, quota_edquot,
		     quota_concurrent_places_never_overshoot,
		     admin_json_refusals, removed_tenant_pass_revoked_at_donors,
		     refused_ticket_releases_its_reservation);
	return s;
}

int main(void)
{
	tu_need_memd();
	return tu_run_suite(suite());
}
