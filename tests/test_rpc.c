// SPDX-License-Identifier: MIT
/*
 * tests/test_rpc.c - fabric/rpc's handshake helpers (rpc_hello, rpc_auth,
 * rpc_handshake)
 * against a scripted memd: a thread on a loopback TCP port that decodes
 * each request and answers as the scenario says, checking what the client
 * sent (its proof, its pass) with fabric/auth.h; and rpc_send/rpc_recv,
 * requests out on two connections at once, against two scripted memds
 * that answer only once both have a request.
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"
#include "tests/testutil.h"

enum scenario {
	SC_OK,	       /* memd holds the client's key */
	SC_WRONG_KEY,  /* memd holds another key: refuses the proof */
	SC_BAD_PROOF,  /* memd answers with a wrong server proof */
	SC_PROTO_NEW,  /* HELLO_OK with a version we did not offer */
	SC_STANDALONE, /* AUTH is EOPNOTSUPP */
	SC_PROTO1,     /* HELLO_OK chooses protocol 1 (no AUTH) */
	SC_TOGETHER,   /* HELLO answered once every fake has one (5 s) */
};

/* SC_TOGETHER: how many fakes hold a HELLO, of how many. */
static pthread_mutex_t together_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t together_cond = PTHREAD_COND_INITIALIZER;
static int together_seen, together_want;

/* Waits until every fake has a HELLO; false after 5 s without. */
static bool together_wait(void)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&together_lock);
	together_seen++;
	pthread_cond_broadcast(&together_cond);
	while (together_seen < together_want &&
	       pthread_cond_timedwait(&together_cond, &together_lock, &ts) == 0)
		;
	ok = together_seen >= together_want;
	pthread_mutex_unlock(&together_lock);
	return ok;
}

struct fake {
	enum scenario sc;
	uint8_t key[AUTH_KEY_LEN];
	int lfd;
	uint16_t port;
	pthread_t thr;
	/* what the server saw / derived */
	char principal[WIRE_NAME_MAX];
	uint8_t pass[WIRE_PASS_MAX];
	uint16_t pass_len;
	uint8_t session_key[AUTH_KEY_LEN];
	bool proof_ok;
};

static const uint64_t SESSION_ID = 0x1234abcdull, EPOCH = 0xfeedbeef01ull;

