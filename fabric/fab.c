// SPDX-License-Identifier: MIT
/*
 * fabric/fab.c - the libfabric data plane: one RDM provider, its endpoints,
 * memory registrations and one-sided RMA, behind fabric/fab.h.
 *
 * Owns: the fi_info/fabric/domain of a fab_domain; the endpoint, address
 * vector and completion queue of a fab_ep; the fid_mr of a fab_mr. This is
 * the only file that includes <rdma/...>.
 *
 * Threads: none of its own. Any caller thread may post (fab_ep_read/write)
 * and progress (fab_op_wait, fab_ep_progress); memd dedicates a thread per
 * endpoint to fab_ep_progress. Completion callbacks (fab_op.done) run on
 * whichever thread is progressing.
 *
 * Progress model (leader/follower). Only one thread at a time reads an
 * endpoint's CQ: the leader, marked by ep->leader under ep->prog_mu. A
 * leader spins on fi_cq_read for a short while (FAB_SPIN_NS; a 4 KiB read
 * over loopback completes in tens of microseconds, and sleeping in the
 * kernel would add a wake-up to every one of them), then blocks in
 * fi_cq_sread on the CQ's wait object (or polls with short sleeps where the
 * provider has no wait object: shm). After each batch it gives up the role,
 * bumps ep->prog_gen and broadcasts ep->prog_cv; the other threads sleep on
 * prog_cv (short timed waits, monotonic clock) and re-check their condition.
 * Completion state is written before the leader takes prog_mu to
 * broadcast, and followers check it under prog_mu before they sleep, so no
 * wake-up is lost.
 *
 * Provider tuning. One FI_* environment default, set before the first
 * fi_getinfo of the process and only where the user has not set it:
 * FI_OFI_RXM_BUFFER_SIZE=1024 (FAB_RXM_BUFFER_SIZE). tcp;ofi_rxm
 * allocates and clears two pools of 1024 buffers of that size per
 * endpoint and one per connection: 85 MB of resident memory in every
 * process at the default 16 KiB, against 5 MB at 1 KiB. We move data
 * with RMA only (fi_read/fi_write; no fi_send), which uses those buffers
 * as operation contexts, never for payload, so their size changes
 * nothing else. ofi_rxm refuses a connection whose peer has another
 * buffer size ("eager_limit mismatch", in libfabric's log only): memd
 * and its clients must agree, which they do when both run this code or
 * both have the same value set. fab_rxm_buffer_size() is the value in
 * effect; memd tells it to clients (FABRIC, protocol 3), and libpool,
 * where they differ, fails the fabric path at once with -EPROTO and a
 * line naming both values and the fix, instead of a first RMA that
 * times out. Beside a memd older than protocol 3 (libfabric's 16384)
 * there is no such check: the client's first transfer times out, and
 * FI_OFI_RXM_BUFFER_SIZE=16384 for the newer side is the fix
 * (docs/paging.md, libpool(3)).
 *
 * Beyond that: on libfabric 1.17
 * tcp;ofi_rxm over loopback (2 vCPUs, 4 KiB and 1 MiB reads at depth 1 and
 * 16, medians of 3-5 runs) none of FI_TCP_NODELAY, FI_TCP_ZEROCOPY_SIZE,
 * FI_TCP_STAGING_SBUF_SIZE, FI_TCP_PREFETCH_RBUF_SIZE (larger),
 * FI_OFI_RXM_ENABLE_DIRECT_SEND, FI_OFI_RXM_BUFFER_SIZE,
 * FI_OFI_RXM_DATA_AUTO_PROGRESS or socket buffer sizes changed syscalls
 * per read or throughput beyond run-to-run noise, and the one default
 * that matters (the 9000-byte prefetch buffer: 0.7 recv per 4 KiB read
 * at depth 16, 4 without it) is already on. What costs is structural: two
 * send syscalls per read (request and response are never batched) and a
 * wait-fd signal per partial send. The "net" provider (what "tcp" became
 * in libfabric 1.18) had lower latency and CPU per read and, unlike
 * tcp;ofi_rxm, reconnects after a refused RMA; choose it with
 * fab_opts.provider. The user's FI_* variables apply as always.
 *
 * Invariants:
 *  - Every posted, uncompleted fab_op is on ep->live (under ep->mu) and
 *    counted in ep->inflight <= ep->max_inflight. It is linked before the
 *    provider sees it (its completion may be read by another thread before
 *    fi_read returns) and unlinked exactly once: by its completion, by a
 *    failed post, or by fab_ep_close.
 *  - A completion sets op->status and op->len, runs op->done, and only then
 *    publishes op->complete (release store). After that store fab never
 *    touches the op again.
 *  - Lock order: prog_mu is never held while taking mu, and neither is held
 *    while calling into the provider or running done.
 *  - Opening and closing fabrics, domains, endpoints, CQs and AVs is
 *    serialised process-wide (fab_ctl_mu), although each link has its own
 *    fabric and domain. This is a precaution (providers keep process-wide
 *    state: the rxm/tcp buffer pools, the tcp CM), not the fix of a race
 *    we have seen: the crash that first suggested one was single-threaded
 *    (next paragraph). These are control-path calls, a few per link's
 *    life; transfers do not take the lock.
 *
 * Closing mid-read. libfabric 1.17's tcp provider (and net, its successor)
 * completes a read twice when its endpoint is closed while the read's
 * response is partly received: the response's entry is both
 * ep->cur_rx.entry and still the head of ep->rma_read_queue, and
 * tcpx_ep_flush_all_queues reports both; the second report comes after
 * the entry was freed, with op_context NULL, and ofi_rxm's
 * rxm_handle_comp_error dereferences it (SIGSEGV in fi_close of the rxm
 * endpoint; upstream fix a74ea0fcd, libfabric 1.18). A client gets there
 * whenever it gives up on a read while memd's response is on its way: a
 * slow link, a partition, or the client itself stopped past its deadline
 * (tests/chaos found it: slow_link, then SIGSTOP of a client). We cannot
 * see the provider's receive state, so on an affected provider
 * (close_hazard) fab_ep_close with a read in flight first progresses the
 * endpoint for up to FAB_CLOSE_DRAIN_MS (a response already in our socket
 * completes), and if a read is still in flight then, it completes our
 * ops with -ECANCELED and leaves the provider's endpoint, CQ and AV open
 * and never progressed again ("quarantined", on fab_graves), and their
 * domain and fabric too when the domain is closed. That is safe because
 * progress is manual (FI_PROGRESS_MANUAL, the default of tcp and net, and
 * no provider thread of its own): an endpoint nobody progresses never
 * touches a buffer again. The cost is a leak of a few MB (the rxm
 * buffer pools, fabric/fab.c top) and one socket per quarantined
 * endpoint until the process exits; only reads given up on in flight pay
 * it, a rare event (tests/test_fab.c t_close_mid_read builds it).
 */
#include "fabric/fab.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/* See "Opening and closing" in the invariants above. */
static pthread_mutex_t fab_ctl_mu = PTHREAD_MUTEX_INITIALIZER;

/*
 * Quarantined provider objects ("Closing mid-read" above), kept reachable
 * so that leak checkers see them as held, not lost. Guarded by fab_ctl_mu.
 */
struct fab_grave {
	struct fid *fid[3];
	struct fab_grave *next;
};
static struct fab_grave *fab_graves;
static unsigned fab_quarantined; /* endpoints among them */

/* The API we are written against; newer libraries keep its semantics. */
#define FAB_FI_VERSION FI_VERSION(1, 17)

/* Completions read per fi_cq_read call. */
#define FAB_CQ_BATCH 16
/* How long a leader polls the CQ before it blocks (see top of file). */
#ifndef FAB_SPIN_NS
#define FAB_SPIN_NS 30000
#endif
/* Longest single block of a leader in the provider: a bound on the cost of
 * a provider that misses a wake-up, not a latency. */
