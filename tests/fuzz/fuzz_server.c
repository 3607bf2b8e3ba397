// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_server.c - libFuzzer harness for memd's control server
 * itself (memd/server.c and everything a request reaches: the lease
 * table, authentication, the registry, the KV store, admin requests).
 * Built by tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * Two real servers live for the whole process, made once by
 * memd_server_create: A standalone (HELLO is the handshake; LEASE,
 * RELEASE, KV without tenants) and B the registry of a pool (AUTH, PLACE,
 * LEASE_GRANT, DONOR_*, ADMIN, DONORS, tenants' KV). Each input is one
 * client connection: a socketpair whose memd end is admitted through the
 * seam in memd/server.h (memd_server_fuzz_adopt: the accept path without
 * accept(2)), and served by memd_server_fuzz_step, one pass of the real
 * event loop. A socketpair rather than TCP on loopback: thousands of
 * connections a second would leave the client's ports in TIME_WAIT and
 * run out within a minute, and it is faster. The data plane is the tcp
 * provider on 127.0.0.1 (the same as the tests): a lease is a real
 * registration, and registering 1 MiB slabs with tcp costs microseconds,
 * so no fake is needed. memd's log is silenced (FUZZ_MEMD_LOG=debug
 * shows it).
 *
 * Input layout: byte 0 chooses what the harness does before and after
 * the rest, which is written to the socket as it is (frames, and
 * anything else):
 *   bit 0     server: 0 A (standalone), 1 B (registry)
 *   bits 1-3  handshake prefix, done by the harness with real replies:
 *             0 none, 1 HELLO protocol 1, 2 HELLO protocol 2, then
 *             AUTH + a correct AUTH_PROOF as 3 @admin, 4 @donor,
 *             5 tenant "t1", 6 tenant "t2", 7 tenant "t1" with a wrong
 *             proof
 *   bits 4-5  the body is written in pieces of 0 all, 1 7, 2 100,
 *             3 1000 bytes, a loop pass between pieces (partial frames)
 *   bit 6     the harness reads no reply until the end (a client that
 *             does not read: backpressure, then a half-close)
 *   bit 7     a BYE is sent after the body (a client that ends well;
 *             its leases go back at once)
 * The seeds (tests/fuzz/corpus_server/, written by this harness when
 * FUZZ_SERVER_SEEDS=DIR is set) are valid handshakes followed by valid
 * requests of every type; tests/fuzz/server.dict names the wire's magic.
 *
 * Properties, for every input: no crash, leak or UB (ASan, LSan, UBSan);
 * a handshake that must succeed does; every reply memd sends to a client
 * that reads frame by frame decodes; after the client half-closes,
 * memd closes the connection within a bounded number of loop passes
 * (otherwise abort: a connection memd would keep forever). The servers'
 * state (tenants, donors, KV entries, leases until they expire after
 * lease_ttl = 200 ms) carries over from one input to the next, as it does
 * in a daemon; a crash found late may need inputs run before it (most
 * replay alone).
 *
 * Threads: libFuzzer's (memd-ctl for both servers), and the servers'
 * own (memd-fab0, memd-reclaim, B's memd-donor joining B over loopback).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/wire.h"
#include "memd/arena.h"
#include "memd/config.h"
#include "memd/log.h"
#include "memd/server.h"
#include "tests/fuzz/fuzzutil.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SLAB_BYTES (1u << 20)
#define DONATE_BYTES (32u << 20)
/* Loop passes without progress before the harness gives up waiting for a
 * reply (a handshake) or for memd to close (a property violation). */
#define PASSES_MAX 20000

enum hs {
	HS_NONE = 0,
	HS_HELLO1,
	HS_HELLO2,
	HS_ADMIN,
	HS_DONOR,
	HS_T1,
	HS_T2,
	HS_T1_BAD,
};

struct srv {
	struct memd_server *s;
	struct memd_arena arena;
};

static struct srv srv_a, srv_b;
static char tmpdir[256];
static const uint8_t secret[32] = "tidepool-fuzz-cluster-secret-32b";
static struct auth_cluster_keys keys;
static uint8_t tenant_key[2][AUTH_KEY_LEN];

static void die(const char *what, const char *err)
{
	fprintf(stderr, "fuzz_server: %s: %s\n", what, err);
	abort();
}

static void write_file(const char *path, const void *buf, size_t len,
		       mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len || close(fd))
		die("write", path);
}

static int level; /* memd_log_level, as FUZZ_MEMD_LOG says */