static int read_full(int fd, uint8_t *b, size_t n)
{
	while (n) {
		ssize_t r = read(fd, b, n);

		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int send_msg(int fd, struct wire_msg *m)
{
	uint8_t *buf = malloc(WIRE_MAX_FRAME); /* fakes run side by side */
	ssize_t n;
	int r;

	ck_assert_ptr_nonnull(buf);
	n = wire_encode(m, buf, WIRE_MAX_FRAME);
	ck_assert_int_gt(n, 0);
	r = write(fd, buf, (size_t)n) == n ? 0 : -1;
	free(buf);
	return r;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	uint8_t *buf = malloc(WIRE_MAX_FRAME);
	uint8_t cnonce[WIRE_NONCE_LEN], snonce[WIRE_NONCE_LEN];
	struct wire_msg *m = malloc(sizeof(*m)), *rep = malloc(sizeof(*rep));
	int fd = accept(f->lfd, NULL, NULL);

	for (; fd >= 0;) {
		ssize_t fl;

		if (read_full(fd, buf, WIRE_HDR_LEN))
			break;
		fl = wire_frame_len(buf, WIRE_HDR_LEN);
		if (fl < WIRE_HDR_LEN || read_full(fd, buf + WIRE_HDR_LEN,
						   (size_t)fl - WIRE_HDR_LEN))
			break;
		if (wire_decode(buf, (size_t)fl, m) != fl)
			break;
		memset(rep, 0, sizeof(*rep));
		rep->seq = m->seq;
		switch (m->type) {
		case WIRE_HELLO:
			if (f->sc == SC_TOGETHER && !together_wait()) {
				wire_make_error(rep, m->seq, -ETIMEDOUT,
						"alone");
				break;
			}
			rep->type = WIRE_HELLO_OK;
			rep->u.hello_ok.proto = f->sc == SC_PROTO_NEW
							? WIRE_PROTO_MAX + 1
						: f->sc == SC_PROTO1 ? 1
								     : 2;
			rep->u.hello_ok.session_id = SESSION_ID;
			rep->u.hello_ok.epoch = EPOCH;
			rep->u.hello_ok.ttl_ms = 1000;
			rep->u.hello_ok.slab_bytes = 1 << 20;
			strcpy(rep->u.hello_ok.provider, "tcp");
			rep->u.hello_ok.nendpoints = 1;
			rep->u.hello_ok.ep[0].node = -1;
			rep->u.hello_ok.ep[0].addr_len = 16;
			break;
		case WIRE_AUTH:
			if (f->sc == SC_STANDALONE) {
				wire_make_error(rep, m->seq, -EOPNOTSUPP,
						"memd is standalone");
				break;
			}
			memcpy(f->principal, m->u.auth.principal,
			       sizeof(f->principal));
			memcpy(cnonce, m->u.auth.cnonce, sizeof(cnonce));
			f->pass_len = m->u.auth.pass_len;
			memcpy(f->pass, m->u.auth.pass, sizeof(f->pass));
			auth_random(snonce, sizeof(snonce));
			rep->type = WIRE_AUTH_CHALLENGE;
			memcpy(rep->u.auth_challenge.snonce, snonce,
			       sizeof(snonce));
			break;
		case WIRE_AUTH_PROOF: {
			uint8_t want[WIRE_MAC_LEN];

			auth_client_proof(f->key, f->principal, SESSION_ID,
					  EPOCH, cnonce, snonce, want);
			f->proof_ok = auth_mac_equal(want, m->u.auth_proof.mac);
			if (!f->proof_ok) {
				wire_make_error(rep, 0, -EACCES,
						"authentication failed");
				break;
			}
			rep->type = WIRE_AUTH_OK;
			auth_server_proof(f->key, f->principal, SESSION_ID,
					  EPOCH, cnonce, snonce,
					  rep->u.auth_ok.mac);
			if (f->sc == SC_BAD_PROOF)
				rep->u.auth_ok.mac[7] ^= 0x40;
			rep->u.auth_ok.role = WIRE_ROLE_TENANT;
			rep->u.auth_ok.tenant_id = 7;
			rep->u.auth_ok.flags = WIRE_AUTH_REGISTRY;
			auth_session_key(f->key, f->principal, cnonce, snonce,
					 f->session_key);
			break;
		}
		default:
			wire_make_error(rep, m->seq, -EINVAL, "unexpected");
			break;
		}
		if (send_msg(fd, rep))
			break;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	free(m);
	free(rep);
	return NULL;
}

static void fake_start(struct fake *f, enum scenario sc,
		       const uint8_t key[AUTH_KEY_LEN])
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	memset(f, 0, sizeof(*f));
	f->sc = sc;
	memcpy(f->key, key, AUTH_KEY_LEN);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 1), 0);
	ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
	f->port = ntohs(sa.sin_port);
	ck_assert_int_eq(pthread_create(&f->thr, NULL, fake_main, f), 0);
}

static struct rpc *fake_connect(struct fake *f)
{
	char addr[64];
	struct rpc *c;

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f->port);
	ck_assert_int_eq(rpc_connect(addr, 2000, &c, NULL, 0), 0);
	return c;
}

static void fake_stop(struct fake *f, struct rpc *c)
{
	rpc_close(c);
	pthread_join(f->thr, NULL);
	close(f->lfd);
}

static void key_of(const char *secret, uint8_t key[AUTH_KEY_LEN])
{
	auth_tenant_key((const uint8_t *)secret, strlen(secret), key);
}

