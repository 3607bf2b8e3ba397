// SPDX-License-Identifier: MIT
/*
 * memd/arena.c - maps the donation (see arena.h). Called from main only.
 *
 * No overcommit: memd checks what the host (and, for a bound arena, the
 * node) can back before it maps, then mlock()s everything, which also
 * prefaults it; a donation that cannot be locked is an error at start-up,
 * never a surprise under load. The mapping is MADV_DONTFORK so a fork
 * never shares registered memory.
 *
 * NUMA: a bound arena gets MPOL_BIND (place_membind) between mmap and
 * mlock, so the first touch, which mlock does, already allocates on the
 * node; nothing has to migrate. hugetlb reservations are not per node, so
 * the plan checks the node's own free huge pages: a fault on a node
 * without them would fail the mlock, not fall back.
 */
#include "memd/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "memd/log.h"
#include "numa/place.h"

/* every slab file: read-only to its owner, nothing to others */
#define SLAB_FILE_MODE 0400

static bool have_ipc_lock(void)
{
	/* Avoid libcap: read CapEff from /proc/self/status. */
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	bool ok = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			ok = caps & (1ull << CAP_IPC_LOCK);
			break;
		}
	}
	fclose(f);
	return ok;
}

int memd_host_mem_read(struct memd_host_mem *h)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long v, hfree = 0, hsize = 0;
	char line[256];
	struct rlimit rl;

	memset(h, 0, sizeof(*h));
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
			h->mem_available = v * 1024;
		else if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
			hfree = v;
		else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
			hsize = v * 1024;
	}
	fclose(f);
	h->huge_page_bytes = hsize;
	h->huge_free = hfree * hsize;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
		h->memlock_limit = rl.rlim_cur == RLIM_INFINITY
					   ? UINT64_MAX
					   : (uint64_t)rl.rlim_cur;
	h->can_lock_any = have_ipc_lock();
	return 0;
}

int memd_host_mem_read_node(int node, struct memd_host_mem *h)
{
	char path[128], line[256];
	unsigned long long v, mfree = 0, active = 0, inactive = 0, pages = 0;
	int r = memd_host_mem_read(h), n;
	FILE *f;

	if (r)
		return r;
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo",
		 node);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	/* "Node 0 MemFree:        123456 kB" */
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Node %d MemFree: %llu kB", &n, &v) == 2)
			mfree = v;
		else if (sscanf(line, "Node %d Active(file): %llu kB", &n,
				&v) == 2)
			active = v;
		else if (sscanf(line, "Node %d Inactive(file): %llu kB", &n,
				&v) == 2)
			inactive = v;
	}
	fclose(f);
	v = (mfree + active + inactive) * 1024;
	if (v < h->mem_available)
		h->mem_available = v;
	h->huge_free = 0;
	if (h->huge_page_bytes) {
		snprintf(path, sizeof(path),
			 "/sys/devices/system/node/node%d/hugepages/"
			 "hugepages-%llukB/free_hugepages",
			 node, (unsigned long long)(h->huge_page_bytes / 1024));
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%llu", &pages) == 1)
				h->huge_free = pages * h->huge_page_bytes;
			fclose(f);
		}
	}
	return 0;
}