static void server_start(struct srv *v, bool registry)
{
	struct memd_config cfg;
	char err[512], path[300];
	int r;

	memd_config_defaults(&cfg);
	snprintf(cfg.listen, sizeof(cfg.listen), "127.0.0.1:0");
	snprintf(cfg.provider, sizeof(cfg.provider), "tcp");
	cfg.donate_bytes = DONATE_BYTES;
	cfg.slab_bytes = SLAB_BYTES;
	cfg.hugepages = MEMD_HUGEPAGES_NO;
	/* Short lives so that leases and reservations left by one input
	 * are gone soon for the next ones. */
	cfg.lease_ttl_ms = 200;
	cfg.lease_grace_ms = 0;
	cfg.quiesce_ms = 0;
	cfg.kv_share = 50;
	cfg.log_level = LOG_ERR; /* memd_log_level stays the harness's */
	snprintf(path, sizeof(path), "%s/spill-%c", tmpdir,
		 registry ? 'b' : 'a');
	if (mkdir(path, 0700))
		die("mkdir", path);
	snprintf(cfg.kv_spill_dir, sizeof(cfg.kv_spill_dir), "%s", path);
	cfg.kv_spill_bytes = 4u << 20;
	if (registry) {
		snprintf(cfg.registry, sizeof(cfg.registry), "yes");
		snprintf(cfg.cluster_secret_file,
			 sizeof(cfg.cluster_secret_file), "%s/secret", tmpdir);
		snprintf(cfg.state_dir, sizeof(cfg.state_dir), "%s/state",
			 tmpdir);
		snprintf(cfg.donor_name, sizeof(cfg.donor_name), "fuzz-b");
	}
	if (memd_config_validate(&cfg, err, sizeof(err)))
		die("config", err);
	v->arena.len_bytes = DONATE_BYTES;
	/* mmap, as memd's arenas are: LeakSanitizer, which libFuzzer runs
	 * after any input that did not free all it allocated, scans the
	 * heap for pointers, and a heap arena was most of its time. */
	v->arena.base = mmap(NULL, DONATE_BYTES, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	v->arena.page_bytes = 4096;
	v->arena.node = -1;
	if (v->arena.base == MAP_FAILED)
		die("arena", strerror(errno));
	r = memd_server_create(&cfg, &v->arena, 1, NULL, NULL, NULL, NULL,
			       &v->s, err, sizeof(err));
	if (r)
		die("memd_server_create", err);
	memd_log_level = level;
}

/* The registry's state before B starts: tenants t1 and t2 with keys the
 * harness knows, as registry.json would hold them. */
static void write_registry_state(void)
{
	char path[300], hex[2][2 * AUTH_KEY_LEN + 1], doc[1024];
	int n;

	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < AUTH_KEY_LEN; j++)
			tenant_key[i][j] = (uint8_t)(0x40 + 7 * i + j);
		auth_hex(tenant_key[i], AUTH_KEY_LEN, hex[i]);
	}
	snprintf(path, sizeof(path), "%s/state", tmpdir);
	if (mkdir(path, 0700))
		die("mkdir", path);
	n = snprintf(doc, sizeof(doc),
		     "{\"version\":1,\"next_tenant_id\":3,\"next_donor_id\":1,"
		     "\"tenants\":[{\"id\":1,\"name\":\"t1\",\"key\":\"%s\","
		     "\"quota_bytes\":16777216},{\"id\":2,\"name\":\"t2\","
		     "\"key\":\"%s\",\"quota_bytes\":1048576}],"
		     "\"donors\":[]}",
		     hex[0], hex[1]);
	snprintf(path, sizeof(path), "%s/state/registry.json", tmpdir);
	write_file(path, doc, (size_t)n, 0600);
}

/* ---- one client ------------------------------------------------------ */

struct client {
	struct srv *v;
	int fd;
	uint8_t rx[4 * WIRE_MAX_FRAME];
	size_t rx_len;
	bool eof;
	bool absorb; /* body: replies feed the echo, then are dropped */
};

/*
 * What a real client copies from memd's replies into its next requests
 * and a mutation cannot guess (random per boot or per reservation): the
 * boot epoch, the last leases granted, the last PLACE's first ticket,
 * and each KV key's last generation. The body's frames carry markers
 * where the harness puts them (see body_patch).
 */
#define ECHO_KEYS 64
static struct echo {
	uint64_t epoch;
	struct wire_lease_ref lease[WIRE_MAX_LEASES];
	uint32_t nlease;
	struct wire_ticket ticket;
	bool have_ticket;
	uint8_t pending[WIRE_KV_BATCH][WIRE_KV_KEY_LEN]; /* last RESERVE, */
	uint16_t npending;				 /* LOOKUP keys */
	struct {
		uint8_t key[WIRE_KV_KEY_LEN];
		uint64_t generation;
	} kv[ECHO_KEYS];
	uint32_t nkv;
} echo;

