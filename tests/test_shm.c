// SPDX-License-Identifier: MIT
/*
 * tests/test_shm.c - same-host sessions (memd.conf(5) shm, LIBPOOL_SHM;
 * docs/design.md, "Co-located clients over shm"): a slab's memfd goes
 * only to the session holding its live lease; a revoked client reads
 * zeros and cannot write, never the next tenant's bytes; another
 * session cannot obtain or bind to a lease's descriptor; a client on
 * another host (boot id), or with shm off on either side, stays on the
 * fabric; a memd restart ends the old session's reads with an error.
 *
 * The raw tests speak the protocol themselves (rpc + the seqpacket
 * socket), so they check memd, not libpool's good behaviour.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#include "fabric/rpc.h"
#include "fabric/wire.h"
#include "libpool/internal.h"
#include "memd/server_int.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define TMO 5000
#define SLAB (16u << 20) /* testutil's slab_size */
#define CONF                                                                   \
	"metrics_listen = 127.0.0.1:0\nquiesce = 10ms\n"                       \
	"handshake_timeout = 1s\n"

static void boot_id(uint8_t out[WIRE_BOOT_ID_LEN])
{
	ck_assert_int_eq(wire_boot_id_read(WIRE_BOOT_ID_PATH, out), 0);
}

/* SHM on c: 0 and *ok, or the ERROR's -errno. */
static int shm_ask(struct rpc *c, const uint8_t *bid, struct wire_shm_ok *ok)
{
	static struct wire_msg req, rep;
	char err[256];
	int r;

	memset(&req, 0, sizeof(req));
	req.type = WIRE_SHM;
	memcpy(req.u.shm.boot_id, bid, WIRE_BOOT_ID_LEN);
	r = rpc_call(c, &req, &rep, WIRE_SHM_OK, TMO, err, sizeof(err));
	if (!r)
		*ok = rep.u.shm_ok;
	return r;
}

/* One request; returns the reply's err (0, positive errno) or -1 when
 * memd closed the socket; *fd: the descriptor passed, or -1. */
static int shm_req(int sock, uint16_t op, uint64_t session,
		   const uint8_t *nonce, uint32_t slab, uint32_t gen, int *fd)
{
	struct wire_shm_req q = {
		.op = op, .session_id = session, .slab = slab, .generation = gen
	};
	struct wire_shm_rep rep;

	if (nonce)
		memcpy(q.nonce, nonce, WIRE_NONCE_LEN);
	if (tu_shm_call(sock, &q, &rep, fd))
		return -1;
	return rep.err;
}

/* A raw session with one lease and a bound same-host socket. */
struct raw {
	struct rpc *c;
	struct wire_hello_ok h;
	struct wire_lease l;
	struct wire_shm_ok ok;
	int sock;
};

static void raw_open(struct raw *r, const char *addr)
{
	static struct wire_msg req, rep;
	uint8_t bid[WIRE_BOOT_ID_LEN];
	char err[256];
	int fd;

	r->c = tu_raw_hello(addr, &r->h);
	memset(&req, 0, sizeof(req));
	req.type = WIRE_LEASE;
	req.u.lease.nslabs = 1;
	req.u.lease.node = -1;
	ck_assert_int_eq(rpc_call(r->c, &req, &rep, WIRE_LEASE_OK, TMO, err,
				  sizeof(err)),
			 0);
	r->l = rep.u.lease_ok.lease[0];
	boot_id(bid);
	ck_assert_int_eq(shm_ask(r->c, bid, &r->ok), 0);
	r->sock = tu_shm_connect(&r->ok);
	ck_assert_int_eq(shm_req(r->sock, WIRE_SHM_BIND, r->h.session_id,
				 r->ok.nonce, 0, 0, &fd),
			 0);
}

static void raw_close(struct raw *r)
{
	close(r->sock);
	rpc_close(r->c);
}

/* Closes the slab descriptors fa and fb of the raw clients a and b, a and
 * b, and stops m. */
static void two_raw_down(int fa, int fb, struct raw *a, struct raw *b,
			 struct tu_memd *m)
{
	close(fa);
	close(fb);
	raw_close(a);
	raw_close(b);
	tu_memd_stop_ok(m);
}

/* poolctl leases of m, its output in m's dir/leases.txt, whose path goes
 * to path (len bytes). */