int memd_arena_plan(const struct memd_host_mem *h, uint64_t len,
		    enum memd_hugepages hp, bool *hugetlb, char *err,
		    size_t errlen)
{
	bool huge_fits = h->huge_page_bytes && h->huge_free >= len &&
			 len % h->huge_page_bytes == 0;
	char want[MEMD_LOG_BYTES_MAX], have[MEMD_LOG_BYTES_MAX],
		page[MEMD_LOG_BYTES_MAX];

	*hugetlb = false;
	memd_log_bytes(len, want, sizeof(want));
	if (hp == MEMD_HUGEPAGES_YES && !huge_fits) {
		snprintf(err, errlen,
			 "hugepages = yes but the host has %s of free huge "
			 "pages (page size %s) for a donation of %s; reserve "
			 "more (vm.nr_hugepages) or set hugepages = auto",
			 memd_log_bytes(h->huge_free, have, sizeof(have)),
			 memd_log_bytes(h->huge_page_bytes, page, sizeof(page)),
			 want);
		return -ENOMEM;
	}
	if (hp != MEMD_HUGEPAGES_NO && huge_fits) {
		*hugetlb = true;
	} else if (len > h->mem_available) {
		/* Huge pages already reserved are not in MemAvailable, and
		 * anything more would push the host into swap or OOM. */
		snprintf(err, errlen,
			 "cannot donate %s: the host has only %s available "
			 "(MemAvailable); lower donate",
			 want,
			 memd_log_bytes(h->mem_available, have, sizeof(have)));
		return -ENOMEM;
	}
	if (!h->can_lock_any && h->memlock_limit < len) {
		snprintf(err, errlen,
			 "cannot lock %s: RLIMIT_MEMLOCK is %s; raise it "
			 "(LimitMEMLOCK=infinity in the systemd unit, ulimit "
			 "-l) or grant CAP_IPC_LOCK",
			 want,
			 memd_log_bytes(h->memlock_limit, have, sizeof(have)));
		return -EPERM;
	}
	return 0;
}

int memd_arena_create(uint64_t len, enum memd_hugepages hp, int node,
		      struct memd_arena *a, char *err, size_t errlen)
{
	struct memd_host_mem h;
	char why[512];
	bool hugetlb;
	void *p;
	int ret;