/* The client's side of a test against a fake memd: the tenant keys of
 * two secrets, the handshake's results, and the connection. */
struct side {
	uint8_t key[AUTH_KEY_LEN];   /* "tenant secret number one" */
	uint8_t other[AUTH_KEY_LEN]; /* "tenant secret number two" */
	uint8_t sk[AUTH_KEY_LEN];
	struct wire_hello_ok hok;
	struct wire_auth_ok aok;
	char err[WIRE_MSG_MAX];
	struct fake f;
	struct rpc *c;
};

/* Starts a fake memd that plays sc holding s's key (with other, the key
 * of the other secret) and connects s to it. */
static void side_open(struct side *s, enum scenario sc, bool other)
{
	key_of("tenant secret number one", s->key);
	key_of("tenant secret number two", s->other);
	fake_start(&s->f, sc, other ? s->other : s->key);
	s->c = fake_connect(&s->f);
}

START_TEST(hello_and_auth_ok)
{
	struct side s;
	uint8_t pass[100];

	for (unsigned i = 0; i < sizeof(pass); i++)
		pass[i] = (uint8_t)(i * 7 + 3);
	side_open(&s, SC_OK, false);
	ck_assert_int_eq(rpc_hello(s.c, "test\x01rpc", 1, 2000, &s.hok, s.err,
				   sizeof(s.err)),
			 0);
	ck_assert_uint_eq(s.hok.proto, 2);
	ck_assert_uint_eq(s.hok.session_id, SESSION_ID);
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, "acme", s.key, pass,
				  sizeof(pass), 2000, &s.aok, s.sk, s.err,
				  sizeof(s.err)),
			 0);
	ck_assert(s.f.proof_ok);
	ck_assert_str_eq(s.f.principal, "acme");
	ck_assert_uint_eq(s.f.pass_len, sizeof(pass));
	ck_assert_mem_eq(s.f.pass, pass, sizeof(pass));
	ck_assert_mem_eq(s.sk, s.f.session_key, AUTH_KEY_LEN);
	ck_assert_uint_eq(s.aok.role, WIRE_ROLE_TENANT);
	ck_assert_uint_eq(s.aok.tenant_id, 7);
	ck_assert_uint_eq(s.aok.flags, WIRE_AUTH_REGISTRY);
	ck_assert(!rpc_is_broken(s.c));
	fake_stop(&s.f, s.c);
}
END_TEST

/* side_open(), HELLO, and an AUTH as "acme" the fake refuses: EACCES,
 * its text in s->err. */
static void auth_refused(struct side *s, enum scenario sc, bool other)
{
	side_open(s, sc, other);
	ck_assert_int_eq(rpc_hello(s->c, NULL, 1, 2000, &s->hok, NULL, 0), 0);
	ck_assert_int_eq(rpc_auth(s->c, &s->hok, "acme", s->key, NULL, 0, 2000,
				  &s->aok, s->sk, s->err, sizeof(s->err)),
			 -EACCES);
}

START_TEST(auth_wrong_key_is_eacces)
{
	struct side s;

	auth_refused(&s, SC_WRONG_KEY, true);
	ck_assert(!s.f.proof_ok);
	ck_assert_str_eq(s.err, "authentication failed");
	fake_stop(&s.f, s.c);
}
END_TEST

START_TEST(auth_server_bad_proof_is_eacces)
{
	struct side s;

	auth_refused(&s, SC_BAD_PROOF, false);
	ck_assert(s.f.proof_ok); /* we proved; memd did not */
	ck_assert_ptr_nonnull(strstr(s.err, "proof"));
	ck_assert(rpc_is_broken(s.c));
	fake_stop(&s.f, s.c);
}
END_TEST