#define FAB_BLOCK_MAX_MS 100
/* Longest block while a post is refused with -FI_EAGAIN (connection setup
 * or a full transmit queue): progress is needed, not a completion. */
#define FAB_RETRY_BLOCK_MS 1
/* A follower's timed wait; broadcasts wake it earlier. */
#define FAB_FOLLOW_SLICE_NS 2000000
/* fab_ep_serve: after this many wake-ups in one call (none completed
 * anything of ours) it checks whether the process is out of descriptors;
 * while it is, it sleeps this long between rounds (see fab_ep_serve). */
#define FAB_STARVED_CHECK_WAKES 256
#define FAB_STARVED_SLEEP_NS 1000000
/* Sleeps of the poll fallback (providers without a CQ wait object). */
#define FAB_POLL_SLEEP_MIN_NS 10000
#define FAB_POLL_SLEEP_MAX_NS 1000000
/* How long fab_ep_close progresses an endpoint with a read in flight on a
 * close_hazard provider before it quarantines it. */
#define FAB_CLOSE_DRAIN_MS 100
/* Default window when fab_ep_open is given 0. */
#define FAB_INFLIGHT_DEFAULT_MAX 256
#define FAB_AV_COUNT 64

/* fab_op.kind while in flight. */
enum { FAB_OP_READ = 1, FAB_OP_WRITE = 2 };

/* The provider owns fab_op.prov as the operation context: FI_CONTEXT and
 * FI_CONTEXT2 require it to be where the context pointer points. */
_Static_assert(offsetof(struct fab_op, prov) == 0, "prov first");
_Static_assert(sizeof(((struct fab_op *)0)->prov) >= sizeof(struct fi_context2),
	       "prov holds a fi_context2");

struct fab_domain {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	unsigned mr_mode; /* FAB_MR_* */
	size_t key_size;
	size_t max_msg;
	char prov[FAB_PROV_MAX];
	unsigned hmem; /* FAB_HMEM_* asked for and granted (FI_HMEM) */
	/* closing an endpoint mid-read crashes the provider ("Closing
	 * mid-read"); quarantined counts its endpoints kept open (under
	 * fab_ctl_mu) */
	bool close_hazard;
	unsigned quarantined;
	/* TP_TEST_FAB_PROV_KEY: the keys we pick for the provider */
	bool fake_prov_key;
	uint64_t next_fake_key;
};

struct fab_mr {
	struct fid_mr *mr;
	uint64_t key;
	uint64_t remote_base;
};

struct fab_ep {
	struct fab_domain *d;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	bool cq_can_block; /* the CQ has a wait object for fi_cq_sread */
	int wait_fd;	   /* the CQ's wait fd (FI_GETWAIT), or -1; once -1
		      * stays -1 (written only by fab_ep_serve's leader) */
	unsigned max_inflight;

	pthread_mutex_t mu;  /* guards everything below up to prog_mu */
	struct fab_op *live; /* posted, uncompleted operations */
	unsigned inflight;
	bool broken; /* the CQ failed: no new posts */
	struct fab_ep_stats stats;

	pthread_mutex_t prog_mu; /* guards leader, prog_gen */
	pthread_cond_t prog_cv;	 /* broadcast after each leader batch */
	bool leader;		 /* a thread is reading the CQ */
	uint64_t prog_gen;	 /* bumped whenever a leader steps down */
	uint64_t wakes;		 /* fab_ep_wake calls (atomic) */
};

/* ---- errors -------------------------------------------------------- */

/*
 * Maps a libfabric return to -errno. FI_E* values below FI_ERRNO_OFFSET are
 * errno values already (and providers pass socket errors such as
 * ECONNRESET through them unchanged); the libfabric-specific ones get the
 * nearest errno.
 */
int fab_errno(int fi_ret)
{
	int e;

	if (fi_ret == 0)
		return 0;
	if (fi_ret == INT_MIN)
		return -EIO;
	e = fi_ret < 0 ? -fi_ret : fi_ret;
	if (e < FI_ERRNO_OFFSET)
		return -e;
	switch (e) {
	case FI_ETOOSMALL:
		return -ENOSPC;
	case FI_EOPBADSTATE:
		return -EBADFD;
	case FI_EBADFLAGS:
	case FI_ENOEQ:
	case FI_EDOMAIN:
	case FI_ENOCQ:
	case FI_ENOAV:
		return -EINVAL; /* our set-up is wrong, not the peer */
	case FI_ECRC:
		return -EBADMSG;
	case FI_ETRUNC:
		return -EMSGSIZE;
	case FI_ENOKEY:
		return -ENOKEY;
	case FI_EOVERRUN:
		return -EOVERFLOW;
	case FI_ENORX:
		return -ENOBUFS;
	case FI_EOTHER:
	case FI_EAVAIL:
	default:
		return -EIO;
	}
}

/* ---- time ---------------------------------------------------------- */

#define FAB_NEVER INT64_MAX

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Absolute deadline of a timeout_ms argument (-1 or below: never). */
static int64_t deadline_after_ms(int timeout_ms)
{
	if (timeout_ms < 0)
		return FAB_NEVER;
	return now_ns() + (int64_t)timeout_ms * 1000000;
}

/* Milliseconds until deadline, rounded up, at most cap_ms (>= 0). */
static int ms_until(int64_t deadline, int cap_ms)
{
	int64_t left;

	if (deadline == FAB_NEVER)
		return cap_ms;
	left = deadline - now_ns();
	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left < cap_ms ? (int)left : cap_ms;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000,
			       .tv_nsec = ns % 1000000000 };

	nanosleep(&ts, NULL);
}

/* ---- domain -------------------------------------------------------- */

/*
 * Test-only: TP_TEST_FAB_PROV_KEY=1 makes every domain of the process act
 * like a provider that picks memory keys itself (FI_MR_PROV_KEY: verbs,
 * efa, cxi), and a predictable one: fab_domain_mr_mode() reports
 * FAB_MR_PROV_KEY and registrations get keys counted up from 1 per
 * domain, whatever key the caller asked for. Lets tests on tcp reach the
 * code paths (and the weaknesses) of such providers. Never set it in
 * production.
 */
static bool fake_prov_key_enabled(void)
{
	const char *v = getenv("TP_TEST_FAB_PROV_KEY");

	return v && !strcmp(v, "1");
}

static uint64_t key_mask(size_t key_size);

/* The key a registration on d asks the provider for. */
static uint64_t reg_key(struct fab_domain *d, uint64_t requested_key)
{
	if (d->fake_prov_key)
		return __atomic_add_fetch(&d->next_fake_key, 1,
					  __ATOMIC_RELAXED) &
		       key_mask(d->key_size);
	if (d->mr_mode & FAB_MR_PROV_KEY)
		return 0;
	return requested_key & key_mask(d->key_size);
}

/* FAB_MR_* view of a provider mr_mode, legacy FI_MR_BASIC included. */
static unsigned mr_mode_from_fi(int fi_mode)
{
	unsigned m = 0;

	if (fi_mode == FI_MR_BASIC)
		fi_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	if (fi_mode & FI_MR_VIRT_ADDR)
		m |= FAB_MR_VIRT_ADDR;
	if (fi_mode & FI_MR_PROV_KEY)
		m |= FAB_MR_PROV_KEY;
	if (fi_mode & FI_MR_LOCAL)
		m |= FAB_MR_LOCAL;
	if (fi_mode & FI_MR_ALLOCATED)
		m |= FAB_MR_ALLOCATED;
	if (fi_mode & FI_MR_ENDPOINT)
		m |= FAB_MR_ENDPOINT;
	return m;
}

/* See "Provider tuning" above. setenv() does not replace what the user
 * set; it runs once, before this process's first fi_getinfo. */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_defaults(void)
{
	setenv("FI_OFI_RXM_BUFFER_SIZE", FAB_RXM_BUFFER_SIZE, 0);
}