static void poolctl_leases(const struct tu_memd *m, char *path, size_t len)
{
	snprintf(path, len, "%s/leases.txt", m->dir);
	ck_assert_int_eq(tu_sh("%s -a %s leases > %s 2>&1",
			       getenv("TP_POOLCTL"), m->addr, path),
			 0);
}

static int raw_slab_fd(struct raw *r)
{
	int fd;

	ck_assert_int_eq(shm_req(r->sock, WIRE_SHM_SLAB, r->h.session_id, NULL,
				 r->l.slab, r->l.generation, &fd),
			 0);
	ck_assert_int_ge(fd, 0);
	return fd;
}

static void raw_release(struct raw *r)
{
	static struct wire_msg req, rep;
	char err[256];

	memset(&req, 0, sizeof(req));
	req.type = WIRE_RELEASE;
	req.u.release.count = 1;
	req.u.release.ref[0] = (struct wire_lease_ref){
		.epoch = r->l.epoch,
		.slab = r->l.slab,
		.generation = r->l.generation,
	};
	ck_assert_int_eq(rpc_call(r->c, &req, &rep, WIRE_RELEASE_OK, TMO, err,
				  sizeof(err)),
			 0);
	ck_assert_uint_eq(rep.u.release_ok.released, 1);
}

static void wait_metric(const struct tu_memd *m, const char *name, int64_t want)
{
	for (int i = 0; i < 500; i++) {
		if (tu_metric(m, name) >= want)
			return;
		usleep(10000);
	}
	ck_abort_msg("%s never reached %lld", name, (long long)want);
}

static void check_pattern_fd(int fd, uint64_t seed)
{
	uint8_t *b = malloc(SLAB);

	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(pread(fd, b, SLAB, 0), SLAB);
	ck_assert_int_eq(tu_pattern_check(b, SLAB, seed, 0), -1);
	free(b);
}

static void check_zero_fd(int fd)
{
	uint8_t *b = malloc(SLAB);

	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(pread(fd, b, SLAB, 0), SLAB);
	for (size_t i = 0; i < SLAB; i++)
		if (b[i])
			ck_abort_msg("byte %zu of a revoked slab is %u", i,
				     b[i]);
	free(b);
}

static void write_pattern_fd(int fd, uint64_t seed)
{
	uint8_t *b = malloc(SLAB);

	ck_assert_ptr_nonnull(b);
	tu_pattern_fill(b, SLAB, seed, 0);
	ck_assert_int_eq(pwrite(fd, b, SLAB, 0), SLAB);
	free(b);
}

/*
 * A revoked client reads zeros through the descriptor it kept (and
 * through a read-only mapping of it, which does not stop the write seal)
 * and cannot write through it; the next tenant of the same slab starts
 * from zeros, and its bytes never show through the old descriptor.
 */
START_TEST(revoked_fd_reads_nothing)
{
	struct tu_memd m;
	struct raw a, b;
	int fa, fb, ro;
	char one = 'x', path[64];
	const uint8_t *map;

	tu_memd_start_ok(&m, CONF);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_enabled"), 1);
	raw_open(&a, m.addr);
	fa = raw_slab_fd(&a);
	write_pattern_fd(fa, 11);
	check_pattern_fd(fa, 11);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_fds_passed_total"),
			 1);
	/* the memfd is sealed: the client cannot resize the slab */
	ck_assert_int_eq(ftruncate(fa, 0), -1);
	ck_assert_int_eq(ftruncate(fa, 2 * (off_t)SLAB), -1);

	/* a read-only mapping, as libpool reads through */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fa);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(ro, 0);
	map = mmap(NULL, SLAB, PROT_READ, MAP_SHARED, ro, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	close(ro);
	ck_assert_int_eq(tu_pattern_check(map, SLAB, 11, 0), -1);

	raw_release(&a);
	wait_metric(&m, "tidepool_memd_slabs_zeroed_total", 1);
	check_zero_fd(fa);
	for (size_t i = 0; i < SLAB; i += 4096)
		ck_assert_msg(!map[i] && !map[i + 4095],
			      "a revoked slab's mapping shows bytes at %zu", i);
	ck_assert_int_eq(pwrite(fa, &one, 1, 0), -1);
	ck_assert_int_eq(errno, EPERM);
	/* a revoked lease's descriptor is refused from now on */
	ck_assert_int_eq(shm_req(a.sock, WIRE_SHM_SLAB, a.h.session_id, NULL,
				 a.l.slab, a.l.generation, &fb),
			 ESTALE);

	/* the next tenant of that slab (lowest free first) */
	raw_open(&b, m.addr);
	ck_assert_uint_eq(b.l.slab, a.l.slab);
	ck_assert_uint_ne(b.l.generation, a.l.generation);
	fb = raw_slab_fd(&b);
	check_zero_fd(fb);
	write_pattern_fd(fb, 22);
	check_pattern_fd(fb, 22);
	check_zero_fd(fa); /* never b's bytes */
	for (size_t i = 0; i < SLAB; i += 4096)
		ck_assert_msg(!map[i], "b's bytes through a's mapping at %zu",
			      i);
	munmap((void *)map, SLAB);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_slabs_renewed_total"),
			 1);
	two_raw_down(fa, fb, &a, &b, &m);
}
END_TEST