	memset(a, 0, sizeof(*a));
	a->node = -1;
	ret = node < 0 ? memd_host_mem_read(&h)
		       : memd_host_mem_read_node(node, &h);
	if (ret) {
		if (node < 0)
			snprintf(err, errlen, "cannot read /proc/meminfo: %s",
				 strerror(-ret));
		else
			snprintf(err, errlen,
				 "cannot read the memory of NUMA node %d "
				 "(/sys/devices/system/node/node%d): %s",
				 node, node, strerror(-ret));
		return ret;
	}
	ret = memd_arena_plan(&h, len, hp, &hugetlb, why, sizeof(why));
	if (ret) {
		if (node < 0)
			snprintf(err, errlen, "%s", why);
		else
			snprintf(err, errlen, "NUMA node %d: %s", node, why);
		return ret;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | (hugetlb ? MAP_HUGETLB : 0), -1,
		 0);
	if (p == MAP_FAILED && hugetlb && hp == MEMD_HUGEPAGES_AUTO) {
		/* The free huge pages counted include those other mappings
		 * have reserved, and another process may take some between
		 * the count and the mmap: auto means anonymous memory then. */
		ret = memd_arena_plan(&h, len, MEMD_HUGEPAGES_NO, &hugetlb, why,
				      sizeof(why));
		if (ret) {
			if (node < 0)
				snprintf(err, errlen, "%s", why);
			else
				snprintf(err, errlen, "NUMA node %d: %s", node,
					 why);
			return ret;
		}
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED) {
		ret = -errno;
		snprintf(err, errlen, "mmap of %" PRIu64 " bytes%s: %s", len,
			 hugetlb ? " (huge pages)" : "", strerror(errno));
		return ret;
	}
	if (!hugetlb)
		(void)madvise(p, len, MADV_HUGEPAGE); /* best effort: THP */
	(void)madvise(p, len, MADV_DONTFORK);
	if (node >= 0) {
		ret = place_membind(p, len, node, 0);
		if (ret) {
			snprintf(err, errlen,
				 "cannot bind %" PRIu64 " bytes to NUMA node "
				 "%d: %s%s",
				 len, node, strerror(-ret),
				 ret == -ENXIO ? " (not among this process's "
						 "allowed memory nodes: "
						 "cpuset, numactl --membind)"
					       : "");
			munmap(p, len);
			return ret;
		}
	}
	if (mlock(p, len) != 0) {
		char where[48] = "";

		ret = -errno;
		if (node >= 0)
			snprintf(where, sizeof(where), " on NUMA node %d",
				 node);
		snprintf(err, errlen,
			 "mlock of %" PRIu64 " bytes%s: %s (need CAP_IPC_LOCK "
			 "or RLIMIT_MEMLOCK >= donate%s)",
			 len, where, strerror(-ret),
			 node >= 0 ? ", and that much free on the node" : "");
		munmap(p, len);
		return ret;
	}
	a->base = p;
	a->node = node;
	a->bound = node >= 0;
	a->len_bytes = len;
	a->hugetlb = hugetlb;
	a->thp = hp != MEMD_HUGEPAGES_NO;
	a->page_bytes =
		hugetlb ? h.huge_page_bytes : (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

void memd_arena_destroy(struct memd_arena *a)
{
	if (!a || !a->base)
		return;
	munlock(a->base, a->len_bytes);
	munmap(a->base, a->len_bytes);
	a->base = NULL;
	for (uint32_t i = 0; a->slab_fd && i < a->nslab_fd; i++)
		if (a->slab_fd[i] >= 0)
			close(a->slab_fd[i]);
	free(a->slab_fd);
	a->slab_fd = NULL;
	a->nslab_fd = 0;
}

/*
 * A slab's memfd: len bytes of zeros, sealed against resizing (not
 * against further seals: memd write-seals it when it is revoked), mode
 * 0400. The mode is what a reopen of /proc/<pid>/fd/N checks: a client
 * given a read-only descriptor cannot reopen the file read-write (nor,
 * as another uid than memd's, open it at all); memd keeps the read-write
 * descriptor it created. memd's own uid (and root) can still chmod the
 * file back: docs/reliability.md, "Same-host descriptors".
 */
static int slab_memfd(uint64_t len)
{
	int fd = memfd_create("tidepool-slab", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int r;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) || fchmod(fd, SLAB_FILE_MODE) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* A slab's unnamed file in the tmpfs directory dir: len bytes of zeros,
 * unsealable (see memd_arena_slab_fds), mode 0400 as a memfd's. */
static int slab_tmpfile(const char *dir, uint64_t len)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, SLAB_FILE_MODE);
	struct statfs sf;
	int r;

	if (fd < 0)
		return -errno;
	if (fstatfs(fd, &sf) || sf.f_type != TMPFS_MAGIC) {
		close(fd);
		return -ENOTTY;
	}
	if (ftruncate(fd, (off_t)len)) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int slab_file(const struct memd_arena *a)
{
	return a->slab_dir[0] ? slab_tmpfile(a->slab_dir, a->slab_bytes)
			      : slab_memfd(a->slab_bytes);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#define SLAB_THP_BYTES ((uint64_t)2 << 20)

/*
 * Puts the memfd slab mapped at at (len bytes, 2 MiB aligned) on 2 MiB
 * transparent huge pages, where the kernel allows: a memfd's pages are
 * 4 KiB unless /sys/kernel/mm/transparent_hugepage/shmem_enabled says
 * otherwise (Debian: never), and a 4 KiB shmem page costs every reader
 * a page-cache lookup per pread and a fault per 16 pages mapped (a
 * client's same-host KV get: docs/bench/kv.md, "Huge pages for memfd
 * slabs"). MADV_COLLAPSE (Linux 6.1) builds huge pages whatever
 * shmem_enabled says short of deny, but only over pages that exist:
 * one zero byte written per 2 MiB (the file stays zeros) gives it one
 * page to collapse around, the holes are filled with zeros. Best
 * effort: where it fails (older kernel, shmem_enabled deny, no 2 MiB of
 * contiguous free memory) the slab stays on 4 KiB pages, as before.
 * Returns whether every 2 MiB of the slab is now a huge page.
 */
static bool slab_collapse(uint8_t *at, uint64_t len)
{
	if ((uintptr_t)at % SLAB_THP_BYTES || len % SLAB_THP_BYTES) {
		errno = EINVAL;
		return false;
	}
	for (uint64_t off = 0; off < len; off += SLAB_THP_BYTES)
		((volatile uint8_t *)at)[off] = 0;
	return madvise(at, len, MADV_COLLAPSE) == 0;
}

/* Maps fd over slab i of a, as memd_arena_create set up the whole. */
static int slab_map(struct memd_arena *a, uint32_t i, int fd)
{
	uint8_t *at = (uint8_t *)a->base + (uint64_t)i * a->slab_bytes;
	void *p = mmap(at, a->slab_bytes, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_FIXED, fd, 0);
	int r;

	if (p == MAP_FAILED)
		return -errno;
	(void)madvise(at, a->slab_bytes, MADV_HUGEPAGE); /* shmem THP */
	(void)madvise(at, a->slab_bytes, MADV_DONTFORK);
	if (a->bound) {
		/* a shared policy on the file: its pages stay on the node */
		r = place_membind(at, a->slab_bytes, a->node, 0);
		if (r)
			return r;
	}
	if (a->thp && !a->slab_dir[0]) {
		bool huge = slab_collapse(at, a->slab_bytes);

		if (!huge && !a->thp_failed)
			memd_log(LOG_INFO,
				 "arena: memfd slabs stay on 4 KiB pages: the "
				 "kernel refused to collapse one into "
				 "transparent huge pages (MADV_COLLAPSE: %s)",
				 strerror(errno));
		a->thp_failed |= !huge;
	}
	if (mlock(at, a->slab_bytes))
		return -errno;
	return 0;
}

int memd_arena_slab_fds(struct memd_arena *a, uint64_t slab_bytes,
			const char *dir, char *err, size_t errlen)
{
	uint32_t n;
	int r;

	if (a->slab_fd)
		return 0;
	if (a->hugetlb) {
		snprintf(err, errlen,
			 "the arena is backed by hugetlbfs pages, whose "
			 "files take no write(2)");
		return -EOPNOTSUPP;
	}
	if (!slab_bytes || a->len_bytes % slab_bytes) {
		snprintf(err, errlen, "slab size does not divide the arena");
		return -EINVAL;
	}
	if (dir && strlen(dir) >= sizeof(a->slab_dir)) {
		snprintf(err, errlen, "shm_dir is too long");
		return -ENAMETOOLONG;
	}
	snprintf(a->slab_dir, sizeof(a->slab_dir), "%s", dir ? dir : "");
	n = (uint32_t)(a->len_bytes / slab_bytes);
	a->slab_fd = malloc(n * sizeof(*a->slab_fd));
	if (!a->slab_fd) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		a->slab_fd[i] = -1;
	a->nslab_fd = n;
	a->slab_bytes = slab_bytes;
	for (uint32_t i = 0; i < n; i++) {
		int fd = slab_file(a);

		if (fd < 0 && fd == -ENOTTY) {
			snprintf(err, errlen,
				 "shm_dir %s is not on tmpfs (mount one, "
				 "e.g. mount -t tmpfs -o huge=always,size=... "
				 "none %s)",
				 a->slab_dir, a->slab_dir);
			return fd;
		}
		if (fd < 0) {
			snprintf(err, errlen, "%s for slab %u: %s%s",
				 a->slab_dir[0] ? "file in shm_dir" : "memfd",
				 i, strerror(-fd),
				 fd == -EMFILE ? " (one descriptor per slab: "
						 "raise LimitNOFILE= or "
						 "ulimit -n, or set shm = "
						 "off)"
					       : "");
			return fd;
		}
		r = slab_map(a, i, fd);
		if (r) {
			close(fd);
			snprintf(err, errlen, "mapping slab %u's memfd: %s", i,
				 strerror(-r));
			return r;
		}
		a->slab_fd[i] = fd;
	}
	return 0;
}

int memd_arena_slab_renew(struct memd_arena *a, uint32_t i)
{
	int old, fd, r;

	if (!a->slab_fd || i >= a->nslab_fd)
		return -EINVAL;
	fd = slab_file(a);
	if (fd < 0)
		return fd;
	r = slab_map(a, i, fd);
	if (r) {
		close(fd);
		return r;
	}
	old = a->slab_fd[i];
	a->slab_fd[i] = fd;
	if (old >= 0) {
		/* Whoever still holds the old file sees zeros from now on,
		 * and (once sealed) cannot write pages back into it. A
		 * client that kept a writable mapping of it makes the seal
		 * fail (EBUSY); it can then refill only its own dead file.
		 * A shm_dir file takes no seal (EPERM): its clients only
		 * ever got read-only descriptors. */
		(void)fallocate(old, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				0, (off_t)a->slab_bytes);
		(void)fcntl(old, F_ADD_SEALS, F_SEAL_WRITE);
		close(old);
	}
	return 0;
}
