// SPDX-License-Identifier: MIT
/*
 * tests/test_memd.c - memd's control port under bad input: garbage,
 * oversized and malformed frames, requests out of order, stale leases,
 * too many clients; memd must answer or close, and keep serving others.
 * Also the command line: bad flags and configs exit with their codes.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/fab.h"
#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

static struct tu_memd md;

static int raw_connect(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char *colon = strrchr(md.addr, ':');
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Reads one reply frame; returns its length, 0 on EOF, -1 on timeout. */
static ssize_t read_frame(int fd, uint8_t *buf, size_t cap, int timeout_ms)
{
	size_t have = 0;

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t fl = wire_frame_len(buf, have), n;

		if (fl > 0 && have >= (size_t)fl)
			return fl;
		if (poll(&pf, 1, timeout_ms) <= 0)
			return -1;
		n = recv(fd, buf + have, cap - have, 0);
		if (n <= 0)
			return 0;
		have += (size_t)n;
	}
}

/* True when the peer closes within the timeout (after any replies). */
static int closed_soon(int fd)
{
	uint8_t b[4096];

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (poll(&pf, 1, 10000) <= 0)
			return 0;
		if (recv(fd, b, sizeof(b), 0) <= 0)
			return 1;
	}
}

static void send_msg(int fd, struct wire_msg *m)
{
	uint8_t buf[WIRE_MAX_FRAME];
	ssize_t n = wire_encode(m, buf, sizeof(buf));

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(send(fd, buf, (size_t)n, MSG_NOSIGNAL), n);
}

/* Reads a reply of type into *m (10 s at most); fails the test on none,
 * one that does not decode, or another type. */
static void expect_reply(int fd, struct wire_msg *m, uint8_t type)
{
	static uint8_t buf[WIRE_MAX_FRAME];
	ssize_t n = read_frame(fd, buf, sizeof(buf), 10000);

	ck_assert_msg(n > 0, "no reply frame (n=%zd)", n);
	ck_assert_int_eq(wire_decode(buf, (size_t)n, m), n);
	ck_assert_msg(m->type == type, "reply %s, wanted %s",
		      wire_type_name(m->type), wire_type_name(type));
}

/* Sends m; its reply, of type, in *rep. */
static void call_ok(int fd, struct wire_msg *m, struct wire_msg *rep,
		    uint8_t type)
{
	send_msg(fd, m);
	expect_reply(fd, rep, type);
}

/* Reads an ERROR with err; returns its seq. */
static uint32_t expect_error(int fd, int err)
{
	struct wire_msg m;

	expect_reply(fd, &m, WIRE_ERROR);
	ck_assert_msg(m.u.error.err == err, "ERROR err=%d (%s), wanted %d",
		      m.u.error.err, m.u.error.msg, err);
	return m.seq;
}

/* An ERROR with err for seq, then the connection closed; closes fd. */
static void expect_error_closed(int fd, int err, uint32_t seq)
{
	ck_assert_uint_eq(expect_error(fd, err), seq);
	ck_assert(closed_soon(fd));
	close(fd);
}

/* Sends m, which memd refuses with err and closes the connection for. */
static void refused_closed(int fd, struct wire_msg *m, int err)
{
	send_msg(fd, m);
	expect_error_closed(fd, err, m->seq);
}

/* memd still serves a real client end to end. */
static void assert_serving(void)
{
	struct pool_opts o = { .addr = md.addr };
	struct pool *p;
	struct pool_region *r;
	uint8_t b[4096], c[4096];

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_alloc(p, sizeof(b), &r), 0);
	tu_pattern_fill(b, sizeof(b), 5, 0);
	ck_assert_int_eq(pool_write(p, r, 0, b, sizeof(b)), 0);
	ck_assert_int_eq(pool_read(p, r, 0, c, sizeof(c)), 0);
	ck_assert_int_eq(memcmp(b, c, sizeof(b)), 0);
	pool_close(p);
	ck_assert_int_eq(kill(md.pid, 0), 0);
}

