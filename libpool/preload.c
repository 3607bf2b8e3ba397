// SPDX-License-Identifier: MIT
/*
 * libpool/preload.c - libpool-preload.so: LD_PRELOAD shim that puts an
 * unmodified program's memory into the pool.
 *
 * DESIGN
 * The shim exports the malloc family, C++ operator new and delete and, on
 * x86-64, dlopen (preload.map; why: below). Two allocators
 * (LIBPOOL_ALLOCATOR):
 *
 *   jemalloc (default). Every allocation of at least LIBPOOL_MIN_BYTES
 *   (default 0: all of them) is served by jemalloc from one arena of its
 *   own, whose extents come from one growable pooled range, the heap
 *   (pool_map_reserve(), libpool/paging.c): the arena's extent hook hands
 *   out the heap's address space in order, and appends a 64 MiB region
 *   (pool_alloc + pool_map_grow) whenever it reaches the end of what
 *   regions back. One paging engine (one pool-uffd thread) serves the
 *   whole heap, and LIBPOOL_LOCAL_BYTES bounds what of it is resident:
 *   the budget of the whole process. Small objects share pages; jemalloc's
 *   per-thread caches and size classes do what they do for any program.
 *   Why jemalloc and how: docs/paging.md, "Whole programs".
 *
 *   regions. The engine as it was before: an allocation of at least
 *   LIBPOOL_MIN_BYTES (default 1 MiB) becomes a region of its own behind
 *   pool_map(), with LIBPOOL_LOCAL_BYTES per allocation and one pool-uffd
 *   thread each. For measurements, and programs with a few large buffers.
 *
 * Everything else goes to glibc through its __libc_* entry points (no
 * dlsym, so no recursion).
 *
 * Process context (the one global, by design: an LD_PRELOAD library has
 * no handle to hang it on): the session, the heap and its arena
 * (jemalloc), or a table of pooled allocations (regions, mmap-backed: no
 * malloc here) and the address range they span, so free() of a libc
 * pointer costs one or two comparisons.
 *
 * Threads: any thread may call in. The session is connected lazily, at
 * the first allocation that would be pooled (no thread starts before the
 * program needs one). ctx.lock guards the table and the connect;
 * ctx.grow_lock the heap's growth (taken inside jemalloc's locks, never
 * around a jemalloc call). While a thread runs pool code for the shim
 * (connect, alloc, map, grow, unmap, free) its own allocations go to libc
 * (in_shim), so pool code never re-enters itself. Engine threads
 * (pool-uffd, and libpool's heartbeat, KV and GPU workers:
 * pool_thread_is_internal) always allocate from libc: pooled memory
 * there could fault while the thread holds a lock the fault path needs.
 *
 * Failure: a pool that cannot be reached at the first pooled allocation
 * gives one warning on stderr and plain libc from then on; with
 * LIBPOOL_REQUIRED=1 the process is aborted instead. An allocation the
 * pool cannot take later (quota, pool full) falls back to libc.
 *
 * fork: the table lock is taken around fork() (pthread_atfork). The child
 * has no session (its threads did not fork): its new allocations go to
 * libc. Of pooled memory it inherited, the pages resident at the fork are
 * its private copy; pages whose data only the pool held are PROT_NONE
 * there (paging_fork.c), so touching one is SIGSEGV, never wrong bytes.
 * free() in the child releases its copy of a region (regions) or leaves
 * the heap alone (jemalloc: the arena's state is the parent's).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <elf.h>
#include <link.h>   /* dl_iterate_phdr */
#include <malloc.h> /* memalign, pvalloc, malloc_usable_size */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h> /* getauxval(AT_BASE): ld.so */
#include <sys/mman.h>
#include <unistd.h>

#include "libpool/internal.h"
#include "libpool/log.h"
#include "libpool/paging.h"
#include "libpool/thread_role.h"
#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define EXPORT __attribute__((visibility("default")))
#define TP_STR_(x) #x
#define TP_STR(x) TP_STR_(x)
#define PAGE 4096u
#define DEFAULT_MIN_BYTES (1u << 20)	 /* regions */
#define TABLE_MAX 65536u		 /* regions alive at once */
#define SEG_BYTES (64ul << 20)		 /* heap growth: one region each */
#define DEFAULT_HEAP_BYTES (256ul << 30) /* heap address space */
#define MIN_HEAP_BYTES (1ul << 30)

/*
 * jemalloc 5 (libjemalloc.so.2, unprefixed: Debian's libjemalloc2). Its
 * header declares malloc() and friends, which this file defines, so the
 * few entry points and the extent-hook ABI used here are declared here.
 */
struct extent_hooks_s;
typedef struct extent_hooks_s extent_hooks_t;
struct extent_hooks_s {
	void *(*alloc)(extent_hooks_t *, void *, size_t, size_t, bool *, bool *,
		       unsigned);
	bool (*dalloc)(extent_hooks_t *, void *, size_t, bool, unsigned);
	void (*destroy)(extent_hooks_t *, void *, size_t, bool, unsigned);
	bool (*commit)(extent_hooks_t *, void *, size_t, size_t, size_t,
		       unsigned);
	bool (*decommit)(extent_hooks_t *, void *, size_t, size_t, size_t,
			 unsigned);
	bool (*purge_lazy)(extent_hooks_t *, void *, size_t, size_t, size_t,
			   unsigned);
	bool (*purge_forced)(extent_hooks_t *, void *, size_t, size_t, size_t,
			     unsigned);
	bool (*split)(extent_hooks_t *, void *, size_t, size_t, size_t, bool,
		      unsigned);
	bool (*merge)(extent_hooks_t *, void *, size_t, void *, size_t, bool,
		      unsigned);
};
extern void *mallocx(size_t size, int flags);
extern void *rallocx(void *ptr, size_t size, int flags);
extern size_t sallocx(const void *ptr, int flags);
extern void dallocx(void *ptr, int flags);
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
		   size_t newlen);
