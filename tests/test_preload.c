// SPDX-License-Identifier: MIT
/*
 * tests/test_preload.c - libpool-preload.so (LD_PRELOAD) against a real
 * memd: an unmodified program (this binary run as "prog": plain malloc
 * family, no tidepool API) and sort(1) on a file bigger than the local
 * budget print byte-identical output with and without the shim; an
 * unreachable pool gives one warning and plain libc, or, with
 * LIBPOOL_REQUIRED=1, a failed process. Not run in sanitizer builds.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

#define MiB (1024u * 1024u)

static struct tu_memd md;
static char tmpdir[64];

/* ------------------------------------------------------------------ */
/* the unmodified program                                               */

static uint64_t sum(const uint8_t *b, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s = s * 31 + b[i];
	return s;
}

/* Every member of the malloc family on large and small blocks; prints
 * what it computed, so any wrong byte changes the output. */
static int prog_main(void)
{
	size_t big = 3 * MiB + 123;
	uint8_t *a, *b, *c, *d, *e;
	void *f = NULL;
	char *small[64];

	a = malloc(big);
	b = calloc(big, 1);
	if (!a || !b)
		return 1;
	for (size_t i = 0; i < big; i++)
		a[i] = (uint8_t)(i * 7 + (i >> 12));
	for (size_t i = 0; i < big; i += 4096)
		if (b[i])
			return 2; /* calloc must read as zero */
	memcpy(b, a, big);
	printf("a=%016llx b=%016llx usable_ok=%d\n",
	       (unsigned long long)sum(a, big), (unsigned long long)sum(b, big),
	       malloc_usable_size(a) >= big);
	for (int i = 0; i < 64; i++) {
		small[i] = malloc((size_t)i * 13 + 1);
		memset(small[i], 'a' + i % 26, (size_t)i * 13 + 1);
	}
	a = realloc(a, 2 * big); /* grows: a new block, old bytes kept */
	memset(a + big, 0x5a, big);
	printf("realloc=%016llx\n", (unsigned long long)sum(a, 2 * big));
	c = malloc(100);
	c = realloc(c, 2 * MiB); /* small to large */
	memset(c, 1, 100);
	memset(c + 100, 2, 2 * MiB - 100);
	printf("c=%016llx\n", (unsigned long long)sum(c, 2 * MiB));
	if (posix_memalign(&f, 4096, 2 * MiB) || ((uintptr_t)f & 4095))
		return 3;
	memset(f, 3, 2 * MiB);
	d = aligned_alloc(64, 2 * MiB);
	e = memalign(1 << 21, 2 * MiB); /* past page alignment: libc */
	if (!d || !e || ((uintptr_t)e & ((1 << 21) - 1)))
		return 4;
	memcpy(d, f, 2 * MiB);
	memcpy(e, d, 2 * MiB);
	printf("e=%016llx\n", (unsigned long long)sum(e, 2 * MiB));
	for (int i = 0; i < 64; i++) {
		if (small[i][i * 13] != 'a' + i % 26)
			return 5;
		free(small[i]);
	}
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	free(f);
	printf("done\n");
	return 0;
}

/* ------------------------------------------------------------------ */
/* running programs                                                     */

/*
 * Runs argv with stdout to out, stderr to err, and, when preload, the
 * shim and env (NULL-terminated "K=V" list) in the environment. Returns
 * the wait status.
 */
static int run(char *const argv[], const char *in, const char *out,
	       const char *err, bool preload, const char *const *env)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0)
			_exit(126);
		if (in) {
			int i = open(in, O_RDONLY);

			if (i < 0)
				_exit(126);
			dup2(i, STDIN_FILENO);
		}
		dup2(o, STDOUT_FILENO);
		dup2(e, STDERR_FILENO);
		unsetenv("LD_PRELOAD");
		if (preload) {
			setenv("LD_PRELOAD", getenv("TP_PRELOAD"), 1);
			setenv("LIBPOOL_ADDR", md.addr, 1);
			for (; env && *env; env++)
				putenv((char *)*env);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return st;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *b;
	long n;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	b[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void assert_same(const char *x, const char *y)
{
	size_t nx, ny;
	char *bx = slurp(x, &nx), *by = slurp(y, &ny);

	ck_assert_msg(nx == ny && !memcmp(bx, by, nx),
		      "%s (%zu bytes) and %s (%zu bytes) differ", x, nx, y, ny);
	ck_assert_uint_gt(nx, 0);
	free(bx);
	free(by);
}

static int count(const char *path, const char *needle)
{
	size_t n;
	char *b = slurp(path, &n), *at = b;
	int k = 0;

	while ((at = strstr(at, needle))) {
		k++;
		at++;
	}
	free(b);
	return k;
}

static void path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

static void start(void)
{
	int r;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/tp-preload-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	r = tu_memd_start(&md, NULL);
	ck_assert_msg(r == 0, "memd did not start: %s", strerror(-r));
}

static void stop(void)
{
	char cmd[128];

	tu_memd_stop(&md, SIGTERM);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(unmodified_program)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=256K",
					   "LIBPOOL_LOG=info", NULL };
	char exe[4096], o1[128], o2[128], e1[128], e2[128];
	char *argv[] = { exe, "prog", NULL };
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int st;

	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	start();
	path(o1, sizeof(o1), "plain.out");
	path(e1, sizeof(e1), "plain.err");
	path(o2, sizeof(o2), "shim.out");
	path(e2, sizeof(e2), "shim.err");
	st = run(argv, NULL, o1, e1, false, NULL);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "plain: %d", st);
	st = run(argv, NULL, o2, e2, true, env);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "shim: %d", st);
	assert_same(o1, o2);
	/* The large blocks really were pooled (a, b, realloc'd a and c,
	 * posix_memalign, aligned_alloc: the 2 MiB-aligned one is libc's). */
	ck_assert_int_ge(count(e2, "paging: map addr="), 6);
	stop();
}
END_TEST