uint32_t fab_rxm_buffer_size(void)
{
	const char *v;
	char *end;
	unsigned long long n;

	pthread_once(&env_once, env_defaults);
	v = getenv("FI_OFI_RXM_BUFFER_SIZE");
	if (!v || *v < '0' || *v > '9')
		return 0;
	errno = 0;
	n = strtoull(v, &end, 0);
	if (errno || *end || !n || n > UINT32_MAX)
		return 0;
	return (uint32_t)n;
}

bool fab_provider_is_rxm(const char *provider)
{
	return provider && strstr(provider, "ofi_rxm") != NULL;
}

/*
 * Crash signals. Debian 12's libfabric.so.1 links its psm provider, so
 * libpsm_infinipath and libinfinipath load with it in every process that
 * links libfabric (memd, every libpool user: the Python extension too),
 * whether or not psm is the provider in use; FI_PROVIDER cannot keep
 * them out. Their constructors catch SIGSEGV, SIGBUS, SIGILL, SIGFPE and
 * SIGABRT to print a backtrace and call exit(): in a threaded process a
 * crash then runs atexit handlers and destructors on a corrupt heap and
 * can hang instead of dying (and no core is written). Where the handler
 * in place is theirs, it goes back to SIG_DFL: once when this library
 * loads (dependencies' constructors have run) and after each
 * fi_getinfo (a provider could install one as it initialises). A
 * handler of the program's own is never touched. The preload shim, which
 * loads libfabric later, does the same in fab_dl.c, putting back the
 * handler in place before the load.
 */
static const int crash_sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

static bool handler_is_psm(const struct sigaction *sa)
{
	void *h = (sa->sa_flags & SA_SIGINFO) ? (void *)sa->sa_sigaction
					      : (void *)sa->sa_handler;
	Dl_info info;

	if (h == (void *)SIG_DFL || h == (void *)SIG_IGN || !dladdr(h, &info) ||
	    !info.dli_fname)
		return false;
	return strstr(info.dli_fname, "libinfinipath") ||
	       strstr(info.dli_fname, "libpsm");
}

static void crash_handlers_reclaim(void)
{
	for (size_t i = 0; i < sizeof(crash_sigs) / sizeof(crash_sigs[0]);
	     i++) {
		struct sigaction sa;

		if (sigaction(crash_sigs[i], NULL, &sa) == 0 &&
		    handler_is_psm(&sa))
			signal(crash_sigs[i], SIG_DFL);
	}
}

__attribute__((constructor)) static void fab_ctor(void)
{
	crash_handlers_reclaim();
}

/* Linked libfabric is loaded already; fab_dl.c's fab_load() replaces
 * this one in the preload shim. */
__attribute__((weak)) void fab_load(void)
{
}

/*
 * Opens the provider: fi_getinfo with the modes we honour (not the legacy
 * FI_MR_BASIC/SCALABLE), first match, then fabric and domain. node/service
 * become the source address (FI_SOURCE) the endpoint listens on.
 */
int fab_domain_open(const struct fab_opts *opts, struct fab_domain **out)
{
	static const struct fab_opts defaults;
	const char *prov_name;
	struct fi_info *hints;
	struct fab_domain *d;
	uint64_t flags = 0;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!opts)
		opts = &defaults;
	prov_name = opts->provider ? opts->provider : "tcp";
	if (!prov_name[0] || strlen(prov_name) >= FAB_PROV_MAX)
		return -EINVAL;
	if (opts->hmem & ~FAB_HMEM_CUDA)
		return -EINVAL;

	pthread_once(&env_once, env_defaults);
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	hints = fi_allocinfo();
	if (!hints) {
		ret = -ENOMEM;
		goto free_d;
	}
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps =
		FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	/* fab_op.prov is a fi_context2, so we can honour either mode. */
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				      FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->fabric_attr->prov_name = strdup(prov_name);
	if (!hints->fabric_attr->prov_name) {
		ret = -ENOMEM;
		goto free_hints;
	}
	if (opts->node || opts->service)
		flags |= FI_SOURCE;
	if (opts->hmem) { /* device memory: see fab_domain_has_hmem() */
		hints->caps |= FI_HMEM;
		hints->domain_attr->mr_mode |= FI_MR_HMEM;
	}

	ret = fab_errno(fi_getinfo(FAB_FI_VERSION, opts->node, opts->service,
				   flags, hints, &d->info));
	crash_handlers_reclaim();
	if (ret)
		goto free_hints;
	pthread_mutex_lock(&fab_ctl_mu);
	ret = fab_errno(fi_fabric(d->info->fabric_attr, &d->fabric, NULL));
	if (!ret) {
		ret = fab_errno(
			fi_domain(d->fabric, d->info, &d->domain, NULL));
		if (ret)
			fi_close(&d->fabric->fid);
	}
	pthread_mutex_unlock(&fab_ctl_mu);
	if (ret)
		goto free_info;

	d->mr_mode = mr_mode_from_fi(d->info->domain_attr->mr_mode);
	if (!(d->mr_mode & FAB_MR_PROV_KEY) && fake_prov_key_enabled()) {
		d->mr_mode |= FAB_MR_PROV_KEY;
		d->fake_prov_key = true;
	}
	if (d->info->caps & FI_HMEM)
		d->hmem = opts->hmem;
	d->key_size = d->info->domain_attr->mr_key_size;
	if (d->key_size == 0 || d->key_size > sizeof(uint64_t))
		d->key_size = sizeof(uint64_t);
	d->max_msg = d->info->ep_attr->max_msg_size;
	if (d->max_msg == 0)
		d->max_msg = SIZE_MAX;
	if (d->info->fabric_attr->prov_name) {
		memcpy(d->prov, d->info->fabric_attr->prov_name,
		       strnlen(d->info->fabric_attr->prov_name,
			       sizeof(d->prov) - 1));
	}
	d->close_hazard = fi_version() < FI_VERSION(1, 18) &&
			  (strncmp(d->prov, "tcp", 3) == 0 ||
			   strncmp(d->prov, "net", 3) == 0);
	fi_freeinfo(hints);
	*out = d;
	return 0;

free_info:
	fi_freeinfo(d->info);
free_hints:
	fi_freeinfo(hints);
free_d:
	free(d);
	return ret;
}

/* Keeps fids (NULLs allowed) open for good. Caller holds fab_ctl_mu.
 * Without memory for the record they stay open all the same. */
static void grave_add_locked(struct fid *a, struct fid *b, struct fid *c)
{
	struct fab_grave *g = calloc(1, sizeof(*g));

	if (!g)
		return;
	g->fid[0] = a;
	g->fid[1] = b;
	g->fid[2] = c;
	g->next = fab_graves;
	fab_graves = g;
}

/*
 * Closes domain, then fabric; every ep and MR on it must be gone. A domain
 * with a quarantined endpoint stays open with it (the provider would
 * refuse or, worse, half-close it).
 */
void fab_domain_close(struct fab_domain *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&fab_ctl_mu);
	if (d->quarantined) {
		grave_add_locked(&d->domain->fid, &d->fabric->fid, NULL);
	} else {
		fi_close(&d->domain->fid);
		fi_close(&d->fabric->fid);
	}
	pthread_mutex_unlock(&fab_ctl_mu);
	fi_freeinfo(d->info);
	free(d);
}

const char *fab_domain_provider(const struct fab_domain *d)
{
	return d->prov;
}

unsigned fab_domain_mr_mode(const struct fab_domain *d)
{
	return d->mr_mode;
}

size_t fab_domain_key_size(const struct fab_domain *d)
{
	return d->key_size;
}

size_t fab_domain_max_msg(const struct fab_domain *d)
{
	return d->max_msg;
}

/* ---- memory registration ------------------------------------------ */

uint64_t fab_mr_base_for_mode(unsigned mr_mode, const void *vaddr)
{
	return (mr_mode & FAB_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)vaddr : 0;
}