/*
 * Another session cannot get a lease's descriptor: not by naming the
 * lease on its own socket, not by binding to the session without its
 * nonce, not by reusing a nonce; nothing before BIND.
 */
START_TEST(cross_session_refused)
{
	uint8_t bid[WIRE_BOOT_ID_LEN], bad[WIRE_NONCE_LEN];
	struct wire_shm_ok ok2;
	struct wire_hello_ok dh;
	struct rpc *d;
	struct tu_memd m;
	struct raw a, b;
	int fd, s;

	tu_memd_start_ok(&m, CONF);
	raw_open(&a, m.addr);
	raw_open(&b, m.addr);
	ck_assert_uint_ne(a.l.slab, b.l.slab);
	/* b names a's lease on its own bound socket */
	ck_assert_int_eq(shm_req(b.sock, WIRE_SHM_SLAB, b.h.session_id, NULL,
				 a.l.slab, a.l.generation, &fd),
			 EPERM);
	/* the session id in a SLAB request is not what decides: the
	 * socket's binding is (b's socket, a's session id) */
	ck_assert_int_eq(shm_req(b.sock, WIRE_SHM_SLAB, a.h.session_id, NULL,
				 a.l.slab, a.l.generation, &fd),
			 EPERM);
	/* a stale generation of its own slab */
	ck_assert_int_eq(shm_req(b.sock, WIRE_SHM_SLAB, b.h.session_id, NULL,
				 b.l.slab, b.l.generation + 1, &fd),
			 ESTALE);
	/* nothing before BIND: the socket is closed */
	s = tu_shm_connect(&a.ok);
	ck_assert_int_eq(shm_req(s, WIRE_SHM_SLAB, a.h.session_id, NULL,
				 a.l.slab, a.l.generation, &fd),
			 EPROTO);
	close(s);
	/* a's nonce was used by a's bind: no second binding with it */
	s = tu_shm_connect(&a.ok);
	ck_assert_int_eq(shm_req(s, WIRE_SHM_BIND, a.h.session_id, a.ok.nonce,
				 0, 0, &fd),
			 EACCES);
	close(s);
	/* a fresh offer to a session d (a, bound, gets none: one bound
	 * socket per session), and a guess at its nonce */
	boot_id(bid);
	ck_assert_int_eq(shm_ask(a.c, bid, &ok2), -EBUSY);
	d = tu_raw_hello(m.addr, &dh);
	ck_assert_int_eq(shm_ask(d, bid, &ok2), 0);
	memcpy(bad, ok2.nonce, sizeof(bad));
	bad[0] ^= 1;
	s = tu_shm_connect(&ok2);
	ck_assert_int_eq(
		shm_req(s, WIRE_SHM_BIND, dh.session_id, bad, 0, 0, &fd),
		EACCES);
	close(s);
	/* b's nonce for a's session */
	s = tu_shm_connect(&ok2);
	ck_assert_int_eq(shm_req(s, WIRE_SHM_BIND, a.h.session_id, b.ok.nonce,
				 0, 0, &fd),
			 EACCES);
	close(s);
	/* a malformed packet closes the socket */
	s = tu_shm_connect(&ok2);
	ck_assert_int_eq(send(s, "junk", 4, 0), 4);
	ck_assert_int_le(recv(s, bad, sizeof(bad), 0), 0);
	close(s);
	/* a connection that never binds is closed after handshake_timeout
	 * (CONF: 1 s): it would hold a slot for nothing */
	s = tu_shm_connect(&ok2);
	ck_assert_int_le(recv(s, bad, sizeof(bad), 0), 0);
	close(s);
	/* none of it passed a descriptor */
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_fds_passed_total"),
			 0);
	ck_assert_int_ge(tu_metric(&m, "tidepool_memd_shm_refused_total"), 8);
	/* and a's own request still works */
	fd = raw_slab_fd(&a);
	close(fd);
	rpc_close(d);
	raw_close(&a);
	raw_close(&b);
	tu_memd_stop_ok(&m);
}
END_TEST