#define MALLOCX_ZERO 0x40
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)
#define MALLOCX_LG_ALIGN(la) ((int)(la))

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
enum ctx_mode { MODE_UNSET, MODE_HEAP, MODE_REGIONS };

static struct {
	pthread_mutex_t lock;
	enum ctx_state state;
	enum ctx_mode mode; /* set once, before the first pooled allocation */
	struct pool *p;
	size_t min_bytes;
	/* regions */
	struct pooled *table; /* TABLE_MAX entries, mmap */
	size_t used;	      /* high-water slot + 1 */
	uintptr_t lo, hi;     /* every pooled allocation is inside */
	/* jemalloc: the heap [heap, heap + heap_bytes), regions appended up
	 * to heap_end, handed out up to heap_next (grow_lock) */
	pthread_mutex_t grow_lock;
	uintptr_t heap;
	size_t heap_bytes;
	uintptr_t heap_next, heap_end;
	size_t nsegs;
	int aflags; /* MALLOCX_ARENA(the arena) */
	size_t (*libc_usable)(void *);
	int stats_fd; /* print_stats(): fd + 1, -1 none, 0 not opened yet */
	bool atfork;
	bool forked; /* a fork() child: p is the parent's session */
} ctx = { .lock = PTHREAD_MUTEX_INITIALIZER,
	  .grow_lock = PTHREAD_MUTEX_INITIALIZER };

/* The shim's mark in the process (preload.map exports it): a libpool
 * loaded beside the shim (an inference engine's, with its own copy of
 * the library) finds it with dlsym() and keeps KV gets off mappings,
 * whose pages would count in the RSS the shim bounds (docs/kv.md,
 * "Gets through a mapping"). */
__attribute__((visibility("default"), used)) const char tidepool_preload[] =
	"libpool-preload";

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
	 * (paging_fork.c fenced the pages the child cannot have). */
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

/* dl_iterate_phdr callback: 1 once an object named libpython* is
 * loaded (a program that embeds CPython). */
static int libpython_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *base =
		info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	(void)arg;
	base = base ? base + 1 : info->dlpi_name;
	return base && !strncmp(base, "libpython", 9);
}

/*
 * CPython keeps its small objects in arenas pymalloc maps itself with
 * mmap(2), which the shim does not see: under the shim most of a Python
 * program's memory would stay local, outside LIBPOOL_LOCAL_BYTES. When
 * the process is CPython (the executable is python*, or libpython is
 * loaded), the heap takes every allocation (jemalloc, LIBPOOL_MIN_BYTES
 * 0) and PYTHONMALLOC is not set, it is set to "malloc" here, before
 * the interpreter reads it, so those objects go through malloc into the
 * pooled heap. LIBPOOL_PYTHON_MALLOC=0 keeps pymalloc; a PYTHONMALLOC of
 * the user's own is left as it is. Child processes inherit the variable
 * with the rest of the environment (and LD_PRELOAD).
 */
__attribute__((constructor)) static void python_malloc_default(void)
{
	const char *opt = getenv("LIBPOOL_PYTHON_MALLOC");
	const char *alloc = getenv("LIBPOOL_ALLOCATOR");
	char exe[4096];
	const char *base;
	ssize_t n;
	bool python;

	if ((opt && !strcmp(opt, "0")) || getenv("PYTHONMALLOC") ||
	    (alloc && *alloc && strcmp(alloc, "jemalloc")) ||
	    env_size("LIBPOOL_MIN_BYTES", 0) != 0)
		return;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	python = !strncmp(base, "python", 6) ||
		 dl_iterate_phdr(libpython_loaded, NULL) == 1;
	if (!python)
		return;
	in_shim++; /* setenv's copy comes from libc: no session yet */
	if (setenv("PYTHONMALLOC", "malloc", 0))
		say("cannot set PYTHONMALLOC=malloc: CPython's small objects "
		    "stay local");
	in_shim--;
}

static int heap_start_locked(void);

/*
 * exit(): the session's fabric may be coming up in a heartbeat thread
 * (libpool/internal.h), inside libfabric's dlopen() or fi_getinfo(). The
 * destructors that run after this (atexit runs it before them) unload
 * libfabric: wait for that thread first, and stop a set-up that only
 * pool_fabric_prepare() asked for once libfabric is loaded (nobody
 * needs it now; the load itself cannot be cut short). Not in a fork()
 * child, whose copy of the session has no threads.
 */