static void echo_kv(const uint8_t *key, uint64_t generation)
{
	uint32_t i;

	for (i = 0; i < echo.nkv; i++)
		if (!memcmp(echo.kv[i].key, key, WIRE_KV_KEY_LEN))
			break;
	if (i == echo.nkv) {
		if (echo.nkv == ECHO_KEYS)
			i = generation % ECHO_KEYS; /* overwrite one */
		else
			echo.nkv++;
	}
	memcpy(echo.kv[i].key, key, WIRE_KV_KEY_LEN);
	echo.kv[i].generation = generation;
}

static void echo_reply(const struct wire_msg *m)
{
	switch (m->type) {
	case WIRE_LEASE_OK:
	case WIRE_LEASE_GRANT_OK:
		echo.nlease = m->u.lease_ok.count;
		for (uint32_t i = 0; i < echo.nlease; i++) {
			echo.lease[i].epoch = m->u.lease_ok.lease[i].epoch;
			echo.lease[i].slab = m->u.lease_ok.lease[i].slab;
			echo.lease[i].generation =
				m->u.lease_ok.lease[i].generation;
		}
		break;
	case WIRE_PLACE_OK:
		if (m->u.place_ok.ngrants) {
			echo.ticket = m->u.place_ok.grant[0].ticket;
			echo.have_ticket = true;
		}
		break;
	case WIRE_KV_RESERVE_OK:
	case WIRE_KV_LOOKUP_OK:
		for (uint16_t i = 0; i < m->u.kv.count && i < echo.npending;
		     i++)
			if (m->u.kv.item[i].status == 0)
				echo_kv(echo.pending[i],
					m->u.kv.item[i].generation);
		break;
	}
}

/* Feeds the echo from every complete reply in rx and drops them. */
static void client_absorb(struct client *c)
{
	static struct wire_msg m;
	size_t off = 0;

	for (;;) {
		ssize_t n = wire_decode(c->rx + off, c->rx_len - off, &m);

		if (n == -EAGAIN)
			break;
		if (n < 0) /* rx holds only memd's replies, never cut */
			die("memd sent a reply that does not decode",
			    strerror((int)-n));
		echo_reply(&m);
		off += (size_t)n;
	}
	memmove(c->rx, c->rx + off, c->rx_len - off);
	c->rx_len -= off;
}

static struct client cl;

/* Reads what memd sent; keeps the first frames (the handshake's), drops
 * the rest once the buffer is full. Returns bytes read. */
static size_t client_read(struct client *c)
{
	uint8_t sink[16384];
	size_t got = 0;

	for (;;) {
		ssize_t n;

		if (c->rx_len < sizeof(c->rx))
			n = recv(c->fd, c->rx + c->rx_len,
				 sizeof(c->rx) - c->rx_len, 0);
		else
			n = recv(c->fd, sink, sizeof(sink), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			c->eof = true;
			return got;
		}
		if (n < 0)
			return got;
		if (c->rx_len < sizeof(c->rx))
			c->rx_len += (size_t)n;
		got += (size_t)n;
		if (c->absorb)
			client_absorb(c);
	}
}

/* Writes len bytes, serving memd between writes while the socket is
 * full. Returns 0, or -1 when memd has closed the connection. */
static int client_write(struct client *c, const void *buf, size_t len,
			bool read_replies)
{
	const uint8_t *p = buf;
	int idle = 0;

	while (len) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			idle = 0;
		}
		if (memd_server_fuzz_step(c->v->s) <= 0 && n <= 0) {
			/* memd stopped reading (backpressure) and we do
			 * not read: give up on the rest, as such a client
			 * would be stuck too */
			if (!read_replies && ++idle > 64)
				return -1;
		}
		if (read_replies)
			client_read(c);
		if (c->eof && len)
			return -1;
	}
	return 0;
}

/* Serves memd and reads until memd has nothing more to do now. */
static void client_settle(struct client *c)
{
	for (int i = 0; i < PASSES_MAX; i++) {
		int ev = memd_server_fuzz_step(c->v->s);
		size_t got = client_read(c);

		if (c->eof || (ev <= 0 && got == 0))
			return;
	}
}

static int client_send(struct client *c, const struct wire_msg *m)
{
	static uint8_t buf[WIRE_MAX_FRAME];
	ssize_t n = wire_encode(m, buf, sizeof(buf));

	if (n < 0)
		die("wire_encode", strerror((int)-n));
	return client_write(c, buf, (size_t)n, true);
}

/* Waits for the next reply frame (the handshake's). 0 and *rep, or -1. */
static int client_reply(struct client *c, struct wire_msg *rep)
{
	for (int i = 0; i < PASSES_MAX; i++) {
		ssize_t n = wire_decode(c->rx, c->rx_len, rep);

		if (n > 0) {
			memmove(c->rx, c->rx + n, c->rx_len - (size_t)n);
			c->rx_len -= (size_t)n;
			return 0;
		}
		if (n != -EAGAIN || c->eof)
			return -1;
		memd_server_fuzz_step(c->v->s);
		client_read(c);
	}
	return -1;
}