/* libpool over shm (reads with pread, and with LIBPOOL_SHM=map through
 * a read-only mapping): data written and read back, poolctl leases says
 * shm, memd passed the descriptors. */
START_TEST(libpool_over_shm)
{
	char path[256];
	struct pool_region *r, *small;
	struct tu_memd m;
	struct pool *p;

	if (_i)
		setenv("LIBPOOL_SHM", "map", 1);
	tu_memd_start_ok(&m, CONF);
	/* fabric on demand (the preload shim's mode): the same-host path
	 * never asks for it */
	pool_set_fabric_background(true);
	p = tu_pool_connect(&m);
	pool_set_fabric_background(false);
	unsetenv("LIBPOOL_SHM");
	/* two whole slabs and a packed region */
	ck_assert_int_eq(pool_alloc(p, 2 * (size_t)SLAB, &r), 0);
	ck_assert_int_eq(pool_alloc(p, 10000, &small), 0);
	tu_pool_write_read_check(p, r, 0, 2 * (size_t)SLAB, 31);
	tu_pool_write_read_check(p, r, SLAB - 5000, 10000, 32);
	tu_pool_write_read_check(p, small, 0, 10000, 33);
	ck_assert(pool_fabric_is_pending(p));
	/* map: the slabs' files are mapped here; otherwise never */
	ck_assert(tu_file_has("/proc/self/maps", "memfd:tidepool-slab") ==
		  (_i == 1));
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_fds_passed_total"),
			 3);
	poolctl_leases(&m, path, sizeof(path));
	ck_assert(tu_file_has(path, " shm"));
	ck_assert(!tu_file_has(path, "fabric"));
	ck_assert_int_eq(pool_free(p, r), 0);
	ck_assert_int_eq(pool_free(p, small), 0);
	wait_metric(&m, "tidepool_memd_shm_slabs_renewed_total", 3);
	pool_close(p);
	tu_memd_stop_ok(&m);
}
END_TEST

/*
 * shm_dir: the slabs are unnamed files of a tmpfs directory, which take
 * no seals, so memd passes read-only descriptors only (mode 0600, memd's
 * uid): the client cannot write or resize the slab through them, libpool
 * reads through them and writes over the fabric, and revocation still
 * leaves a kept descriptor reading zeros, never the next tenant's bytes.
 * A shm_dir that is not on tmpfs stops memd at start-up.
 */
