/* SPDX-License-Identifier: MIT */
/*
 * tests/testutil.h - shared helpers for the Check tests: patterns derived
 * from offsets (so any wrong byte is caught), spawning real memd processes
 * on loopback with free ports, reading a process's NUMA placement from
 * /proc, and skipping with exit 77.
 */
#ifndef TP_TESTS_TESTUTIL_H
#define TP_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Byte at absolute offset off of a stream named by seed. */
static inline uint8_t tu_pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + seed;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint8_t)(x >> ((off & 7) * 8));
}
void tu_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off);

/* SplitMix64: the next of the stream of *s (a seed; advanced). */
static inline uint64_t tu_splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
/* Index of the first wrong byte, or -1 when all match. */
ssize_t tu_pattern_check(const void *buf, size_t len, uint64_t seed,
			 uint64_t off);

/* Exit 77 (skipped) after printing why. */
void tu_skip(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));
/*
 * Skips the program (tu_skip) unless this host's topology (numa/'s
 * place_topo_open(NULL), HWLOC_XMLFILE unset first) has at least min
 * NUMA nodes: "WHAT needs at least MIN NUMA nodes and this host has N;
 * RAN", ran saying what the program checks on a smaller host. A topology
 * that does not load ends the program with status 1.
 */
void tu_need_numa_nodes(int min, const char *what, const char *ran);

/*
 * Runs every test of s (Check's Suite) in Check's default mode and frees
 * the runner: main()'s exit status, EXIT_FAILURE when a test failed.
 */
struct Suite;
struct TCase;
int tu_run_suite(struct Suite *s);

/* A new TCase name of s, with a timeout of timeout_s seconds (0: Check's
 * default); its tests may be added after. */
struct TCase *tu_tcase(struct Suite *s, const char *name, int timeout_s);

/* Adds every test of the list (START_TEST names) to the TCase tc, in
 * order: TU_ADD_TESTS(tc, first_test, second_test, ...). */
struct TTest;
void tu_add_tests(struct TCase *tc, const struct TTest *const *tests, size_t n);
#define TU_ADD_TESTS(tc, ...)                                                  \
	tu_add_tests((tc), (const struct TTest *const[]){ __VA_ARGS__ },       \
		     sizeof((const struct TTest *const[]){ __VA_ARGS__ }) /    \
			     sizeof(const struct TTest *))

/* How many threads of this process are named name (comm); *tid, when
 * given, is the first one found. */
int tu_threads_named(const char *name, pid_t *tid);

/*
 * Makes a fresh directory "ROOT/name.XXXXXX" into buf (len bytes) under
 * this test run's scratch root (/tmp/tp-test-PID, PID of the test's main
 * process), which that process removes with everything in it when it
 * exits, even after a forked test failed; TP_KEEP_LOGS=1 keeps it.
 * Returns 0 or -errno (-ENAMETOOLONG when buf is too short).
 */
int tu_scratch_dir(char *buf, size_t len, const char *name);

struct tu_memd {
	pid_t pid;
	char addr[64];	  /* "127.0.0.1:PORT" once ready */
	char metrics[64]; /* "HOST:PORT" of /metrics; "" when not served */
	char dir[128];	  /* scratch dir: config, ready file, log */
	char netns[32];	  /* network namespace to run in; "" = ours */
};

/*
 * Starts $TP_MEMD listening on 127.0.0.1 with an ephemeral port, with
 * extra "key = value" lines appended to its config (may be NULL) and waits
 * until it is ready. Returns 0 or -errno (log at dir/memd.log).
 */
int tu_memd_start(struct tu_memd *m, const char *extra_conf);
/* The same with extra command-line arguments (NULL-terminated, may be
 * NULL), which override the config file: "--donate", "96M". */
int tu_memd_start_args(struct tu_memd *m, const char *extra_conf,
		       const char *const *extra_args);
/*
 * tu_memd_start_args() of a registry with its own donor part r0 (--set
 * registry=yes, donor_name=r0): its cluster secret in the file at
 * cluster, its state in the directory state (NULL: none), then more_args
 * (NULL-terminated, may be NULL: "--donate", "64M"). -E2BIG when
 * more_args are too many.
 */
int tu_registry_start(struct tu_memd *m, const char *cluster, const char *state,
		      const char *extra_conf, const char *const *more_args);
/* Sends sig and reaps; returns the exit status as waitpid gives it. */
int tu_memd_stop(struct tu_memd *m, int sig);
struct pool;
/* Like tu_memd_start, but fails the running Check test on error. */
void tu_memd_start_ok(struct tu_memd *m, const char *extra_conf);
/* SIGTERM; fails the running test unless memd exits 0. No-op if gone. */
void tu_memd_stop_ok(struct tu_memd *m);
/* pool_connect to m (5 s timeout); fails the running test on error. */
struct pool *tu_pool_connect(const struct tu_memd *m);
/* pool_connect to addr as tenant with its secret file (NULL: pool_opts'
 * defaults) within timeout_ms (0: pool_opts' default); fails the running
 * test on error. */
