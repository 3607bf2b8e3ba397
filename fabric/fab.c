// SPDX-License-Identifier: MIT
/*
 * fabric/fab.c - the libfabric data plane: one RDM provider, its endpoints,
 * memory registrations and one-sided RMA, behind fabric/fab.h.
 *
 * Owns: the fi_info/fabric/domain of a fab_domain; the endpoint, address
 * vector and completion queue of a fab_ep; the fid_mr of a fab_mr. These
 * are the only files that include <rdma/...> (fab*.c; fabric/fab_int.h
 * lists them and what each owns). This file is the provider and its
 * domain.
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
#include "fabric/fab_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* See "Opening and closing" in the invariants above. */
pthread_mutex_t fab_ctl_mu = PTHREAD_MUTEX_INITIALIZER;

/*
 * Quarantined provider objects ("Closing mid-read" above), kept reachable
 * so that leak checkers see them as held, not lost. Guarded by fab_ctl_mu.
 */
struct fab_grave {
	struct fid *fid[3];
	struct fab_grave *next;
};
static struct fab_grave *fab_graves;

/* The API we are written against; newer libraries keep its semantics. */
#define FAB_FI_VERSION FI_VERSION(1, 17)

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
const int fab_crash_sigs[FAB_CRASH_NSIGS] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE,
					      SIGABRT };

bool fab_handler_is_psm(const struct sigaction *sa)
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
	for (size_t i = 0; i < FAB_CRASH_NSIGS; i++) {
		struct sigaction sa;

		if (sigaction(fab_crash_sigs[i], NULL, &sa) == 0 &&
		    fab_handler_is_psm(&sa))
			signal(fab_crash_sigs[i], SIG_DFL);
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
void fab_grave_add_locked(struct fid *a, struct fid *b, struct fid *c)
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
		fab_grave_add_locked(&d->domain->fid, &d->fabric->fid, NULL);
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
