// SPDX-License-Identifier: MIT
/*
 * tests/test_metrics.c - memd's GET /metrics (memd/metrics.c and
 * srv_write_metrics in memd/server_metrics.c) against a real memd: the
 * ready file's second line, the exposition's names and values before,
 * during and after leases taken through libpool, every MEMD_COUNTERS
 * counter, and the HTTP errors (404, 405, malformed requests), over plain
 * sockets.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpool/internal.h"
#include "memd/server.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define MIB (UINT64_C(1) << 20)
/* testutil's memd: donate = 256M, slab_size = 16M */
#define SLAB (16 * MIB)
#define NSLABS 16

static struct tu_memd md;

static void start_with_metrics(void)
{
	static const char *const args[] = { "--set",
					    "metrics_listen=127.0.0.1:0",
					    NULL };
	int r = tu_memd_start_args(&md, NULL, args);

	ck_assert_msg(r == 0, "memd did not start: %s", strerror(-r));
	ck_assert_msg(md.metrics[0], "no metrics line in the ready file");
}

static void setup(void)
{
	start_with_metrics();
}

static void teardown(void)
{
	tu_memd_stop_ok(&md);
}

static int connect_to(const char *hostport)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const char *colon = strrchr(hostport, ':');
	struct timeval tv = { .tv_sec = 30 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(colon);
	ck_assert(!strncmp(hostport, "127.0.0.1:", 10));
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	/* a hung server fails the test instead of hanging it */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

struct reply {
	int status;
	char head[4096];
	char *body; /* malloc'd, NUL-terminated */
	size_t body_len;
};

/*
 * Sends request as is and reads the reply up to the server's close
 * (HTTP/1.0, or "Connection: close"). Returns the status code.
 */
static int http_raw(const char *hostport, const char *request,
		    struct reply *rep)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap), *sep;
	int fd = connect_to(hostport);
	ssize_t n;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(send(fd, request, strlen(request), MSG_NOSIGNAL),
			 (ssize_t)strlen(request));
	for (;;) {
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		n = recv(fd, buf + len, cap - len - 1, 0);
		ck_assert_msg(n >= 0, "recv: %s", strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	memset(rep, 0, sizeof(*rep));
	ck_assert_msg(sscanf(buf, "HTTP/1.%*d %d", &rep->status) == 1,
		      "not an HTTP reply: '%.80s'", buf);
	sep = strstr(buf, "\r\n\r\n");
	ck_assert_ptr_nonnull(sep);
	snprintf(rep->head, sizeof(rep->head), "%.*s", (int)(sep - buf), buf);
	rep->body_len = len - (size_t)(sep + 4 - buf);
	rep->body = strdup(sep + 4);
	ck_assert_ptr_nonnull(rep->body);
	free(buf);
	return rep->status;
}

/*
 * Sends junk; the server must close the connection, after an error reply or
 * none. Returns 0 then, else the status it answered (or -1: no close).
 */
static int http_junk(const char *hostport, const char *junk)
{
	char buf[4096];
	size_t len = 0;
	int fd = connect_to(hostport), status = 0;
	ssize_t n;

	send(fd, junk, strlen(junk), MSG_NOSIGNAL);
	while (len < sizeof(buf) - 1 &&
	       (n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	if (len == sizeof(buf) - 1)
		return -1;
	if (len && (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 ||
		    status < 400 || status > 599))
		return status ? status : -1;
	return 0;
}

/* GET /metrics; fails the test unless it is 200 with the 0.0.4 type. */
static char *scrape_at(const char *hostport)
{
	struct reply rep;

	ck_assert_int_eq(http_raw(hostport,
				  "GET /metrics HTTP/1.0\r\n"
				  "Host: test\r\n\r\n",
				  &rep),
			 200);
	ck_assert_msg(strstr(rep.head, "\r\nContent-Type: text/plain; "
				       "version=0.0.4"),
		      "head: %s", rep.head);
	ck_assert_uint_eq(strlen(rep.body), rep.body_len);
	return rep.body;
}

static char *scrape(void)
{
	return scrape_at(md.metrics);
}

/*
 * The value of the sample whose name (with labels, if any) is exactly
 * series; fails the test when there is none or more than one.
 */
static uint64_t sample(const char *text, const char *series)
{
	size_t sl = strlen(series);
	const char *p = text, *found = NULL;
	uint64_t v;

	for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, series, sl) && p[sl] == ' ') {
			ck_assert_msg(!found, "'%s' twice", series);
			found = p + sl + 1;
		}
	}
	ck_assert_msg(found, "no sample '%s' in:\n%s", series, text);
	ck_assert_msg(sscanf(found, "%" SCNu64, &v) == 1, "'%s': bad value",
		      series);
	return v;
}