static void setup(void)
{
	int r = tu_memd_start(&md, "max_clients = 16");

	ck_assert_msg(r == 0, "memd: %s", strerror(-r));
}

static void teardown(void)
{
	int st = tu_memd_stop(&md, SIGTERM);

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "memd exit status %d", st);
}

START_TEST(garbage_bytes_close_connection)
{
	int fd = raw_connect();
	uint8_t junk[1000];

	tu_pattern_fill(junk, sizeof(junk), 1, 0);
	ck_assert_int_eq(send(fd, junk, sizeof(junk), MSG_NOSIGNAL), 1000);
	ck_assert(closed_soon(fd));
	close(fd);
	assert_serving();
}
END_TEST

/* The raw bytes b (len of them) on a new connection: memd answers an
 * ERROR with err for seq and closes the connection, and serves on. */
static void raw_refused(const uint8_t *b, size_t len, int err, uint32_t seq)
{
	int fd = raw_connect();

	ck_assert_int_eq(send(fd, b, len, MSG_NOSIGNAL), (ssize_t)len);
	expect_error_closed(fd, err, seq);
	assert_serving();
}

START_TEST(oversized_frame_gets_emsgsize)
{
	uint8_t h[WIRE_HDR_LEN] = {
		'T', 'D', 'P', 'L', 1, WIRE_HELLO, 0,	 0,
		9,   0,	  0,   0,   0, 0,	   0x10, 0
	};

	/* len = 0x00100000 (1 MiB) > WIRE_MAX_PAYLOAD; the ERROR carries
	 * the header's seq (docs/protocol.md) */
	raw_refused(h, sizeof(h), EMSGSIZE, 9);
}
END_TEST

START_TEST(malformed_payload_gets_ebadmsg)
{
	/* HELLO whose string length runs past the payload. */
	uint8_t f[WIRE_HDR_LEN + 6] = { 'T', 'D', 'P', 'L', 1, WIRE_HELLO,
					0,   0,	  7,   0,   0, 0,
					6,   0,	  0,   0,   1, 0,
					1,   0,	  200, 0 };

	raw_refused(f, sizeof(f), EBADMSG, 7);
}
END_TEST

START_TEST(requests_before_hello_refused)
{
	int fd = raw_connect();
	struct wire_msg m = { .type = WIRE_LEASE, .seq = 1 };

	m.u.lease.nslabs = 1;
	send_msg(fd, &m);
	expect_error(fd, EPROTO);
	ck_assert(closed_soon(fd));
	close(fd);
	assert_serving();
}
END_TEST

/* HELLO with exactly proto on a new raw connection; returns the fd. */
static int raw_hello(uint16_t proto, struct wire_hello_ok *ok)
{
	int fd = raw_connect();
	struct wire_msg m = { .type = WIRE_HELLO, .seq = 1 };
	struct wire_msg rep;

	m.u.hello.proto_min = m.u.hello.proto_max = proto;
	call_ok(fd, &m, &rep, WIRE_HELLO_OK);
	ck_assert_uint_eq(rep.u.hello_ok.proto, proto);
	*ok = rep.u.hello_ok;
	return fd;
}