static void ctx_exit_settle(void)
{
	if (__atomic_load_n(&ctx.state, __ATOMIC_ACQUIRE) == CTX_ON &&
	    !ctx.forked)
		pool_fabric_exit(ctx.p);
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
		/* The fabric comes up while the program runs: see
		 * libpool/internal.h and docs/paging.md, "Start-up". */
		const char *bg = getenv("LIBPOOL_FABRIC_BACKGROUND");

		pool_set_fabric_background(!bg || strcmp(bg, "0"));
		ret = pool_connect(NULL, &ctx.p);
	}
	if (!ctx.atfork) {
		pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		ctx.atfork = true;
	}
	/* regions: each allocation has LIBPOOL_LOCAL_BYTES of its own, as
	 * before there was one budget for the process */
	if (ret == 0 && ctx.mode == MODE_REGIONS)
		pool_paging_set_process_budget(SIZE_MAX);
	if (ret == 0 && ctx.mode == MODE_HEAP) {
		ret = heap_start_locked();
		if (ret) {
			say("cannot set up the pooled heap: allocations use "
			    "libc (LIBPOOL_LOG=info says more)");
			return;
		}
	}
	if (ret == 0) {
		__atomic_store_n(&ctx.lo, UINTPTR_MAX, __ATOMIC_RELAXED);
		__atomic_store_n(&ctx.state, CTX_ON, __ATOMIC_RELEASE);
		atexit(ctx_exit_settle);
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
	say("pool unreachable: allocations use libc "
	    "(LIBPOOL_ADDR, memd running? LIBPOOL_LOG=info says more)");
}

/* ------------------------------------------------------------------ */
/* the heap: jemalloc's arena on one growable pooled range               */

/*
 * jemalloc's extent hook: size bytes of the heap at alignment, the next
 * ones in address order (new_addr: only where the heap goes on anyway).
 * Regions are appended until they back the extent. Never touched
 * before, so zero and committed. NULL when the heap or the pool is full:
 * jemalloc then fails the allocation and the shim uses libc.
 */
static void *heap_extent_alloc(extent_hooks_t *h, void *new_addr, size_t size,
			       size_t align, bool *zero, bool *commit,
			       unsigned ind)
{
	struct pool_region *r;
	uintptr_t a, end = ctx.heap + ctx.heap_bytes;
	void *ret = NULL;

	(void)h;
	(void)ind;
	if (align < PAGE)
		align = PAGE;
	in_shim++;
	pthread_mutex_lock(&ctx.grow_lock);
	a = (ctx.heap_next + align - 1) & ~(uintptr_t)(align - 1);
	if ((new_addr && (uintptr_t)new_addr != a) || a < ctx.heap_next ||
	    size > end - a)
		goto out;
	while (a + size > ctx.heap_end) {
		if (pool_alloc(ctx.p, SEG_BYTES, &r))
			goto out;
		if (pool_map_grow((void *)ctx.heap, r)) {
			pool_free(ctx.p, r);
			goto out;
		}
		ctx.heap_end += SEG_BYTES;
		ctx.nsegs++;
	}
	__atomic_store_n(&ctx.heap_next, a + size, __ATOMIC_RELEASE);
	*zero = true;
	*commit = true;
	ret = (void *)a;
out:
	pthread_mutex_unlock(&ctx.grow_lock);
	in_shim--;
	return ret;
}

/* Extents stay in the heap: jemalloc keeps what it frees (retain) and
 * reuses it; nothing is decommitted. true: "not done". */
static bool heap_extent_dalloc(extent_hooks_t *h, void *addr, size_t size,
			       bool committed, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)committed, (void)ind;
	return true;
}

static bool heap_extent_commit(extent_hooks_t *h, void *addr, size_t size,
			       size_t off, size_t len, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)off, (void)len, (void)ind;
	return false; /* always committed */
}

static bool heap_extent_decommit(extent_hooks_t *h, void *addr, size_t size,
				 size_t off, size_t len, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)off, (void)len, (void)ind;
	return true;
}

/* Purged pages read as zero and are never written back: the engine drops
 * them (pool_map_discard()). false: done. */
static bool heap_extent_purge(extent_hooks_t *h, void *addr, size_t size,
			      size_t off, size_t len, unsigned ind)
{
	(void)h, (void)size, (void)ind;
	return pool_map_discard((void *)ctx.heap, (uint8_t *)addr + off, len) !=
	       0;
}

/* Any two extents of the heap may be split or merged: it is one range. */
static bool heap_extent_split(extent_hooks_t *h, void *addr, size_t size,
			      size_t a, size_t b, bool committed, unsigned ind)
{
	(void)h, (void)addr, (void)size, (void)a, (void)b, (void)committed;
	(void)ind;
	return false;
}

static bool heap_extent_merge(extent_hooks_t *h, void *a, size_t sa, void *b,
			      size_t sb, bool committed, unsigned ind)
{
	(void)h, (void)a, (void)sa, (void)b, (void)sb, (void)committed;
	(void)ind;
	return false;
}

static extent_hooks_t heap_hooks = {
	.alloc = heap_extent_alloc,
	.dalloc = heap_extent_dalloc,
	.commit = heap_extent_commit,
	.decommit = heap_extent_decommit,
	.purge_forced = heap_extent_purge,
	.split = heap_extent_split,
	.merge = heap_extent_merge,
	/* destroy: arenas are never destroyed; purge_lazy: none (a page
	 * is dropped or kept, muzzy_decay_ms is 0) */
};

/*
 * Reserves the heap (LIBPOOL_HEAP_BYTES of address space, default 256 GiB,
 * halved while the kernel refuses it) and creates the arena whose extents
 * come from it. ctx.lock held, in_shim set. Returns 0 or -errno.
 */