static void assert_contains(const char *haystack, const char *needle)
{
	ck_assert_msg(strstr(haystack, needle), "no '%s' in:\n%s", needle,
		      haystack);
}

/* Slab accounting adds up, whatever the moment. */
static void assert_slabs(const char *t, uint64_t leased, uint64_t free_slabs)
{
	ck_assert_uint_eq(sample(t, "tidepool_memd_capacity_bytes"),
			  NSLABS * SLAB);
	ck_assert_uint_eq(sample(t, "tidepool_memd_slab_bytes"), SLAB);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leased_bytes"),
			  leased * SLAB);
	ck_assert_uint_eq(sample(t, "tidepool_memd_free_bytes"),
			  free_slabs * SLAB);
	ck_assert_uint_eq(sample(t, "tidepool_memd_reclaiming_bytes"),
			  (NSLABS - leased - free_slabs) * SLAB);
	ck_assert_uint_eq(
		sample(t, "tidepool_memd_arena_slabs{arena=\"0\",node=\"-1\"}"),
		NSLABS);
	ck_assert_uint_eq(sample(t, "tidepool_memd_arena_free_slabs{arena="
				    "\"0\",node=\"-1\"}"),
			  free_slabs);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/*
 * Waits (up to 30 s) until n slabs have been zeroed. A scrape reads the
 * lease table before the counters, so the slabs are counted free only in
 * the scrapes after the one where the counter reaches n.
 */
static void wait_zeroed(uint64_t n)
{
	uint64_t zeroed = 0;

	for (int i = 0; i < 3000; i++) {
		char *t = scrape();

		zeroed = sample(t, "tidepool_memd_slabs_zeroed_total");
		free(t);
		if (zeroed >= n)
			break;
		sleep_ms(10);
	}
	ck_assert_uint_eq(zeroed, n);
}