struct pool *tu_pool_connect_as(const char *addr, const char *tenant,
				const char *secret_file, int timeout_ms);
struct pool_region;
/* Writes the pattern of seed at [off, off + len) of r, reads it back and
 * fails the running test on any error or wrong byte. */
void tu_pool_write_read_check(struct pool *p, struct pool_region *r,
			      uint64_t off, size_t len, uint64_t seed);

/*
 * tu_memd_start_args() inside network namespace ns (tu_net_*), listening
 * on host (that namespace's address) with an ephemeral port.
 */
int tu_memd_start_ns(struct tu_memd *m, const char *ns, const char *host,
		     const char *extra_conf, const char *const *extra_args);

/*
 * A small network of namespaces for multi-host tests: hosts 0 .. n-1, each
 * its own network namespace with one veth interface "eth0" at
 * 10.77.<net>.<host + 1>/24, all plugged into a bridge in a switch
 * namespace. Nothing touches the caller's namespace. Needs root and
 * `ip` (iproute2); -EPERM when not root, -ENOTSUP when namespaces or
 * veth/bridge devices are missing (callers skip).
 */
#define TU_NET_MAX 8
struct tu_net {
	int n;
	unsigned id; /* makes names unique per process */
	char sw[32];
	char ns[TU_NET_MAX][32];
	char ip[TU_NET_MAX][20];
};
int tu_net_create(struct tu_net *net, int nhosts);
void tu_net_destroy(struct tu_net *net);
/* Moves the calling process into host's namespace (call while it is
 * single-threaded: setns(CLONE_NEWNET) applies to the calling thread). */
int tu_net_enter(const struct tu_net *net, int host);
/* Cuts (on) or heals (off) all traffic between hosts a and b, with
 * iptables DROP rules in a's namespace. 0 or -EIO. */
int tu_net_partition(const struct tu_net *net, int a, int b, bool on);
/* Runs a shell command line; 0 when it exits 0, else -EIO. */
int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether the file at path (its first MiB: a memd's log, a program's
 * stderr) holds needle; false when it cannot be read. */
bool tu_file_has(const char *path, const char *needle);
/* tu_file_has() polled every 20 ms for up to timeout_ms: whether needle
 * showed up in time. */
bool tu_file_wait(const char *path, const char *needle, int timeout_ms);

/* The whole file at path, NUL-terminated (free it); NULL when it cannot
 * be read. */
char *tu_read_whole(const char *path);
/* The same with its length (it may hold NUL bytes) in *len. */
char *tu_read_file(const char *path, size_t *len);
/* An argv of cap entries for exec: prog, then args (NULL-terminated) as
 * many as fit, then NULL. The number of arguments (prog included). */
int tu_argv(const char **argv, int cap, const char *prog,
	    const char *const *args);
/*
 * In a forked child before exec: stdout to out and stderr to err (created
 * or truncated, mode), and stdin from in when not NULL. A file that cannot
 * be opened ends the child with _exit(126).
 */
void tu_child_stdio(const char *in, const char *out, const char *err,
		    mode_t mode);
/* Writes len bytes of data to a new (or truncated) file at path; fails
 * the running test on any error. */
void tu_write_file(const char *path, const void *data, size_t len);

/*
 * A fixture's directory: tu_tmpdir_make creates $TMPDIR/name.XXXXXX
 * (TMPDIR unset: /tmp) in dir, len bytes; tu_tmpdir_remove removes what
 * it holds (files, empty directories, made writable first) and it.
 * Both assert.
 */
void tu_tmpdir_make(char *dir, size_t len, const char *name);
void tu_tmpdir_remove(const char *dir);

/*
 * Cluster helpers (docs/cluster.md). tu_secret_file writes 32 random bytes
 * as hex to dir/name, mode 0600, and its path to path (room for 256).
 * tu_admin sends one ADMIN request as "@admin" (key from the cluster
 * secret file) to addr and copies the JSON reply, NUL-terminated, to out.
 * Both return 0 or -errno (tu_admin: memd's refusal, text in out).
 * tu_tenant_add adds a tenant whose secret is in secret_file.
 */
int tu_secret_file(const char *dir, const char *name, char *path);
int tu_admin(const char *addr, const char *cluster_secret, const char *json,
	     char *out, size_t cap);
/*
 * tu_admin() of json every 20 ms until its reply (in out) holds every
 * string of the NULL-terminated list that follows, for up to timeout_ms:
 * 0, or -ETIMEDOUT with the last reply (or refusal) in out.
 */
int tu_admin_until(const char *addr, const char *cluster_secret,
		   const char *json, int timeout_ms, char *out, size_t cap, ...)
	__attribute__((sentinel));