START_TEST(shm_dir_read_only)
{
	char dir[] = "/dev/shm/tp-test-shm-XXXXXX", conf[512], path[256];
	struct pool_region *r, *r2;
	struct tu_memd m, bad;
	struct pool *p, *p2;
	struct statfs sf;
	struct raw a;
	struct stat st;
	char one = 'x';
	int fa, fl;

	if (statfs("/dev/shm", &sf) || sf.f_type != TMPFS_MAGIC) {
		printf("SKIP shm_dir_read_only: /dev/shm is not tmpfs\n");
		return;
	}
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(conf, sizeof(conf), CONF "shm_dir = %s\n", dir);
	tu_memd_start_ok(&m, conf);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_enabled"), 1);

	/* raw: the descriptor is read-only, the file not resizable */
	raw_open(&a, m.addr);
	fa = raw_slab_fd(&a);
	fl = fcntl(fa, F_GETFL);
	ck_assert_int_eq(fl & O_ACCMODE, O_RDONLY);
	ck_assert_int_eq(fstat(fa, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0400);
	ck_assert_int_eq(st.st_size, SLAB);
	ck_assert_int_eq(pwrite(fa, &one, 1, 0), -1);
	ck_assert_int_eq(errno, EBADF);
	ck_assert_int_eq(ftruncate(fa, 0), -1);
	ck_assert_ptr_eq(
		mmap(NULL, SLAB, PROT_READ | PROT_WRITE, MAP_SHARED, fa, 0),
		MAP_FAILED);
	check_zero_fd(fa);
	close(fa);
	raw_release(&a);
	raw_close(&a);

	/* libpool: reads through the descriptor, writes over the fabric */
	p = tu_pool_connect(&m);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 61);
	tu_pool_write_read_check(p, r, SLAB - 5000, 5000, 62);
	ck_assert(!pool_fabric_is_pending(p)); /* the writes needed it */
	poolctl_leases(&m, path, sizeof(path));
	ck_assert(tu_file_has(path, " shm"));

	/* a raw client that kept a descriptor of p's slab */
	raw_open(&a, m.addr);
	ck_assert_int_eq(pool_free(p, r), 0);
	wait_metric(&m, "tidepool_memd_shm_slabs_renewed_total", 2);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 63);
	fa = raw_slab_fd(&a);
	check_zero_fd(fa); /* a's own slab, fresh */
	/* the next tenant of the slab a held: a's kept fd reads zeros */
	raw_release(&a);
	wait_metric(&m, "tidepool_memd_shm_slabs_renewed_total", 3);
	p2 = tu_pool_connect(&m);
	ck_assert_int_eq(pool_alloc(p2, SLAB, &r2), 0);
	tu_pool_write_read_check(p2, r2, 0, SLAB, 64);
	check_zero_fd(fa);
	close(fa);
	raw_close(&a);
	pool_close(p2);
	pool_close(p);
	tu_memd_stop_ok(&m);

	/* not tmpfs (the build tree, where ctest runs us): memd refuses
	 * to start, saying why */
	ck_assert_ptr_nonnull(getcwd(path, sizeof(path)));
	if (statfs(path, &sf) == 0 && sf.f_type != TMPFS_MAGIC) {
		snprintf(conf, sizeof(conf), CONF "shm_dir = %s\n", path);
		ck_assert_int_ne(tu_memd_start(&bad, conf), 0);
		snprintf(path, sizeof(path), "%s/memd.log", bad.dir);
		ck_assert(tu_file_has(path, "is not on tmpfs"));
	}
	ck_assert(rmdir(dir) == 0);
}
END_TEST

/*
 * In a child that drops to uid and gid 65534 (nobody): reopens fd through
 * /proc/self/fd with flags. Returns the child's errno (0: it opened).
 */
static int reopen_as_other_uid(int fd, int flags)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char path[64];
		int r;

		if (setgid(65534) || setuid(65534))
			_exit(100);
		/* a changed uid makes us undumpable: /proc/self/fd would
		 * be root's, and refuse for that reason alone */
		(void)prctl(PR_SET_DUMPABLE, 1);
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		r = open(path, flags);
		_exit(r >= 0 ? 0 : errno);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_ne(WEXITSTATUS(st), 100);
	return WEXITSTATUS(st);
}

/*
 * Slab files are mode 0400, the first ones and the renewed ones: a
 * descriptor passed to a client cannot be reopened read-write through
 * /proc (nor read-only, by another uid than memd's), so a read-only
 * descriptor (a KV lookup's, a shm_dir slab's) stays read-only.
 */