START_TEST(exposition_names_and_types)
{
	char *t = scrape(), want[256];

	/* the info sample, with the version this build says */
	snprintf(want, sizeof(want),
		 "\ntidepool_memd_info{version=\"%s\",provider=\"", TP_VERSION);
	assert_contains(t, want);
	assert_contains(t, "\",mode=\"standalone\"} 1\n");
	assert_contains(t, "# TYPE tidepool_memd_info gauge\n");
	assert_contains(t, "\n# TYPE tidepool_memd_uptime_seconds gauge\n"
			   "tidepool_memd_uptime_seconds ");
	/* every counter of the X-macro, with its help text */
#define X(name, help)                                                          \
	assert_contains(t, "\n# HELP tidepool_memd_" #name "_total " help      \
			   ".\n# TYPE tidepool_memd_" #name "_total counter\n" \
			   "tidepool_memd_" #name "_total ");
	MEMD_COUNTERS(X)
#undef X
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions_opened_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leases_granted_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions_expired_total"), 0);
	assert_slabs(t, 0, NSLABS);
	/* every line is a comment or "name value", and the text ends whole */
	ck_assert_int_eq(t[strlen(t) - 1], '\n');
	for (char *line = t; *line;) {
		char *nl = strchr(line, '\n');

		ck_assert_ptr_nonnull(nl);
		ck_assert_msg(line[0] == '#' ||
				      !strncmp(line, "tidepool_memd_", 14),
			      "odd line '%.*s'", (int)(nl - line), line);
		line = nl + 1;
	}
	free(t);
}
END_TEST

START_TEST(values_follow_leases)
{
	struct pool *p = tu_pool_connect(&md);
	struct pool_region *r1 = NULL, *r2 = NULL;
	uint64_t frames0, frames1;
	char *t;

	t = scrape();
	frames0 = sample(t, "tidepool_memd_frames_in_total");
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions"), 1);
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions_opened_total"), 1);
	ck_assert_uint_ge(sample(t, "tidepool_memd_conns_accepted_total"), 1);
	free(t);

	/* half a slab and more: whole slabs of its own (pool_alloc(3)) */
	ck_assert_int_eq(pool_alloc(p, 3 * SLAB, &r1), 0);
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &r2), 0);
	t = scrape();
	assert_slabs(t, 5, NSLABS - 5);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leases_granted_total"), 5);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leases_released_total"), 0);
	frames1 = sample(t, "tidepool_memd_frames_in_total");
	ck_assert_uint_gt(frames1, frames0);
	free(t);

	ck_assert_int_eq(pool_free(p, r1), 0);
	t = scrape();
	ck_assert_uint_eq(sample(t, "tidepool_memd_leased_bytes"), 2 * SLAB);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leases_released_total"), 3);
	free(t);

	/* the three released slabs come back once zeroed (quiesce 100ms) */
	wait_zeroed(3);
	t = scrape();
	assert_slabs(t, 2, NSLABS - 2);
	free(t);

	pool_close(p); /* releases r2 */
	wait_zeroed(5);
	t = scrape();
	assert_slabs(t, 0, NSLABS);
	ck_assert_uint_eq(sample(t, "tidepool_memd_sessions"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_leases_expired_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_slabs_zeroed_total"), 5);
	free(t);
}
END_TEST

START_TEST(refused_lease_is_counted)
{
	struct pool *p = tu_pool_connect(&md);
	struct pool_region *r = NULL;
	char *t;

	ck_assert_int_eq(pool_alloc(p, (NSLABS + 1) * SLAB, &r), -ENOSPC);
	t = scrape();
	ck_assert_uint_ge(sample(t, "tidepool_memd_leases_refused_total"), 1);
	assert_slabs(t, 0, NSLABS);
	free(t);
	pool_close(p);
}
END_TEST

START_TEST(http_errors)
{
	struct reply rep;
	char *t;

	ck_assert_int_eq(http_raw(md.metrics, "GET / HTTP/1.0\r\n\r\n", &rep),
			 404);
	free(rep.body);
	ck_assert_int_eq(
		http_raw(md.metrics, "GET /metrics/x HTTP/1.0\r\n\r\n", &rep),
		404);
	free(rep.body);
	ck_assert_int_eq(http_raw(md.metrics,
				  "POST /metrics HTTP/1.0\r\n"
				  "Content-Length: 3\r\n\r\nabc",
				  &rep),
			 405);
	assert_contains(rep.head, "\r\nAllow: GET, HEAD");
	free(rep.body);
	ck_assert_int_eq(http_raw(md.metrics,
				  "DELETE /metrics HTTP/1.1\r\nHost: x\r\n"
				  "Connection: close\r\n\r\n",
				  &rep),
			 405);
	free(rep.body);
	/* HEAD: the head of the 200, no body */
	ck_assert_int_eq(
		http_raw(md.metrics, "HEAD /metrics HTTP/1.0\r\n\r\n", &rep),
		200);
	ck_assert_uint_eq(rep.body_len, 0);
	free(rep.body);
	/* not HTTP at all: closed (or answered 4xx/5xx), the server goes on */
	ck_assert_int_eq(http_junk(md.metrics, "NONSENSE\r\n\r\n"), 0);
	ck_assert_int_eq(http_junk(md.metrics, "GET /metrics HTTP/9.9\r\n"
					       "\x01\x02: \xff\r\n\r\n"),
			 0);
	/* a query string is not part of the path */
	ck_assert_int_eq(http_raw(md.metrics,
				  "GET /metrics?name[]=x HTTP/1.0\r\n\r\n",
				  &rep),
			 200);
	free(rep.body);
	t = scrape();
	assert_slabs(t, 0, NSLABS);
	free(t);
}
END_TEST

/* The ready file's second line is there only with metrics_listen. */
START_TEST(ready_file_lines)
{
	struct tu_memd plain;
	char *colon_c = strrchr(md.addr, ':'),
	     *colon_m = strrchr(md.metrics, ':');

	ck_assert_ptr_nonnull(colon_c);
	ck_assert_ptr_nonnull(colon_m);
	ck_assert_str_ne(colon_c, colon_m);
	ck_assert_int_ne(atoi(colon_m + 1), 0);
	ck_assert(!strncmp(md.metrics, "127.0.0.1:", 10));

	tu_memd_start_ok(&plain, NULL);
	ck_assert_str_eq(plain.metrics, "");
	tu_memd_stop_ok(&plain);
}
END_TEST

/* A metrics address that cannot be bound stops memd at start-up. */
START_TEST(metrics_port_in_use)
{
	struct tu_memd second;
	char arg[96];
	const char *args[] = { "--set", arg, NULL };

	snprintf(arg, sizeof(arg), "metrics_listen=%s", md.metrics);
	ck_assert_int_eq(tu_memd_start_args(&second, NULL, args), -ECHILD);
	tu_memd_stop(&second, SIGTERM);
}
END_TEST

/* memd(8), METRICS, documents every name a scrape has. */
START_TEST(man_page_names_every_metric)
{
	const char *src = getenv("TP_SOURCE_DIR");
	char path[512], needle[160], *man, *t = scrape();
	int names = 0;

	snprintf(path, sizeof(path), "%s/man/memd.8", src && *src ? src : ".");
	man = tu_read_whole(path);
	ck_assert_msg(man, "cannot read %s (set TP_SOURCE_DIR)", path);
	for (char *line = t; *line; line = strchr(line, '\n') + 1) {
		size_t n = strcspn(line, "{ \n");

		if (line[0] == '#')
			continue;
		snprintf(needle, sizeof(needle), "\n.TP\n.B %.*s\n", (int)n,
			 line);
		ck_assert_msg(strstr(man, needle), "%s does not document %.*s",
			      path, (int)n, line);
		names++;
	}
	ck_assert_int_ge(names, 10);
	free(man);
	free(t);
}
END_TEST

/* The value of a sample in seconds (a decimal), as for sample(). */
static double sample_seconds(const char *text, const char *series)
{
	size_t sl = strlen(series);
	const char *p = text;

	for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, series, sl) && p[sl] == ' ')
			return strtod(p + sl + 1, NULL);
	ck_assert_msg(0, "no sample '%s' in:\n%s", series, text);
	return 0;
}