static bool tenants_lost; /* a tenant's handshake was refused */

static const char *hs_principal(enum hs hs)
{
	switch (hs) {
	case HS_ADMIN:
		return "@admin";
	case HS_DONOR:
		return "@donor";
	case HS_T2:
		return "t2";
	default:
		return "t1";
	}
}

static const uint8_t *hs_key(enum hs hs)
{
	switch (hs) {
	case HS_ADMIN:
		return keys.admin;
	case HS_DONOR:
		return keys.donor;
	case HS_T2:
		return tenant_key[1];
	default:
		return tenant_key[0];
	}
}

/*
 * The handshake a real client does, with memd's real replies. A
 * handshake that must succeed and does not is a bug (abort); a refused
 * one (B's wrong proof) is what it should be. Returns 0 when the body
 * should follow, -1 when memd closed the connection.
 */
static int handshake(struct client *c, enum hs hs, bool registry,
		     uint8_t skey[AUTH_KEY_LEN])
{
	static struct wire_msg m, rep;
	uint64_t sid, epoch;
	uint8_t cnonce[WIRE_NONCE_LEN], snonce[WIRE_NONCE_LEN];
	const char *who;

	if (hs == HS_NONE)
		return 0;
	memset(&m, 0, sizeof(m));
	m.type = WIRE_HELLO;
	m.seq = 1;
	m.u.hello.proto_min = 1;
	m.u.hello.proto_max = hs == HS_HELLO1 ? 1 : 2;
	snprintf(m.u.hello.client, sizeof(m.u.hello.client), "fuzz");
	if (client_send(c, &m) || client_reply(c, &rep))
		return -1;
	if (rep.type != WIRE_HELLO_OK) {
		if (registry && hs == HS_HELLO1)
			return -1; /* a pool needs protocol 2: refused */
		die("handshake", "HELLO refused");
	}
	echo.epoch = rep.u.hello_ok.epoch;
	if (hs <= HS_HELLO2 || !registry)
		return 0;
	sid = rep.u.hello_ok.session_id;
	epoch = rep.u.hello_ok.epoch;
	who = hs_principal(hs);
	memset(&m, 0, sizeof(m));
	m.type = WIRE_AUTH;
	m.seq = 2;
	snprintf(m.u.auth.principal, sizeof(m.u.auth.principal), "%s", who);
	for (int i = 0; i < WIRE_NONCE_LEN; i++)
		cnonce[i] = (uint8_t)(i * 3 + 1);
	memcpy(m.u.auth.cnonce, cnonce, sizeof(cnonce));
	if (client_send(c, &m) || client_reply(c, &rep))
		die("handshake", "no reply to AUTH");
	if (rep.type != WIRE_AUTH_CHALLENGE)
		die("handshake", "AUTH refused");
	memcpy(snonce, rep.u.auth_challenge.snonce, sizeof(snonce));
	memset(&m, 0, sizeof(m));
	m.type = WIRE_AUTH_PROOF;
	m.seq = 3;
	auth_client_proof(hs_key(hs), who, sid, epoch, cnonce, snonce,
			  m.u.auth_proof.mac);
	if (hs == HS_T1_BAD)
		m.u.auth_proof.mac[0] ^= 1;
	if (client_send(c, &m) || client_reply(c, &rep))
		die("handshake", "no reply to AUTH_PROOF");
	if (hs == HS_T1_BAD) {
		if (rep.type != WIRE_ERROR)
			die("handshake", "a wrong proof was accepted");
		return -1;
	}
	if (rep.type != WIRE_AUTH_OK) {
		/* An input before may have removed the tenant (admin
		 * requests are fuzzed too): add it back for the next. */
		if (hs == HS_T1 || hs == HS_T2) {
			tenants_lost = true;
			return -1;
		}
		die("handshake", "a correct proof was refused");
	}
	if (skey)
		auth_session_key(hs_key(hs), who, cnonce, snonce, skey);
	return 0;
}

/*
 * Half-closes and serves memd until it closes its end. memd promises to
 * let go of a peer that sends nothing more (docs/reliability.md); one
 * that does not within PASSES_MAX passes is a bug.
 */
static void client_finish(struct client *c)
{
	shutdown(c->fd, SHUT_WR);
	for (int i = 0; i < PASSES_MAX && !c->eof; i++) {
		memd_server_fuzz_step(c->v->s);
		client_read(c);
	}
	if (!c->eof)
		die("finish", "memd kept a half-closed connection");
}

static bool is_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/*
 * Puts what the echo knows where a frame has a marker: a KV_COMMIT or
 * KV_DONE item's generation 1 becomes its key's last generation; a
 * RELEASE ref's epoch 0 becomes the boot epoch and, with generation 0,
 * ref i becomes the i-th lease last granted; a LEASE_GRANT ticket without
 * a MAC becomes the last PLACE's first ticket. Remembers the keys of a
 * KV_RESERVE or KV_LOOKUP for its reply. Returns whether m changed.
 */
