// SPDX-License-Identifier: MIT
/*
 * libpool/paging_uffd.c - transparent paging: the userfaultfd calls: copy, zero, wake, write-protect, open, register.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

/*
 * Copies and inspects pages of the range from pool-uffd. The range's pages
 * are written by the kernel (UFFDIO_COPY) and by the application under
 * write protection we manage, an ordering ThreadSanitizer cannot see:
 * these two are the only places we read the range, so they are not
 * instrumented (under TSan, volatile keeps the compiler from calling
 * memcpy, which TSan intercepts; elsewhere memcpy is used).
 */
__attribute__((no_sanitize("thread"))) void
pg_page_copy_out(void *dst, const void *src, size_t bytes)
{
#if defined(__SANITIZE_THREAD__)
	const volatile uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < bytes / 8; i++)
		d[i] = s[i];
#else
	/* 4-5x faster than the loop on a 2 MiB page (0.4 ms -> 0.1 ms). */
	memcpy(dst, src, bytes);
#endif
}

__attribute__((no_sanitize("thread"))) bool pg_page_is_zero(const void *src,
							    size_t bytes)
{
	const volatile uint64_t *s = src;
	uint64_t acc = 0;

	for (size_t i = 0; i < bytes / 8; i++)
		acc |= s[i];
	return acc == 0;
}

/* ------------------------------------------------------------------ */
/* userfaultfd                                                          */

/*
 * Test-only fault injection: TP_TEST_UFFD_EAGAIN=N (at least 2) makes
 * every Nth of the engine's page-table ioctls (UFFDIO_COPY, _ZEROPAGE,
 * _WRITEPROTECT, _WAKE) fail with EAGAIN before it reaches the kernel,
 * as the kernel answers while the faulting mm is changing
 * (mmap_changing). Read once; unset, it costs one relaxed load per
 * ioctl. Never set it in production.
 */
static unsigned uffd_eagain_every; /* 0: off */
static unsigned uffd_eagain_count;
static pthread_once_t uffd_eagain_once = PTHREAD_ONCE_INIT;

static void uffd_eagain_init(void)
{
	const char *v = getenv("TP_TEST_UFFD_EAGAIN");
	long n = v ? strtol(v, NULL, 10) : 0;

	__atomic_store_n(&uffd_eagain_every,
			 n <= 0	       ? 0u
			 : n < 2       ? 2u
			 : n > 1000000 ? 1000000u
				       : (unsigned)n,
			 __ATOMIC_RELAXED);
}

/* ioctl() on the engine's userfaultfd, through the injection above. */
static int uffd_ioctl(const struct mapping *m, unsigned long req, void *arg)
{
	unsigned every;

	pthread_once(&uffd_eagain_once, uffd_eagain_init);
	every = __atomic_load_n(&uffd_eagain_every, __ATOMIC_RELAXED);
	if (every &&
	    __atomic_add_fetch(&uffd_eagain_count, 1, __ATOMIC_RELAXED) %
			    every ==
		    0) {
		errno = EAGAIN;
		return -1;
	}
	return ioctl(m->uffd, req, arg);
}

/*
 * EAGAIN from a page-table ioctl is transient: the faulting mm was
 * changing (a fork, mremap or unmap under way in the kernel) and nothing
 * or part of the range was done. It is retried, never turned into a
 * failed mapping (SIGBUS). The change ends without us (we ask for no
 * non-cooperative events, so none waits for pool-uffd): yield and go
 * again. Counted (uffd_retries in the stats).
 */
static void uffd_again(struct mapping *m)
{
	STAT_ADD(m, uffd_retries, 1);
	sched_yield();
}