static uint64_t key_mask(size_t key_size)
{
	return key_size >= sizeof(uint64_t) ? UINT64_MAX
					    : (1ull << (8 * key_size)) - 1;
}

/*
 * Registers a buffer. Under FAB_MR_ENDPOINT the MR is bound to ep and
 * enabled before any peer can use its key.
 */
int fab_mr_reg(struct fab_domain *d, struct fab_ep *ep, void *buf, size_t len,
	       unsigned access, uint64_t requested_key, struct fab_mr **out)
{
	struct fab_mr *m;
	uint64_t fi_access = 0;
	uint64_t key = 0;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!d || !buf || !len || !access ||
	    (access &
	     ~(FAB_ACCESS_LOCAL | FAB_ACCESS_REMOTE | FAB_ACCESS_REMOTE_READ)))
		return -EINVAL;
	if ((d->mr_mode & FAB_MR_ENDPOINT) && !ep)
		return -EINVAL;
	if (ep && ep->d != d)
		return -EINVAL;
	if (access & FAB_ACCESS_LOCAL)
		fi_access |= FI_READ | FI_WRITE;
	if (access & FAB_ACCESS_REMOTE)
		fi_access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (access & FAB_ACCESS_REMOTE_READ)
		fi_access |= FI_REMOTE_READ;
	key = reg_key(d, requested_key);

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = fab_errno(fi_mr_reg(d->domain, buf, len, fi_access, 0, key, 0,
				  &m->mr, NULL));
	if (ret)
		goto free_m;
	if (d->mr_mode & FAB_MR_ENDPOINT) {
		ret = fab_errno(fi_mr_bind(m->mr, &ep->ep->fid, 0));
		if (ret)
			goto close_mr;
		ret = fab_errno(fi_mr_enable(m->mr));
		if (ret)
			goto close_mr;
	}
	m->key = fi_mr_key(m->mr);
	if (m->key == FI_KEY_NOTAVAIL) {
		/* Only providers with FI_MR_RAW do this; we do not ask
		 * for raw keys, so this is a provider we cannot use. */
		ret = -EOPNOTSUPP;
		goto close_mr;
	}
	m->remote_base = fab_mr_base_for_mode(d->mr_mode, buf);
	*out = m;
	return 0;

close_mr:
	fi_close(&m->mr->fid);
free_m:
	free(m);
	return ret;
}

/*
 * Test-only fault injection: TP_TEST_FAIL_MR_CLOSE=N makes the first N
 * fab_mr_close() calls of the process report -EIO (the registration is
 * closed all the same), so tests can drive what memd does when a close
 * fails (docs/reliability.md). Read once; unset, it costs one relaxed
 * load per close. Never set it in production.
 */
static int mr_close_fail_left = -1; /* -1: environment not read yet */
static pthread_once_t mr_close_fail_once = PTHREAD_ONCE_INIT;

static void mr_close_fail_init(void)
{
	const char *v = getenv("TP_TEST_FAIL_MR_CLOSE");
	long n = v ? strtol(v, NULL, 10) : 0;

	__atomic_store_n(&mr_close_fail_left, n > 0 && n < INT_MAX ? (int)n : 0,
			 __ATOMIC_RELAXED);
}

