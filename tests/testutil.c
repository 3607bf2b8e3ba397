// SPDX-License-Identifier: MIT
/*
 * tests/testutil.c - helpers shared by the Check tests (testutil.h).
 * Single-threaded use from a test's main thread, except the pattern
 * functions (pure).
 *
 * Scratch directories: every memd a test starts gets its directory
 * (config, ready file, log, and whatever the test or memd writes there)
 * under one root per test run, /tmp/tp-test-PID (PID of the test's main
 * process), made when first needed. Check forks each test, and a forked
 * test that fails exits at once, never reaching tu_memd_stop(): so the
 * main process removes the root whole at exit, after killing any memd
 * still running from it. A copy of the test binary that a test starts as
 * a helper program makes no root unless it needs one.
 * TP_KEEP_LOGS=1 keeps everything (the root's path is printed).
 */
#include "tests/testutil.h"

#include <check.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <ftw.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"
#include "numa/place.h"
#include "tidepool/pool.h"

/* The 8 bytes at offset off (a multiple of 8) of seed's stream, as one
 * little-endian word: tu_pattern_byte() of each, computed once. */
static inline uint64_t pattern_word(uint64_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + seed;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return x;
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "pattern_word() is the bytes in little-endian order");

/* Whole words from the first offset that is a multiple of 8: the
 * multi-MiB fills and checks of the paging tests, 8 times faster. */
void tu_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
	uint8_t *b = buf;
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		b[i] = tu_pattern_byte(seed, off + i);
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, off + i);

		memcpy(b + i, &w, 8);
	}
	for (; i < len; i++)
		b[i] = tu_pattern_byte(seed, off + i);
}

ssize_t tu_pattern_check(const void *buf, size_t len, uint64_t seed,
			 uint64_t off)
{
	const uint8_t *b = buf;
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		if (b[i] != tu_pattern_byte(seed, off + i))
			return (ssize_t)i;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, 8);
		if (w != pattern_word(seed, off + i))
			break; /* the byte loop below finds which */
	}
	for (; i < len; i++)
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

void tu_need_numa_nodes(int min, const char *what, const char *ran)
{
	struct place_topo *t = NULL;
	int n, err;

	unsetenv("HWLOC_XMLFILE");
	err = place_topo_open(NULL, &t);
	if (err) {
		fprintf(stderr, "cannot load this host's topology: %s\n",
			strerror(-err));
		exit(1);
	}
	n = place_topo_nnodes(t);
	place_topo_close(t);
	if (n < min)
		tu_skip("%s needs at least %d NUMA nodes and this host has %d; "
			"%s",
			what, min, n, ran);
}

struct TCase *tu_tcase(struct Suite *s, const char *name, int timeout_s)
{
	TCase *tc = tcase_create(name);

	if (timeout_s > 0)
		tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}

void tu_add_tests(struct TCase *tc, const struct TTest *const *tests, size_t n)
{
	for (size_t i = 0; i < n; i++)
		tcase_add_test(tc, tests[i]);
}