START_TEST(auth_refusals)
{
	struct side s;
	uint8_t pass[WIRE_PASS_MAX + 1];
	char longname[WIRE_NAME_MAX + 1];

	memset(pass, 1, sizeof(pass));
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';

	side_open(&s, SC_STANDALONE, false);
	ck_assert_int_eq(rpc_hello(s.c, NULL, 1, 2000, &s.hok, NULL, 0), 0);
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, "", s.key, NULL, 0, 2000, &s.aok,
				  s.sk, NULL, 0),
			 -EINVAL);
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, longname, s.key, NULL, 0, 2000,
				  &s.aok, s.sk, NULL, 0),
			 -EINVAL);
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, "acme", s.key, pass,
				  sizeof(pass), 2000, &s.aok, s.sk, NULL, 0),
			 -EINVAL);
	s.hok.proto = 1;
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, "acme", s.key, NULL, 0, 2000,
				  &s.aok, s.sk, NULL, 0),
			 -EPROTONOSUPPORT);
	s.hok.proto = 2;
	ck_assert_int_eq(rpc_auth(s.c, &s.hok, "acme", s.key, NULL, 0, 2000,
				  &s.aok, s.sk, NULL, 0),
			 -EOPNOTSUPP);
	fake_stop(&s.f, s.c);

	side_open(&s, SC_PROTO_NEW, false);
	ck_assert_int_eq(rpc_hello(s.c, NULL, 1, 2000, &s.hok, NULL, 0),
			 -EPROTONOSUPPORT);
	ck_assert_int_eq(rpc_hello(s.c, NULL, 0, 2000, &s.hok, NULL, 0),
			 -EINVAL);
	fake_stop(&s.f, s.c);
}
END_TEST

/* rpc_handshake() with proto_min offer, against a fake playing sc
 * (holding the other key with other), fails with want; hello then says
 * protocol hello_proto (0: untouched). */
static void handshake_fails(enum scenario sc, bool other, uint16_t offer,
			    int want, uint16_t hello_proto)
{
	struct side s;

	side_open(&s, sc, other);
	memset(&s.hok, 0, sizeof(s.hok));
	ck_assert_int_eq(rpc_handshake(s.c, "t", offer, "acme", s.key, 0, 2000,
				       &s.hok, NULL, s.sk, s.err,
				       sizeof(s.err)),
			 want);
	ck_assert_uint_eq(s.hok.proto, hello_proto);
	fake_stop(&s.f, s.c);
}

/* rpc_handshake: HELLO + AUTH in one call, the role checked, and which
 * step failed told by hello. */
START_TEST(handshake_in_one_call)
{
	struct side s;

	side_open(&s, SC_OK, false);
	ck_assert_int_eq(rpc_handshake(s.c, "t", 2, "acme", s.key,
				       WIRE_ROLE_TENANT, 2000, &s.hok, &s.aok,
				       s.sk, s.err, sizeof(s.err)),
			 0);
	ck_assert_uint_eq(s.hok.session_id, SESSION_ID);
	ck_assert_uint_eq(s.aok.tenant_id, 7);
	ck_assert(s.f.proof_ok);
	ck_assert_mem_eq(s.sk, s.f.session_key, AUTH_KEY_LEN);
	fake_stop(&s.f, s.c);

	/* memd made us a tenant; we asked to be admin */
	side_open(&s, SC_OK, false);
	ck_assert_int_eq(rpc_handshake(s.c, "t", 2, "@admin", s.key,
				       WIRE_ROLE_ADMIN, 2000, NULL, NULL, s.sk,
				       s.err, sizeof(s.err)),
			 -EPROTO);
	ck_assert_str_eq(s.err, "memd gave @admin the role tenant, not admin");
	fake_stop(&s.f, s.c);

	/* AUTH fails: hello was written; HELLO fails: hello untouched */
	handshake_fails(SC_WRONG_KEY, true, 2, -EACCES, 2);
	handshake_fails(SC_PROTO_NEW, false, 1, -EPROTONOSUPPORT, 0);

	/* protocol 1, offered: no AUTH, 0; not offered: refused */
	side_open(&s, SC_PROTO1, false);
	ck_assert_int_eq(rpc_handshake(s.c, "t", 1, "acme", s.key,
				       WIRE_ROLE_TENANT, 2000, &s.hok, NULL,
				       s.sk, s.err, sizeof(s.err)),
			 0);
	ck_assert_uint_eq(s.hok.proto, 1);
	ck_assert_str_eq(s.f.principal, "");
	ck_assert_int_eq(rpc_handshake(s.c, "t", 2, "acme", s.key, 0, 2000,
				       &s.hok, NULL, s.sk, s.err,
				       sizeof(s.err)),
			 -EPROTONOSUPPORT);
	fake_stop(&s.f, s.c);
}
END_TEST