static bool body_patch(struct wire_msg *m)
{
	bool changed = false;

	switch (m->type) {
	case WIRE_KV_RESERVE:
	case WIRE_KV_LOOKUP:
		echo.npending = m->u.kv.count;
		for (uint16_t i = 0; i < m->u.kv.count; i++)
			memcpy(echo.pending[i], m->u.kv.item[i].key,
			       WIRE_KV_KEY_LEN);
		break;
	case WIRE_KV_COMMIT:
	case WIRE_KV_DONE:
		for (uint16_t i = 0; i < m->u.kv.count; i++) {
			if (m->u.kv.item[i].generation != 1)
				continue;
			for (uint32_t k = 0; k < echo.nkv; k++) {
				if (memcmp(echo.kv[k].key, m->u.kv.item[i].key,
					   WIRE_KV_KEY_LEN))
					continue;
				m->u.kv.item[i].generation =
					echo.kv[k].generation;
				changed = true;
			}
		}
		break;
	case WIRE_RELEASE:
		for (uint32_t i = 0; i < m->u.release.count; i++) {
			struct wire_lease_ref *r = &m->u.release.ref[i];

			if (r->epoch)
				continue;
			if (r->generation == 0 && i < echo.nlease)
				*r = echo.lease[i];
			else
				r->epoch = echo.epoch;
			changed = true;
		}
		break;
	case WIRE_LEASE_GRANT:
		if (echo.have_ticket &&
		    is_zero(m->u.lease_grant.ticket.mac, WIRE_MAC_LEN)) {
			m->u.lease_grant.ticket = echo.ticket;
			changed = true;
		}
		break;
	}
	return changed;
}

/*
 * The body frame by frame, as a client that waits for each reply: a
 * complete frame is patched from the echo (body_patch) and sent, and its
 * replies are read before the next; bytes that are not a frame go as
 * they are. Returns -1 when memd closed the connection.
 */
static int body_frames(struct client *c, const uint8_t *data, size_t size)
{
	static struct wire_msg m;
	static uint8_t buf[WIRE_MAX_FRAME];

	c->absorb = true;
	while (size) {
		ssize_t n = wire_frame_len(data, size);
		size_t len = n > 0 && (size_t)n <= size ? (size_t)n : size;
		const uint8_t *p = data;
		size_t plen = len;

		if (n > 0 && (size_t)n <= size &&
		    wire_decode(data, len, &m) > 0 && body_patch(&m)) {
			ssize_t k = wire_encode(&m, buf, sizeof(buf));

			if (k > 0) {
				p = buf;
				plen = (size_t)k;
			}
		}
		if (client_write(c, p, plen, true))
			return -1;
		data += len;
		size -= len;
		client_settle(c);
	}
	return 0;
}

static void client_open(struct client *c, struct srv *v)
{
	int sv[2];

	c->v = v;
	c->rx_len = 0;
	c->eof = false;
	c->absorb = false;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       sv))
		die("socketpair", strerror(errno));
	c->fd = sv[0];
	memd_server_fuzz_adopt(v->s, sv[1]);
	memd_server_fuzz_step(v->s);
}

/* Adds t1 and t2 back at B as @admin (tenant-add, the key sealed with
 * the session key), with their first quotas. */
static void tenants_restore(void)
{
	static const uint64_t quota[2] = { 16u << 20, 1u << 20 };
	static struct wire_msg m, rep;
	uint8_t skey[AUTH_KEY_LEN], box[WIRE_BOX_MAX];
	char hex[2 * WIRE_BOX_MAX + 1], json[512];
	struct client *c = &cl;
	int n;

	client_open(c, &srv_b);
	if (handshake(c, HS_ADMIN, true, skey))
		die("restore", "@admin refused");
	for (int i = 0; i < 2; i++) {
		n = auth_seal(skey, tenant_key[i], AUTH_KEY_LEN, box,
			      sizeof(box));
		if (n < 0)
			die("restore", "auth_seal");
		auth_hex(box, (size_t)n, hex);
		n = snprintf(json, sizeof(json),
			     "{\"cmd\":\"tenant-add\",\"name\":\"t%d\","
			     "\"quota_bytes\":%llu,\"key_box\":\"%s\"}",
			     i + 1, (unsigned long long)quota[i], hex);
		memset(&m, 0, sizeof(m));
		m.type = WIRE_ADMIN;
		m.seq = 10 + (uint32_t)i;
		m.u.admin.json = json;
		m.u.admin.json_len = (uint32_t)n;
		/* ADMIN_OK, or EEXIST for one still there */
		if (client_send(c, &m) || client_reply(c, &rep))
			die("restore", "no reply to tenant-add");
	}
	client_finish(c);
	close(c->fd);
	tenants_lost = false;
}