START_TEST(protocol_misuse_after_hello)
{
	struct wire_hello_ok ok;
	int fd = raw_hello(WIRE_PROTO_MAX, &ok);
	struct wire_msg m, rep;

	/* A stale lease is skipped (RELEASE is idempotent). */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_RELEASE;
	m.seq = 2;
	m.u.release.count = 1;
	m.u.release.ref[0].epoch = ok.epoch ^ 1;
	m.u.release.ref[0].slab = 0;
	m.u.release.ref[0].generation = 1;
	call_ok(fd, &m, &rep, WIRE_RELEASE_OK);
	ck_assert_uint_eq(rep.u.release_ok.released, 0);

	/* More slabs than exist. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_LEASE;
	m.seq = 3;
	m.u.lease.nslabs = 17;
	m.u.lease.node = WIRE_NODE_ANY;
	send_msg(fd, &m);
	expect_error(fd, ENOSPC);

	/* A node this memd (no numa_nodes) does not serve. */
	m.seq = 4;
	m.u.lease.nslabs = 1;
	m.u.lease.node = 0;
	send_msg(fd, &m);
	expect_error(fd, EINVAL);

	/* A reply type is not a request: error and close. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_BYE_OK;
	m.seq = 5;
	refused_closed(fd, &m, EBADMSG);
	assert_serving();
}
END_TEST

/* A well-formed request of type with seq in *m (FABRIC, KV_MODEL,
 * KV_CLEAR, MEMBERS, KV_LOOKUP_AT: one key at membership 1). */
static void request(struct wire_msg *m, uint8_t type, uint32_t seq)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = seq;
	if (type == WIRE_FABRIC)
		m->u.fabric.rxm_buffer_size = 1024;
	if (type == WIRE_KV_MODEL) {
		m->u.kv_model.prefill_tokens_per_s = 1000;
		m->u.kv_model.bytes_per_token = 4096;
	}
	if (type == WIRE_KV_LOOKUP_AT) {
		m->u.kv.membership = 1;
		m->u.kv.count = 1;
	}
}

/* FABRIC (protocol 3): memd's effective FI_OFI_RXM_BUFFER_SIZE, the
 * same as this process's (memd inherits our environment, and both
 * default it alike), 0 for a provider without ofi_rxm; refused in a
 * version-2 session, as KV_MODEL is. */
START_TEST(fabric_tells_rxm_buffer_size)
{
	/* requests of later protocols in a session of an earlier one */
	static const struct {
		uint16_t proto;
		uint8_t type;
	} too_new[] = {
		{ 2, WIRE_FABRIC },	  { 2, WIRE_KV_MODEL },
		{ 3, WIRE_KV_CLEAR },	  { 4, WIRE_MEMBERS },
		{ 4, WIRE_KV_LOOKUP_AT },
	};
	struct wire_msg m = { .type = WIRE_FABRIC, .seq = 2 }, rep;
	struct wire_hello_ok ok;
	uint32_t want;
	int fd;

	fd = raw_hello(WIRE_PROTO_MAX, &ok);
	want = fab_provider_is_rxm(ok.provider) ? fab_rxm_buffer_size() : 0;
	m.u.fabric.rxm_buffer_size = 1024;
	for (uint32_t i = 0; i < 2; i++) { /* asked twice, same answer */
		m.seq = 2 + i;
		call_ok(fd, &m, &rep, WIRE_FABRIC_OK);
		ck_assert_uint_eq(rep.seq, 2 + i);
		ck_assert_uint_eq(rep.u.fabric.flags, 0);
		ck_assert_uint_eq(rep.u.fabric.rxm_buffer_size, want);
	}
	close(fd);

	/* FABRIC and KV_MODEL (protocol 3) in a version-2 session, KV_CLEAR
	 * (4) in a version-3 one (as an older memd answers it: libpool
	 * sends it only on 4), protocol 5's MEMBERS and _AT forms in a
	 * version-4 one: EPROTO, closed */
	for (size_t i = 0; i < sizeof(too_new) / sizeof(too_new[0]); i++) {
		fd = raw_hello(too_new[i].proto, &ok);
		request(&m, too_new[i].type, 9 + (uint32_t)i);
		refused_closed(fd, &m, EPROTO);
	}
	/* in a version-5 session at a standalone memd: no registry, so no
	 * donor list (EOPNOTSUPP) and no membership a request could have
	 * been routed by (ESTALE); the connection stays */
	fd = raw_hello(5, &ok);
	request(&m, WIRE_MEMBERS, 14);
	send_msg(fd, &m);
	ck_assert_uint_eq(expect_error(fd, EOPNOTSUPP), 14);
	request(&m, WIRE_KV_LOOKUP_AT, 15);
	send_msg(fd, &m);
	ck_assert_uint_eq(expect_error(fd, ESTALE), 15);
	m.type = WIRE_KV_LOOKUP; /* the plain form is served: a miss */
	m.seq = 16;
	m.u.kv.membership = 0;
	call_ok(fd, &m, &rep, WIRE_KV_LOOKUP_OK);
	ck_assert_int_eq(rep.u.kv.item[0].status, -ENOENT);
	close(fd);
	assert_serving();
}
END_TEST