static bool mr_close_fail_injected(void)
{
	int left;

	pthread_once(&mr_close_fail_once, mr_close_fail_init);
	left = __atomic_load_n(&mr_close_fail_left, __ATOMIC_RELAXED);
	while (left > 0)
		if (__atomic_compare_exchange_n(
			    &mr_close_fail_left, &left, left - 1, false,
			    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return true;
	return false;
}

int fab_mr_close(struct fab_mr *mr)
{
	int ret;

	if (!mr)
		return 0;
	ret = fab_errno(fi_close(&mr->mr->fid));
	free(mr);
	if (!ret && mr_close_fail_injected())
		ret = -EIO;
	return ret;
}

uint64_t fab_mr_key(const struct fab_mr *mr)
{
	return mr->key;
}

void *fab_mr_desc(const struct fab_mr *mr)
{
	return fi_mr_desc(mr->mr);
}

uint64_t fab_mr_remote_base(const struct fab_mr *mr)
{
	return mr->remote_base;
}

/* ---- endpoint ------------------------------------------------------ */

/*
 * Opens the CQ. A wait object lets a leader sleep in fi_cq_sread; we ask
 * for FI_WAIT_FD explicitly rather than FI_WAIT_UNSPEC because some
 * providers (shm) answer UNSPEC with FI_WAIT_YIELD, a spin that burns a
 * core. Without one, leaders poll with short sleeps.
 */
static int ep_cq_open(struct fab_ep *ep)
{
	struct fi_cq_attr attr = {
		.format = FI_CQ_FORMAT_CONTEXT,
		.wait_obj = FI_WAIT_FD,
		.wait_cond = FI_CQ_COND_NONE,
	};
	size_t tx_size = ep->d->info->tx_attr->size;
	int ret;

	attr.size = tx_size > ep->max_inflight ? tx_size : ep->max_inflight;
	ep->wait_fd = -1;
	ret = fi_cq_open(ep->d->domain, &attr, &ep->cq, NULL);
	if (ret == 0) {
		int fd = -1;

		ep->cq_can_block = true;
		/* fab_ep_serve blocks in poll(2) on it: a wake-up it sees
		 * is how it knows a peer is active. */
		if (fi_control(&ep->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0)
			ep->wait_fd = fd;
		return 0;
	}
	attr.wait_obj = FI_WAIT_NONE;
	ep->cq_can_block = false;
	return fab_errno(fi_cq_open(ep->d->domain, &attr, &ep->cq, NULL));
}

static int ep_av_open(struct fab_ep *ep)
{
	struct fi_av_attr attr = { .count = FAB_AV_COUNT };
	enum fi_av_type want = ep->d->info->domain_attr->av_type;
	int ret;

	attr.type = want == FI_AV_UNSPEC ? FI_AV_TABLE : want;
	ret = fi_av_open(ep->d->domain, &attr, &ep->av, NULL);
	if (ret && want == FI_AV_UNSPEC) {
		attr.type = FI_AV_MAP;
		ret = fi_av_open(ep->d->domain, &attr, &ep->av, NULL);
	}
	return fab_errno(ret);
}

/*
 * Opens AV, CQ and endpoint, binds them and enables the endpoint. The CQ
 * is bound for both directions (some providers want an rx CQ to enable);
 * every operation is posted with FI_COMPLETION.
 */
int fab_ep_open(struct fab_domain *d, unsigned max_inflight,
		struct fab_ep **out)
{
	pthread_condattr_t ca;
	struct fab_ep *ep;
	size_t tx_size;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!d)
		return -EINVAL;
	tx_size = d->info->tx_attr->size;
	if (max_inflight == 0) {
		max_inflight = FAB_INFLIGHT_DEFAULT_MAX;
		if (tx_size && tx_size < max_inflight)
			max_inflight = (unsigned)tx_size;
	} else if (tx_size && max_inflight > tx_size) {
		max_inflight = (unsigned)tx_size;
	}

	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->d = d;
	ep->max_inflight = max_inflight;
	ret = -pthread_mutex_init(&ep->mu, NULL);
	if (ret)
		goto free_ep;
	ret = -pthread_mutex_init(&ep->prog_mu, NULL);
	if (ret)
		goto destroy_mu;
	ret = -pthread_condattr_init(&ca);
	if (ret)
		goto destroy_prog_mu;
	ret = -pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!ret)
		ret = -pthread_cond_init(&ep->prog_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto destroy_prog_mu;

	pthread_mutex_lock(&fab_ctl_mu);
	ret = ep_av_open(ep);
	if (ret)
		goto unlock;
	ret = ep_cq_open(ep);
	if (ret)
		goto close_av;
	ret = fab_errno(fi_endpoint(d->domain, d->info, &ep->ep, NULL));
	if (ret)
		goto close_cq;
	ret = fab_errno(fi_ep_bind(ep->ep, &ep->av->fid, 0));
	if (ret)
		goto close_ep;
	ret = fab_errno(
		fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV));
	if (ret)
		goto close_ep;
	ret = fab_errno(fi_enable(ep->ep));
	if (ret)
		goto close_ep;
	pthread_mutex_unlock(&fab_ctl_mu);
	*out = ep;
	return 0;

close_ep:
	fi_close(&ep->ep->fid);
close_cq:
	fi_close(&ep->cq->fid);
close_av:
	fi_close(&ep->av->fid);
unlock:
	pthread_mutex_unlock(&fab_ctl_mu);
	pthread_cond_destroy(&ep->prog_cv);
destroy_prog_mu:
	pthread_mutex_destroy(&ep->prog_mu);
destroy_mu:
	pthread_mutex_destroy(&ep->mu);
free_ep:
	free(ep);
	return ret;
}

/* Caller holds ep->mu. */
static void live_link_locked(struct fab_ep *ep, struct fab_op *op)
{
	op->prev_live = NULL;
	op->next_live = ep->live;
	if (ep->live)
		ep->live->prev_live = op;
	ep->live = op;
	/* Atomic only for pred_window_open, which peeks without mu. */
	__atomic_store_n(&ep->inflight, ep->inflight + 1, __ATOMIC_RELAXED);
}

/* Caller holds ep->mu. */
static void live_unlink_locked(struct fab_ep *ep, struct fab_op *op)
{
	if (op->prev_live)
		op->prev_live->next_live = op->next_live;
	else
		ep->live = op->next_live;
	if (op->next_live)
		op->next_live->prev_live = op->prev_live;
	op->next_live = op->prev_live = NULL;
	__atomic_store_n(&ep->inflight, ep->inflight - 1, __ATOMIC_RELAXED);
}

/*
 * Completes op with status: status and len first, then done, then the
 * release store of complete. done runs before complete is published, so a
 * thread that sees complete knows done has returned and fab is finished
 * with the op; the flip side is that done must not free or reuse the op
 * (nor let another thread do so) before complete reads true. The op is
 * already unlinked.
 */
static void op_finish(struct fab_op *op, int status)
{
	op->status = status;
	if (status)
		op->len = 0;
	if (op->done)
		op->done(op);
	__atomic_store_n(&op->complete, 1, __ATOMIC_RELEASE);
}

/* Unlinks op, counts its outcome and completes it. */
static void ep_complete(struct fab_ep *ep, struct fab_op *op, int status)
{
	pthread_mutex_lock(&ep->mu);
	live_unlink_locked(ep, op);
	if (status)
		ep->stats.errors++;
	else if (op->kind == FAB_OP_READ)
		ep->stats.read_bytes += op->len;
	else
		ep->stats.write_bytes += op->len;
	pthread_mutex_unlock(&ep->mu);
	op_finish(op, status);
}

static int ep_cq_poll(struct fab_ep *ep);

static bool ep_read_in_flight(struct fab_ep *ep)
{
	bool found = false;

	pthread_mutex_lock(&ep->mu);
	for (struct fab_op *op = ep->live; op && !found; op = op->next_live)
		found = op->kind == FAB_OP_READ;
	pthread_mutex_unlock(&ep->mu);
	return found;
}

/*
 * On a close_hazard provider with a read in flight: progresses ep for up
 * to FAB_CLOSE_DRAIN_MS and returns true when a read is still in flight,
 * i.e. when ep must not be closed ("Closing mid-read"). The caller owns ep
 * (no other thread uses it), so this reads the CQ without the leader role.
 */
static bool ep_must_quarantine(struct fab_ep *ep)
{
	int64_t end;

	if (!ep->d->close_hazard || !ep_read_in_flight(ep))
		return false;
	end = now_ns() + (int64_t)FAB_CLOSE_DRAIN_MS * 1000000;
	for (;;) {
		int ret = ep_cq_poll(ep);

		if (!ep_read_in_flight(ep))
			return false;
		if (ret < 0 || now_ns() >= end)
			return true;
		if (ret == 0)
			sleep_ns(FAB_POLL_SLEEP_MAX_NS / 4);
	}
}

bool fab_domain_close_hazard(const struct fab_domain *d)
{
	return d->close_hazard;
}

unsigned fab_quarantined_eps(void)
{
	unsigned n;

	pthread_mutex_lock(&fab_ctl_mu);
	n = fab_quarantined;
	pthread_mutex_unlock(&fab_ctl_mu);
	return n;
}

/*
 * Closes the provider endpoint first: once fi_close returns the provider
 * no longer touches posted buffers, so what is still on the live list can
 * be completed with -ECANCELED and handed back. Then CQ and AV. A
 * quarantined endpoint is not closed but never progressed again, which
 * holds the same promise ("Closing mid-read").
 */
bool fab_ep_close(struct fab_ep *ep)
{
	struct fab_op *op, *next;
	bool quarantine;

	if (!ep)
		return false;
	quarantine = ep_must_quarantine(ep);
	pthread_mutex_lock(&fab_ctl_mu);
	if (quarantine) {
		grave_add_locked(&ep->ep->fid, &ep->cq->fid, &ep->av->fid);
		ep->d->quarantined++;
		fab_quarantined++;
	} else {
		fi_close(&ep->ep->fid);
	}
	pthread_mutex_unlock(&fab_ctl_mu);

	pthread_mutex_lock(&ep->mu);
	op = ep->live;
	ep->live = NULL;
	ep->inflight = 0;
	ep->broken = true;
	pthread_mutex_unlock(&ep->mu);
	for (; op; op = next) {
		next = op->next_live;
		op->next_live = op->prev_live = NULL;
		op_finish(op, -ECANCELED);
	}

	if (!quarantine) {
		pthread_mutex_lock(&fab_ctl_mu);
		fi_close(&ep->cq->fid);
		fi_close(&ep->av->fid);
		pthread_mutex_unlock(&fab_ctl_mu);
	}
	pthread_cond_destroy(&ep->prog_cv);
	pthread_mutex_destroy(&ep->prog_mu);
	pthread_mutex_destroy(&ep->mu);
	free(ep);
	return quarantine;
}

int fab_ep_name(struct fab_ep *ep, void *addr, size_t *len)
{
	size_t cap;
	int ret;

	if (!ep || !addr || !len)
		return -EINVAL;
	cap = *len;
	ret = fi_getname(&ep->ep->fid, addr, len);
	if (ret == -FI_ETOOSMALL || (ret == 0 && *len > cap))
		return -ENOSPC;
	return fab_errno(ret);
}

int fab_ep_av_insert(struct fab_ep *ep, const void *addr, size_t len,
		     uint64_t *peer)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	int ret;

	if (!ep || !addr || !len || len > FAB_ADDR_MAX || !peer)
		return -EINVAL;
	ret = fi_av_insert(ep->av, addr, 1, &fa, 0, NULL);
	if (ret < 0)
		return fab_errno(ret);
	if (ret != 1 || fa == FI_ADDR_NOTAVAIL)
		return -EINVAL; /* the provider rejected the address */
	*peer = fa;
	return 0;
}

/*
 * Forgets a peer (a donor that left): its handle becomes invalid and the
 * provider may drop its connection. It does not repair a connection the
 * provider has broken (see fab_ep_read in the header).
 */
int fab_ep_av_remove(struct fab_ep *ep, uint64_t peer)
{
	fi_addr_t fa = peer;

	if (!ep)
		return -EINVAL;
	return fab_errno(fi_av_remove(ep->av, &fa, 1, 0));
}

/* ---- progress ------------------------------------------------------ */

/*
 * Reads the error completion behind -FI_EAVAIL and completes its op.
 * Returns 1 (an op completed), 0 (an error without an op of ours), or
 * -errno when the CQ itself failed.
 */