int tu_tenant_add(const char *addr, const char *cluster_secret,
		  const char *tenant, const char *secret_file,
		  uint64_t quota_bytes);
/*
 * A test pool's files in a fresh scratch directory "name" (see
 * tu_scratch_dir), its path in dir: the cluster secret, dir/cluster.secret,
 * its path in cluster (room for 256), and, when state is not NULL, the
 * registry's state directory, dir/state, its path in state. 0 or -errno.
 */
int tu_pool_dir(char *dir, size_t dirlen, const char *name, char *state,
		size_t statelen, char *cluster);
/*
 * tu_pool_dir(), then tu_secret_file(dir, file, path) for each (file,
 * path) pair of the NULL-terminated list that follows, in order: 0, or
 * the first -errno (what follows it not written).
 */
int tu_pool_dir_secrets(char *dir, size_t dirlen, const char *name, char *state,
			size_t statelen, char *cluster, ...)
	__attribute__((sentinel));
/* The tenant key derived from the secret in the file at path. Fails the
 * running test when the file does not hold a secret. */
void tu_tenant_key(const char *path, uint8_t key[32]);

/*
 * What the kernel says about pid's memory with policy "bind:NODE"
 * (/proc/PID/numa_maps, sizes from /proc/PID/maps): how many bytes of
 * mappings carry it, how many of their pages are present on the node,
 * and how many are present anywhere else (which MPOL_BIND forbids).
 * Fails the running test when /proc cannot be read.
 */
struct tu_bound {
	uint64_t mapped, on_node, elsewhere;
};
struct tu_bound tu_bound_to(pid_t pid, int node);
/*
 * memd's arena for node: bound to it in full, nothing of it elsewhere,
 * and (mlock prefaults) all of it present there. The sanitizers' mlock is
 * a no-op, so under ASan and TSan only what was touched is present.
 */
void tu_assert_arena_on(pid_t pid, int node, uint64_t bytes);

/* A raw control session to addr, no AUTH: HELLO offering WIRE_PROTO_MAX
 * only, its HELLO_OK in *hello. Fails the running test on error. */
struct rpc;
struct wire_hello_ok;
struct rpc *tu_raw_hello(const char *addr, struct wire_hello_ok *hello);

/* A socket connected to memd's same-host socket named in ok (SHM_OK).
 * Fails the running test on error. */
struct wire_shm_ok;
int tu_shm_connect(const struct wire_shm_ok *ok);
/*
 * One same-host request q on sock and its reply in *rep; *fd is the
 * descriptor passed with it, or -1. Returns 0, or -1 when the request
 * could not be sent or memd closed the socket. Fails the running test on
 * a reply that does not decode or answers another op, and on a refusal
 * (rep->err) that passes a descriptor.
 */
struct wire_shm_req;
struct wire_shm_rep;
int tu_shm_call(int sock, const struct wire_shm_req *q,
		struct wire_shm_rep *rep, int *fd);

/*
 * hugetlb pages (2 MiB) for a test: tu_huge_reserve() takes an exclusive
 * flock on /tmp/tp-hugetlb.lock (test executables ctest runs in parallel
 * take turns), then raises vm.nr_hugepages until need pages are
 * available (free and not reserved by another mapping), never lowering
 * it. tu_huge_release() puts back the value it found and drops the lock.
 * Returns 0, or -errno with why (for a SKIP line): not root, no hugetlb
 * support, or the kernel gave fewer pages than asked (fragmented memory).
 */
struct tu_huge {
	int lock_fd;
	long old_nr; /* vm.nr_hugepages found; -1 when untouched */
};
int tu_huge_reserve(struct tu_huge *h, unsigned long need, char *why,
		    size_t whylen);
void tu_huge_release(struct tu_huge *h);
/* 2 MiB hugetlb pages a new MAP_NORESERVE mapping can take now: free
 * minus reserved (/sys/kernel/mm/hugepages/hugepages-2048kB). */
unsigned long tu_huge_avail(void);
/*
 * Takes hugetlb pages until at most leave are available (a mapping of
 * them, every page touched); *len is its size (0: none taken). Returns
 * the mapping (munmap(p, *len) gives them back) or NULL. Fails the
 * running Check test when the pages cannot be taken.
 */
void *tu_huge_consume(unsigned long leave, size_t *len);

/*
 * One sample of m's /metrics (memd started with metrics_listen =
 * 127.0.0.1:0): the value of the unlabelled line "name VALUE", or -1 when
 * the scrape has no such line. Fails the running test when /metrics
 * cannot be read.
 */
int64_t tu_metric(const struct tu_memd *m, const char *name);

/* Path of the memd binary (from TP_MEMD) or NULL. */
const char *tu_memd_path(void);
/* Skips the test program (tu_skip) when TP_MEMD is not set. */
void tu_need_memd(void);

#endif