int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int tu_threads_named(const char *name, pid_t *tid)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], comm[64];
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f)) {
			comm[strcspn(comm, "\n")] = '\0';
			if (!strcmp(comm, name) && n++ == 0 && tid)
				*tid = (pid_t)atoi(e->d_name);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

const char *tu_memd_path(void)
{
	const char *p = getenv("TP_MEMD");

	return p && *p ? p : NULL;
}

void tu_need_memd(void)
{
	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set (run through ctest)");
}

/* setns(CLONE_NEWNET) into /var/run/netns/NAME for the calling thread. */
static int ns_join(const char *name)
{
	char path[128];
	int fd, r;

	snprintf(path, sizeof(path), "/var/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = setns(fd, CLONE_NEWNET) ? -errno : 0;
	close(fd);
	return r;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* --- scratch directories ------------------------------------------------ */

static char scratch_root[64]; /* "/tmp/tp-test-PID", made on first use */
static pid_t scratch_owner;   /* the process whose PID names it */

static int rm_one(const char *path, const struct stat *st, int type,
		  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0; /* keep going: remove what can be removed */
}

/* Removes path and everything under it (no symlink followed). */
static void rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* SIGKILLs every process whose command line names a path under dir (a
 * memd started with "-c DIR/memd.conf" by a test that failed before it
 * stopped it), so that nothing keeps running, or writing, after the
 * directory is gone. */
static void kill_users_of(const char *dir)
{
	size_t dlen = strlen(dir);
	DIR *proc = opendir("/proc");
	struct dirent *de;

	if (!proc)
		return;
	while ((de = readdir(proc))) {
		char path[300], buf[4096];
		pid_t pid = (pid_t)atoi(de->d_name);
		ssize_t n;
		int fd;

		if (pid <= 0 || pid == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
			if (!strncmp(buf + i, dir, dlen) &&
			    buf[i + dlen] == '/') {
				kill(pid, SIGKILL);
				break;
			}
		}
	}
	closedir(proc);
}

static void scratch_remove(void)
{
	struct stat st;

	if (getpid() != scratch_owner || lstat(scratch_root, &st) ||
	    !S_ISDIR(st.st_mode))
		return;
	if (getenv("TP_KEEP_LOGS")) {
		fprintf(stderr, "TP_KEEP_LOGS: scratch files kept in %s\n",
			scratch_root);
		return;
	}
	kill_users_of(scratch_root);
	rm_tree(scratch_root);
}

/* Names the root in the main process; forked tests inherit the name. */
__attribute__((constructor)) static void scratch_name(void)
{
	scratch_owner = getpid();
	snprintf(scratch_root, sizeof(scratch_root), "/tmp/tp-test-%d",
		 (int)scratch_owner);
	atexit(scratch_remove);
}

/* Makes the root if no process of this run has yet. One left by an
 * earlier run whose PID this one reuses is taken over only if it is a
 * real directory of ours, 0700 (nobody else's trap in /tmp). */
static int scratch_root_make(void)
{
	struct stat st;

	if (!mkdir(scratch_root, 0700))
		return 0;
	if (errno != EEXIST)
		return -errno;
	if (lstat(scratch_root, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 0777) != 0700)
		return -EEXIST;
	return 0;
}

int tu_scratch_dir(char *buf, size_t len, const char *name)
{
	int n, r;

	r = scratch_root_make();
	if (r)
		return r;
	n = snprintf(buf, len, "%s/%s.XXXXXX", scratch_root, name);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return mkdtemp(buf) ? 0 : -errno;
}

int tu_memd_start(struct tu_memd *m, const char *extra_conf)
{
	return tu_memd_start_args(m, extra_conf, NULL);
}

static int memd_spawn(struct tu_memd *m, const char *ns, const char *host,
		      const char *extra_conf, const char *const *extra_args);

int tu_memd_start_args(struct tu_memd *m, const char *extra_conf,
		       const char *const *extra_args)
{
	return memd_spawn(m, NULL, NULL, extra_conf, extra_args);
}

int tu_registry_start(struct tu_memd *m, const char *cluster, const char *state,
		      const char *extra_conf, const char *const *more_args)
{
	char secret[300], dir[300];
	const char *args[40] = { "--set",	  "registry=yes", "--set",
				 "donor_name=r0", "--set",	  secret };
	int n = 6;

	snprintf(secret, sizeof(secret), "cluster_secret_file=%s", cluster);
	if (state) {
		snprintf(dir, sizeof(dir), "state_dir=%s", state);
		args[n++] = "--set";
		args[n++] = dir;
	}
	for (; more_args && *more_args; more_args++) {
		if (n + 1 >= (int)(sizeof(args) / sizeof(args[0])))
			return -E2BIG;
		args[n++] = *more_args;
	}
	return tu_memd_start_args(m, extra_conf, args);
}

int tu_memd_start_ns(struct tu_memd *m, const char *ns, const char *host,
		     const char *extra_conf, const char *const *extra_args)
{
	return memd_spawn(m, ns, host, extra_conf, extra_args);
}

static int memd_spawn(struct tu_memd *m, const char *ns, const char *host,
		      const char *extra_conf, const char *const *extra_args)
{
	char conf[256], ready[256], log[256];
	const char *bin = tu_memd_path();
	const char *argv[32];
	int argc = 0, r;
	FILE *f;

	memset(m, 0, sizeof(*m));
	if (!bin)
		return -ENOENT;
	if (ns)
		snprintf(m->netns, sizeof(m->netns), "%s", ns);
	r = tu_scratch_dir(m->dir, sizeof(m->dir), "memd");
	if (r) {
		m->dir[0] = '\0';
		return r;
	}
	snprintf(conf, sizeof(conf), "%s/memd.conf", m->dir);
	snprintf(ready, sizeof(ready), "%s/ready", m->dir);
	snprintf(log, sizeof(log), "%s/memd.log", m->dir);
	f = fopen(conf, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"listen = %s:0\ndonate = 256M\nslab_size = 16M\n"
		"log_level = debug\nprogress_threads = 1\n%s\n",
		host ? host : "127.0.0.1", extra_conf ? extra_conf : "");
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
		if (ns && ns_join(ns)) {
			perror("setns");
			_exit(126);
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

/* Removes the scratch dir and all in it (a test may have written its own
 * files there, memd its state), unless TP_KEEP_LOGS is set (debugging). */
static void cleanup_dir(struct tu_memd *m)
{
	if (getenv("TP_KEEP_LOGS") || !m->dir[0])
		return;
	rm_tree(m->dir);
	m->dir[0] = '\0';
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
	return tu_pool_connect_as(m->addr, NULL, NULL, 5000);
}

struct pool *tu_pool_connect_as(const char *addr, const char *tenant,
				const char *secret_file, int timeout_ms)
{
	struct pool_opts o = { .addr = addr,
			       .timeout_ms = timeout_ms,
			       .tenant = tenant,
			       .secret_file = secret_file };
	struct pool *p = NULL;
	int r = pool_connect(&o, &p);

	ck_assert_msg(r == 0, "pool_connect %s as %s: %s", addr,
		      tenant ? tenant : "(no tenant)", pool_strerror(r));
	return p;
}

bool tu_file_has(const char *path, const char *needle)
{
	static char buf[1 << 20];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

bool tu_file_wait(const char *path, const char *needle, int timeout_ms)
{
	struct timespec ts = { 0, 20 * 1000000 };

	for (int waited = 0; !tu_file_has(path, needle); waited += 20) {
		if (waited >= timeout_ms)
			return false;
		nanosleep(&ts, NULL);
	}
	return true;
}

int tu_argv(const char **argv, int cap, const char *prog,
	    const char *const *args)
{
	int n = 0;

	argv[n++] = prog;
	while (*args && n < cap - 1)
		argv[n++] = *args++;
	argv[n] = NULL;
	return n;
}

void tu_child_stdio(const char *in, const char *out, const char *err,
		    mode_t mode)
{
	int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, mode);
	int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, mode);

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
}

char *tu_read_file(const char *path, size_t *len)
{
	char *buf = NULL, chunk[4096];
	size_t n;
	FILE *out, *in = fopen(path, "r");

	if (!in)
		return NULL;
	out = open_memstream(&buf, len);
	ck_assert_ptr_nonnull(out);
	while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0)
		fwrite(chunk, 1, n, out);
	fclose(in);
	fclose(out);
	return buf;
}

void tu_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");

	ck_assert_msg(f, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

char *tu_read_whole(const char *path)
{
	size_t len;

	return tu_read_file(path, &len);
}

void tu_tmpdir_make(char *dir, size_t len, const char *name)
{
	const char *base = getenv("TMPDIR");

	snprintf(dir, len, "%s/%s.XXXXXX", base && *base ? base : "/tmp", name);
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

void tu_tmpdir_remove(const char *dir)
{
	char path[PATH_MAX * 2];
	struct dirent *de;
	DIR *d = opendir(dir);

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		chmod(path, 0700);
		if (unlink(path) && (errno == EISDIR || errno == EPERM))
			rmdir(path);
	}
	closedir(d);
	ck_assert_int_eq(rmdir(dir), 0);
}

int tu_sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

int tu_net_create(struct tu_net *net, int nhosts)
{
	static unsigned seq;

	memset(net, 0, sizeof(*net));
	if (geteuid() != 0)
		return -EPERM;
	if (nhosts < 1 || nhosts > TU_NET_MAX)
		return -EINVAL;
	net->id = ((unsigned)getpid() * 8u + seq++) % 200u + 20u;
	snprintf(net->sw, sizeof(net->sw), "tpsw%u", net->id);
	if (tu_sh("ip netns add %s 2>/dev/null && "
		  "ip -n %s link add br0 type bridge && "
		  "ip -n %s link set br0 up && ip -n %s link set lo up",
		  net->sw, net->sw, net->sw, net->sw)) {
		tu_net_destroy(net);
		return -ENOTSUP;
	}
	for (int i = 0; i < nhosts; i++) {
		snprintf(net->ns[i], sizeof(net->ns[i]), "tp%uh%d", net->id, i);
		snprintf(net->ip[i], sizeof(net->ip[i]), "10.77.%u.%d", net->id,
			 i + 1);
		net->n = i + 1;
		if (tu_sh("ip netns add %s && ip -n %s link set lo up && "
			  "ip link add tp%uv%d netns %s type veth peer name "
			  "eth0 netns %s && "
			  "ip -n %s link set tp%uv%d master br0 up && "
			  "ip -n %s addr add %s/24 dev eth0 && "
			  "ip -n %s link set eth0 up",
			  net->ns[i], net->ns[i], net->id, i, net->sw,
			  net->ns[i], net->sw, net->id, i, net->ns[i],
			  net->ip[i], net->ns[i])) {
			tu_net_destroy(net);
			return -ENOTSUP;
		}
	}
	/* STP is off on a new bridge: ports forward at once. */
	return 0;
}

void tu_net_destroy(struct tu_net *net)
{
	/* Deleting a namespace deletes its end of each veth pair, and with
	 * it the peer. */
	for (int i = 0; i < net->n; i++)
		tu_sh("ip netns del %s 2>/dev/null", net->ns[i]);
	if (net->sw[0])
		tu_sh("ip netns del %s 2>/dev/null", net->sw);
	net->n = 0;
	net->sw[0] = '\0';
}

int tu_net_enter(const struct tu_net *net, int host)
{
	if (host < 0 || host >= net->n)
		return -EINVAL;
	return ns_join(net->ns[host]);
}

int tu_net_partition(const struct tu_net *net, int a, int b, bool on)
{
	const char *op = on ? "-I" : "-D";

	if (a < 0 || a >= net->n || b < 0 || b >= net->n)
		return -EINVAL;
	return tu_sh("ip netns exec %s iptables %s INPUT -s %s -j DROP && "
		     "ip netns exec %s iptables %s OUTPUT -d %s -j DROP",
		     net->ns[a], op, net->ip[b], net->ns[a], op, net->ip[b]);
}

int tu_secret_file(const char *dir, const char *name, char *path)
{
	uint8_t raw[32];
	char hex[65];
	int fd;

	auth_init();
	auth_random(raw, sizeof(raw));
	auth_hex(raw, sizeof(raw), hex);
	snprintf(path, 256, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, hex, 64) != 64 || write(fd, "\n", 1) != 1) {
		close(fd);
		return -EIO;
	}
	close(fd);
	return 0;
}

int tu_pool_dir(char *dir, size_t dirlen, const char *name, char *state,
		size_t statelen, char *cluster)
{
	int r = tu_scratch_dir(dir, dirlen, name);

	if (r)
		return r;
	if (state) {
		if ((size_t)snprintf(state, statelen, "%s/state", dir) >=
		    statelen)
			return -ENAMETOOLONG;
		if (mkdir(state, 0700))
			return -errno;
	}
	return tu_secret_file(dir, "cluster.secret", cluster);
}

int tu_pool_dir_secrets(char *dir, size_t dirlen, const char *name, char *state,
			size_t statelen, char *cluster, ...)
{
	const char *file;
	va_list ap;
	int r = tu_pool_dir(dir, dirlen, name, state, statelen, cluster);

	va_start(ap, cluster);
	while (!r && (file = va_arg(ap, const char *)))
		r = tu_secret_file(dir, file, va_arg(ap, char *));
	va_end(ap);
	return r;
}

void tu_tenant_key(const char *path, uint8_t key[AUTH_KEY_LEN])
{
	uint8_t secret[AUTH_SECRET_MAX];
	char err[256];
	int n = auth_read_secret_file(path, secret, err, sizeof(err));

	ck_assert_msg(n > 0, "%s", err);
	auth_tenant_key(secret, (size_t)n, key);
}

/* An "@admin" session to addr: 0 and *out, with its session key. */
static int admin_session(const char *addr, const char *cluster_secret,
			 struct rpc **out, uint8_t skey[AUTH_KEY_LEN],
			 char *err, size_t errlen)
{
	uint8_t secret[AUTH_SECRET_MAX];
	struct auth_cluster_keys keys;
	char local[64];
	int n, r;

	auth_init();
	n = auth_read_secret_file(cluster_secret, secret, err, errlen);
	if (n < 0)
		return n;
	auth_cluster_keys(secret, (size_t)n, &keys);
	r = rpc_connect(addr, 5000, out, local, sizeof(local));
	if (r)
		return r;
	r = rpc_handshake(*out, "tests admin", 2, "@admin", keys.admin, 0, 5000,
			  NULL, NULL, skey, err, errlen);
	if (r) {
		rpc_close(*out);
		*out = NULL;
	}
	return r;
}

static int admin_call(struct rpc *c, const char *json, char *out, size_t cap)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	int r = -ENOMEM;

	if (req && rep) {
		req->type = WIRE_ADMIN;
		req->u.admin.json = json;
		req->u.admin.json_len = (uint32_t)strlen(json);
		out[0] = '\0';
		r = rpc_call(c, req, rep, WIRE_ADMIN_OK, 10000, out, cap);
		if (!r)
			snprintf(out, cap, "%.*s", (int)rep->u.admin.json_len,
				 rep->u.admin.json);
	}
	free(req);
	free(rep);
	return r;
}

int tu_admin(const char *addr, const char *cluster_secret, const char *json,
	     char *out, size_t cap)
{
	uint8_t skey[AUTH_KEY_LEN];
	struct rpc *c;
	int r = admin_session(addr, cluster_secret, &c, skey, out, cap);

	if (r)
		return r;
	r = admin_call(c, json, out, cap);
	rpc_close(c);
	return r;
}

int tu_admin_until(const char *addr, const char *cluster_secret,
		   const char *json, int timeout_ms, char *out, size_t cap, ...)
{
	struct timespec ts = { 0, 20 * 1000000 };

	for (int waited = 0;; waited += 20) {
		bool all = !tu_admin(addr, cluster_secret, json, out, cap);
		const char *want;
		va_list ap;

		va_start(ap, cap);
		while (all && (want = va_arg(ap, const char *)))
			all = strstr(out, want) != NULL;
		va_end(ap);
		if (all)
			return 0;
		if (waited >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
	}
}

int tu_tenant_add(const char *addr, const char *cluster_secret,
		  const char *tenant, const char *secret_file,
		  uint64_t quota_bytes)
{
	uint8_t secret[AUTH_SECRET_MAX], key[AUTH_KEY_LEN], skey[AUTH_KEY_LEN];
	uint8_t box[AUTH_KEY_LEN + AUTH_SEAL_OVERHEAD];
	char hex[2 * sizeof(box) + 1], json[512], out[1024];
	struct rpc *c;
	int n, r;

	auth_init();
	n = auth_read_secret_file(secret_file, secret, out, sizeof(out));
	if (n < 0)
		return n;
	auth_tenant_key(secret, (size_t)n, key);
	r = admin_session(addr, cluster_secret, &c, skey, out, sizeof(out));
	if (r)
		return r;
	n = auth_seal(skey, key, sizeof(key), box, sizeof(box));
	if (n < 0) {
		rpc_close(c);
		return n;
	}
	auth_hex(box, (size_t)n, hex);
	snprintf(json, sizeof(json),
		 "{\"cmd\":\"tenant-add\",\"name\":\"%s\",\"quota_bytes\":%llu,"
		 "\"key_box\":\"%s\"}",
		 tenant, (unsigned long long)quota_bytes, hex);
	r = admin_call(c, json, out, sizeof(out));
	if (r)
		fprintf(stderr, "tenant-add %s: %s: %s\n", tenant, strerror(-r),
			out);
	rpc_close(c);
	return r;
}

void tu_pool_write_read_check(struct pool *p, struct pool_region *r,
			      uint64_t off, size_t len, uint64_t seed)
{
	uint8_t *w = malloc(len), *b = malloc(len);
	ssize_t bad;

	ck_assert_ptr_nonnull(w);
	ck_assert_ptr_nonnull(b);
	tu_pattern_fill(w, len, seed, off);
	ck_assert_int_eq(pool_write(p, r, off, w, len), 0);
	memset(b, 0xee, len);
	ck_assert_int_eq(pool_read(p, r, off, b, len), 0);
	bad = tu_pattern_check(b, len, seed, off);
	ck_assert_msg(bad < 0, "wrong byte at %zd (off %lu, len %zu)", bad,
		      (unsigned long)off, len);
	free(w);
	free(b);
}

/* ---- NUMA placement, as the kernel reports it ------------------------ */

static uint64_t vma_bytes(pid_t pid, unsigned long long start)
{
	char path[64], line[512];
	unsigned long long a, b;
	uint64_t len = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f, "cannot read %s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%llx", &a, &b) == 2 && a == start)
			len = b - a;
	fclose(f);
	return len;
}

struct tu_bound tu_bound_to(pid_t pid, int node)
{
	char path[64], line[4096], policy[32];
	struct tu_bound r = { 0, 0, 0 };
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/numa_maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f, "cannot read %s", path);
	snprintf(policy, sizeof(policy), "bind:%d", node);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, kib = 4;
		const char *k = strstr(line, "kernelpagesize_kB=");
		char pol[64], *tok, *save = NULL;

		/* "7f0f95c00000 bind:0 anon=... N0=..." (no pages: no more) */
		if (sscanf(line, "%llx %63s", &start, pol) != 2 ||
		    strcmp(pol, policy))
			continue;
		if (k)
			kib = strtoull(k + 18, NULL, 10);
		r.mapped += vma_bytes(pid, start);
		for (tok = strtok_r(line, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save)) {
			int n;
			unsigned long long pages;

			if (sscanf(tok, "N%d=%llu", &n, &pages) != 2)
				continue;
			if (n == node)
				r.on_node += pages * kib * 1024;
			else
				r.elsewhere += pages * kib * 1024;
		}
	}
	fclose(f);
	return r;
}

