// SPDX-License-Identifier: MIT
/*
 * memd/arena.c - maps the donation (see arena.h). Called from main only.
 *
 * No overcommit: memd checks what the host can back before it maps, then
 * mlock()s everything, which also prefaults it; a donation that cannot be
 * locked is an error at start-up, never a surprise under load. The mapping
 * is MADV_DONTFORK so a fork never shares registered memory.
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
		h->memlock_limit = rl.rlim_cur == RLIM_INFINITY ?
					   UINT64_MAX :
					   (uint64_t)rl.rlim_cur;
	h->can_lock_any = have_ipc_lock();
	return 0;
}

int memd_arena_plan(const struct memd_host_mem *h, uint64_t len,
		    enum memd_hugepages hp, bool *hugetlb, char *err,
		    size_t errlen)
{
	bool huge_fits = h->huge_page_bytes && h->huge_free >= len &&
			 len % h->huge_page_bytes == 0;

	*hugetlb = false;
	if (hp == MEMD_HUGEPAGES_YES && !huge_fits) {
		snprintf(err, errlen,
			 "hugepages = yes but the host has %" PRIu64
			 " bytes of free huge pages (page size %" PRIu64
			 ") for a donation of %" PRIu64
			 " bytes; reserve more (vm.nr_hugepages) or set "
			 "hugepages = auto",
			 h->huge_free, h->huge_page_bytes, len);
		return -ENOMEM;
	}
	if (hp != MEMD_HUGEPAGES_NO && huge_fits) {
		*hugetlb = true;
	} else if (len > h->mem_available) {
		/* Huge pages already reserved are not in MemAvailable, and
		 * anything more would push the host into swap or OOM. */
		snprintf(err, errlen,
			 "cannot donate %" PRIu64 " bytes: the host has only %"
			 PRIu64 " bytes available (MemAvailable); lower "
			 "donate",
			 len, h->mem_available);
		return -ENOMEM;
	}
	if (!h->can_lock_any && h->memlock_limit < len) {
		snprintf(err, errlen,
			 "cannot lock %" PRIu64 " bytes: RLIMIT_MEMLOCK is %"
			 PRIu64 " bytes; raise it (LimitMEMLOCK=infinity in "
			 "the systemd unit, ulimit -l) or grant CAP_IPC_LOCK",
			 len, h->memlock_limit);
		return -EPERM;
	}
	return 0;
}

int memd_arena_create(uint64_t len, enum memd_hugepages hp,
		      struct memd_arena *a, char *err, size_t errlen)
{
	struct memd_host_mem h;
	bool hugetlb;
	void *p;
	int ret;

	memset(a, 0, sizeof(*a));
	ret = memd_host_mem_read(&h);
	if (ret) {
		snprintf(err, errlen, "cannot read /proc/meminfo: %s",
			 strerror(-ret));
		return ret;
	}
	ret = memd_arena_plan(&h, len, hp, &hugetlb, err, errlen);
	if (ret)
		return ret;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS |
			 (hugetlb ? MAP_HUGETLB : 0),
		 -1, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		snprintf(err, errlen, "mmap of %" PRIu64 " bytes%s: %s", len,
			 hugetlb ? " (huge pages)" : "", strerror(errno));
		return ret;
	}
	if (!hugetlb)
		(void)madvise(p, len, MADV_HUGEPAGE); /* best effort: THP */
	(void)madvise(p, len, MADV_DONTFORK);
	if (mlock(p, len) != 0) {
		ret = -errno;
		snprintf(err, errlen,
			 "mlock of %" PRIu64 " bytes: %s (need CAP_IPC_LOCK "
			 "or RLIMIT_MEMLOCK >= donate)",
			 len, strerror(errno));
		munmap(p, len);
		return ret;
	}
	a->base = p;
	a->len_bytes = len;
	a->hugetlb = hugetlb;
	a->page_bytes = hugetlb ? h.huge_page_bytes :
				  (uint64_t)sysconf(_SC_PAGESIZE);
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