static int heap_start_locked(void)
{
	extent_hooks_t *hp = &heap_hooks;
	size_t bytes = env_size("LIBPOOL_HEAP_BYTES", DEFAULT_HEAP_BYTES);
	size_t lim = SEG_BYTES, sz = sizeof(unsigned);
	ssize_t zero_ms = 0;
	unsigned ind;
	char name[64];
	void *a = NULL;
	int ret;

	if (bytes < MIN_HEAP_BYTES)
		bytes = MIN_HEAP_BYTES;
	for (;;) {
		ret = pool_map_reserve(ctx.p, bytes, SEG_BYTES, 0, &a);
		if (ret != -ENOMEM || bytes / 2 < MIN_HEAP_BYTES)
			break;
		bytes /= 2;
	}
	if (ret)
		return ret;
	ctx.heap_next = ctx.heap_end = (uintptr_t)a;
	ctx.heap_bytes = bytes;
	__atomic_store_n(&ctx.heap, (uintptr_t)a, __ATOMIC_RELEASE);
	/*
	 * The arena is created with jemalloc's own hooks and given ours
	 * after: its first metadata block (the arena and base structs,
	 * which jemalloc's fork handlers lock and reset in the child) is
	 * then ordinary memory, never a page that a fork child finds fenced.
	 * Later metadata (extent records) comes from the heap.
	 */
	if (mallctl("arenas.create", &ind, &sz, NULL, 0))
		return -ENOMEM;
	snprintf(name, sizeof(name), "arena.%u.extent_hooks", ind);
	if (mallctl(name, NULL, NULL, &hp, sizeof(hp)))
		return -ENOMEM; /* no allocation can come from it: libc */
	/* Retained growth in steps of at most one region, so that the
	 * regions appended follow what the program uses. */
	snprintf(name, sizeof(name), "arena.%u.retain_grow_limit", ind);
	mallctl(name, NULL, NULL, &lim, sizeof(lim));
	/* Freed pages go straight from dirty to purged: no lazy purge. */
	snprintf(name, sizeof(name), "arena.%u.muzzy_decay_ms", ind);
	mallctl(name, NULL, NULL, &zero_ms, sizeof(zero_ms));
	ctx.aflags = MALLOCX_ARENA(ind);
	return 0;
}

/* Whether ptr is in the heap (jemalloc's). */
static bool in_heap(const void *ptr)
{
	uintptr_t h = __atomic_load_n(&ctx.heap, __ATOMIC_ACQUIRE);

	return h && (uintptr_t)ptr - h < ctx.heap_bytes;
}

/* n bytes from the heap (flags: MALLOCX_ZERO, an alignment), or NULL
 * (then the caller uses libc). Connects on first use. */
static void *heap_alloc(size_t n, int flags)
{
	if (__atomic_load_n(&ctx.state, __ATOMIC_ACQUIRE) == CTX_NEW) {
		in_shim++;
		pthread_mutex_lock(&ctx.lock);
		if (ctx.state == CTX_NEW)
			ctx_start_locked();
		pthread_mutex_unlock(&ctx.lock);
		in_shim--;
	}
	if (__atomic_load_n(&ctx.state, __ATOMIC_ACQUIRE) != CTX_ON)
		return NULL;
	return mallocx(n ? n : 1, ctx.aflags | flags);
}

/* ------------------------------------------------------------------ */
/* regions: one per allocation                                          */

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

/*
 * LIBPOOL_PRELOAD_STATS: "1" (stderr) or an absolute path (appended to)
 * for print_stats(). stderr is duplicated now: programs close it before
 * the destructors run (coreutils' close_stdout does).
 */
static void stats_open(void)
{
	const char *env = getenv("LIBPOOL_PRELOAD_STATS");
	int fd = -1;

	if (!env || ctx.stats_fd)
		return;
	if (!strcmp(env, "1"))
		fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 64);
	else if (env[0] == '/')
		fd = open(env, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	else
		say("LIBPOOL_PRELOAD_STATS is neither 1 nor an absolute path: "
		    "no statistics");
	ctx.stats_fd = fd >= 0 ? fd + 1 : -1;
}

/* LIBPOOL_ALLOCATOR and LIBPOOL_MIN_BYTES, read once (getenv allocates
 * nothing: safe here). Two threads may both read them: same result. */
static enum ctx_mode ctx_config(void)
{
	const char *a = getenv("LIBPOOL_ALLOCATOR");
	enum ctx_mode mode = MODE_HEAP;
	size_t min;

	if (a && !strcmp(a, "regions"))
		mode = MODE_REGIONS;
	else if (a && *a && strcmp(a, "jemalloc"))
		say("LIBPOOL_ALLOCATOR is neither jemalloc nor regions: "
		    "using jemalloc");
	min = env_size("LIBPOOL_MIN_BYTES",
		       mode == MODE_REGIONS ? DEFAULT_MIN_BYTES : 0);
	if (mode == MODE_REGIONS && min < PAGE)
		min = PAGE;
	stats_open();
	__atomic_store_n(&ctx.min_bytes, min, __ATOMIC_RELAXED);
	__atomic_store_n(&ctx.mode, mode, __ATOMIC_RELEASE);
	return mode;
}

/* The allocator for n bytes in this thread: MODE_HEAP, MODE_REGIONS, or
 * MODE_UNSET for libc. */