START_TEST(release_of_another_sessions_lease_refused)
{
	struct pool_opts o = { .addr = md.addr };
	struct pool *p;
	struct pool_region *r;
	struct wire_lease l;
	uint64_t off, len;
	struct wire_msg m = { .type = WIRE_HELLO, .seq = 1 };
	static uint8_t buf[WIRE_MAX_FRAME];
	uint8_t w[4096], b[4096];
	int fd;
	ssize_t n;

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_alloc(p, 16u << 20, &r), 0);
	tu_pattern_fill(w, sizeof(w), 9, 0);
	ck_assert_int_eq(pool_write(p, r, 0, w, sizeof(w)), 0);
	ck_assert_int_eq(pool_region_extent(r, 0, &l, &off, &len), 0);

	/* Another session names that exact lease. */
	fd = raw_connect();
	m.u.hello.proto_min = m.u.hello.proto_max = WIRE_PROTO_MAX;
	send_msg(fd, &m);
	n = read_frame(fd, buf, sizeof(buf), 10000);
	ck_assert_int_gt(n, 0);
	memset(&m, 0, sizeof(m));
	m.type = WIRE_RELEASE;
	m.seq = 2;
	m.u.release.count = 1;
	m.u.release.ref[0].epoch = l.epoch;
	m.u.release.ref[0].slab = l.slab;
	m.u.release.ref[0].generation = l.generation;
	send_msg(fd, &m);
	expect_error(fd, EPERM);
	close(fd);

	/* The owner's lease and bytes are untouched. */
	ck_assert_int_eq(pool_read(p, r, 0, b, sizeof(b)), 0);
	ck_assert_int_eq(memcmp(w, b, sizeof(b)), 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
}
END_TEST

START_TEST(unsupported_version_refused)
{
	int fd = raw_connect();
	struct wire_msg m = { .type = WIRE_HELLO, .seq = 1 };

	m.u.hello.proto_min = m.u.hello.proto_max = WIRE_PROTO_MAX + 1;
	send_msg(fd, &m);
	expect_error(fd, EPROTONOSUPPORT);
	ck_assert(closed_soon(fd));
	close(fd);
}
END_TEST

START_TEST(too_many_clients_refused_then_served)
{
	static uint8_t buf[WIRE_MAX_FRAME];
	int fds[20];

	/* max_clients = 16 sessions: the 17th and later connections get
	 * EBUSY and a close. (Connections still in their handshake would
	 * be displaced instead: test_memd_hostile.) */
	for (int i = 0; i < 16; i++) {
		struct wire_msg m = { .type = WIRE_HELLO, .seq = 1 };

		fds[i] = raw_connect();
		m.u.hello.proto_min = m.u.hello.proto_max = WIRE_PROTO_MAX;
		send_msg(fds[i], &m);
		ck_assert_int_gt(read_frame(fds[i], buf, sizeof(buf), 10000),
				 0);
	}
	for (int i = 16; i < 20; i++) {
		fds[i] = raw_connect();
		expect_error(fds[i], EBUSY);
		ck_assert(closed_soon(fds[i]));
	}
	for (int i = 0; i < 20; i++)
		close(fds[i]);
	/* Slots come back once those clients are gone. */
	for (int i = 0; i < 100; i++) {
		struct pool_opts o = { .addr = md.addr };
		struct pool *p;

		if (pool_connect(&o, &p) == 0) {
			pool_close(p);
			break;
		}
		usleep(50000);
	}
	assert_serving();
}
END_TEST