static int ep_cq_take_error(struct fab_ep *ep)
{
	struct fi_cq_err_entry err = { 0 };
	ssize_t n;
	int status;

	n = fi_cq_readerr(ep->cq, &err, 0);
	if (n == -FI_EAGAIN)
		return 0;
	if (n < 0)
		return fab_errno((int)n);
	status = fab_errno(err.err ? err.err : FI_EIO);
	/*
	 * A provider cancels an op when its connection is torn down under
	 * it (tcp: the target refused an RMA, bad key or range, and dropped
	 * the connection). -ECANCELED is what fab_ep_close reports, so say
	 * what happened instead.
	 */
	if (status == -ECANCELED)
		status = -ECONNABORTED;
	if (!err.op_context) {
		pthread_mutex_lock(&ep->mu);
		ep->stats.errors++;
		pthread_mutex_unlock(&ep->mu);
		return 0;
	}
	ep_complete(ep, err.op_context, status);
	return 1;
}

/*
 * Handles what fi_cq_read/fi_cq_sread returned: completes n entries, or
 * the error entry, and returns the count completed; 0 for nothing (timeout
 * included); -errno when the CQ failed, which breaks the endpoint.
 */
static int ep_cq_consume(struct fab_ep *ep, struct fi_cq_entry *ents, ssize_t n)
{
	ssize_t i;
	int ret;

	if (n > 0) {
		for (i = 0; i < n; i++)
			ep_complete(ep, ents[i].op_context, 0);
		return (int)n;
	}
	if (n == 0 || n == -FI_EAGAIN || n == -FI_EINTR)
		return 0;
	if (n == -FI_EAVAIL)
		ret = ep_cq_take_error(ep);
	else
		ret = fab_errno((int)n);
	if (ret < 0) {
		pthread_mutex_lock(&ep->mu);
		ep->broken = true;
		pthread_mutex_unlock(&ep->mu);
	}
	return ret;
}

/* Caller holds prog_mu. Atomic only for pred_gen_moved's peek. */
static void gen_bump_locked(struct fab_ep *ep)
{
	__atomic_store_n(&ep->prog_gen, ep->prog_gen + 1, __ATOMIC_RELAXED);
}

static int ep_cq_poll(struct fab_ep *ep)
{
	struct fi_cq_entry ents[FAB_CQ_BATCH];

	return ep_cq_consume(ep, ents, fi_cq_read(ep->cq, ents, FAB_CQ_BATCH));
}

/*
 * The leader's turn: poll until something completes, FAB_SPIN_NS pass or
 * the deadline comes; then, if block_ms allows, sleep in the provider for
 * at most block_ms (and never past the deadline). Returns completions, 0
 * or -errno.
 */
static int ep_lead(struct fab_ep *ep, int64_t deadline, int block_ms)
{
	struct fi_cq_entry ents[FAB_CQ_BATCH];
	int64_t t = now_ns(), spin_end = t + FAB_SPIN_NS, end, nap;
	int ret, ms;

	if (spin_end > deadline)
		spin_end = deadline;
	do {
		ret = ep_cq_poll(ep);
		if (ret)
			return ret;
		t = now_ns();
	} while (t < spin_end);

	ms = ms_until(deadline, block_ms);
	if (ms <= 0)
		return 0;
	if (ep->cq_can_block) {
		return ep_cq_consume(
			ep, ents,
			fi_cq_sread(ep->cq, ents, FAB_CQ_BATCH, NULL, ms));
	}
	/* No wait object: poll with growing naps. */
	end = t + (int64_t)ms * 1000000;
	for (nap = FAB_POLL_SLEEP_MIN_NS; t < end;) {
		sleep_ns(nap);
		ret = ep_cq_poll(ep);
		if (ret)
			return ret;
		if (nap < FAB_POLL_SLEEP_MAX_NS)
			nap *= 2;
		t = now_ns();
	}
	return 0;
}

/* Predicate of ep_drive; called without locks, must be cheap. */
typedef bool (*ep_pred)(struct fab_ep *ep, void *arg);

/*
 * Progresses ep until pred holds or the deadline passes. Each round this
 * thread either becomes the leader for one turn (ep_lead) or, while
 * another thread leads, sleeps on prog_cv until that leader steps down.
 * block_ms caps a leader's sleep in the provider. *ncomp (may be NULL)
 * accumulates the operations this thread completed.
 * Returns 0 when pred held, -ETIMEDOUT, or -errno from the CQ.
 */
static int ep_drive(struct fab_ep *ep, ep_pred pred, void *arg,
		    int64_t deadline, int block_ms, int *ncomp)
{
	struct timespec ts;
	int64_t until;
	uint64_t gen;
	int ret;

	for (;;) {
		if (pred(ep, arg))
			return 0;
		if (now_ns() >= deadline)
			return -ETIMEDOUT;

		pthread_mutex_lock(&ep->prog_mu);
		if (!ep->leader) {
			ep->leader = true;
			pthread_mutex_unlock(&ep->prog_mu);
			ret = ep_lead(ep, deadline, block_ms);
			pthread_mutex_lock(&ep->prog_mu);
			ep->leader = false;
			gen_bump_locked(ep);
			pthread_cond_broadcast(&ep->prog_cv);
			pthread_mutex_unlock(&ep->prog_mu);
			if (ret < 0)
				return ret;
			if (ncomp)
				*ncomp += ret;
			continue;
		}
		/*
		 * Follow. The leader publishes completions before it takes
		 * prog_mu to step down, so checking pred here under prog_mu
		 * cannot miss its broadcast.
		 */
		gen = ep->prog_gen;
		if (!pred(ep, arg)) {
			until = now_ns() + FAB_FOLLOW_SLICE_NS;
			if (until > deadline)
				until = deadline;
			ts.tv_sec = until / 1000000000;
			ts.tv_nsec = until % 1000000000;
			while (ep->leader && ep->prog_gen == gen &&
			       pthread_cond_timedwait(&ep->prog_cv,
						      &ep->prog_mu, &ts) == 0)
				;
		}
		pthread_mutex_unlock(&ep->prog_mu);
	}
}

static bool pred_op_complete(struct fab_ep *ep, void *arg)
{
	struct fab_op *op = arg;

	(void)ep;
	return __atomic_load_n(&op->complete, __ATOMIC_ACQUIRE);
}

static bool pred_window_open(struct fab_ep *ep, void *arg)
{
	(void)arg;
	return __atomic_load_n(&ep->inflight, __ATOMIC_RELAXED) <
	       ep->max_inflight;
}

/* True once the progress generation moved past *arg: someone made a
 * progress turn after we started. */
static bool pred_gen_moved(struct fab_ep *ep, void *arg)
{
	return __atomic_load_n(&ep->prog_gen, __ATOMIC_RELAXED) !=
	       *(uint64_t *)arg;
}

/*
 * One progress turn for a poster whose post was refused: lead for one
 * short turn or wait for the current leader's turn to end.
 */
static int ep_progress_turn(struct fab_ep *ep, int64_t deadline)
{
	uint64_t gen = __atomic_load_n(&ep->prog_gen, __ATOMIC_RELAXED);

	return ep_drive(ep, pred_gen_moved, &gen, deadline, FAB_RETRY_BLOCK_MS,
			NULL);
}

/*
 * Reads completions; a target calls this in a loop. While another thread
 * leads, this one sleeps on prog_cv instead of reading the CQ; it returns
 * what it completed itself, so it may wait out its whole timeout and
 * return 0 while others complete operations.
 */
int fab_ep_wake(struct fab_ep *ep)
{
	if (!ep)
		return -EINVAL;
	__atomic_add_fetch(&ep->wakes, 1, __ATOMIC_RELEASE);
	/* Interrupts a leader blocked in fi_cq_sread; a leader that polls
	 * (no wait object) naps at most FAB_POLL_SLEEP_MAX_NS at a time. */
	if (ep->cq_can_block)
		fi_cq_signal(ep->cq);
	/* A follower sleeps on prog_cv in slices; wake it too. */
	pthread_mutex_lock(&ep->prog_mu);
	pthread_cond_broadcast(&ep->prog_cv);
	pthread_mutex_unlock(&ep->prog_mu);
	return 0;
}