static enum ctx_mode pool_mode(size_t n)
{
	enum ctx_mode mode;

	if (in_shim || pool_thread_is_internal())
		return MODE_UNSET;
	mode = __atomic_load_n(&ctx.mode, __ATOMIC_ACQUIRE);
	if (mode == MODE_UNSET)
		mode = ctx_config();
	if (n < __atomic_load_n(&ctx.min_bytes, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&ctx.state, __ATOMIC_RELAXED) == CTX_OFF)
		return MODE_UNSET;
	return mode;
}

/* glibc's malloc_usable_size (ours shadows it), found once in libc.so.6
 * itself: "the next" one (RTLD_NEXT) is jemalloc's in a program linked
 * with libjemalloc.so.2 (redis), and jemalloc reading a glibc pointer
 * crashed it. */
static size_t libc_usable(void *ptr)
{
	size_t (*fn)(void *) =
		__atomic_load_n(&ctx.libc_usable, __ATOMIC_ACQUIRE);

	if (!fn) {
		void *libc;

		in_shim++;
		libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
		fn = libc ? (size_t(*)(void *))dlsym(libc, "malloc_usable_size")
			  : NULL;
		if (libc)
			dlclose(libc);
		in_shim--;
		if (!fn)
			say("cannot find glibc's malloc_usable_size: "
			    "malloc_usable_size() of glibc's blocks is 0");
		if (!fn)
			return 0;
		__atomic_store_n(&ctx.libc_usable, fn, __ATOMIC_RELEASE);
	}
	return fn(ptr);
}

/*
 * The dynamic linker's own allocations (link maps, scope lists, the DTV
 * and blocks of dynamic TLS of every library dlopen()ed after start-up:
 * ld.so calls the program's malloc once relocated) stay in libc. In the
 * heap they could be evicted, and pool-uffd itself reads them: a lazy
 * PLT binding, a dlsym() or a dynamic TLS access in the engine walks the
 * link maps, faults on a page only pool-uffd can bring back, and the
 * process hangs (a library dlopen()ed RTLD_GLOBAL puts its map in every
 * lookup's path: torch does). ld.so's text is [ldso_lo, ldso_hi): the
 * PT_LOAD segments of the object at AT_BASE, read without allocating.
 */
static uintptr_t ldso_lo, ldso_hi;

static void ldso_find(void)
{
	uintptr_t base = (uintptr_t)getauxval(AT_BASE), hi = 0;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
	const ElfW(Phdr) * ph;

	if (!base || memcmp(eh->e_ident, ELFMAG, SELFMAG)) {
		__atomic_store_n(&ldso_hi, 1, __ATOMIC_RELEASE); /* none */
		return;
	}
	ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD &&
		    ph[i].p_vaddr + ph[i].p_memsz > hi)
			hi = ph[i].p_vaddr + ph[i].p_memsz;
	__atomic_store_n(&ldso_lo, base, __ATOMIC_RELAXED);
	__atomic_store_n(&ldso_hi, hi ? base + hi : 1, __ATOMIC_RELEASE);
}

/* Whether return address ra is in ld.so. */
static bool from_ldso(const void *ra)
{
	if (!__atomic_load_n(&ldso_hi, __ATOMIC_ACQUIRE))
		ldso_find();
	return (uintptr_t)ra - ldso_lo < ldso_hi - ldso_lo;
}

/* n bytes pooled (flags: MALLOCX_ZERO, an alignment: heap only), or NULL
 * when they go to libc. */
static void *pool_alloc_any(size_t n, int flags)
{
	switch (pool_mode(n)) {
	case MODE_HEAP:
		return heap_alloc(n, flags);
	case MODE_REGIONS:
		return pooled_alloc(n); /* zero and page-aligned */
	default:
		return NULL;
	}
}

EXPORT void *malloc(size_t n)
{
	void *a;

	if (from_ldso(__builtin_return_address(0)))
		return __libc_malloc(n);
	a = pool_alloc_any(n, 0);

	return a ? a : __libc_malloc(n);
}

/*
 * A pointer no allocator of this process can have handed out, given to
 * fn: one line naming it and the call, then abort(), rather than let
 * jemalloc or glibc work on it (heap corruption). Caught: a heap address
 * the heap never handed out (at or past its high-water mark) or not
 * 8-aligned (jemalloc's least alignment), and a glibc pointer not
 * 16-aligned (glibc's). glibc checks its own pointers further.
 */
__attribute__((noreturn)) static void bad_pointer(const char *fn,
						  const void *ptr)
{
	char line[160];

	snprintf(line, sizeof(line),
		 "%s(%p): not a pointer this process's allocators handed "
		 "out (heap %#lx-%#lx); aborting",
		 fn, ptr, (unsigned long)ctx.heap,
		 (unsigned long)__atomic_load_n(&ctx.heap_next,
						__ATOMIC_RELAXED));
	say(line);
	signal(SIGABRT, SIG_DFL);
	abort();
}

/* ptr is in the heap: whether it can be a block of it (else fn aborts). */
static void heap_check(const char *fn, const void *ptr)
{
	if (((uintptr_t)ptr & 7) ||
	    (uintptr_t)ptr >= __atomic_load_n(&ctx.heap_next, __ATOMIC_RELAXED))
		bad_pointer(fn, ptr);
}