/* Serves B until its own donor part has joined it (over loopback), so
 * that PLACE finds a donor from the first input on, as in a running
 * pool, and an input replayed alone does what it did in the run. */
static void donor_wait(void)
{
	static struct wire_msg m, rep;
	static const char req[] = "{\"cmd\":\"donors\"}";
	struct client *c = &cl;

	/* 60 s: a loaded CI host, and the donor's backoff (up to 2 s) */
	for (int tries = 0; tries < 6000; tries++) {
		bool up;

		client_open(c, &srv_b);
		if (handshake(c, HS_ADMIN, true, NULL))
			die("donor_wait", "@admin refused");
		memset(&m, 0, sizeof(m));
		m.type = WIRE_ADMIN;
		m.seq = 5;
		m.u.admin.json = req;
		m.u.admin.json_len = sizeof(req) - 1;
		if (client_send(c, &m) || client_reply(c, &rep) ||
		    rep.type != WIRE_ADMIN_OK)
			die("donor_wait", "no reply to donors");
		up = memmem(rep.u.admin.json, rep.u.admin.json_len,
			    "\"state\":\"up\"", 12) != NULL;
		client_finish(c);
		close(c->fd);
		if (up)
			return;
		usleep(10000);
	}
	die("donor_wait", "B's donor did not join within 60 s");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pieces[4] = { 0, 7, 100, 1000 };
	struct client *c = &cl;
	uint8_t mode;
	bool registry, read_replies;
	size_t piece;
	enum hs hs;

	if (size < 1)
		return 0;
	mode = data[0];
	data++;
	size--;
	registry = mode & 1;
	hs = (enum hs)((mode >> 1) & 7);
	piece = pieces[(mode >> 4) & 3];
	read_replies = !(mode & 0x40);

	if (tenants_lost)
		tenants_restore();
	client_open(c, registry ? &srv_b : &srv_a);
	memset(&echo, 0, sizeof(echo));
	if (handshake(c, hs, registry, NULL) == 0) {
		c->rx_len = 0;
		if (read_replies && !piece) {
			body_frames(c, data, size);
			size = 0;
		}
		while (size) {
			size_t n = piece && piece < size ? piece : size;

			if (client_write(c, data, n, read_replies))
				break;
			data += n;
			size -= n;
			if (read_replies)
				client_settle(c);
			else
				memd_server_fuzz_step(c->v->s);
		}
		if (!c->eof && (mode & 0x80)) {
			static struct wire_msg bye;

			bye.type = WIRE_BYE;
			bye.seq = 99;
			client_send(c, &bye);
		}
		if (read_replies)
			client_settle(c);
	}
	client_finish(c);
	close(c->fd);
	return 0;
}

/* ---- seeds ------------------------------------------------------------ */

static void seed_put(const char *dir, const char *name, uint8_t mode,
		     const struct wire_msg *const *msgs, size_t n)
{
	static uint8_t buf[1 + 8 * WIRE_MAX_FRAME];
	char path[512];
	size_t len = 1;

	buf[0] = mode;
	for (size_t i = 0; i < n; i++) {
		ssize_t k = wire_encode(msgs[i], buf + len, sizeof(buf) - len);

		if (k < 0)
			die("seed encode", name);
		len += (size_t)k;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	write_file(path, buf, len, 0644);
}

static void kv_items(struct wire_msg *m, uint8_t type, uint32_t seq,
		     uint16_t count)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = seq;
	m->u.kv.count = count;
	for (uint16_t i = 0; i < count; i++) {
		for (int j = 0; j < (int)sizeof(m->u.kv.item[i].key); j++)
			m->u.kv.item[i].key[j] = (uint8_t)(i * 16 + j);
		/* each type carries only its fields (wire_kv.c's kv_fields) */
		if (type == WIRE_KV_RESERVE)
			m->u.kv.item[i].value_len = 4096u * (i + 1);
		if (type == WIRE_KV_COMMIT || type == WIRE_KV_DONE)
			m->u.kv.item[i].generation = 1;
		if (type == WIRE_KV_COMMIT)
			m->u.kv.item[i].checksum = 0x1234u + i;
	}
}

static void admin(struct wire_msg *m, uint32_t seq, const char *json)
{
	memset(m, 0, sizeof(*m));
	m->type = WIRE_ADMIN;
	m->seq = seq;
	m->u.admin.json = json;
	m->u.admin.json_len = (uint32_t)strlen(json);
}

static void simple(struct wire_msg *m, uint8_t type, uint32_t seq)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = seq;
}

/* Writes the seed corpus to dir (FUZZ_SERVER_SEEDS=dir): one input per
 * path worth reaching, each a valid handshake and valid requests. */