START_TEST(client_stuck_mid_frame_does_not_block_others)
{
	int fd = raw_connect();
	uint8_t h[8] = { 'T', 'D', 'P', 'L', 1, WIRE_HELLO, 0, 0 };

	ck_assert_int_eq(send(fd, h, sizeof(h), MSG_NOSIGNAL), sizeof(h));
	assert_serving(); /* half a header pending on another connection */
	/* and the stalled client is dropped (handshake_timeout, 5 s) */
	ck_assert(closed_soon(fd));
	close(fd);
}
END_TEST

/* Runs memd with args, its stderr to errpath (NULL: /dev/null); returns
 * its exit status. */
static int run_memd_log(const char *const *args, const char *errpath)
{
	const char *argv[16];
	int n = 0, st;
	pid_t pid;

	argv[n++] = tu_memd_path();
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		int errfd = errpath ? open(errpath,
					   O_WRONLY | O_CREAT | O_TRUNC, 0600)
				    : devnull;

		dup2(devnull, 1);
		dup2(errfd, 2);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs memd with args; returns its exit status. */
static int run_memd(const char *const *args)
{
	return run_memd_log(args, NULL);
}

/* memd with args exits 78 (EX_CONFIG) and its stderr (errp) says what
 * fmt formats. */
static void memd_config_error(const char *const *args, const char *errp,
			      const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void memd_config_error(const char *const *args, const char *errp,
			      const char *fmt, ...)
{
	char want[PATH_MAX + 128];
	va_list ap;

	ck_assert_int_eq(run_memd_log(args, errp), 78);
	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	ck_assert_msg(tu_file_has(errp, want), "memd did not say '%s'", want);
}

/*
 * A rule between keys (donate a multiple of slab_size, lease_grace below
 * lease_ttl) is a config error like any other: exit 78 (EX_CONFIG), and
 * the message names the file and line of the key it blames, or the flag.
 */
START_TEST(cross_key_errors_name_file_and_line)
{
	/* memd -c CONF FLAGS --check-config says want (%s: CONF's path) */
	static const struct {
		const char *flags[4];
		const char *want;
	} cases[] = {
		{ { NULL },
		  "%s:3: key 'donate': 40M is not a multiple of slab_size = "
		  "16M" },
		/* --donate fixes donate; lease_grace (line 4) is next */
		{ { "--donate", "48M" },
		  "%s:4: key 'lease_grace': 20s must be less than lease_ttl = "
		  "10s" },
		/* and a flag that breaks a rule is named as the command line */
		{ { "--donate", "56M", "--set", "lease_grace=1s" },
		  "command line: key 'donate': 56M is not a multiple of "
		  "slab_size = 16M" },
	};
	char dir[PATH_MAX], conf[PATH_MAX + 16], errp[PATH_MAX + 16];
	FILE *f;

	ck_assert_int_eq(tu_scratch_dir(dir, sizeof(dir), "crosskey"), 0);
	snprintf(conf, sizeof(conf), "%s/memd.conf", dir);
	snprintf(errp, sizeof(errp), "%s/stderr", dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fputs("# memd.conf\nslab_size = 16M\ndonate = 40M\n"
	      "lease_grace = 20s\n",
	      f);
	fclose(f);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[8] = { "-c", conf };
		int n = 2;

		for (int k = 0; k < 4 && cases[i].flags[k]; k++)
			args[n++] = cases[i].flags[k];
		args[n] = "--check-config";
		memd_config_error(args, errp, cases[i].want, conf);
	}
}
END_TEST

/* Reads m's memd.log into a static buffer, NUL-terminated. */
static const char *memd_log_text(const struct tu_memd *m)
{
	static char buf[1 << 20];
	char path[256];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/memd.log", m->dir);
	f = fopen(path, "r");
	ck_assert_msg(f, "cannot open %s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Stops m with SIGTERM and reaps it here (tu_memd_stop would remove its
 * log); returns the log's text (memd_log_text); *st: the wait status. */
static const char *memd_stop_keep_log(struct tu_memd *m, int *st)
{
	ck_assert_int_eq(kill(m->pid, SIGTERM), 0);
	ck_assert_int_eq(waitpid(m->pid, st, 0), m->pid);
	m->pid = 0;
	return memd_log_text(m);
}

/* Starts m and opens and closes one session of client o to it. */
static void memd_one_session(struct tu_memd *m, struct pool_opts *o)
{
	struct pool *p;

	tu_memd_start_ok(m, NULL);
	o->addr = m->addr;
	ck_assert_int_eq(pool_connect(o, &p), 0);
	pool_close(p);
}

/*
 * The close line of a standalone client names the session its hello
 * line named, also after BYE closed the session (it said session=0).
 * memd is stopped before its log is read, so every line is in it.
 */
START_TEST(close_line_names_the_session)
{
	struct tu_memd m;
	struct pool_opts o = { .client_name = "sessiontest" };
	const char *log, *l;
	char peer[64], want[128];
	uint64_t sid = 0, closed;
	int st;

	memd_one_session(&m, &o);
	log = memd_stop_keep_log(&m, &st);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "memd exit status %d", st);

	l = strstr(log, "ctl: hello peer=");
	ck_assert_msg(l, "no hello line in:\n%s", log);
	ck_assert_int_eq(
		sscanf(l, "ctl: hello peer=%63s session=%" SCNx64, peer, &sid),
		2);
	ck_assert_msg(sid != 0, "hello line with session 0");
	snprintf(want, sizeof(want), "ctl: close peer=%s session=", peer);
	l = strstr(l, want);
	ck_assert_msg(l, "no '%s' line in:\n%s", want, log);
	ck_assert_int_eq(sscanf(l + strlen(want), "%" SCNx64, &closed), 1);
	ck_assert_msg(closed == sid,
		      "close line says session=%" PRIx64
		      ", hello said %" PRIx64,
		      closed, sid);
}
END_TEST

/* A TCP connection to addr (host:port) from 127.0.0.1; its local port
 * in *port. */
static int connect_from(const char *addr, uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/*
 * memd says why it closed a client's connection in its handshake (here
 * displaced by a newer connection from its address, max_clients_per_host
 * = 1, before memd read its HELLO), one notice line; a churn of half-sent
 * headers leaves no such line. memd is stopped before its log is read,
 * so every line is in it.
 */
START_TEST(handshake_close_of_a_client_is_logged)
{
	struct wire_msg hm = { .type = WIRE_HELLO, .seq = 1 };
	uint8_t frame[WIRE_MAX_FRAME], half[8];
	uint16_t pa, pb, pc;
	char want[160];
	struct tu_memd m;
	const char *log;
	int a, b, c, st;
	ssize_t n;

	hm.u.hello.proto_min = hm.u.hello.proto_max = WIRE_PROTO_MAX;
	n = wire_encode(&hm, frame, sizeof(frame));
	ck_assert_int_gt(n, WIRE_HDR_LEN);
	memcpy(half, frame, sizeof(half));
	tu_memd_start_ok(&m, "max_clients_per_host = 1\n");
	/* a client whose HELLO's header arrived, its payload not yet */
	a = connect_from(m.addr, &pa);
	ck_assert_int_eq(send(a, frame, WIRE_HDR_LEN, MSG_NOSIGNAL),
			 WIRE_HDR_LEN);
	/* half a header from the same address displaces it, and so on */
	b = connect_from(m.addr, &pb);
	ck_assert_int_eq(send(b, half, sizeof(half), MSG_NOSIGNAL),
			 sizeof(half));
	ck_assert(closed_soon(a));
	c = connect_from(m.addr, &pc);
	ck_assert_int_eq(send(c, half, sizeof(half), MSG_NOSIGNAL),
			 sizeof(half));
	ck_assert(closed_soon(b));
	close(a);
	close(b);
	close(c);
	log = memd_stop_keep_log(&m, &st);
	snprintf(want, sizeof(want),
		 "notice ctl: close peer=127.0.0.1:%u session=0 "
		 "state=handshake why=displaced in its handshake suppressed=",
		 pa);
	ck_assert_msg(strstr(log, want), "no '%s' line in:\n%s", want, log);
	/* (the test's memd logs at debug: half a header's line is one) */
	snprintf(want, sizeof(want), "debug ctl: close peer=127.0.0.1:%u ", pb);
	ck_assert_msg(strstr(log, want), "no '%s' line in:\n%s", want, log);
	tu_memd_stop(&m, SIGTERM); /* removes its directory */
}
END_TEST

/*
 * A client name with blanks and quotes is one quoted value in the hello
 * line, so the line still parses as key=value pairs.
 */
START_TEST(hello_line_quotes_client_name)
{
	struct tu_memd m;
	struct pool_opts o = { .client_name = "kvbench pid 13498 \"x\"" };
	const char *want = " client=\"kvbench pid 13498 \\\"x\\\"\"";
	const char *log, *l, *e;
	int st;

	memd_one_session(&m, &o);
	log = memd_stop_keep_log(&m, &st);
	l = strstr(log, "ctl: hello peer=");
	ck_assert_msg(l, "no hello line in:\n%s", log);
	e = strchr(l, '\n');
	ck_assert_ptr_nonnull(e);
	/* the last pair of the line */
	ck_assert_msg((size_t)(e - l) > strlen(want) &&
			      !strncmp(e - strlen(want), want, strlen(want)),
		      "hello line: %.*s", (int)(e - l), l);
	tu_memd_stop(&m, SIGTERM); /* removes its directory */
}
END_TEST

START_TEST(command_line_exit_codes)
{
	const char *bad_flag[] = { "--no-such-flag", NULL };
	const char *bad_value[] = { "--donate", "12Q", "--check-config", NULL };
	const char *bad_set[] = { "--set", "nokey", NULL };
	const char *ok[] = { "--donate",       "64M", "--slab-size", "16M",
			     "--check-config", NULL };
	const char *missing[] = { "-c", "/nonexistent/memd.conf",
				  "--check-config", NULL };
	const char *too_big[] = { "--listen", "127.0.0.1:0", "--donate",
				  "1048576G", NULL };

	ck_assert_int_eq(run_memd(bad_flag), 64);
	ck_assert_int_eq(run_memd(bad_value), 78);
	ck_assert_int_eq(run_memd(bad_set), 64);
	ck_assert_int_eq(run_memd(ok), 0);
	ck_assert_int_eq(run_memd(missing), 78);
	/* 1 PiB: the host cannot back it; memd refuses (EX_OSERR). */
	ck_assert_int_eq(run_memd(too_big), 71);
}
END_TEST

/*
 * hugepages = auto with every free huge page reserved by another mapping
 * (mmap(MAP_HUGETLB), not touched yet): free_hugepages still counts them,
 * so memd plans huge pages, but its mmap cannot have them. It starts on
 * anonymous memory instead of exiting. Needs root for vm.nr_hugepages
 * and 16 free huge pages: run alone by `test_memd --huge` (ctest
 * test_memd_huge), which exits 77 (skipped, saying why) without them.
 */
START_TEST(hugepages_auto_falls_back_when_reserved)
{
	static const char *const args[] = { "--donate", "32M", "--hugepages",
					    "auto", NULL };
	struct tu_memd m;
	struct tu_huge h;
	struct pool_region *r;
	struct pool *p;
	char why[256];
	size_t len;
	void *resv;
	int ret;

	/* main() checked that this works before running the test */
	ck_assert_msg(tu_huge_reserve(&h, 16, why, sizeof(why)) == 0, "%s",
		      why);
	len = tu_huge_avail() * (2ul << 20);
	resv = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	ck_assert_msg(resv != MAP_FAILED, "mmap of %zu hugetlb bytes: %s", len,
		      strerror(errno));
	ret = tu_memd_start_args(&m, NULL, args);
	ck_assert_int_eq(munmap(resv, len), 0);
	tu_huge_release(&h);
	ck_assert_msg(ret == 0, "memd did not start: %s", strerror(-ret));
	p = tu_pool_connect(&m);
	ck_assert_int_eq(pool_alloc(p, 4 << 20, &r), 0);
	tu_pool_write_read_check(p, r, 0, 4 << 20, 9);
	pool_close(p);
	tu_memd_stop_ok(&m);
}
END_TEST

/*
 * test_memd --scratch-fail (tests/scratch_cleanup.sh): a forked test that
 * starts memd, writes a file of its own into memd's scratch directory and
 * fails without stopping memd, as a broken test does. The script then
 * checks that this process's exit removed /tmp/tp-test-PID and killed
 * that memd.
 */
START_TEST(fails_with_memd_running)
{
	struct tu_memd m;
	char path[300];
	FILE *f;

	tu_memd_start_ok(&m, NULL);
	snprintf(path, sizeof(path), "%s/left-by-the-test", m.dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	printf("memd pid %d dir %s\n", (int)m.pid, m.dir);
	fflush(stdout);
	ck_abort_msg("failing on purpose, memd still running");
}
END_TEST

static int run_scratch_fail(void)
{
	Suite *s = suite_create("scratch");
	TCase *tc = tcase_create("fail");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, fails_with_memd_running);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 1 ? 3 : EXIT_FAILURE; /* 3: failed as planned */
}

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc, *cli, *logt;
	bool huge = argc > 1 && !strcmp(argv[1], "--huge");

	tu_need_memd();
	if (argc > 1 && !strcmp(argv[1], "--scratch-fail"))
		return run_scratch_fail();
	s = suite_create("memd"); /* after: --scratch-fail must not leak it */
	if (huge) {
		/* only the huge-page case, and a skip where it cannot run */
		struct tu_huge h;
		char why[256];
		TCase *hc = tcase_create("huge");

		if (tu_huge_reserve(&h, 16, why, sizeof(why)))
			tu_skip("hugepages_auto_falls_back_when_reserved: %s",
				why);
		tu_huge_release(&h);
		tcase_set_timeout(hc, 120);
		tcase_add_test(hc, hugepages_auto_falls_back_when_reserved);
		suite_add_tcase(s, hc);
		return tu_run_suite(s);
	}
	tc = tcase_create("control");
	cli = tcase_create("cli");
	logt = tcase_create("log");
	tcase_set_timeout(logt, 60);
	signal(SIGPIPE, SIG_IGN);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	TU_ADD_TESTS(tc, garbage_bytes_close_connection,
		     oversized_frame_gets_emsgsize,
		     malformed_payload_gets_ebadmsg,
		     requests_before_hello_refused, protocol_misuse_after_hello,
		     release_of_another_sessions_lease_refused,
		     fabric_tells_rxm_buffer_size, unsupported_version_refused,
		     too_many_clients_refused_then_served,
		     client_stuck_mid_frame_does_not_block_others);
	tcase_add_test(cli, command_line_exit_codes);
	tcase_add_test(cli, cross_key_errors_name_file_and_line);
	TU_ADD_TESTS(logt, close_line_names_the_session,
		     handshake_close_of_a_client_is_logged,
		     hello_line_quotes_client_name);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, cli);
	suite_add_tcase(s, logt);
	return tu_run_suite(s);
}
