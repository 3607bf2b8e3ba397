/* SPDX-License-Identifier: MIT */
/*
 * memd/arena.h - donated memory: one mapping per arena, pinned and
 * prefaulted, backed by hugetlbfs pages when the host (the node) has
 * enough of them, otherwise by anonymous memory advised for transparent
 * huge pages, and bound to a NUMA node when memd is given numa_nodes.
 * Created once at start-up (the one place to fail fast), destroyed at exit.
 */
#ifndef TP_MEMD_ARENA_H
#define TP_MEMD_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memd/config.h"

struct memd_arena {
	void *base;
	uint64_t len_bytes;
	bool hugetlb;	     /* backed by hugetlbfs pages */
	uint64_t page_bytes; /* hugetlb page size, or the base page size */
	int node;   /* NUMA node its pages are bound to; -1: not bound */
	bool bound; /* memd_arena_create bound it to node (MPOL_BIND) */
	/* memd_arena_slab_fds: slab i is the memfd slab_fd[i], mapped
	 * MAP_SHARED at base + i * slab_bytes; NULL: one anonymous mapping */
	int *slab_fd;
	uint32_t nslab_fd;
	uint64_t slab_bytes;
	/* slab_dir (shm_dir): the slabs are unnamed files of that tmpfs
	 * directory, which take no seals, so clients get read-only
	 * descriptors of them only (srv_shm_ro_fd); "": sealed memfds */
	char slab_dir[256];
	/* memfd slabs on transparent huge pages (slab_collapse) unless
	 * hugepages = no; thp_failed: one was refused (logged once) */
	bool thp, thp_failed;
};

/* What the host can back, read from /proc/meminfo and getrlimit. */
struct memd_host_mem {
	uint64_t mem_available;	  /* MemAvailable */
	uint64_t huge_free;	  /* HugePages_Free * Hugepagesize */
	uint64_t huge_page_bytes; /* Hugepagesize */
	uint64_t memlock_limit;	  /* RLIMIT_MEMLOCK soft, UINT64_MAX: none */
	bool can_lock_any;	  /* CAP_IPC_LOCK (root) */
};

int memd_host_mem_read(struct memd_host_mem *h);

/*
 * The same for one NUMA node: mem_available becomes the smaller of the
 * host's MemAvailable and the node's free plus file-cache memory
 * (/sys/devices/system/node/nodeN/meminfo), huge_free the node's free
 * huge pages of the default size. -ENOENT when the node has no sysfs
 * entry.
 */
int memd_host_mem_read_node(int node, struct memd_host_mem *h);

/*
 * Decides how len bytes would be backed under policy hp, from h alone
 * (pure): sets *hugetlb. Returns 0, or -ENOMEM (not enough memory:
 * err says how much there is), -EPERM (cannot lock that much), with err
 * saying what to change.
 */
int memd_arena_plan(const struct memd_host_mem *h, uint64_t len,
		    enum memd_hugepages hp, bool *hugetlb, char *err,
		    size_t errlen);

/*
 * Maps, advises, binds (node >= 0: MPOL_BIND to that node, through
 * place_membind(), before any page is touched), locks and prefaults len
 * bytes as planned; node -1 binds nothing. Returns 0 and *a, or -errno
 * with err explaining (-ENXIO: node not usable by this process).
 */
int memd_arena_create(uint64_t len, enum memd_hugepages hp, int node,
		      struct memd_arena *a, char *err, size_t errlen);
void memd_arena_destroy(struct memd_arena *a);

/*
 * Same-host sessions (docs/design.md, "Co-located clients over shm"):
 * turns an anonymous arena into one memfd per slab of slab_bytes, each
 * mapped MAP_SHARED | MAP_FIXED at its place in the arena (advised,
 * bound to the arena's node and locked as before), so addresses, memory
 * registrations and the tcp path do not change, and a slab's fd can be
 * handed to a client that may hold its lease. Each memfd is sealed
 * against shrinking and growing: a client holding it cannot truncate
 * the slab under memd (which would make memd's own accesses fault).
 * An arena already converted is left as it is (0).
 * dir non-NULL and not empty: the slabs are unnamed files (O_TMPFILE,
 * mode 0600) of that directory instead, which must be on tmpfs (a tmpfs
 * mounted huge=always gives them 2 MiB pages whatever
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled says). Such files
 * cannot be sealed: memd hands out read-only descriptors of them only
 * (a read-only descriptor can neither truncate nor write the file, and
 * mode 0600 keeps another uid from reopening it for writing).
 * Returns 0, -EOPNOTSUPP for a hugetlb arena (hugetlbfs files take no
 * write(2): the client's pwrite path would not work), -ENOTTY when dir
 * is not on tmpfs, or -errno with err explaining; on error the arena is
 * as it was, or partly converted (every slab still mapped and locked,
 * each either way).
 */
int memd_arena_slab_fds(struct memd_arena *a, uint64_t slab_bytes,
			const char *dir, char *err, size_t errlen);

/*
 * Revocation of slab i of a memfd arena: a fresh (zero) memfd takes its
 * place in the mapping, and the old one is emptied (its pages punched
 * out, so whoever still holds it reads zeros, never the next tenant's
 * bytes) and write-sealed (its writes fail) before memd closes it; its
 * memory goes back when the last holder closes it. This is the zeroing
 * of the slab. Returns 0, or -errno: the slab's mapping may then be gone
 * and it must never be leased again (the caller quarantines it).
 * Called on memd-reclaim only, for a slab nothing can reach (no
 * registration, not leased).
 */
int memd_arena_slab_renew(struct memd_arena *a, uint32_t i);

#endif