int pg_uffd_wake(struct mapping *m, size_t idx, size_t n)
{
	struct uffdio_range rg = {
		.start = (uintptr_t)page_addr(m, idx),
		.len = n * m->psize,
	};

	while (uffd_ioctl(m, UFFDIO_WAKE, &rg)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	return 0;
}

/* Sets (wp) or clears write protection; clearing wakes the writers. A
 * retry after EAGAIN does the whole range again (idempotent). */
int pg_uffd_protect(struct mapping *m, size_t idx, size_t n, bool wp)
{
	struct uffdio_writeprotect w = {
		.range = { .start = (uintptr_t)page_addr(m, idx),
			   .len = n * m->psize },
		.mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	while (uffd_ioctl(m, UFFDIO_WRITEPROTECT, &w)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	return 0;
}

/* Installs n pages from src at page idx (and wakes their waiters).
 * Returns 0 or -errno (-EEXIST: a page was already there). A huge page
 * the kernel cannot allocate (-ENOMEM: its pool of hugetlb pages ran
 * short, another process took them) costs us one of ours: the oldest is
 * evicted, which gives its page back, and the copy is tried again; with
 * none of ours left, -ENOMEM (the mapping fails). */
int pg_uffd_copy(struct mapping *m, size_t idx, size_t n, const uint8_t *src,
		 bool wp)
{
	return pg_uffd_copy_mode(m, idx, n, src, wp, 0);
}

/* pg_uffd_copy() with more UFFDIO_COPY mode bits (MODE_DONTWAKE). */
int pg_uffd_copy_mode(struct mapping *m, size_t idx, size_t n,
		      const uint8_t *src, bool wp, uint64_t mode)
{
	size_t done = 0, len = n * m->psize, step = len;

	while (done < len) {
		struct uffdio_copy c = {
			.dst = (uintptr_t)page_addr(m, idx) + done,
			.src = (uintptr_t)src + done,
			.len = step < len - done ? step : len - done,
			.mode = (wp ? UFFDIO_COPY_MODE_WP : 0) | mode,
		};
		int err;

		if (uffd_ioctl(m, UFFDIO_COPY, &c) == 0) {
			done += c.len;
			step = len - done;
			continue;
		}
		err = errno;
		if (c.copy > 0) {
			done += (size_t)c.copy;
			continue;
		}
		/* ENOENT: the range is not inside one VMA. The program split
		 * the mapping (madvise(MADV_HUGEPAGE) on part of an array, as
		 * numpy does, mprotect): the kernel checks the whole range
		 * against one VMA before copying anything. Shorter copies
		 * find the boundary; one page that is still refused is
		 * really gone (unmapped), and that is the error. */
		if (err == ENOENT && c.len > m->psize) {
			step = (c.len / 2 + m->psize - 1) & ~(m->psize - 1);
			continue;
		}
		/* Linux (6.x) says EEXIST, not ENOMEM, when it finds no
		 * free hugetlb page but the page table for the address
		 * exists: "already there" would be taken as a race and the
		 * program would fault on the missing page forever. */
		if (m->huge && err == EEXIST &&
		    !pg_page_is_present(m, idx + done / m->psize))
			err = ENOMEM;
		if (err == ENOMEM && m->huge && m->nres > 0) {
			int ret = pg_evict(m, 1);

			if (ret)
				return ret;
			STAT_ADD(m, huge_short, 1);
		} else if (err == EAGAIN) { /* the mm was changing */
			uffd_again(m);
		} else {
			return -err;
		}
	}
	return 0;
}

/*
 * Maps the zero page at idx for a read fault. The page is write-protected
 * before its waiter is woken, so its first write comes to us. Another
 * thread may write it between the two ioctls without faulting (the
 * kernel copies the zero page on its own): that page keeps PG_ZERO and
 * eviction checks its contents instead of trusting PG_DIRTY.
 */
int pg_zero_install(struct mapping *m, size_t idx)
{
	struct uffdio_zeropage z = {
		.range = { .start = (uintptr_t)page_addr(m, idx),
			   .len = m->psize },
		.mode = UFFDIO_ZEROPAGE_MODE_DONTWAKE,
	};
	int ret;

	/* hugetlb has no zero page: a page of zeros is copied in,
	 * protected in the same step (no window for a silent write). */
	if (m->huge)
		return pg_uffd_copy(m, idx, 1, m->zero, true);
	while (uffd_ioctl(m, UFFDIO_ZEROPAGE, &z)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	ret = pg_uffd_protect(m, idx, 1, true);
	if (ret)
		return ret;
	return pg_uffd_wake(m, idx, 1);
}

/* Opens a userfaultfd: /dev/userfaultfd, else the syscall (kernel-mode
 * faults need privilege or vm.unprivileged_userfaultfd=1), else the
 * syscall in user-mode-only mode. LIBPOOL_UFFD_USER_ONLY=1 forces the
 * last (tests, and reproducing a host without the privilege). */
static int uffd_open(bool *user_only)
{
	const char *force = getenv("LIBPOOL_UFFD_USER_ONLY");
	int fd, dev;

	*user_only = false;
	if (!(force && !strcmp(force, "1"))) {
		dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
		if (dev >= 0) {
			fd = ioctl(dev, USERFAULTFD_IOC_NEW,
				   O_CLOEXEC | O_NONBLOCK);
			close(dev);
			if (fd >= 0)
				return fd;
		}
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0)
			return fd;
	}
	fd = (int)syscall(SYS_userfaultfd,
			  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd >= 0) {
		*user_only = true;
		return fd;
	}
	if (errno == ENOSYS || errno == EINVAL)
		return -EOPNOTSUPP;
	return -errno;
}

/* Negotiates the API of the engine's userfaultfd: with the hugetlb
 * features where the kernel has them (pg_eng.huge_ok), else without (a fresh
 * descriptor: the API is set once). Returns 0, -EOPNOTSUPP or -errno. */
int pg_engine_open_uffd(void)
{
	const uint64_t base =
		UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	const uint64_t huge = UFFD_FEATURE_MISSING_HUGETLBFS |
			      UFFD_FEATURE_WP_HUGETLBFS_SHMEM;

	for (int pass = 0; pass < 2; pass++) {
		struct uffdio_api api = {
			.api = UFFD_API,
			.features = base | (pass == 0 ? huge : 0),
		};
		int fd = uffd_open(&pg_eng.user_only);

		if (fd < 0)
			return fd;
		if (ioctl(fd, UFFDIO_API, &api) == 0) {
			pg_eng.uffd = fd;
			pg_eng.huge_ok = pass == 0;
			return 0;
		}
		close(fd);
		if (errno != EINVAL)
			return -errno;
	}
	return -EOPNOTSUPP;
}

/* Registers m's range with the engine's userfaultfd. -EOPNOTSUPP when the
 * kernel lacks a feature the mapping needs. */
int pg_uffd_register(struct mapping *m)
{
	const uint64_t need = (1ull << _UFFDIO_COPY) |
			      (m->huge ? 0 : (1ull << _UFFDIO_ZEROPAGE)) |
			      (1ull << _UFFDIO_WAKE) |
			      (1ull << _UFFDIO_WRITEPROTECT);
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)m->base, .len = m->len },
		.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
	};

	if (m->huge && !pg_eng.huge_ok)
		return -EOPNOTSUPP;
	if (ioctl(m->uffd, UFFDIO_REGISTER, &reg))
		return errno == EINVAL ? -EOPNOTSUPP : -errno;
	if ((reg.ioctls & need) != need) {
		struct uffdio_range rg = { .start = (uintptr_t)m->base,
					   .len = m->len };

		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
		return -EOPNOTSUPP;
	}
	return 0;
}