START_TEST(slab_files_mode_0400)
{
	struct tu_memd m;
	struct raw a, b;
	struct stat st;
	int fa, fb;

	if (geteuid() != 0) {
		printf("SKIP slab_files_mode_0400: needs root for setuid\n");
		return;
	}
	tu_memd_start_ok(&m, CONF);
	raw_open(&a, m.addr);
	fa = raw_slab_fd(&a);
	ck_assert_int_eq(fstat(fa, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0400);
	ck_assert_int_eq(reopen_as_other_uid(fa, O_RDWR), EACCES);
	ck_assert_int_eq(reopen_as_other_uid(fa, O_RDONLY), EACCES);
	/* the renewed file of a revoked slab: the same */
	raw_release(&a);
	wait_metric(&m, "tidepool_memd_shm_slabs_renewed_total", 1);
	raw_open(&b, m.addr);
	ck_assert_uint_eq(b.l.slab, a.l.slab);
	fb = raw_slab_fd(&b);
	ck_assert_int_eq(fstat(fb, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0400);
	ck_assert_int_eq(reopen_as_other_uid(fb, O_RDWR), EACCES);
	two_raw_down(fa, fb, &a, &b, &m);
}
END_TEST

/* A libpool client of m moves one slab; true when it went over shm. */
static bool pool_client_gets_shm(struct tu_memd *m)
{
	int64_t before = tu_metric(m, "tidepool_memd_shm_fds_passed_total");
	struct pool_region *r;
	struct pool *p = tu_pool_connect(m);
	bool shm;

	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, 4096, 81);
	shm = tu_metric(m, "tidepool_memd_shm_fds_passed_total") > before;
	pool_close(p);
	return shm;
}

/*
 * A process of another uid that opens more unbound connections than
 * max_clients (the socket's name is in /proc/net/unix) only displaces
 * its own oldest: a new client still gets the same-host path.
 */
START_TEST(unbound_flood_of_other_uid)
{
	struct tu_memd m;
	struct raw a;
	int go[2], done[2];
	pid_t pid;
	char c;

	if (geteuid() != 0) {
		printf("SKIP unbound_flood_of_other_uid: needs root\n");
		return;
	}
	tu_memd_start_ok(&m, "metrics_listen = 127.0.0.1:0\nquiesce = 10ms\n"
			     "handshake_timeout = 60s\nmax_clients = 8\n"
			     "max_clients_per_host = 3\n");
	raw_open(&a, m.addr); /* for the socket's name */
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(100);
		for (int i = 0; i < 20; i++)
			(void)tu_shm_connect(&a.ok);
		(void)!write(go[1], "x", 1);
		(void)!read(done[0], &c, 1);
		_exit(0);
	}
	ck_assert_int_eq(read(go[0], &c, 1), 1);
	/* memd took them in order: the client's connection comes after */
	ck_assert(pool_client_gets_shm(&m));
	ck_assert_int_ge(tu_metric(&m, "tidepool_memd_shm_displaced_total"),
			 20 - 3);
	ck_assert_int_eq(write(done[1], "x", 1), 1);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	raw_close(&a);
	tu_memd_stop_ok(&m);
}
END_TEST

/*
 * One session that repeats SHM + BIND holds one bound connection: the
 * second SHM is refused EBUSY, and a new client still gets the
 * same-host path. Once its socket is closed, the session may bind again.
 */
START_TEST(one_bound_socket_per_session)
{
	uint8_t bid[WIRE_BOOT_ID_LEN];
	struct wire_shm_ok ok;
	struct tu_memd m;
	struct raw a;
	int fd;

	tu_memd_start_ok(&m, "metrics_listen = 127.0.0.1:0\nquiesce = 10ms\n"
			     "handshake_timeout = 60s\nmax_clients = 8\n");
	boot_id(bid);
	raw_open(&a, m.addr);
	for (int i = 0; i < 16; i++) {
		int r = shm_ask(a.c, bid, &ok), sock;

		if (i == 0)
			ck_assert_int_eq(r, -EBUSY);
		if (r)
			continue;
		sock = tu_shm_connect(&ok); /* kept, as an attacker would */
		(void)shm_req(sock, WIRE_SHM_BIND, a.h.session_id, ok.nonce, 0,
			      0, &fd);
	}
	ck_assert(pool_client_gets_shm(&m));
	/* its socket closed, the session binds a new one */
	close(a.sock);
	for (int i = 0; i < 500 && shm_ask(a.c, bid, &ok) == -EBUSY; i++)
		usleep(10000);
	a.sock = tu_shm_connect(&ok);
	ck_assert_int_eq(shm_req(a.sock, WIRE_SHM_BIND, a.h.session_id,
				 ok.nonce, 0, 0, &fd),
			 0);
	ck_assert_int_ge(raw_slab_fd(&a), 0);
	raw_close(&a);
	tu_memd_stop_ok(&m);
}
END_TEST