static void write_seeds(const char *dir)
{
	static struct wire_msg m[8];
	const struct wire_msg *p[8];
	enum { A = 0, B = 1 };
#define MODE(srv, hs, extra) ((uint8_t)((srv) | ((hs) << 1) | (extra)))
#define PUT(name, mode, n)                                                     \
	do {                                                                   \
		for (int i_ = 0; i_ < (n); i_++)                               \
			p[i_] = &m[i_];                                        \
		seed_put(dir, name, mode, p, (n));                             \
	} while (0)

	/* A: lease, status, heartbeat, release */
	simple(&m[0], WIRE_LEASE, 10);
	m[0].u.lease.nslabs = 2;
	m[0].u.lease.node = -1;
	simple(&m[1], WIRE_STATUS, 11);
	simple(&m[2], WIRE_HEARTBEAT, 12);
	simple(&m[3], WIRE_RELEASE, 13);
	m[3].u.release.count = 2; /* epoch 0, generation 0: the echo's */
	PUT("a-lease", MODE(A, HS_HELLO2, 0x80), 4);
	PUT("a-lease-v1-pieces", MODE(A, HS_HELLO1, 0x10), 4);
	PUT("a-status-noread", MODE(A, HS_HELLO2, 0x40), 2);
	/* A: no handshake: a HELLO in the body, then a second one */
	simple(&m[0], WIRE_HELLO, 1);
	m[0].u.hello.proto_min = 1;
	m[0].u.hello.proto_max = 2;
	m[1] = m[0];
	PUT("a-hello-twice", MODE(A, HS_NONE, 0), 2);
	/* A: KV put and get */
	kv_items(&m[0], WIRE_KV_RESERVE, 20, 2);
	kv_items(&m[1], WIRE_KV_COMMIT, 21, 2);
	kv_items(&m[2], WIRE_KV_LOOKUP, 22, 2);
	kv_items(&m[3], WIRE_KV_DONE, 23, 2);
	kv_items(&m[4], WIRE_KV_EXISTS, 24, 2);
	kv_items(&m[5], WIRE_KV_PIN, 25, 1);
	kv_items(&m[6], WIRE_KV_DELETE, 26, 2);
	PUT("a-kv", MODE(A, HS_HELLO2, 0x80), 7);
	admin(&m[0], 30, "{\"cmd\":\"leases\"}");
	PUT("a-admin-leases", MODE(A, HS_HELLO2, 0), 1);
	/* B: tenant KV */
	kv_items(&m[0], WIRE_KV_RESERVE, 20, 3);
	kv_items(&m[1], WIRE_KV_COMMIT, 21, 3);
	kv_items(&m[2], WIRE_KV_LOOKUP, 22, 3);
	kv_items(&m[3], WIRE_KV_DELETE, 23, 1);
	PUT("b-t1-kv", MODE(B, HS_T1, 0x80), 4);
	PUT("b-t2-kv", MODE(B, HS_T2, 0x20), 4);
	/* B: tenant placement and the donor list */
	simple(&m[0], WIRE_PLACE, 40);
	m[0].u.place.nslabs = 2;
	m[0].u.place.node = -1;
	simple(&m[1], WIRE_DONORS, 41);
	simple(&m[2], WIRE_HEARTBEAT2, 42);
	simple(&m[3], WIRE_STATUS, 43);
	PUT("b-t1-place", MODE(B, HS_T1, 0), 4);
	/* B: place, redeem the ticket here (B is its own donor), use and
	 * release the lease; the echo fills in ticket, epoch, generation */
	simple(&m[1], WIRE_LEASE_GRANT, 44);
	m[1].u.lease_grant.ticket.nslabs = 1; /* no MAC: the echo's */
	m[1].u.lease_grant.ticket.tenant_id = 1;
	simple(&m[2], WIRE_HEARTBEAT2, 45);
	m[2].u.heartbeat2.bytes_read = 4096;
	simple(&m[3], WIRE_RELEASE, 46);
	m[3].u.release.count = 2;
	PUT("b-t1-place-grant-release", MODE(B, HS_T1, 0), 4);
	m[0].u.place.flags = WIRE_PLACE_REPLICA;
	PUT("b-t2-place-replica", MODE(B, HS_T2, 0), 2);
	/* B: admin */
	admin(&m[0], 50, "{\"cmd\":\"status\"}");
	admin(&m[1], 51, "{\"cmd\":\"donors\"}");
	admin(&m[2], 52, "{\"cmd\":\"tenants\"}");
	admin(&m[3], 53, "{\"cmd\":\"quota-get\",\"name\":\"t1\"}");
	admin(&m[4], 54,
	      "{\"cmd\":\"quota-set\",\"name\":\"t2\",\"quota_bytes\":"
	      "2097152}");
	admin(&m[5], 55,
	      "{\"cmd\":\"drain\",\"donor\":\"fuzz-b\",\"drain\":"
	      "false}");
	admin(&m[6], 56, "{\"cmd\":\"leases\"}");
	PUT("b-admin", MODE(B, HS_ADMIN, 0), 7);
	admin(&m[0], 57,
	      "{\"cmd\":\"tenant-add\",\"name\":\"t3\",\"quota_bytes\":1,"
	      "\"key_box\":\"00\"}");
	admin(&m[1], 58, "{\"cmd\":\"tenant-remove\",\"name\":\"t3\"}");
	admin(&m[2], 59, "{\"cmd\":\"quota-get\",\"name\":[1,2,{}]}");
	PUT("b-admin-edit", MODE(B, HS_ADMIN, 0), 3);
	/* B: a donor joins and reports */
	simple(&m[0], WIRE_DONOR_JOIN, 60);
	snprintf(m[0].u.donor_join.name, sizeof(m[0].u.donor_join.name),
		 "fuzz-d");
	snprintf(m[0].u.donor_join.addr, sizeof(m[0].u.donor_join.addr),
		 "127.0.0.1:1");
	m[0].u.donor_join.epoch = 7;
	m[0].u.donor_join.slab_bytes = SLAB_BYTES;
	m[0].u.donor_join.slabs_total = 8;
	m[0].u.donor_join.nnodes = 1;
	m[0].u.donor_join.node[0].node = -1;
	m[0].u.donor_join.node[0].slabs_total = 8;
	m[0].u.donor_join.node[0].slabs_free = 8;
	simple(&m[1], WIRE_DONOR_REPORT, 61);
	m[1].u.donor_report.epoch = 7;
	m[1].u.donor_report.slabs_free = 6;
	m[1].u.donor_report.slabs_leased = 2;
	m[1].u.donor_report.ntenants = 1;
	m[1].u.donor_report.tenant[0].tenant_id = 1;
	m[1].u.donor_report.tenant[0].slabs = 2;
	PUT("b-donor", MODE(B, HS_DONOR, 0), 2);
	/* B: a lease grant with a ticket that is not the registry's */
	simple(&m[0], WIRE_LEASE_GRANT, 70);
	m[0].u.lease_grant.ticket.nslabs = 1;
	m[0].u.lease_grant.ticket.tenant_id = 1;
	PUT("b-t1-grant", MODE(B, HS_T1, 0), 1);
	/* B: requests before authentication, and a wrong proof */
	simple(&m[0], WIRE_STATUS, 80);
	PUT("b-hello-status", MODE(B, HS_HELLO2, 0), 1);
	PUT("b-t1-badproof", MODE(B, HS_T1_BAD, 0), 1);
	PUT("b-hello1", MODE(B, HS_HELLO1, 0), 1);
#undef PUT
#undef MODE
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *lvl = getenv("FUZZ_MEMD_LOG");
	const char *seeds = getenv("FUZZ_SERVER_SEEDS");
	char path[300];

	(void)argc;
	(void)argv;
	/*
	 * tcp;ofi_rxm posts 4096 receive buffers of 16 KiB per endpoint
	 * by default: 84 MB of heap per server that LeakSanitizer scans
	 * after every input that allocated more than it freed (most, as
	 * the servers' state grows), which made the harness 20 times
	 * slower. No client does RMA here; small queues do as well.
	 * setenv does not override what the caller set.
	 */
	setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", 0);
	setenv("FI_OFI_RXM_TX_SIZE", "16", 0);
	setenv("FI_OFI_RXM_RX_SIZE", "16", 0);
	setenv("FI_OFI_RXM_MSG_TX_SIZE", "16", 0);
	setenv("FI_OFI_RXM_MSG_RX_SIZE", "16", 0);
	if (!lvl || memd_parse_log_level(lvl, &memd_log_level))
		memd_log_level = LOG_CRIT; /* below every memd line */
	level = memd_log_level;
	if (auth_init())
		die("auth_init", "libsodium");
	auth_cluster_keys(secret, sizeof(secret), &keys);
	if (seeds) {
		write_seeds(seeds);
		exit(0);
	}
	if (fuzz_scratch_dir("server", tmpdir, sizeof(tmpdir)))
		die("mkdtemp", tmpdir);
	snprintf(path, sizeof(path), "%s/secret", tmpdir);
	write_file(path, secret, sizeof(secret), 0600);
	write_registry_state();
	server_start(&srv_a, false);
	server_start(&srv_b, true);
	donor_wait();
	/*
	 * libfabric's psm provider (libinfinipath), loaded by fi_getinfo
	 * even when another provider is asked for, turns SIGABRT, SIGINT
	 * and SIGTERM into exit(): an abort would be reported as "fuzz
	 * target exited" and ^C would write a crash file. libFuzzer, which
	 * sets its handlers after this function, keeps a handler it finds,
	 * so give it the defaults back. (SIGSEGV and SIGBUS are ASan's.)
	 */
	signal(SIGABRT, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	return 0;
}