void tu_assert_arena_on(pid_t pid, int node, uint64_t bytes)
{
	struct tu_bound b = tu_bound_to(pid, node);

	ck_assert_msg(
		b.mapped >= bytes, "%llu bytes bound to node %d, want %llu",
		(unsigned long long)b.mapped, node, (unsigned long long)bytes);
	ck_assert_uint_eq(b.elsewhere, 0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	ck_assert_msg(
		b.on_node >= bytes, "%llu bytes present on node %d, want %llu",
		(unsigned long long)b.on_node, node, (unsigned long long)bytes);
#endif
}

struct rpc *tu_raw_hello(const char *addr, struct wire_hello_ok *hello)
{
	struct wire_msg req = { .type = WIRE_HELLO }, rep;
	struct rpc *c;

	ck_assert_int_eq(rpc_connect(addr, 5000, &c, NULL, 0), 0);
	req.u.hello.proto_min = req.u.hello.proto_max = WIRE_PROTO_MAX;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_HELLO_OK, 5000, NULL, 0),
			 0);
	*hello = rep.u.hello_ok;
	return c;
}

int tu_shm_connect(const struct wire_shm_ok *ok)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strnlen(ok->socket, sizeof(ok->socket));
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	/* an abstract name: a NUL, then the name */
	memcpy(sa.sun_path + 1, ok->socket, n);
	ck_assert_int_eq(
		connect(fd, (struct sockaddr *)&sa,
			(socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
				    n)),
		0);
	return fd;
}