/* Descriptors pid holds now. */
static int count_fds(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * memd with no descriptor left (RLIMIT_NOFILE lowered to what it holds):
 * a pending same-host connection is shed (closed, as the control port's
 * are), not left in the backlog while memd-ctl spins on the readable
 * listener; and a revoked slab whose file went out is still renewed
 * (its kept descriptor gets the write seal), not quarantined for good.
 */
START_TEST(out_of_descriptors_same_host)
{
	struct rlimit old, low;
	struct tu_memd m;
	struct raw a;
	char one = 'x', b;
	int fa, i, socks[40];
	bool shed;

	tu_memd_start_ok(&m, "metrics_listen = 127.0.0.1:0\nquiesce = 10ms\n"
			     "handshake_timeout = 60s\n");
	raw_open(&a, m.addr);
	fa = raw_slab_fd(&a);
	ck_assert_int_eq(pwrite(fa, &one, 1, 0), 1);
	ck_assert_int_eq(prlimit(m.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)count_fds(m.pid);
	ck_assert_int_eq(prlimit(m.pid, RLIMIT_NOFILE, &low, NULL), 0);

	/* memd takes these until its table of descriptors is full (the
	 * limit is on numbers, and memd's may have holes); the rest wait
	 * in the backlog, where memd must shed them, not spin */
	for (i = 0; i < 40; i++)
		socks[i] = tu_shm_connect(&a.ok);
	shed = false;
	for (int tries = 0; tries < 2000 && !shed; tries++) {
		for (i = 0; i < 40 && !shed; i++) {
			struct pollfd pf = { .fd = socks[i], .events = POLLIN };

			shed = poll(&pf, 1, 0) == 1 &&
			       recv(socks[i], &b, 1, MSG_DONTWAIT) <= 0;
		}
		usleep(10000);
	}
	ck_assert_msg(shed, "same-host connections stayed pending at EMFILE");

	/* the renewal at release needs a descriptor: memd-reclaim's spare */
	raw_release(&a);
	for (i = 0; i < 2000 && pwrite(fa, &one, 1, 0) == 1; i++)
		usleep(10000);
	ck_assert_int_eq(pwrite(fa, &one, 1, 0), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(prlimit(m.pid, RLIMIT_NOFILE, &old, NULL), 0);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_slabs_quarantined"), 0);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_slabs_renewed_total"),
			 1);
	ck_assert_int_ge(tu_metric(&m, "tidepool_memd_conns_shed_total"), 1);
	for (i = 0; i < 40; i++)
		close(socks[i]);
	ck_assert(pool_client_gets_shm(&m));
	close(fa);
	raw_close(&a);
	tu_memd_stop_ok(&m);
}
END_TEST

/*
 * Sets every slab file of memd (its descriptors of files in dir) to len
 * bytes; returns how many.
 */
static int memd_slab_files_truncate(const struct tu_memd *m, const char *dir,
				    off_t len)
{
	char path[320], to[320];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)m->pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		ssize_t k;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)m->pid,
			 de->d_name);
		k = readlink(path, to, sizeof(to) - 1);
		if (k <= 0)
			continue;
		to[k] = 0;
		if (strncmp(to, dir, strlen(dir)))
			continue;
		fd = open(path, O_RDWR | O_CLOEXEC);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ftruncate(fd, len), 0);
		close(fd);
		n++;
	}
	closedir(d);
	return n;
}

/*
 * LIBPOOL_SHM=map maps only a file sealed against shrinking: a shm_dir
 * slab (no seals) that someone truncated reads -ESTALE past its end, as
 * with pread, and never faults with SIGBUS in the client.
 */
START_TEST(map_short_file_estale)
{
	char dir[] = "/dev/shm/tp-test-shm-XXXXXX", conf[512];
	struct pool_region *r;
	struct tu_memd m;
	struct statfs sf;
	struct pool *p;
	uint8_t *b = malloc(SLAB);

	ck_assert_ptr_nonnull(b);
	if (statfs("/dev/shm", &sf) || sf.f_type != TMPFS_MAGIC) {
		printf("SKIP map_short_file_estale: /dev/shm is not tmpfs\n");
		free(b);
		return;
	}
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(conf, sizeof(conf), CONF "shm_dir = %s\n", dir);
	tu_memd_start_ok(&m, conf);
	setenv("LIBPOOL_SHM", "map", 1);
	p = tu_pool_connect(&m);
	unsetenv("LIBPOOL_SHM");
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 71);
	ck_assert_int_gt(memd_slab_files_truncate(&m, dir, SLAB / 2), 0);
	ck_assert_int_eq(pool_read(p, r, SLAB / 2, b, 4096), -ESTALE);
	ck_assert_int_eq(pool_read(p, r, 0, b, SLAB), -ESTALE);
	/* memd's own mapping needs its file whole again */
	ck_assert_int_gt(memd_slab_files_truncate(&m, dir, SLAB), 0);
	pool_close(p);
	tu_memd_stop_ok(&m);
	ck_assert(rmdir(dir) == 0);
	free(b);
}
END_TEST

