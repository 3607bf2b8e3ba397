// SPDX-License-Identifier: MIT
/*
 * libpool/preload.c - libpool-preload.so: LD_PRELOAD shim that puts the
 * large allocations of an unmodified program into pooled memory.
 *
 * DESIGN
 * The shim exports the malloc family only (preload.map). An allocation of
 * at least LIBPOOL_MIN_BYTES (default 1 MiB) becomes a region of its own
 * (pool_alloc) seen through pool_map() (libpool/paging.c): the program
 * gets a page-aligned pointer and pages come and go under the local
 * budget (LIBPOOL_LOCAL_BYTES per allocation). Everything else goes to
 * glibc through its __libc_* entry points (no dlsym, so no recursion).
 *
 * Process context (the one global, by design: an LD_PRELOAD library has
 * no handle to hang it on): the session, a table of pooled allocations
 * (mmap-backed: no malloc here) and the address range they span, so
 * free() of a libc pointer costs one comparison.
 *
 * Threads: any thread may call in. The session is connected lazily, at
 * the first large allocation (no thread starts before the program needs
 * one). ctx.lock guards the table and the connect. While a thread runs
 * pool code for the shim (connect, alloc, map, unmap, free) its own
 * allocations go to libc (in_shim), so pool code never re-enters itself.
 * pool-uffd threads (and libfabric under them) always allocate from libc
 * (pool_paging_is_engine_thread): pooled memory there would be memory the
 * engine has to fault in while it serves faults. pool-hb allocates small.
 *
 * Failure: a pool that cannot be reached at the first large allocation
 * gives one warning on stderr and plain libc from then on; with
 * LIBPOOL_REQUIRED=1 the process is aborted instead. A pool_alloc or
 * pool_map that fails later falls back to libc for that allocation.
 *
 * fork: the table lock is taken around fork() (pthread_atfork). The child
 * has no session (its threads did not fork): its new allocations go to
 * libc. Of pooled memory it inherited, the pages resident at the fork are
 * its private copy; pages whose data only the pool held are PROT_NONE
 * there (paging.c), so touching one is SIGSEGV, never wrong bytes.
 * free() in the child releases its copy, never the parent's region.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h> /* memalign, pvalloc, malloc_usable_size */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libpool/paging.h"
#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define EXPORT __attribute__((visibility("default")))
#define PAGE 4096u
#define DEFAULT_MIN_BYTES (1u << 20)
#define TABLE_MAX 65536u /* pooled allocations alive at once */

extern void *__libc_malloc(size_t n);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

struct pooled {
	uint8_t *addr; /* NULL: free slot */
	size_t bytes;  /* requested */
	struct pool_region *r;
};

enum ctx_state { CTX_NEW, CTX_ON, CTX_OFF };

static struct {
	pthread_mutex_t lock;
	enum ctx_state state;
	struct pool *p;
	size_t min_bytes;
	struct pooled *table; /* TABLE_MAX entries, mmap */
	size_t used;	      /* high-water slot + 1 */
	uintptr_t lo, hi;     /* every pooled allocation is inside */
	size_t (*libc_usable)(void *);
	bool atfork;
	bool forked; /* a fork() child: p is the parent's session */
} ctx = { .lock = PTHREAD_MUTEX_INITIALIZER };

static __thread int in_shim __attribute__((tls_model("initial-exec")));

static void say(const char *msg)
{
	static const char pre[] = "libpool-preload: ";

	if (write(STDERR_FILENO, pre, sizeof(pre) - 1) < 0 ||
	    write(STDERR_FILENO, msg, strlen(msg)) < 0 ||
	    write(STDERR_FILENO, "\n", 1) < 0)
		return;
}

static size_t env_size(const char *name, size_t dflt)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long n;

	if (!v || !*v)
		return dflt;
	n = strtoull(v, &end, 10);
	switch (*end) {
	case 'k':
	case 'K':
		n <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		n <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		n <<= 30;
		end++;
		break;
	default:
		break;
	}
	return *end || end == v ? dflt : (size_t)n;
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&ctx.lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&ctx.lock);
}

static void atfork_child(void)
{
	/* The session's threads did not come along: the child allocates
	 * from libc only. Its inherited pooled pointers stay in the table
	 * so free() recognises them and releases the child's copy only
	 * (paging.c fenced the pages the child cannot have). */
	if (ctx.state == CTX_ON)
		__atomic_store_n(&ctx.state, CTX_OFF, __ATOMIC_RELAXED);
	ctx.forked = true;
	pthread_mutex_unlock(&ctx.lock);
}

/*
 * libfabric's psm providers link libinfinipath and libpsm2, whose
 * constructors (run before ours, at load) catch SIGSEGV, SIGBUS, SIGILL,
 * SIGFPE and SIGABRT to print a backtrace and exit(1). Under the shim
 * that would change how an unmodified program dies, and turn the SIGBUS
 * of a fault the pool cannot serve into exit status 1. Handlers that live
 * in those libraries go back to the default; any other is left alone.
 */
