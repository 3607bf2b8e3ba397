/* SPDX-License-Identifier: MIT */
/*
 * tidepool/pool_map.h - transparent paging: a region of the pool seen as
 * ordinary memory.
 *
 * pool_map() returns a local address range the size of a region. Pages are
 * fetched from the pool when first touched (userfaultfd), at most
 * local_bytes of them stay resident, pages written to are written back to
 * the pool before they are dropped. Page size is 4 KiB, or 2 MiB with
 * huge pages (POOL_MAP_HUGE, $LIBPOOL_HUGE_PAGES; pool_map(3), HUGE PAGES).
 *
 * Threads: any number of threads may touch a mapping at once. One thread
 * per process ("pool-uffd") serves the page faults of every mapping.
 * $LIBPOOL_LOCAL_BYTES, when set, also bounds what all mappings of the
 * process keep resident together (pool_map(3)).
 * pool_map() and pool_unmap() may be called from any thread; a mapping must
 * not be touched during or after its pool_unmap().
 *
 * Limits (see docs/paging.md):
 *  - When /dev/userfaultfd cannot be opened and the process lacks the
 *    privilege for kernel-mode faults (vm.unprivileged_userfaultfd = 0),
 *    the mapping runs in user-mode-only mode: system calls that write into
 *    or read from not-yet-resident pages of the mapping (read(2) into it,
 *    say) fail with EFAULT instead of faulting the page in. Touch the
 *    pages first, or copy through a buffer of your own.
 *  - Do not pass mapped memory to pool_read()/pool_write() of the session
 *    that backs the mapping: use a buffer of your own or another session.
 *  - A fault cannot return an error. When the pool can no longer serve a
 *    page (memd gone, session lost, write-back failed), the thread that
 *    touches a page that is not resident gets SIGBUS (as with a truncated
 *    file mapping); if that thread blocks or ignores SIGBUS, the process
 *    is aborted. Memory never silently reads wrong.
 *  - The range must not be munmap()ed, mremap()ed or madvise()d by the
 *    caller. A fork() child gets a private copy of the pages resident at
 *    the fork (and zeros where the region never held data); pages whose
 *    data only the region held are PROT_NONE there (SIGSEGV when
 *    touched, never wrong bytes). In the child, pool_unmap() releases
 *    the copy: DISCARD returns 0, FLUSH -ENOTCONN.
 */
#ifndef TIDEPOOL_POOL_MAP_H
#define TIDEPOOL_POOL_MAP_H

#include <stddef.h>

#include "tidepool/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pool_map flags */
/* The region already holds data: every page is fetched on first touch.
 * Without it the region is taken as new: its contents read as zero until
 * written through the mapping, and a first touch costs no network trip. */
#define POOL_MAP_EXISTING 0x1u
/* Page in 2 MiB huge pages (hugetlb, vm.nr_hugepages) instead of 4 KiB
 * ones: a fault, a read and a page-table change move 2 MiB, so streams
 * (scans, sorts, merges) cost far less per byte; random access to small
 * items costs far more (each miss reads 2 MiB). Without either flag,
 * $LIBPOOL_HUGE_PAGES decides (default 4 KiB; see pool_map(3)). Needs
 * a region larger than 14 MiB (8 huge pages once rounded up), a budget of
 * at least 4 MiB and as many free 2 MiB huge pages as the budget. */
#define POOL_MAP_HUGE 0x2u
/* 4 KiB pages whatever $LIBPOOL_HUGE_PAGES says. */
#define POOL_MAP_SMALL 0x4u

/* pool_unmap flags (exactly one) */
#define POOL_UNMAP_FLUSH 0x1u	/* write dirty pages back to the region */
#define POOL_UNMAP_DISCARD 0x2u /* drop them: the region keeps older data */

/*
 * Maps region r of session p at a new address (*addr), the region's size
 * rounded up to the page size (4 KiB, or 2 MiB with huge pages). At most
 * local_bytes (rounded down to whole pages) are resident at once; 0 means
 * $LIBPOOL_LOCAL_BYTES (a size such as "64M") or else 256 MiB. The
 * session and the region must outlive the mapping.
 * Returns 0 and *addr, or
 *   -EINVAL     p, r or addr is NULL, flags unknown or both POOL_MAP_HUGE
 *               and POOL_MAP_SMALL, local_bytes (or LIBPOOL_LOCAL_BYTES)
 *               below 256 KiB or malformed; or huge pages demanded
 *               (POOL_MAP_HUGE, or LIBPOOL_HUGE_PAGES=required) and the
 *               region spans fewer than 8 of them (is 14 MiB or less) or
 *               the budget is under 2 (4 MiB); or LIBPOOL_HUGE_PAGES is
 *               none of 0, 1, required (and no page-size flag is given)
 *   -EOPNOTSUPP the kernel lacks userfaultfd write-protection of anonymous
 *               memory (Linux 5.7+) or UFFD_FEATURE_THREAD_ID; with huge
 *               pages, of hugetlb memory (Linux 5.19+)
 *   -EPERM      userfaultfd is not permitted to this process at all
 *   -ENOMEM     out of address space or memory; or huge pages demanded
 *               and fewer 2 MiB ones free than the budget (vm.nr_hugepages)
 *   -EAGAIN     the fault-handler thread could not be started
 */
POOL_API int pool_map(struct pool *p, struct pool_region *r, size_t local_bytes,
		      unsigned flags, void **addr);

/*
 * Ends the mapping at addr (as returned by pool_map): stops its thread,
 * with POOL_UNMAP_FLUSH writes every page written to since it was last
 * written back, then unmaps the range. The mapping is gone even when an
 * error is returned. Returns 0, or
 *   -EINVAL    addr is not a mapping of p, or flags is not exactly one of
 *              POOL_UNMAP_FLUSH and POOL_UNMAP_DISCARD
 *   -ENOTCONN (or another pool_write() error)  FLUSH could not write back
 *              every dirty page, or the mapping had already failed: the
 *              region may lack some of what was written; or FLUSH of a
 *              mapping inherited across fork() (the child's copy is
 *              released, the region is the parent's)
 */
POOL_API int pool_unmap(struct pool *p, void *addr, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
