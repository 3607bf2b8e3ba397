// SPDX-License-Identifier: MIT
/*
 * libpool/pool_shm.c - the same-host path (docs/design.md, "Co-located
 * clients over shm"): the socket memd passes slab memfds over, the
 * slabs' files and their read-only mappings, and the KV tier's files
 * (WIRE_SHM_KV) with the transfers through them.
 */
#include "libpool/pool_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

/* ------------------------------------------------------------------ */
/* slab memfds                                                          */

/* One request on the same-host socket and its reply (and descriptor). */
static int shm_call(struct plink *lk, const struct wire_shm_req *q,
		    struct wire_shm_rep *rep, int *fd)
{
	uint8_t buf[WIRE_SHM_REQ_LEN], in[WIRE_SHM_REP_MAX + 1];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = in, .iov_len = sizeof(in) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct timeval tv = { .tv_sec = lk->p->timeout_ms / 1000,
			      .tv_usec = (lk->p->timeout_ms % 1000) * 1000 };
	struct cmsghdr *h;
	ssize_t n;
	int got = -1;

	*fd = -1;
	if (wire_shm_req_encode(q, buf) != WIRE_SHM_REQ_LEN)
		return -EINVAL;
	pthread_mutex_lock(&lk->shm_mu);
	(void)setsockopt(lk->shm_sock, SOL_SOCKET, SO_RCVTIMEO, &tv,
			 sizeof(tv));
	if (send(lk->shm_sock, buf, sizeof(buf), MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(buf)) {
		n = errno ? -errno : -EIO;
		pthread_mutex_unlock(&lk->shm_mu);
		return (int)n;
	}
	n = recvmsg(lk->shm_sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		n = -errno;
	pthread_mutex_unlock(&lk->shm_mu);
	if (n < 0)
		return (int)n;
	for (h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
		    h->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(h), sizeof(int));
	if (wire_shm_rep_decode(in, (size_t)n, rep) || rep->op != q->op ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (got >= 0)
			close(got);
		return -EPROTO;
	}
	*fd = got;
	return 0;
}

/*
 * Same-host path: when LIBPOOL_SHM allows it and memd answers SHM with
 * SHM_OK (same boot id, shm on), connects to memd's socket and binds it
 * to this session. Any failure leaves the link on the fabric (logged),
 * which is the contract of auto.
 */
void pl_link_shm_open(struct plink *lk)
{
	struct wire_msg *req, *rep;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct wire_shm_req q = { .op = WIRE_SHM_BIND };
	struct wire_shm_rep sr;
	char text[WIRE_MSG_MAX] = "";
	socklen_t sl;
	size_t nl;
	int r, fd = -1, ign;

	if (!lk->p->shm || lk->proto < 2)
		return;
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	if (!req || !rep) {
		r = -ENOMEM;
		goto out;
	}
	req->type = WIRE_SHM;
	r = wire_boot_id_read(WIRE_BOOT_ID_PATH, req->u.shm.boot_id);
	if (r) {
		snprintf(text, sizeof(text), "no boot id");
		goto out;
	}
	r = rpc_call(lk->ctl, req, rep, WIRE_SHM_OK, lk->p->timeout_ms, text,
		     sizeof(text));
	if (r)
		goto out;
	nl = strnlen(rep->u.shm_ok.socket, sizeof(rep->u.shm_ok.socket));
	memcpy(sa.sun_path + 1, rep->u.shm_ok.socket, nl);
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl)) {
		r = -errno;
		snprintf(text, sizeof(text), "socket @%s unreachable",
			 rep->u.shm_ok.socket);
		goto out;
	}
	lk->shm_sock = fd;
	q.session_id = lk->session_id;
	memcpy(q.nonce, rep->u.shm_ok.nonce, WIRE_NONCE_LEN);
	r = shm_call(lk, &q, &sr, &ign);
	explicit_bzero(&q, sizeof(q));
	if (ign >= 0)
		close(ign);
	if (!r && sr.err)
		r = -sr.err;
	if (r) {
		snprintf(text, sizeof(text), "bind refused");
		lk->shm_sock = -1;
		goto out;
	}
	fd = -1;
	pool_log(LOG_INFO, "session: shm session=%" PRIx64 " memd=%s",
		 lk->session_id, lk->addr);
out:
	if (r)
		pool_log(LOG_INFO,
			 "session: fabric session=%" PRIx64 " memd=%s "
			 "why=no same-host path (%s: %s)",
			 lk->session_id, lk->addr, strerror(-r), text);
	if (fd >= 0)
		close(fd);
	if (rep)
		explicit_bzero(rep, sizeof(*rep));
	free(req);
	free(rep);
}