int tu_shm_call(int sock, const struct wire_shm_req *q,
		struct wire_shm_rep *rep, int *fd)
{
	uint8_t b[WIRE_SHM_REQ_LEN], in[WIRE_SHM_REP_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = in, .iov_len = sizeof(in) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *h;
	ssize_t n;

	*fd = -1;
	ck_assert_int_eq(wire_shm_req_encode(q, b), WIRE_SHM_REQ_LEN);
	if (send(sock, b, sizeof(b), MSG_NOSIGNAL) != (ssize_t)sizeof(b))
		return -1;
	n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -1;
	for (h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
		if (h->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(h), sizeof(int));
	ck_assert_int_eq(wire_shm_rep_decode(in, (size_t)n, rep), 0);
	ck_assert_uint_eq(rep->op, q->op);
	if (rep->err)
		ck_assert_int_eq(*fd, -1); /* a refusal passes nothing */
	return 0;
}

/* ------------------------------------------------------------------ */
/* hugetlb                                                              */

#define TU_HUGE_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"
#define TU_HUGE_SIZE (2ul << 20)

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int ret = 0;

	if (!f)
		return -errno;
	if (fprintf(f, "%ld\n", v) < 0)
		ret = -EIO;
	if (fclose(f))
		ret = -errno;
	return ret;
}

unsigned long tu_huge_avail(void)
{
	long f = read_long(TU_HUGE_DIR "free_hugepages");
	long r = read_long(TU_HUGE_DIR "resv_hugepages");

	if (f < 0 || r < 0 || f < r)
		return 0;
	return (unsigned long)(f - r);
}

int tu_huge_reserve(struct tu_huge *h, unsigned long need, char *why,
		    size_t whylen)
{
	unsigned long avail;
	long nr;
	int ret;

	h->old_nr = -1;
	h->lock_fd = open("/tmp/tp-hugetlb.lock",
			  O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
	if (h->lock_fd < 0 || flock(h->lock_fd, LOCK_EX)) {
		ret = -errno;
		snprintf(why, whylen, "cannot lock /tmp/tp-hugetlb.lock: %s",
			 strerror(errno));
		if (h->lock_fd >= 0)
			close(h->lock_fd);
		h->lock_fd = -1;
		return ret;
	}
	nr = read_long(TU_HUGE_DIR "nr_hugepages");
	if (nr < 0) {
		snprintf(why, whylen,
			 "no 2 MiB hugetlb pages on this kernel "
			 "(%snr_hugepages)",
			 TU_HUGE_DIR);
		tu_huge_release(h);
		return -ENOTSUP;
	}
	avail = tu_huge_avail();
	if (avail >= need)
		return 0;
	h->old_nr = nr;
	ret = write_long("/proc/sys/vm/nr_hugepages",
			 nr + (long)(need - avail));
	avail = tu_huge_avail();
	if (ret || avail < need) {
		snprintf(why, whylen,
			 "%lu hugetlb pages available, %lu needed: raising "
			 "vm.nr_hugepages from %ld: %s",
			 avail, need, nr,
			 ret ? strerror(-ret)
			     : "gave fewer (memory fragmented?)");
		tu_huge_release(h);
		return ret ? ret : -ENOMEM;
	}
	return 0;
}

void tu_huge_release(struct tu_huge *h)
{
	if (h->old_nr >= 0) {
		/* Pages still in use stay (surplus) until they are freed. */
		long nr = read_long(TU_HUGE_DIR "nr_hugepages");

		if (nr > h->old_nr)
			write_long("/proc/sys/vm/nr_hugepages", h->old_nr);
		h->old_nr = -1;
	}
	if (h->lock_fd >= 0)
		close(h->lock_fd); /* drops the flock */
	h->lock_fd = -1;
}

void *tu_huge_consume(unsigned long leave, size_t *len)
{
	for (int tries = 0; tries < 10; tries++) {
		unsigned long avail = tu_huge_avail();
		uint8_t *p;

		*len = 0;
		if (avail <= leave)
			return NULL;
		*len = (avail - leave) * TU_HUGE_SIZE;
		/* Not MAP_NORESERVE: the pages are reserved here and now
		 * (ENOMEM when another process took some meanwhile). */
		p = mmap(NULL, *len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p == MAP_FAILED)
			continue;
		for (size_t off = 0; off < *len; off += TU_HUGE_SIZE)
			p[off] = 1;
		if (tu_huge_avail() <= leave)
			return p;
		munmap(p, *len); /* pages came back meanwhile: again */
	}
	ck_abort_msg("cannot take hugetlb pages down to %lu available", leave);
	return NULL;
}

int64_t tu_metric(const struct tu_memd *m, const char *name)
{
	static char buf[1 << 20];
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct timeval tv = { .tv_sec = 10 };
	const char *colon = strrchr(m->metrics, ':');
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	size_t len = 0, nlen = strlen(name);
	ssize_t n;
	int fd;

	ck_assert_msg(colon && !strncmp(m->metrics, "127.0.0.1:", 10),
		      "memd serves no /metrics on loopback ('%s')", m->metrics);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL),
			 (ssize_t)sizeof(req) - 1);
	while (len + 1 < sizeof(buf) &&
	       (n = recv(fd, buf + len, sizeof(buf) - len - 1, 0)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, name, nlen) && p[nlen] == ' ')
			return strtoll(p + nlen + 1, NULL, 10);
	return -1;
}