EXPORT void free(void *ptr)
{
	if (!ptr)
		return;
	if (in_heap(ptr)) {
		heap_check("free", ptr);
		/* A fork child leaves the heap alone: its arena state is a
		 * copy of the parent's, and the pages may be fenced. */
		if (!ctx.forked)
			dallocx(ptr, 0);
		return;
	}
	if (pooled_free(ptr))
		return;
	if ((uintptr_t)ptr & 15)
		bad_pointer("free", ptr);
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
	if (from_ldso(__builtin_return_address(0)))
		return __libc_calloc(nmemb, size);
	/* Fresh heap extents and new regions read as zero: jemalloc
	 * knows which of its pages are, so no needless memset or fault. */
	a = pool_alloc_any(n, MALLOCX_ZERO);
	return a ? a : __libc_calloc(nmemb, size);
}

/* realloc() of a heap pointer. */
static void *heap_realloc(void *ptr, size_t n)
{
	size_t old;
	void *a;

	if (n == 0) {
		free(ptr);
		return NULL;
	}
	if (ctx.forked || pool_mode(n) != MODE_HEAP) {
		/* To libc: a fork child (its heap is the parent's), a size
		 * under LIBPOOL_MIN_BYTES, or an engine thread. */
		old = sallocx(ptr, 0);
		a = __libc_malloc(n);
		if (!a)
			return NULL;
		memcpy(a, ptr, old < n ? old : n);
		free(ptr);
		return a;
	}
	/* In place when jemalloc can (a large extent grows into the free
	 * pages after it), else moved within the heap. */
	a = rallocx(ptr, n, ctx.aflags);
	if (!a)
		errno = ENOMEM;
	return a;
}

EXPORT void *realloc(void *ptr, size_t n)
{
	size_t old;
	void *a;

	if (!in_heap(ptr) && from_ldso(__builtin_return_address(0)))
		return __libc_realloc(ptr, n); /* ld.so's: libc's (NULL too) */
	if (!ptr)
		return malloc(n);
	if (in_heap(ptr)) {
		heap_check("realloc", ptr);
		return heap_realloc(ptr, n);
	}
	old = pooled_size(ptr);
	if (!old) {
		if (n == 0 || !(a = pool_alloc_any(n, 0)))
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
	enum ctx_mode mode;
	void *a = NULL;

	/* Any power of two in the heap; regions are page-aligned, larger
	 * alignments stay with libc; glibc rounds other values up. */
	if (align && !(align & (align - 1))) {
		mode = pool_mode(n);
		if (mode == MODE_HEAP)
			a = heap_alloc(n,
				       MALLOCX_LG_ALIGN(__builtin_ctzl(align)));
		else if (mode == MODE_REGIONS && align <= PAGE)
			a = pooled_alloc(n);
	}
	return a ? a : __libc_memalign(align, n);
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
	if (in_heap(ptr)) {
		heap_check("malloc_usable_size", ptr);
		return sallocx(ptr, 0);
	}
	n = pooled_size(ptr);
	/* Pooled: exactly what was asked for (bytes past it in the last
	 * page are not backed by the region). */
	return n ? n : libc_usable(ptr);
}

/* ------------------------------------------------------------------ */
/* dlopen(RTLD_DEEPBIND)                                                */

/*
 * A library opened with RTLD_DEEPBIND looks its symbols up in itself and
 * its own dependencies first: its malloc and free are glibc's, not the
 * shim's, and a pointer that crosses between it and the rest of the
 * program (one frees what the other allocated) meets the wrong
 * allocator: heap corruption or glibc's abort. Under the shim dlopen()
 * opens such a library without RTLD_DEEPBIND (its symbols then resolve
 * as for any library: the program's, the shim's, then its own), and
 * says so once at LIBPOOL_LOG=info. The stub jumps to glibc's dlopen,
 * not calls it: glibc finds the caller from the return address (the
 * caller's RUNPATH, its namespace), which a call would make the shim's.
 * x86-64 only; elsewhere dlopen is glibc's and RTLD_DEEPBIND libraries
 * are not supported under the shim (libpool-preload(8)).
 */
#if defined(__x86_64__)
void *tp_dlopen_real;
void *tp_dlopen_prepare(int mode);

void *tp_dlopen_prepare(int mode)
{
	static bool said;
	void *real = __atomic_load_n(&tp_dlopen_real, __ATOMIC_ACQUIRE);

	if (!real) {
		real = dlsym(RTLD_NEXT, "dlopen");
		if (!real) {
			say("cannot find glibc's dlopen: aborting");
			abort();
		}
		__atomic_store_n(&tp_dlopen_real, real, __ATOMIC_RELEASE);
	}
	if ((mode & RTLD_DEEPBIND) &&
	    !__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		pool_log(LOG_INFO, "preload: dlopen(RTLD_DEEPBIND) opens "
				   "without deep binding (malloc and free "
				   "stay the shim's)");
	return real;
}

/* void *dlopen(const char *file, int mode): mode in esi */
__asm__(".text\n"
	".globl dlopen\n"
	".type dlopen, @function\n"
	"dlopen:\n"
	".cfi_startproc\n"
	"	testl $" TP_STR(
		RTLD_DEEPBIND) ", %esi\n"
			       "	jnz 1f\n"
			       "	movq tp_dlopen_real(%rip), %rax\n"
			       "	testq %rax, %rax\n"
			       "	jz 1f\n"
			       "	jmpq *%rax\n"
			       "1:	pushq %rdi\n"
			       ".cfi_adjust_cfa_offset 8\n"
			       "	pushq %rsi\n"
			       ".cfi_adjust_cfa_offset 8\n"
			       "	subq $8, %rsp\n"
			       ".cfi_adjust_cfa_offset 8\n"
			       "	movl %esi, %edi\n"
			       "	call tp_dlopen_prepare\n"
			       "	addq $8, %rsp\n"
			       ".cfi_adjust_cfa_offset -8\n"
			       "	popq %rsi\n"
			       ".cfi_adjust_cfa_offset -8\n"
			       "	popq %rdi\n"
			       ".cfi_adjust_cfa_offset -8\n"
			       "	andl $~" TP_STR(
				       RTLD_DEEPBIND) ", %esi\n"
						      "	jmpq *%rax\n"
						      ".cfi_endproc\n"
						      ".size dlopen, "
						      ".-dlopen\n");
#endif

/* ------------------------------------------------------------------ */
/* C++ operator new and delete                                          */

/*
 * libjemalloc.so.2 (the shim's dependency) defines operator new and
 * delete itself, allocating from its own default arena. A program that
 * does not link libstdc++ (python3: its C++ extensions come in by
 * dlopen) finds jemalloc's before libstdc++'s in the global scope: its
 * new would bypass the heap (outside the budget), and jemalloc's delete
 * hands the pointer to free() through the PLT, the shim's, which takes
 * it for glibc's: "free(): invalid pointer" (torch's import, issue 28).
 * The shim defines every variant, so the first definition any program
 * finds is this one, on the shim's malloc family.
 *
 * Failure follows the standard: the new-handler, if any, is called and
 * the allocation tried again; without one, std::bad_alloc is thrown
 * (libstdc++'s own thrower, found with dlsym: the shim does not link
 * libstdc++). The nothrow variants return NULL instead and do not call
 * the handler (it may throw, and they must not).
 */
/* Mangled names: no header declares them in C. */
void *_Znwm(size_t n);
void *_Znam(size_t n);
void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt);
void *_ZnamRKSt9nothrow_t(size_t n, const void *nt);
void *_ZnwmSt11align_val_t(size_t n, size_t align);
void *_ZnamSt11align_val_t(size_t n, size_t align);
void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t align,
					 const void *nt);