START_TEST(sort_bigger_than_budget)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=512K",
					   "LIBPOOL_LOG=info", NULL };
	char in[128], o1[128], o2[128], e1[128], e2[128];
	char *argv[] = { "sort", in, NULL };
	FILE *f;
	int st;

	start();
	path(in, sizeof(in), "input.txt");
	path(o1, sizeof(o1), "plain.out");
	path(e1, sizeof(e1), "plain.err");
	path(o2, sizeof(o2), "shim.out");
	path(e2, sizeof(e2), "shim.err");
	/*
	 * 1.2 MiB of lines (the budget is 512 KiB): blocks of 64 in
	 * descending order, each block shuffled by a pattern. Merging such
	 * runs reads the text as a few sequential streams; a fully random
	 * input would thrash a budget this small on this 2-vCPU VM for
	 * minutes without testing anything more.
	 */
	f = fopen(in, "w");
	ck_assert_ptr_nonnull(f);
	for (int b = 60000 / 64; b >= 0; b--) {
		unsigned idx[64];

		for (unsigned i = 0; i < 64; i++)
			idx[i] = i;
		for (unsigned i = 63; i > 0; i--) {
			unsigned j = tu_pattern_byte(9, (uint64_t)b * 64 + i) %
				     (i + 1),
				 t = idx[i];

			idx[i] = idx[j];
			idx[j] = t;
		}
		for (unsigned i = 0; i < 64; i++) {
			unsigned k = (unsigned)b * 64 + idx[i];

			if (k < 60000)
				fprintf(f, "%08u %.*s\n", k, (int)(k % 23),
					"xxxxxxxxxxxxxxxxxxxxxxx");
		}
	}
	ck_assert_int_gt(ftell(f), 1 * MiB);
	fclose(f);
	st = run(argv, NULL, o1, e1, false, NULL);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "plain sort: %d", st);
	st = run(argv, NULL, o2, e2, true, env);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "shim sort: %d", st);
	assert_same(o1, o2);
	ck_assert_int_ge(count(e2, "paging: map addr="), 1);
	stop();
}
END_TEST

START_TEST(unreachable_pool)
{
	static const char *const off[] = { "LIBPOOL_ADDR=127.0.0.1:1", NULL };
	static const char *const req[] = { "LIBPOOL_ADDR=127.0.0.1:1",
					   "LIBPOOL_REQUIRED=1", NULL };
	char exe[4096], o1[128], o2[128], e1[128], e2[128];
	char *argv[] = { exe, "prog", NULL };
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int st;

	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	start();
	path(o1, sizeof(o1), "plain.out");
	path(e1, sizeof(e1), "plain.err");
	path(o2, sizeof(o2), "shim.out");
	path(e2, sizeof(e2), "shim.err");
	st = run(argv, NULL, o1, e1, false, NULL);
	ck_assert(WIFEXITED(st) && !WEXITSTATUS(st));
	st = run(argv, NULL, o2, e2, true, off);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "shim: %d", st);
	assert_same(o1, o2);
	ck_assert_int_eq(count(e2, "libpool-preload: pool unreachable"), 1);
	st = run(argv, NULL, o2, e2, true, req);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
		      "LIBPOOL_REQUIRED=1: status %d", st);
	ck_assert_int_eq(count(e2, "LIBPOOL_REQUIRED=1"), 1);
	stop();
}
END_TEST

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc;
	SRunner *sr;
	int failed;

	if (argc > 1 && !strcmp(argv[1], "prog"))
		return prog_main();
	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set (run through ctest)");
	if (!getenv("TP_PRELOAD") || access(getenv("TP_PRELOAD"), R_OK))
		tu_skip("TP_PRELOAD is not set: libpool-preload.so is not "
			"built here (sanitizer build?)");
	if (access("/dev/userfaultfd", R_OK | W_OK))
		tu_skip("/dev/userfaultfd is not accessible: the shim would "
			"run user-mode-only, where read(2) into pooled "
			"buffers fails (see libpool-preload(8))");
	s = suite_create("preload");
	tc = tcase_create("preload");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, unmodified_program);
	tcase_add_test(tc, sort_bigger_than_budget);
	tcase_add_test(tc, unreachable_pool);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