/* Not the same host, or shm off on either side: the fabric. */
START_TEST(other_host_stays_on_fabric)
{
	uint8_t bid[WIRE_BOOT_ID_LEN];
	struct wire_hello_ok h;
	struct wire_shm_ok ok;
	struct pool_region *r;
	struct tu_memd m, off;
	struct pool *p;
	struct rpc *c;
	char path[256];

	tu_memd_start_ok(&m, CONF);
	/* another kernel's boot id: refused, EXDEV */
	c = tu_raw_hello(m.addr, &h);
	boot_id(bid);
	bid[3] ^= 0x40;
	ck_assert_int_eq(shm_ask(c, bid, &ok), -EXDEV);
	rpc_close(c);
	/* the client turns it off */
	setenv("LIBPOOL_SHM", "off", 1);
	p = tu_pool_connect(&m);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 41);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_fds_passed_total"),
			 0);
	poolctl_leases(&m, path, sizeof(path));
	ck_assert(tu_file_has(path, "fabric"));
	pool_close(p);
	/* a value that is neither */
	setenv("LIBPOOL_SHM", "yes", 1);
	{
		struct pool_opts o = { .addr = m.addr };

		ck_assert_int_eq(pool_connect(&o, &p), -EINVAL);
	}
	unsetenv("LIBPOOL_SHM");
	tu_memd_stop_ok(&m);

	/* memd turns it off: SHM refused, libpool on the fabric */
	tu_memd_start_ok(&off, CONF "shm = off\n");
	ck_assert_int_eq(tu_metric(&off, "tidepool_memd_shm_enabled"), 0);
	c = tu_raw_hello(off.addr, &h);
	boot_id(bid);
	ck_assert_int_eq(shm_ask(c, bid, &ok), -EOPNOTSUPP);
	rpc_close(c);
	p = tu_pool_connect(&off);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 42);
	ck_assert_int_eq(tu_metric(&off, "tidepool_memd_shm_fds_passed_total"),
			 0);
	pool_close(p);
	tu_memd_stop_ok(&off);
}
END_TEST

/*
 * memd restarts under a session on shm: the old session's reads end
 * with an error (its heartbeat finds memd gone) and never return
 * anything but its own bytes before that; a session on the new memd
 * starts from zeros.
 */
START_TEST(memd_restart)
{
	uint8_t *b = malloc(SLAB);
	struct pool_region *r, *r2;
	struct tu_memd m, m2;
	struct pool *p, *p2;
	int ret = 0;

	ck_assert_ptr_nonnull(b);
	tu_memd_start_ok(&m, CONF "lease_ttl = 600ms\nlease_grace = 100ms\n");
	p = tu_pool_connect(&m);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 0, SLAB, 51);
	ck_assert_int_eq(tu_metric(&m, "tidepool_memd_shm_fds_passed_total"),
			 1);
	ck_assert_int_eq(tu_memd_stop(&m, SIGKILL), SIGKILL);
	tu_memd_start_ok(&m2, CONF);
	for (int i = 0; i < 300; i++) {
		ret = pool_read(p, r, 0, b, SLAB);
		if (ret)
			break;
		ck_assert_int_eq(tu_pattern_check(b, SLAB, 51, 0), -1);
		usleep(10000);
	}
	ck_assert_int_eq(ret, -ENOTCONN);
	p2 = tu_pool_connect(&m2);
	ck_assert_int_eq(pool_alloc(p2, SLAB, &r2), 0);
	ck_assert_int_eq(pool_read(p2, r2, 0, b, SLAB), 0);
	for (size_t i = 0; i < SLAB; i++)
		if (b[i])
			ck_abort_msg("byte %zu of a fresh slab is %u", i, b[i]);
	pool_close(p2);
	pool_close(p);
	tu_memd_stop_ok(&m2);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shm");
	TCase *tc = tu_tcase(s, "shm", 120);

	if (!tu_memd_path()) {
		printf("SKIP: TP_MEMD not set\n");
		return 77;
	}
	tcase_add_test(tc, revoked_fd_reads_nothing);
	tcase_add_test(tc, cross_session_refused);
	tcase_add_loop_test(tc, libpool_over_shm, 0, 2);
	TU_ADD_TESTS(tc, shm_dir_read_only, slab_files_mode_0400,
		     map_short_file_estale, unbound_flood_of_other_uid,
		     one_bound_socket_per_session, out_of_descriptors_same_host,
		     other_host_stays_on_fabric, memd_restart);
	return tu_run_suite(s);
}