#define WAKEUPS "tidepool_memd_fabric_wakeups_total{endpoint=\"0\"}"
#define BUSY "tidepool_memd_fabric_busy_poll_seconds_total{endpoint=\"0\"}"
#define WAKEUPS1 "tidepool_memd_fabric_wakeups_total{endpoint=\"1\"}"
#define FABCPU "tidepool_memd_fabric_cpu_seconds_total{endpoint=\"0\"}"
#define NREADS 200

/* NREADS synchronous 4 KiB reads through memd m, each checked. */
static void small_reads(const struct tu_memd *m)
{
	struct pool *p = tu_pool_connect(m);
	struct pool_region *r = NULL;
	uint8_t buf[4096];

	ck_assert_int_eq(pool_alloc(p, MIB, &r), 0);
	tu_pool_write_read_check(p, r, 0, MIB, 19);
	for (int i = 0; i < NREADS; i++) {
		uint64_t off = (uint64_t)(i % 256) * sizeof(buf);

		ck_assert_int_eq(pool_read(p, r, off, buf, sizeof(buf)), 0);
		ck_assert_int_lt(tu_pattern_check(buf, sizeof(buf), 19, off),
				 0);
	}
	pool_close(p);
}

/*
 * memd-fab0 reports what serving RMA cost it. With busy_poll_us = 0 (the
 * fixture's default) it sleeps whenever nothing is pending, so reads wake
 * it (how many depends on whether the next request beat it to sleep) and
 * it never busy-polls; with a window of 100 ms, far longer than the gap
 * between two reads, it stays awake through them: at most one wake-up per
 * return of its 100 ms progress call besides the first, a handful for
 * NREADS reads where sleeping costs dozens, and the polling time counted.
 */
START_TEST(fabric_progress_is_reported)
{
	static const char *const args[] = { "--set",
					    "metrics_listen=127.0.0.1:0",
					    "--set", "busy_poll_us=100000",
					    NULL };
	struct tu_memd busy;
	int64_t wakeups;
	char *t;

	/* the fabric's costs: keep libpool off the same-host path */
	setenv("LIBPOOL_SHM", "off", 1);
	small_reads(&md);
	t = scrape();
	ck_assert_uint_ge(sample(t, WAKEUPS), 1);
	ck_assert(sample_seconds(t, BUSY) == 0);
	ck_assert(sample_seconds(t, FABCPU) > 0);
	free(t);

	ck_assert_int_eq(tu_memd_start_args(&busy, NULL, args), 0);
	small_reads(&busy);
	t = scrape_at(busy.metrics);
	wakeups = (int64_t)sample(t, WAKEUPS);
	ck_assert_msg(wakeups <= NREADS / 10, "%" PRId64 " wake-ups", wakeups);
	ck_assert(sample_seconds(t, BUSY) > 0);
	ck_assert(sample_seconds(t, FABCPU) > 0);
	free(t);
	tu_memd_stop_ok(&busy);
	unsetenv("LIBPOOL_SHM");
}
END_TEST

/*
 * progress_threads = 2: HELLO_OK announces two endpoints, a region of four
 * slabs takes turns over them (slab i to endpoint i % 2), its bytes come
 * back right through both, and both progress threads served RMA.
 */