__attribute__((constructor)) static void restore_crash_signals(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction sa;
		Dl_info info;
		void *h;

		if (sigaction(sigs[i], NULL, &sa))
			continue;
		h = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction
					       : (void *)sa.sa_handler;
		if (h == (void *)SIG_DFL || h == (void *)SIG_IGN ||
		    !dladdr(h, &info) || !info.dli_fname)
			continue;
		if (strstr(info.dli_fname, "libinfinipath") ||
		    strstr(info.dli_fname, "libpsm"))
			signal(sigs[i], SIG_DFL);
	}
}

/* Connects on first use; ctx.lock held, in_shim set. */
static void ctx_start_locked(void)
{
	const char *req = getenv("LIBPOOL_REQUIRED");
	int ret;

	__atomic_store_n(&ctx.state, CTX_OFF, __ATOMIC_RELAXED);
	ctx.table = mmap(NULL, TABLE_MAX * sizeof(*ctx.table),
			 PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (ctx.table == MAP_FAILED) {
		ctx.table = NULL;
		ret = -ENOMEM;
	} else {
		ret = pool_connect(NULL, &ctx.p);
	}
	if (!ctx.atfork) {
		pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		ctx.atfork = true;
	}
	if (ret == 0) {
		__atomic_store_n(&ctx.lo, UINTPTR_MAX, __ATOMIC_RELAXED);
		__atomic_store_n(&ctx.state, CTX_ON, __ATOMIC_RELEASE);
		return;
	}
	if (req && !strcmp(req, "1")) {
		say("pool unreachable and LIBPOOL_REQUIRED=1: aborting "
		    "(LIBPOOL_ADDR, memd running?)");
		/* Libraries loaded with libfabric (psm) turn SIGABRT into
		 * exit(1); a required pool that is missing must read as
		 * the abort it is. */
		signal(SIGABRT, SIG_DFL);
		abort();
	}
	say("pool unreachable: large allocations use libc "
	    "(LIBPOOL_ADDR, memd running? LIBPOOL_LOG=info says more)");
}

/* A pooled allocation of n bytes, or NULL (then the caller uses libc). */
static void *pooled_alloc(size_t n)
{
	struct pool_region *r = NULL;
	void *a = NULL;
	size_t slot;

	in_shim++;
	pthread_mutex_lock(&ctx.lock);
	if (ctx.state == CTX_NEW)
		ctx_start_locked();
	if (ctx.state != CTX_ON || n < ctx.min_bytes)
		goto out;
	for (slot = 0; slot < ctx.used; slot++)
		if (!ctx.table[slot].addr)
			break;
	if (slot == TABLE_MAX)
		goto out;
	/* Pool calls block on the network: not under ctx.lock. */
	pthread_mutex_unlock(&ctx.lock);
	if (pool_alloc(ctx.p, n, &r) == 0 &&
	    pool_map(ctx.p, r, 0, 0, &a) != 0) {
		pool_free(ctx.p, r);
		a = NULL;
	}
	pthread_mutex_lock(&ctx.lock);
	if (!a)
		goto out;
	/* The slot may have been taken meanwhile: look again. */
	for (slot = 0; slot < TABLE_MAX && ctx.table[slot].addr; slot++)
		;
	if (slot == TABLE_MAX) {
		pthread_mutex_unlock(&ctx.lock);
		pool_unmap(ctx.p, a, POOL_UNMAP_DISCARD);
		pool_free(ctx.p, r);
		pthread_mutex_lock(&ctx.lock);
		a = NULL;
		goto out;
	}
	ctx.table[slot] = (struct pooled){ a, n, r };
	if (slot >= ctx.used)
		ctx.used = slot + 1;
	if ((uintptr_t)a < ctx.lo)
		__atomic_store_n(&ctx.lo, (uintptr_t)a, __ATOMIC_RELAXED);
	if ((uintptr_t)a + n > ctx.hi)
		__atomic_store_n(&ctx.hi, (uintptr_t)a + n, __ATOMIC_RELAXED);
out:
	pthread_mutex_unlock(&ctx.lock);
	in_shim--;
	return a;
}

/* The table slot of pooled pointer ptr, or -1. ctx.lock held. */
static ssize_t find_locked(const void *ptr)
{
	uintptr_t v = (uintptr_t)ptr;

	if (v < ctx.lo || v >= ctx.hi)
		return -1;
	for (size_t i = 0; i < ctx.used; i++)
		if (ctx.table[i].addr == ptr)
			return (ssize_t)i;
	return -1;
}

/* Whether ptr may be pooled, without the lock (lo/hi only grow). */
static bool maybe_pooled(const void *ptr)
{
	uintptr_t v = (uintptr_t)ptr;

	return v >= __atomic_load_n(&ctx.lo, __ATOMIC_RELAXED) &&
	       v < __atomic_load_n(&ctx.hi, __ATOMIC_RELAXED);
}

/* Size of pooled ptr, or 0 when it is not pooled. */
static size_t pooled_size(const void *ptr)
{
	size_t n = 0;
	ssize_t i;

	if (!maybe_pooled(ptr))
		return 0;
	pthread_mutex_lock(&ctx.lock);
	i = find_locked(ptr);
	if (i >= 0)
		n = ctx.table[i].bytes;
	pthread_mutex_unlock(&ctx.lock);
	return n;
}

/* Frees ptr if it is pooled; false when it is libc's. */
static bool pooled_free(void *ptr)
{
	struct pooled e;
	bool child;
	ssize_t i;

	if (!maybe_pooled(ptr))
		return false;
	pthread_mutex_lock(&ctx.lock);
	i = find_locked(ptr);
	if (i < 0) {
		pthread_mutex_unlock(&ctx.lock);
		return false;
	}
	e = ctx.table[i];
	ctx.table[i].addr = NULL;
	child = ctx.forked;
	pthread_mutex_unlock(&ctx.lock);
	in_shim++;
	pool_unmap(ctx.p, e.addr, POOL_UNMAP_DISCARD);
	/* A fork child's region is the parent's: only the copy goes. */
	if (!child)
		pool_free(ctx.p, e.r);
	in_shim--;
	return true;
}

static bool wants_pool(size_t n)
{
	size_t min = __atomic_load_n(&ctx.min_bytes, __ATOMIC_RELAXED);

	if (in_shim || pool_paging_is_engine_thread())
		return false;
	if (!min) { /* getenv allocates nothing: safe here */
		min = env_size("LIBPOOL_MIN_BYTES", DEFAULT_MIN_BYTES);
		if (min < PAGE)
			min = PAGE;
		__atomic_store_n(&ctx.min_bytes, min, __ATOMIC_RELAXED);
	}
	return n >= min &&
	       __atomic_load_n(&ctx.state, __ATOMIC_RELAXED) != CTX_OFF;
}

/* glibc's malloc_usable_size (ours shadows it), found once. */
static size_t libc_usable(void *ptr)
{
	size_t (*fn)(void *) =
		__atomic_load_n(&ctx.libc_usable, __ATOMIC_ACQUIRE);

	if (!fn) {
		in_shim++;
		fn = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
		in_shim--;
		if (!fn)
			return 0;
		__atomic_store_n(&ctx.libc_usable, fn, __ATOMIC_RELEASE);
	}
	return fn(ptr);
}

EXPORT void *malloc(size_t n)
{
	void *a;

	if (wants_pool(n) && (a = pooled_alloc(n)))
		return a;
	return __libc_malloc(n);
}

EXPORT void free(void *ptr)
{
	if (!ptr || pooled_free(ptr))
		return;
	__libc_free(ptr);
}

EXPORT void *calloc(size_t nmemb, size_t size)
{
	size_t n;
	void *a;

	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	/* A new mapping reads as zero: no memset, no faults. */
	if (wants_pool(n) && (a = pooled_alloc(n)))
		return a;
	return __libc_calloc(nmemb, size);
}

EXPORT void *realloc(void *ptr, size_t n)
{
	size_t old;
	void *a;

	if (!ptr)
		return malloc(n);
	old = pooled_size(ptr);
	if (!old) {
		if (!wants_pool(n) || !(a = pooled_alloc(n)))
			return __libc_realloc(ptr, n);
		old = libc_usable(ptr);
		memcpy(a, ptr, old < n ? old : n);
		__libc_free(ptr);
		return a;
	}
	if (n == 0) {
		free(ptr);
		return NULL;
	}
	if (n < __atomic_load_n(&ctx.min_bytes, __ATOMIC_RELAXED)) {
		/* Below the threshold: back to libc, and the region (and
		 * its pool-uffd thread) goes. */
		a = __libc_malloc(n);
		if (!a)
			return NULL;
		memcpy(a, ptr, n);
		free(ptr);
		return a;
	}
	if (n <= old)
		return ptr; /* shrinking above the threshold keeps the region */
	a = malloc(n);
	if (!a)
		return NULL;
	memcpy(a, ptr, old);
	free(ptr);
	return a;
}

EXPORT void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t n;

	/* glibc's own reallocarray calls its internal realloc, which
	 * would not know a pooled pointer: it must be ours. */
	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(ptr, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
	void *a;

	/* Mappings are page-aligned; larger alignments stay with libc. */
	if (align <= PAGE && wants_pool(n) && (a = pooled_alloc(n)))
		return a;
	return __libc_memalign(align, n);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	void *a;

	if (!align || (align & (align - 1)) || align % sizeof(void *))
		return EINVAL;
	a = memalign(align, n);
	if (!a && n)
		return ENOMEM;
	*out = a;
	return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
	if (!align || (align & (align - 1))) {
		errno = EINVAL;
		return NULL;
	}
	return memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
	return memalign(PAGE, n);
}

EXPORT void *pvalloc(size_t n)
{
	size_t r = (n + PAGE - 1) & ~(size_t)(PAGE - 1);

	if (r < n) {
		errno = ENOMEM;
		return NULL;
	}
	return memalign(PAGE, r ? r : PAGE);
}

EXPORT size_t malloc_usable_size(void *ptr)
{
	size_t n;

	if (!ptr)
		return 0;
	n = pooled_size(ptr);
	/* Pooled: exactly what was asked for (bytes past it in the last
	 * page are not backed by the region). */
	return n ? n : libc_usable(ptr);
}