int fab_ep_progress(struct fab_ep *ep, int timeout_ms)
{
	int64_t deadline;
	uint64_t gen, wakes;
	int ncomp = 0, ret;

	if (!ep)
		return -EINVAL;
	if (timeout_ms == 0) {
		pthread_mutex_lock(&ep->prog_mu);
		if (ep->leader) {
			pthread_mutex_unlock(&ep->prog_mu);
			return 0;
		}
		ep->leader = true;
		pthread_mutex_unlock(&ep->prog_mu);
		ret = ep_cq_poll(ep);
		pthread_mutex_lock(&ep->prog_mu);
		ep->leader = false;
		gen_bump_locked(ep);
		pthread_cond_broadcast(&ep->prog_cv);
		pthread_mutex_unlock(&ep->prog_mu);
		return ret;
	}

	deadline = deadline_after_ms(timeout_ms);
	gen = __atomic_load_n(&ep->prog_gen, __ATOMIC_RELAXED);
	wakes = __atomic_load_n(&ep->wakes, __ATOMIC_ACQUIRE);
	for (;;) {
		/* Stop once a turn (ours or another thread's) completed
		 * something, or at the deadline. */
		ret = ep_drive(ep, pred_gen_moved, &gen, deadline,
			       FAB_BLOCK_MAX_MS, &ncomp);
		if (ret == -ETIMEDOUT)
			return ncomp;
		if (ret < 0)
			return ret;
		if (ncomp > 0)
			return ncomp;
		if (__atomic_load_n(&ep->wakes, __ATOMIC_ACQUIRE) != wakes)
			return 0; /* fab_ep_wake */
		gen = __atomic_load_n(&ep->prog_gen, __ATOMIC_RELAXED);
		if (now_ns() >= deadline)
			return 0;
		/* The turn that ended completed nothing of ours: when it
		 * was another thread's, its completions were its to report;
		 * when it was ours, nothing arrived yet. Keep waiting. */
	}
}

/*
 * The target's loop with adaptive busy polling. The leader role is held
 * for the whole call (a target has no other reader). Blocking is poll(2)
 * on the CQ's wait fd after fi_trywait said it is safe; each return of
 * that poll with the fd readable is a wake-up, i.e. a peer sent us
 * something, and opens a busy window of busy_us during which the loop
 * keeps calling fi_cq_read (which is what progresses tcp) instead of
 * sleeping, so the next request of a peer that is talking to us costs no
 * scheduler wake-up. A readable fd seen inside the window (one poll(2)
 * with timeout 0 per round) extends it. Each empty round yields the CPU:
 * on a host with fewer cores than runnable threads (2 vCPUs, a client
 * and memd on them) a spinning target otherwise takes the core the peer
 * needs to send its next request (docs/bench/poolbench.md measured
 * that). Without a wait fd, or when another thread leads, it is
 * fab_ep_progress().
 *
 * Out of descriptors: the tcp provider accepts connections itself, and
 * when accept(2) fails with EMFILE the connection stays in its listening
 * socket's backlog, so the wait fd stays readable and every poll(2)
 * returns at once: a spin (libfabric's, which memd cannot fix). So
 * every FAB_STARVED_CHECK_WAKES wake-ups in one call (a target's RMA
 * completes nothing here, so a busy one wakes often too: the check is
 * one dup(2), rare) the loop checks whether the process has a
 * descriptor left; while it has none it sleeps FAB_STARVED_SLEEP_NS
 * between rounds instead of polling (progress still runs each round,
 * so transfers go on, slower) and checks again each round.
 */
static bool out_of_descriptors(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (d >= 0) {
		close(d);
		return false;
	}
	return errno == EMFILE || errno == ENFILE;
}

int fab_ep_serve(struct fab_ep *ep, unsigned busy_us, int timeout_ms,
		 struct fab_serve_stats *st)
{
	struct fid *fids[1];
	struct pollfd pfd;
	int64_t deadline, t, busy_end = 0, spin_from = 0; /* last stamp */
	uint64_t wakes;
	unsigned nwakes = 0; /* in this call: none completed anything */
	bool starved = false;
	int ncomp = 0, ret = 0, ms;

	if (!ep)
		return -EINVAL;
	if (ep->wait_fd < 0 || timeout_ms == 0)
		return fab_ep_progress(ep, timeout_ms);
	pthread_mutex_lock(&ep->prog_mu);
	if (ep->leader) {
		pthread_mutex_unlock(&ep->prog_mu);
		return fab_ep_progress(ep, timeout_ms);
	}
	ep->leader = true;
	pthread_mutex_unlock(&ep->prog_mu);

	deadline = deadline_after_ms(timeout_ms);
	wakes = __atomic_load_n(&ep->wakes, __ATOMIC_ACQUIRE);
	fids[0] = &ep->cq->fid;
	pfd.fd = ep->wait_fd;
	for (;;) {
		ret = ep_cq_poll(ep);
		if (ret < 0)
			break;
		ncomp += ret;
		ret = 0;
		if (ncomp > 0 ||
		    __atomic_load_n(&ep->wakes, __ATOMIC_ACQUIRE) != wakes)
			break;
		t = now_ns();
		if (t >= deadline)
			break;
		if (starved) {
			/* no busy window either: the fd is always ready */
			struct timespec ts = { .tv_nsec =
						       FAB_STARVED_SLEEP_NS };

			if (st)
				__atomic_add_fetch(&st->starved_sleeps, 1,
						   __ATOMIC_RELAXED);
			nanosleep(&ts, NULL);
			starved = out_of_descriptors(ep->wait_fd);
			continue;
		}
		if (t < busy_end) {
			/* counted as it goes, so a reader sees a long window */
			if (st)
				__atomic_add_fetch(&st->busy_ns,
						   (uint64_t)(t - spin_from),
						   __ATOMIC_RELAXED);
			spin_from = t;
			pfd.events = POLLIN;
			pfd.revents = 0;
			if (poll(&pfd, 1, 0) > 0)
				busy_end = t + (int64_t)busy_us * 1000;
			else
				sched_yield(); /* a runnable peer goes first */
			continue;
		}
		/* fi_trywait: nothing is pending that the fd would not
		 * show; else progress once more before sleeping. */
		ret = fi_trywait(ep->d->fabric, fids, 1);
		if (ret == -FI_EAGAIN) {
			ret = 0;
			continue;
		}
		if (ret == -FI_ENOSYS) {
			/* a provider whose wait fd cannot be waited on by
			 * hand: fab_ep_progress (fi_cq_sread) from now on */
			ep->wait_fd = -1;
			ret = 0;
			break;
		}
		if (ret) {
			ret = fab_errno(ret);
			break;
		}
		ms = ms_until(deadline, FAB_BLOCK_MAX_MS);
		pfd.events = POLLIN;
		pfd.revents = 0;
		ret = poll(&pfd, 1, ms);
		if (ret < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		ret = 0;
		if (pfd.revents & POLLIN) {
			if (st)
				__atomic_add_fetch(&st->wakeups, 1,
						   __ATOMIC_RELAXED);
			if (++nwakes % FAB_STARVED_CHECK_WAKES == 0 &&
			    out_of_descriptors(ep->wait_fd)) {
				starved = true;
				continue;
			}
			if (busy_us) {
				spin_from = now_ns();
				busy_end = spin_from + (int64_t)busy_us * 1000;
			}
		}
	}
	pthread_mutex_lock(&ep->prog_mu);
	ep->leader = false;
	gen_bump_locked(ep);
	pthread_cond_broadcast(&ep->prog_cv);
	pthread_mutex_unlock(&ep->prog_mu);
	return ret < 0 ? ret : ncomp;
}

int fab_op_wait(struct fab_ep *ep, struct fab_op *op, int timeout_ms)
{
	int ret;

	if (!ep || !op)
		return -EINVAL;
	if (__atomic_load_n(&op->complete, __ATOMIC_ACQUIRE))
		return op->status;
	if (timeout_ms == 0) {
		/* A poll: one look at the CQ unless another thread leads. */
		ret = fab_ep_progress(ep, 0);
		if (__atomic_load_n(&op->complete, __ATOMIC_ACQUIRE))
			return op->status;
		return ret < 0 ? ret : -ETIMEDOUT;
	}
	ret = ep_drive(ep, pred_op_complete, op, deadline_after_ms(timeout_ms),
		       FAB_BLOCK_MAX_MS, NULL);
	if (ret == 0)
		return op->status;
	/* The op may have completed in the turn that hit the deadline. */
	if (__atomic_load_n(&op->complete, __ATOMIC_ACQUIRE))
		return op->status;
	return ret;
}

/* ---- RMA ----------------------------------------------------------- */

struct rma_args {
	void *buf;
	size_t len;
	void *desc;
	fi_addr_t peer;
	uint64_t raddr;
	uint64_t key;
};

/*
 * Common post path: reserves a window slot (progressing until one frees up),
 * links op, then posts, progressing and retrying while the provider says
 * -FI_EAGAIN (rxm says so until its connection to a new peer is up). On any
 * failure op is unlinked and the slot returned.
 *
 * Writes ask for FI_DELIVERY_COMPLETE: the default, transmit-complete, lets
 * tcp report a write done once the bytes left our socket, before the target
 * has placed them (measured: the target buffer still held the old bytes
 * when the completion came). A client that writes, then commits over the
 * control plane, needs the bytes in place first.
 */
static int ep_post(struct fab_ep *ep, int kind, const struct rma_args *a,
		   struct fab_op *op, int timeout_ms)
{
	int64_t deadline = deadline_after_ms(timeout_ms);
	struct iovec iov = { .iov_base = a->buf, .iov_len = a->len };
	struct fi_rma_iov rma = { .addr = a->raddr,
				  .len = a->len,
				  .key = a->key };
	void *desc = a->desc;
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &desc,
		.iov_count = 1,
		.addr = a->peer,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.context = op,
	};
	ssize_t fret;
	int ret;