void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t align,
					 const void *nt);
void _ZdlPv(void *p);
void _ZdaPv(void *p);
void _ZdlPvm(void *p, size_t n);
void _ZdaPvm(void *p, size_t n);
void _ZdlPvRKSt9nothrow_t(void *p, const void *nt);
void _ZdaPvRKSt9nothrow_t(void *p, const void *nt);
void _ZdlPvSt11align_val_t(void *p, size_t align);
void _ZdaPvSt11align_val_t(void *p, size_t align);
void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t align);
void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t align);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt);
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt);

typedef void (*new_handler_fn)(void);

static void *cxx_new(size_t n, size_t align, bool nothrow)
{
	for (;;) {
		new_handler_fn (*get)(void);
		new_handler_fn h;
		void (*thrower)(void);
		void *a = align ? memalign(align, n) : malloc(n);

		if (a)
			return a;
		if (nothrow)
			return NULL;
		get = (new_handler_fn(*)(void))dlsym(RTLD_DEFAULT,
						     "_ZSt15get_new_handlerv");
		h = get ? get() : NULL;
		if (h) {
			h();
			continue;
		}
		thrower = (void (*)(void))dlsym(RTLD_DEFAULT,
						"_ZSt17__throw_bad_allocv");
		if (thrower)
			thrower();
		say("operator new: out of memory and no std::bad_alloc to "
		    "throw: aborting");
		abort();
	}
}

/* operator new(size_t), new[](size_t), and their nothrow and aligned
 * (std::align_val_t, C++17) variants */
EXPORT void *_Znwm(size_t n)
{
	return cxx_new(n, 0, false);
}

EXPORT void *_Znam(size_t n)
{
	return cxx_new(n, 0, false);
}

EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt)
{
	(void)nt;
	return cxx_new(n, 0, true);
}

EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *nt)
{
	(void)nt;
	return cxx_new(n, 0, true);
}

EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t align)
{
	return cxx_new(n, align, false);
}

EXPORT void *_ZnamSt11align_val_t(size_t n, size_t align)
{
	return cxx_new(n, align, false);
}

EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t align,
						const void *nt)
{
	(void)nt;
	return cxx_new(n, align, true);
}

EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t align,
						const void *nt)
{
	(void)nt;
	return cxx_new(n, align, true);
}

/* operator delete and delete[]: plain, sized, nothrow, aligned */
EXPORT void _ZdlPv(void *p)
{
	free(p);
}

EXPORT void _ZdaPv(void *p)
{
	free(p);
}

EXPORT void _ZdlPvm(void *p, size_t n)
{
	(void)n;
	free(p);
}

EXPORT void _ZdaPvm(void *p, size_t n)
{
	(void)n;
	free(p);
}

EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt)
{
	(void)nt;
	free(p);
}

EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt)
{
	(void)nt;
	free(p);
}

EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align)
{
	(void)align;
	free(p);
}

EXPORT void _ZdaPvSt11align_val_t(void *p, size_t align)
{
	(void)align;
	free(p);
}

EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t align)
{
	(void)n, (void)align;
	free(p);
}

EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t align)
{
	(void)n, (void)align;
	free(p);
}

EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align,
						const void *nt)
{
	(void)align, (void)nt;
	free(p);
}

EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align,
						const void *nt)
{
	(void)align, (void)nt;
	free(p);
}

/*
 * LIBPOOL_PRELOAD_STATS (stats_open()): one line at exit with what was
 * pooled and how the heap's paging went (jemalloc; regions: the number
 * of regions alive), and whether the session's fabric was ever set up
 * (fabric=1; 0: never needed, libfabric never loaded). snprintf of
 * numbers allocates nothing.
 */
/* The process's file-backed and shared resident bytes now (RssFile +
 * RssShmem of /proc/self/status): its code and mapped files, which no
 * budget covers (tests/programs/run.sh adds them to its bound). Read
 * without stdio or malloc. */
static unsigned long long rss_file_bytes(void)
{
	static const char *const keys[] = { "RssFile:", "RssShmem:" };
	unsigned long long kb[2];

	if (pool_proc_status_fields("/proc/self/status", keys, 2, 10, kb))
		return 0;
	return (kb[0] + kb[1]) << 10;
}

__attribute__((destructor)) static void print_stats(void)
{
	struct pool_map_stats st = { 0 };
	struct pool_paging_engine_stats es;
	char line[1536]; /* 28 numbers of up to 20 digits, and names */
	int n, fabric;

	if (ctx.stats_fd <= 0 || ctx.forked)
		return;
	fabric = ctx.p && !pool_fabric_is_pending(ctx.p);
	pool_paging_get_engine_stats(&es);
	if (in_heap((void *)ctx.heap) &&
	    pool_map_get_stats((void *)ctx.heap, &st) == 0) {
		n = snprintf(
			line, sizeof(line),
			"libpool-preload: stats allocator=jemalloc "
			"pooled_bytes=%zu heap_bytes=%zu budget_bytes=%llu "
			"resident_bytes=%llu resident_peak_bytes=%llu "
			"faults=%llu wp_faults=%llu zero_fills=%llu "
			"fetches=%llu pages_fetched=%llu evictions=%llu "
			"writebacks=%llu second_chances=%llu refaults=%llu "
			"behind_evictions=%llu clock_fifo_windows=%llu "
			"ahead_pages=%llu "
			"discarded=%llu sigbus=%llu fabric=%d "
			"spin_cap_us=%llu waits=%llu spin_hits=%llu "
			"spin_misses=%llu spin_us=%llu rss_file_bytes=%llu\n",
			ctx.nsegs * SEG_BYTES,
			(size_t)(ctx.heap_next - ctx.heap),
			(unsigned long long)(st.max_resident * st.page_bytes),
			(unsigned long long)(st.resident * st.page_bytes),
			(unsigned long long)(st.resident_peak * st.page_bytes),
			(unsigned long long)st.faults,
			(unsigned long long)st.wp_faults,
			(unsigned long long)st.zero_fills,
			(unsigned long long)st.fetches,
			(unsigned long long)st.pages_fetched,
			(unsigned long long)st.evictions,
			(unsigned long long)st.writebacks,
			(unsigned long long)st.second_chances,
			(unsigned long long)st.refaults,
			(unsigned long long)st.behind_evictions,
			(unsigned long long)st.clock_fifo_windows,
			(unsigned long long)st.ahead_pages,
			(unsigned long long)st.discarded,
			(unsigned long long)st.sigbus, fabric,
			(unsigned long long)(es.spin_cap_ns / 1000),
			(unsigned long long)es.waits,
			(unsigned long long)es.spin_hits,
			(unsigned long long)es.spin_misses,
			(unsigned long long)(es.spin_ns / 1000),
			rss_file_bytes());
	} else {
		size_t live = 0, bytes = 0;

		for (size_t i = 0; ctx.table && i < ctx.used; i++) {
			if (ctx.table[i].addr) {
				live++;
				bytes += ctx.table[i].bytes;
			}
		}
		n = snprintf(line, sizeof(line),
			     "libpool-preload: stats allocator=%s "
			     "pooled_bytes=%zu regions=%zu fabric=%d "
			     "rss_file_bytes=%llu\n",
			     ctx.mode == MODE_REGIONS ? "regions" : "none",
			     bytes, live, fabric, rss_file_bytes());
	}
	if (n >= (int)sizeof(line)) /* never: but never past the buffer */
		n = (int)sizeof(line) - 1;
	if (n > 0 && write(ctx.stats_fd - 1, line, (size_t)n) < 0)
		return;
	/* Where pool-uffd's time went: STEP_us=total STEP_n=times. */
	n = snprintf(line, sizeof(line), "libpool-preload: phases");
	for (unsigned i = 0; i < POOL_PHASE_N && n > 0 && n < (int)sizeof(line);
	     i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n,
			      " %s_us=%llu %s_n=%llu",
			      pool_paging_phase_name(i),
			      (unsigned long long)(es.phase_ns[i] / 1000),
			      pool_paging_phase_name(i),
			      (unsigned long long)es.phase_n[i]);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	if (n > 0) {
		line[n++] = '\n';
		if (write(ctx.stats_fd - 1, line, (size_t)n) < 0)
			return;
	}
}