START_TEST(progress_threads_share_the_arena)
{
	static const char *const args[] = { "--set",
					    "metrics_listen=127.0.0.1:0",
					    "--set", "progress_threads=2",
					    NULL };
	struct tu_memd two;
	uint64_t w0, w1;
	struct pool *p;
	struct pool_region *r = NULL;
	char *t;

	ck_assert_int_eq(tu_memd_start_args(&two, NULL, args), 0);
	setenv("LIBPOOL_SHM", "off", 1); /* RMA through both endpoints */
	p = tu_pool_connect(&two);
	unsetenv("LIBPOOL_SHM");
	ck_assert_int_eq(pool_session_nendpoints(p), 2);
	ck_assert_int_eq(pool_alloc(p, 4 * SLAB, &r), 0);
	/* the session's set-up touched both endpoints: count from here */
	t = scrape_at(two.metrics);
	w0 = sample(t, WAKEUPS);
	w1 = sample(t, WAKEUPS1);
	free(t);
	for (uint64_t i = 0; i < 4; i++)
		tu_pool_write_read_check(p, r, i * SLAB + SLAB / 2, 256 * 1024,
					 40 + i);
	/* one transfer across all four slabs, so over both endpoints */
	tu_pool_write_read_check(p, r, SLAB / 2, 3 * SLAB, 50);
	t = scrape_at(two.metrics);
	/* busy_poll_us = 0: a request to a sleeping thread wakes it */
	ck_assert_uint_gt(sample(t, WAKEUPS), w0);
	ck_assert_uint_gt(sample(t, WAKEUPS1), w1);
	ck_assert_ptr_null(strstr(t, "{endpoint=\"2\"}"));
	free(t);
	pool_close(p);
	tu_memd_stop_ok(&two);
}
END_TEST

/*
 * A registry that donates too redeems the grant tickets of its own
 * placements: /metrics counts them (memd/redeem.c's stats), and no
 * replay, stale or busy refusal.
 */
START_TEST(ticket_redemptions_are_counted)
{
	const char *args[] = { "--set",	   "report_interval=100ms",
			       "--set",	   "metrics_listen=127.0.0.1:0",
			       "--donate", "128M",
			       NULL };
	char dir[64], state[128], cluster[256], sec_a[256];
	struct pool_opts o = { .tenant = "a", .secret_file = sec_a };
	struct tu_memd reg = { 0 };
	struct pool_region *r = NULL;
	struct pool *p = NULL;
	char *t;
	int rc = -ENOSPC;

	ck_assert_int_eq(tu_pool_dir(dir, sizeof(dir), "mreg", state,
				     sizeof(state), cluster),
			 0);
	ck_assert_int_eq(tu_secret_file(dir, "a.secret", sec_a), 0);
	ck_assert_int_eq(tu_registry_start(&reg, cluster, state, NULL, args),
			 0);
	ck_assert_msg(reg.metrics[0], "no metrics line in the ready file");
	ck_assert_int_eq(
		tu_tenant_add(reg.addr, cluster, "a", sec_a, 1024 * MIB), 0);
	t = scrape_at(reg.metrics);
	ck_assert_uint_eq(sample(t, "tidepool_memd_tickets_redeemed_total"), 0);
	free(t);
	o.addr = reg.addr;
	ck_assert_int_eq(pool_connect(&o, &p), 0);
	/* until the donor r0 has reported, PLACE answers ENOSPC */
	for (int i = 0; i < 500 && rc == -ENOSPC; i++) {
		rc = pool_alloc(p, 3 * MIB, &r);
		if (rc == -ENOSPC)
			usleep(20000);
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	ck_assert_int_eq(pool_alloc(p, 3 * MIB, &r), 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	t = scrape_at(reg.metrics);
	ck_assert_uint_ge(sample(t, "tidepool_memd_tickets_redeemed_total"), 2);
	ck_assert_uint_eq(sample(t, "tidepool_memd_tickets_replayed_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_tickets_too_old_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_tickets_busy_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_tickets_burnt_total"), 0);
	ck_assert_uint_eq(sample(t, "tidepool_memd_redeem_epochs"), 1);
	assert_contains(t, "# TYPE tidepool_memd_tickets_redeemed_total "
			   "counter\n");
	free(t);
	pool_close(p);
	tu_memd_stop_ok(&reg);
	tu_sh("rm -rf %s", dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tu_tcase(s, "metrics", 120);

	tu_need_memd();
	signal(SIGPIPE, SIG_IGN);
	tcase_add_checked_fixture(tc, setup, teardown);
	TU_ADD_TESTS(tc, exposition_names_and_types, values_follow_leases,
		     refused_lease_is_counted, http_errors, ready_file_lines,
		     metrics_port_in_use, man_page_names_every_metric,
		     ticket_redemptions_are_counted,
		     fabric_progress_is_reported,
		     progress_threads_share_the_arena);
	return tu_run_suite(s);
}