	if (!ep || !op || (!a->buf && a->len))
		return -EINVAL;
	if (a->len > ep->d->max_msg)
		return -EMSGSIZE;

	pthread_mutex_lock(&ep->mu);
	for (;;) {
		if (ep->broken) {
			pthread_mutex_unlock(&ep->mu);
			return -ESHUTDOWN;
		}
		if (ep->inflight < ep->max_inflight)
			break;
		pthread_mutex_unlock(&ep->mu);
		ret = ep_drive(ep, pred_window_open, NULL, deadline,
			       FAB_BLOCK_MAX_MS, NULL);
		if (ret)
			return ret;
		pthread_mutex_lock(&ep->mu);
	}
	op->status = 0;
	op->len = a->len;
	op->kind = kind;
	__atomic_store_n(&op->complete, 0, __ATOMIC_RELAXED);
	live_link_locked(ep, op);
	if (kind == FAB_OP_READ)
		ep->stats.reads++;
	else
		ep->stats.writes++;
	pthread_mutex_unlock(&ep->mu);

	for (;;) {
		if (kind == FAB_OP_READ)
			fret = fi_readmsg(ep->ep, &msg, FI_COMPLETION);
		else
			fret = fi_writemsg(ep->ep, &msg,
					   FI_COMPLETION |
						   FI_DELIVERY_COMPLETE);
		if (fret == 0)
			return 0;
		if (fret != -FI_EAGAIN) {
			ret = fab_errno((int)fret);
			break;
		}
		ret = ep_progress_turn(ep, deadline);
		if (ret)
			break;
	}

	pthread_mutex_lock(&ep->mu);
	live_unlink_locked(ep, op);
	if (kind == FAB_OP_READ)
		ep->stats.reads--;
	else
		ep->stats.writes--;
	pthread_mutex_unlock(&ep->mu);
	/* A waiter for a window slot may be asleep: tell it one is free. */
	pthread_mutex_lock(&ep->prog_mu);
	gen_bump_locked(ep);
	pthread_cond_broadcast(&ep->prog_cv);
	pthread_mutex_unlock(&ep->prog_mu);
	return ret;
}

int fab_ep_read(struct fab_ep *ep, void *buf, size_t len, void *desc,
		uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		int timeout_ms)
{
	struct rma_args a = { buf, len, desc, peer, raddr, key };

	return ep_post(ep, FAB_OP_READ, &a, op, timeout_ms);
}

int fab_ep_write(struct fab_ep *ep, const void *buf, size_t len, void *desc,
		 uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		 int timeout_ms)
{
	/* fi_write takes a non-const buffer but only reads it. */
	struct rma_args a = { (void *)buf, len, desc, peer, raddr, key };

	return ep_post(ep, FAB_OP_WRITE, &a, op, timeout_ms);
}

void fab_ep_get_stats(struct fab_ep *ep, struct fab_ep_stats *st)
{
	pthread_mutex_lock(&ep->mu);
	*st = ep->stats;
	st->inflight = ep->inflight;
	pthread_mutex_unlock(&ep->mu);
}

/* ---- device memory (FI_HMEM) -------------------------------------- */

bool fab_domain_has_hmem(const struct fab_domain *d, unsigned iface)
{
	return d && (iface == 0 || (iface & ~d->hmem) == 0);
}

int fab_mr_reg_hmem(struct fab_domain *d, struct fab_ep *ep, void *buf,
		    size_t len, unsigned access, unsigned iface, int device,
		    uint64_t requested_key, struct fab_mr **out)
{
	struct fi_mr_attr attr = { 0 };
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fab_mr *m;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!d || !buf || !len || !access ||
	    (access & ~(FAB_ACCESS_LOCAL | FAB_ACCESS_REMOTE |
			FAB_ACCESS_REMOTE_READ)) ||
	    (iface != 0 && iface != FAB_HMEM_CUDA) || device < 0)
		return -EINVAL;
	if (!fab_domain_has_hmem(d, iface))
		return -EOPNOTSUPP;
	if ((d->mr_mode & FAB_MR_ENDPOINT) && !ep)
		return -EINVAL;
	if (ep && ep->d != d)
		return -EINVAL;
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	if (access & FAB_ACCESS_LOCAL)
		attr.access |= FI_READ | FI_WRITE;
	if (access & FAB_ACCESS_REMOTE)
		attr.access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (access & FAB_ACCESS_REMOTE_READ)
		attr.access |= FI_REMOTE_READ;
	attr.requested_key = reg_key(d, requested_key);
	attr.iface = iface == FAB_HMEM_CUDA ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
	attr.device.cuda = device;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = fab_errno(fi_mr_regattr(d->domain, &attr, 0, &m->mr));
	if (ret)
		goto free_m;
	if (d->mr_mode & FAB_MR_ENDPOINT) {
		ret = fab_errno(fi_mr_bind(m->mr, &ep->ep->fid, 0));
		if (!ret)
			ret = fab_errno(fi_mr_enable(m->mr));
		if (ret)
			goto close_mr;
	}
	m->key = fi_mr_key(m->mr);
	if (m->key == FI_KEY_NOTAVAIL) {
		ret = -EOPNOTSUPP; /* FI_MR_RAW only: see fab_mr_reg() */
		goto close_mr;
	}
	m->remote_base = fab_mr_base_for_mode(d->mr_mode, buf);
	*out = m;
	return 0;

close_mr:
	fi_close(&m->mr->fid);
free_m:
	free(m);
	return ret;
}