/* Two requests out at once: each fake answers only when both hold one,
 * which rpc_call one after the other could never give. */
START_TEST(send_recv_overlap)
{
	struct fake f1, f2;
	struct rpc *c1, *c2;
	struct wire_msg *q1 = calloc(1, sizeof(*q1)),
			*q2 = calloc(1, sizeof(*q2));
	struct wire_msg *rep = malloc(sizeof(*rep));
	uint8_t key[AUTH_KEY_LEN];

	ck_assert_ptr_nonnull(q1);
	ck_assert_ptr_nonnull(q2);
	ck_assert_ptr_nonnull(rep);
	key_of("s", key);
	together_seen = 0;
	together_want = 2;
	fake_start(&f1, SC_TOGETHER, key);
	fake_start(&f2, SC_TOGETHER, key);
	c1 = fake_connect(&f1);
	c2 = fake_connect(&f2);
	q1->type = q2->type = WIRE_HELLO;
	q1->u.hello.proto_min = q2->u.hello.proto_min = WIRE_PROTO_MIN;
	q1->u.hello.proto_max = q2->u.hello.proto_max = WIRE_PROTO_MAX;
	ck_assert_int_eq(rpc_send(c1, q1, 8000), 0);
	ck_assert_int_eq(rpc_send(c2, q2, 8000), 0);
	/* replies taken in the other order than sent: no matter */
	ck_assert_int_eq(rpc_recv(c2, rep, WIRE_HELLO_OK, NULL, 0), 0);
	ck_assert_uint_eq(rep->seq, q2->seq);
	ck_assert_int_eq(rpc_recv(c1, rep, WIRE_HELLO_OK, NULL, 0), 0);
	ck_assert_uint_eq(rep->seq, q1->seq);
	/* the connections are free again: an ordinary call, and a reply of
	 * the wrong type breaks the connection as rpc_call does */
	ck_assert_int_eq(rpc_call(c1, q1, rep, WIRE_HELLO_OK, 2000, NULL, 0),
			 0);
	ck_assert_int_eq(rpc_send(c2, q2, 2000), 0);
	ck_assert_int_eq(rpc_recv(c2, rep, WIRE_AUTH_OK, NULL, 0), -EPROTO);
	ck_assert(rpc_is_broken(c2));
	ck_assert_int_eq(rpc_send(c2, q2, 2000), -ENOTCONN);
	ck_assert_int_eq(rpc_call(c2, q2, rep, WIRE_HELLO_OK, 2000, NULL, 0),
			 -ENOTCONN);
	fake_stop(&f1, c1);
	fake_stop(&f2, c2);
	free(q1);
	free(q2);
	free(rep);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rpc");
	TCase *tc = tu_tcase(s, "handshake", 0);

	if (auth_init()) {
		fprintf(stderr, "libsodium does not initialize\n");
		return 1;
	}
	TU_ADD_TESTS(tc, hello_and_auth_ok, auth_wrong_key_is_eacces,
		     auth_server_bad_proof_is_eacces, auth_refusals,
		     handshake_in_one_call, send_recv_overlap);
	return tu_run_suite(s);
}
