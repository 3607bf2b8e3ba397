// SPDX-License-Identifier: MIT
/*
 * tests/testutil.c - helpers shared by the Check tests (testutil.h).
 * Single-threaded use from a test's main thread, except the pattern
 * functions (pure).
 */
#include "tests/testutil.h"

#include <check.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tidepool/pool.h"

void tu_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
	uint8_t *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = tu_pattern_byte(seed, off + i);
}

ssize_t tu_pattern_check(const void *buf, size_t len, uint64_t seed,
			 uint64_t off)
{
	const uint8_t *b = buf;

	for (size_t i = 0; i < len; i++)
		if (b[i] != tu_pattern_byte(seed, off + i))
			return (ssize_t)i;
	return -1;
}

void tu_skip(const char *fmt, ...)
{
	va_list ap;

	fputs("SKIP: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	exit(77);
}

const char *tu_memd_path(void)
{
	const char *p = getenv("TP_MEMD");

	return p && *p ? p : NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

int tu_memd_start(struct tu_memd *m, const char *extra_conf)
{
	return tu_memd_start_args(m, extra_conf, NULL);
}

int tu_memd_start_args(struct tu_memd *m, const char *extra_conf,
		       const char *const *extra_args)
{
	char conf[256], ready[256], log[256];
	const char *bin = tu_memd_path();
	const char *argv[32];
	int argc = 0;
	FILE *f;

	memset(m, 0, sizeof(*m));
	if (!bin)
		return -ENOENT;
	snprintf(m->dir, sizeof(m->dir), "/tmp/tp-test-XXXXXX");
	if (!mkdtemp(m->dir))
		return -errno;
	snprintf(conf, sizeof(conf), "%s/memd.conf", m->dir);
	snprintf(ready, sizeof(ready), "%s/ready", m->dir);
	snprintf(log, sizeof(log), "%s/memd.log", m->dir);
	f = fopen(conf, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"listen = 127.0.0.1:0\ndonate = 256M\nslab_size = 16M\n"
		"log_level = debug\n%s\n",
		extra_conf ? extra_conf : "");
	fclose(f);
	m->pid = fork();
	if (m->pid < 0)
		return -errno;
	if (m->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd >= 0) {
			dup2(fd, STDERR_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		argv[argc++] = bin;
		argv[argc++] = "-c";
		argv[argc++] = conf;
		argv[argc++] = "--ready-file";
		argv[argc++] = ready;
		while (extra_args && *extra_args && argc < 31)
			argv[argc++] = *extra_args++;
		argv[argc] = NULL;
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 3000; i++) { /* up to 30 s on a loaded box */
		int st;

		f = fopen(ready, "r");
		if (f) {
			/* "HOST:PORT\n", then "metrics HOST:PORT\n" when
			 * /metrics is served; the file appears whole */
			int ok = fscanf(f, "%63s", m->addr) == 1;

			if (ok && fscanf(f, " metrics %63s", m->metrics) != 1)
				m->metrics[0] = '\0';

			fclose(f);
			if (ok)
				return 0;
		}
		if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
			m->pid = 0;
			fprintf(stderr, "memd exited early (status %d); log:\n",
				st);
			f = fopen(log, "r");
			if (f) {
				char line[512];

				while (fgets(line, sizeof(line), f))
					fputs(line, stderr);
				fclose(f);
			}
			return -ECHILD;
		}
		sleep_ms(10);
	}
	kill(m->pid, SIGKILL);
	waitpid(m->pid, NULL, 0);
	m->pid = 0;
	return -ETIMEDOUT;
}

/* Removes the scratch dir unless TP_KEEP_LOGS is set (for debugging). */
static void cleanup_dir(struct tu_memd *m)
{
	static const char *const files[] = { "memd.conf", "ready", "memd.log" };
	char path[300];

	if (getenv("TP_KEEP_LOGS") || !m->dir[0])
		return;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", m->dir, files[i]);
		unlink(path);
	}
	rmdir(m->dir);
}

int tu_memd_stop(struct tu_memd *m, int sig)
{
	int st = -1;

	if (m->pid <= 0) {
		cleanup_dir(m);
		return -1;
	}
	kill(m->pid, sig);
	/* A clean drain is quick; don't let a hung memd hang the test. */
	for (int i = 0; i < 2000; i++) {
		if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
			m->pid = 0;
			cleanup_dir(m);
			return st;
		}
		sleep_ms(10);
	}
	kill(m->pid, SIGKILL);
	waitpid(m->pid, &st, 0);
	m->pid = 0;
	cleanup_dir(m);
	return st;
}

void tu_memd_start_ok(struct tu_memd *m, const char *extra_conf)
{
	int r = tu_memd_start(m, extra_conf);

	ck_assert_msg(r == 0, "memd did not start: %s", strerror(-r));
}

void tu_memd_stop_ok(struct tu_memd *m)
{
	int st;

	if (m->pid <= 0)
		return;
	st = tu_memd_stop(m, SIGTERM);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "memd did not exit cleanly: status %d", st);
}

struct pool *tu_pool_connect(const struct tu_memd *m)
{
	struct pool_opts o = { .addr = m->addr, .timeout_ms = 5000 };
	struct pool *p = NULL;
	int r = pool_connect(&o, &p);

	ck_assert_msg(r == 0, "pool_connect %s: %s", m->addr, pool_strerror(r));
	return p;
}
