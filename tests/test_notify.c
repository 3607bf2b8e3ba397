// SPDX-License-Identifier: MIT
/*
 * tests/test_notify.c - memd's sd_notify(3) messages (memd/notify.c and
 * its callers): the test plays the service manager with a unix datagram
 * socket in NOTIFY_SOCKET and checks that a real memd sends READY=1 once
 * it listens, RELOADING=1 then READY=1 around a SIGHUP reload (also a
 * failed one), and STOPPING=1 when SIGTERM makes it drain.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memd/notify.h"
#include "tests/testutil.h"

static struct tu_memd md;
static char sock_dir[64];
static char sock_path[96];
static int sock_fd = -1;

static void setup(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	ck_assert_int_eq(tu_scratch_dir(sock_dir, sizeof(sock_dir), "notify"),
			 0);
	snprintf(sock_path, sizeof(sock_path), "%s/notify", sock_dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	sock_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(sock_fd, 0);
	ck_assert_int_eq(bind(sock_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* memd, forked by testutil, inherits it */
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", sock_path, 1), 0);
}

static void teardown(void)
{
	unsetenv("NOTIFY_SOCKET");
	if (md.pid > 0)
		tu_memd_stop(&md, SIGKILL);
	if (sock_fd >= 0)
		close(sock_fd);
	sock_fd = -1;
	unlink(sock_path);
	rmdir(sock_dir);
}

/*
 * The next datagram, NUL-terminated in buf; fails the test when none
 * comes within 30 s (a deadline for a hung memd, not a timing check).
 */
static void next_message(char *buf, size_t len)
{
	struct pollfd pf = { .fd = sock_fd, .events = POLLIN };
	ssize_t n;

	ck_assert_msg(poll(&pf, 1, 30000) == 1, "no notification from memd");
	n = recv(sock_fd, buf, len - 1, 0);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
}

/* Whether msg holds the line want (lines are '\n'-separated). */
static bool has_line(const char *msg, const char *want)
{
	size_t wl = strlen(want);

	for (const char *p = msg; p; p = strchr(p, '\n'), p = p ? p + 1 : 0)
		if (!strncmp(p, want, wl) && (p[wl] == '\n' || !p[wl]))
			return true;
	return false;
}

/* Reads messages until one has the line want; returns it in buf. */
static void expect_line(char *buf, size_t len, const char *want)
{
	for (int i = 0; i < 16; i++) {
		next_message(buf, len);
		if (has_line(buf, want))
			return;
	}
	ck_abort_msg("no '%s' among 16 notifications", want);
}

static bool has_prefix_line(const char *msg, const char *prefix)
{
	size_t pl = strlen(prefix);

	for (const char *p = msg; p; p = strchr(p, '\n'), p = p ? p + 1 : 0)
		if (!strncmp(p, prefix, pl))
			return true;
	return false;
}

START_TEST(ready_reload_stopping)
{
	char msg[2048], status[256], conf[256];
	FILE *f;
	int st;

	tu_memd_start_ok(&md, NULL);
	/* READY=1 comes with a STATUS naming the control address */
	expect_line(msg, sizeof(msg), "READY=1");
	snprintf(status, sizeof(status), "STATUS=Serving on %s (standalone)",
		 md.addr);
	ck_assert_msg(has_prefix_line(msg, status), "'%s' lacks '%s'", msg,
		      status);

	/* a good reload: RELOADING=1 (with the monotonic time), READY=1 */
	kill(md.pid, SIGHUP);
	next_message(msg, sizeof(msg));
	ck_assert_msg(has_line(msg, "RELOADING=1"), "got '%s'", msg);
	ck_assert_msg(has_prefix_line(msg, "MONOTONIC_USEC="), "got '%s'", msg);
	next_message(msg, sizeof(msg));
	ck_assert_msg(has_line(msg, "READY=1"), "got '%s'", msg);
	ck_assert_msg(has_prefix_line(msg, "STATUS=Serving on "), "got '%s'",
		      msg);

	/* a bad file: still READY=1 after RELOADING=1, saying so */
	snprintf(conf, sizeof(conf), "%s/memd.conf", md.dir);
	f = fopen(conf, "a");
	ck_assert_ptr_nonnull(f);
	fputs("no_such_key = 1\n", f);
	fclose(f);
	kill(md.pid, SIGHUP);
	next_message(msg, sizeof(msg));
	ck_assert_msg(has_line(msg, "RELOADING=1"), "got '%s'", msg);
	next_message(msg, sizeof(msg));
	ck_assert_msg(has_line(msg, "READY=1"), "got '%s'", msg);
	ck_assert_msg(has_prefix_line(msg, "STATUS=Reload failed"), "got '%s'",
		      msg);

	/* SIGTERM: STOPPING=1, then a clean exit */
	st = tu_memd_stop(&md, SIGTERM);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	next_message(msg, sizeof(msg));
	ck_assert_msg(has_line(msg, "STOPPING=1"), "got '%s'", msg);
}
END_TEST

/* memd_notify itself: one datagram, formatted; nothing without a socket. */
START_TEST(notify_function)
{
	char msg[256];

	ck_assert_int_eq(memd_notify("STATUS=x %d\nREADY=1", 42), 1);
	next_message(msg, sizeof(msg));
	ck_assert_str_eq(msg, "STATUS=x 42\nREADY=1");
	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(memd_notify("READY=1"), 0);
	ck_assert_uint_gt(memd_notify_monotonic_usec(), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("notify");
	TCase *tc = tcase_create("notify");

	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set (run through ctest)");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, ready_reload_stopping);
	tcase_add_test(tc, notify_function);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
