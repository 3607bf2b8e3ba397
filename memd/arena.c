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
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memd/log.h"
#include "numa/place.h"

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
	a->len_bytes = len;
	a->hugetlb = hugetlb;
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
}