#define SHM_HUGE_BYTES ((uint64_t)2 << 20)

/*
 * A read-only shared mapping of len bytes of fd at an address aligned
 * to 2 MiB, or NULL. memd puts its memfd slabs on 2 MiB pages where the
 * kernel lets it (memd.conf(5) hugepages); the kernel maps such a page
 * with one page-table entry, one fault, only where the address is as
 * aligned as the file offset, and mmap(NULL) of a memfd is only 4 KiB
 * aligned. A copy from a mapping at a misaligned address faults per 16
 * pages (about half the speed: docs/bench/kv.md, "Huge pages for
 * memfd slabs"). munmap(m, len) undoes it: the slack is unmapped here.
 */
static void *shm_map_aligned(int fd, uint64_t len)
{
	uint8_t *r, *at;
	void *m;
	size_t head, tail;

	r = mmap(NULL, len + SHM_HUGE_BYTES, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return NULL;
	at = (uint8_t *)(((uintptr_t)r + SHM_HUGE_BYTES - 1) &
			 ~(uintptr_t)(SHM_HUGE_BYTES - 1));
	m = mmap(at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		munmap(r, len + SHM_HUGE_BYTES);
		return NULL;
	}
	head = (size_t)(at - r);
	tail = (size_t)(SHM_HUGE_BYTES - head);
	if (head)
		munmap(r, head);
	if (tail)
		munmap(at + len, tail);
	return m;
}

/*
 * LIBPOOL_SHM=map: a read-only shared mapping of a slab's memfd, through
 * a read-only descriptor of the same file: no VM_MAYWRITE, so memd can
 * still write-seal the file at revocation. Reads copy from it (the
 * kernel's pread of shmem costs about 0.7 us per 4 KiB page here, 4x a
 * memcpy: docs/bench/poolbench.md). After revocation the mapping shows
 * the punched-out old file: zeros, never the next tenant's bytes. Not
 * the default: every page read stays mapped and counts in the client's
 * RSS (RssShmem), which the OOM killer and the paging engine's budget
 * checks see. The KV path maps through here too (kvshm_map).
 *
 * Only a file sealed against shrinking (F_SEAL_SHRINK: nobody can
 * truncate it under the mapping) that holds len bytes is mapped: a copy
 * from anything else could fault with SIGBUS past the file's end. A
 * shm_dir file (no seals) or a short one is read with pread instead,
 * whose short read is -ESTALE (shm_piece). A writable descriptor is
 * reopened read-only through /proc/self/fd, which the file's mode 0400
 * allows only to memd's uid (and root): another uid's client reads with
 * pread. NULL: reads use pread.
 */
const uint8_t *pl_shm_map_ro(int fd, uint64_t len)
{
	char path[64];
	struct stat st;
	uint8_t *m;
	int ro, seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return NULL;
	if (fstat(fd, &st) || st.st_size < 0 || (uint64_t)st.st_size < len)
		return NULL;
	if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		return shm_map_aligned(fd, len);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		return NULL;
	m = shm_map_aligned(ro, len);
	close(ro);
	return m;
}

/* The memfd of lease l of a same-host link, or -1 (fabric for it). */
int pl_link_shm_slab_fd(struct plink *lk, const struct wire_lease *l)
{
	struct wire_shm_req q = { .op = WIRE_SHM_SLAB,
				  .session_id = lk->session_id,
				  .slab = l->slab,
				  .generation = l->generation };
	struct wire_shm_rep rep;
	int fd, r;

	if (lk->shm_sock < 0 || lk->shm_broken)
		return -1;
	r = shm_call(lk, &q, &rep, &fd);
	if (!r && (rep.err || rep.slab != l->slab ||
		   rep.generation != l->generation || fd < 0))
		r = rep.err ? -rep.err : -EPROTO;
	if (r) {
		if (fd >= 0)
			close(fd);
		pool_log(LOG_WARNING,
			 "alloc: slab=%u of memd=%s over the fabric: its "
			 "memfd was refused (%s)",
			 l->slab, lk->addr, strerror(-r));
		if (r != -ESTALE && r != -EPERM)
			lk->shm_broken = true; /* out of step: ask no more */
		return -1;
	}
	return fd;
}

/* ------------------------------------------------------------------ */
/* the KV tier's files                                                  */

/*
 * The read-only mapping KV gets copy from (LIBPOOL_KV_MAP, on by
 * default), or NULL: pread. Why a mapping here when pool_read's default
 * is pread: docs/kv.md, "Gets through a mapping". Only what pl_shm_map_ro
 * maps: a memfd slab of the slab's size (sealed against shrinking, so a
 * copy never faults with SIGBUS); a shm_dir file is neither sealed nor
 * slow to pread (2 MiB pages). After the store gives the slab back,
 * memd's punch leaves zeros in the mapping, which fail the block's
 * checks: a miss, as with the kept descriptor.
 */
static const uint8_t *kvshm_map(struct plink *lk, int fd)
{
	if (fd < 0 || !lk->p->kv_map ||
	    (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY)
		return NULL; /* a reservation's file: writes only */
	return pl_shm_map_ro(fd, lk->p->slab_bytes);
}

/* Closes KV file entry e (its mapping, its descriptor). Caller holds
 * kvshm_rw for writing, or is pl_link_close. */
void pl_kvshm_drop(struct plink *lk, struct kvshm *e)
{
	if (e->used && e->map)
		munmap((void *)e->map, lk->p->slab_bytes);
	if (e->used && e->fd >= 0)
		close(e->fd);
	e->used = false;
	e->map = NULL;
}

/* The KV file entry of (endpoint, rkey), or NULL. Caller holds
 * kvshm_rw. */
static struct kvshm *kvshm_find(struct plink *lk, uint16_t endpoint,
				uint64_t rkey)
{
	for (uint32_t i = 0; i < KVSHM_MAX; i++) {
		struct kvshm *e = &lk->kvshm[i];

		if (e->used && e->rkey == rkey && e->endpoint == endpoint)
			return e;
	}
	return NULL;
}

/* Asks memd for the file of the KV slab behind (endpoint, rkey) and
 * keeps it (or its refusal). Caller holds kvshm_rw for writing. */
static void kvshm_fetch_locked(struct plink *lk, uint16_t endpoint,
			       uint64_t rkey)
{
	struct wire_shm_req q = { .op = WIRE_SHM_KV,
				  .session_id = lk->session_id,
				  .rkey = rkey,
				  .endpoint = endpoint };
	struct wire_shm_rep rep;
	struct kvshm *e;
	int fd = -1, r;

	if (lk->kvshm_broken || kvshm_find(lk, endpoint, rkey))
		return;
	r = shm_call(lk, &q, &rep, &fd);
	if (!r && (rep.err || fd < 0)) {
		if (fd >= 0)
			close(fd);
		fd = -1;
		pool_log(LOG_DEBUG,
			 "kv: memd=%s endpoint=%u over the fabric: the KV "
			 "slab's file was refused (%s)",
			 lk->addr, endpoint,
			 strerror(rep.err ? rep.err : EPROTO));
	}
	if (r) {
		lk->kvshm_broken = true; /* out of step: ask no more */
		pool_log(LOG_WARNING,
			 "kv: memd=%s KV over the fabric: same-host socket "
			 "failed (%s)",
			 lk->addr, strerror(-r));
		return;
	}
	e = &lk->kvshm[lk->kvshm_next];
	lk->kvshm_next = (lk->kvshm_next + 1) % KVSHM_MAX;
	pl_kvshm_drop(lk, e);
	*e = (struct kvshm){ .rkey = rkey,
			     .map = kvshm_map(lk, fd),
			     .base = rep.base,
			     .fd = fd,
			     .endpoint = endpoint,
			     .used = true,
			     .ro = fd >= 0 && (fcntl(fd, F_GETFL) &
					       O_ACCMODE) == O_RDONLY };
}

void pool_link_kv_shm_forget(struct plink *lk)
{
	pthread_rwlock_wrlock(&lk->kvshm_rw);
	for (uint32_t i = 0; i < KVSHM_MAX; i++)
		pl_kvshm_drop(lk, &lk->kvshm[i]);
	pthread_rwlock_unlock(&lk->kvshm_rw);
}

/* The kept file of the KV slab behind (endpoint, rkey), asked of memd
 * first where none is kept (or NULL); returns with kvshm_rw read-locked
 * either way. */
static const struct kvshm *kvshm_get_rdlocked(struct plink *lk,
					      uint16_t endpoint, uint64_t rkey)
{
	const struct kvshm *e;

	pthread_rwlock_rdlock(&lk->kvshm_rw);
	e = kvshm_find(lk, endpoint, rkey);
	if (!e) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		pthread_rwlock_wrlock(&lk->kvshm_rw);
		kvshm_fetch_locked(lk, endpoint, rkey);
		pthread_rwlock_unlock(&lk->kvshm_rw);
		pthread_rwlock_rdlock(&lk->kvshm_rw);
		e = kvshm_find(lk, endpoint, rkey);
	}
	return e;
}

uint64_t pool_shm_bytes(struct pool *p)
{
	return __atomic_load_n(&p->st_shm_bytes, __ATOMIC_RELAXED);
}

bool pool_link_kv_local(struct plink *lk, uint16_t endpoint, uint64_t rkey)
{
	const struct kvshm *e;
	bool ok;

	if (lk->shm_sock < 0 || pool_link_is_lost(lk))
		return false;
	e = kvshm_get_rdlocked(lk, endpoint, rkey);
	ok = e && e->fd >= 0;
	pthread_rwlock_unlock(&lk->kvshm_rw);
	return ok;
}

/*
 * A KV transfer through the KV slab's file (same-host link): done
 * before this returns, as shm_piece does for leases. 1: not on this
 * path (no same-host socket, memd refused the key, a write through a
 * read-only file): the caller posts it over the fabric. The location
 * stays memd's to check: only a key it gave this session's tenant
 * yields a file, and the block's header and checksum are verified after
 * the read exactly as after RMA.
 */
int pl_kv_shm_xfer(struct plink *lk, bool write, void *buf, size_t len,
		   uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		   struct fab_op *f)
{
	struct pollfd pfd = { .fd = lk->shm_sock, .events = POLLRDHUP };
	const struct kvshm *e;
	uint64_t off, slab = lk->p->slab_bytes;
	int r = 0;

	e = kvshm_get_rdlocked(lk, endpoint, rkey);
	if (!e || e->fd < 0 || (write && e->ro)) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		return 1;
	}
	off = raddr - e->base;
	if (raddr < e->base || off > slab || len > slab - off) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		return -EPROTO;
	}
	/* memd's death closes the socket; a pread would not notice */
	if (poll(&pfd, 1, 0) > 0) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		pl_link_fail(lk, -ENOTCONN, "memd closed its same-host socket");
		return -ENOTCONN;
	}
	/* A copy from a mapping (kvshm_map) may race memd's punch or a
	 * block's reuse: zeros or other bytes, which the get's checks
	 * refuse, as they refuse those of a pread. */
	r = pl_shm_copy(e->fd, e->map, buf, len, off, write);
	pthread_rwlock_unlock(&lk->kvshm_rw);
	if (!r)
		__atomic_add_fetch(&lk->p->st_shm_bytes, len, __ATOMIC_RELAXED);
	f->status = r;
	__atomic_store_n(&f->complete, 1, __ATOMIC_RELEASE);
	return 0;
}
