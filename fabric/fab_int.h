// SPDX-License-Identifier: MIT
/*
 * fabric/fab_int.h - what the files of the libfabric data plane share:
 * the domain, endpoint and registration structures, the progress
 * tuning, the time helpers, and the functions one file calls in another.
 * Private to fabric/fab*.c; fabric/fab.h is the API. One concern a file:
 *
 * fabric/fab.c           the provider and its domain: fi_getinfo, the
 *                        FI_* defaults, crash handlers, error mapping,
 *                        quarantined domains; the design notes (top)
 * fabric/fab_mr.c        memory registrations, host and device (FI_HMEM)
 * fabric/fab_ep.c        endpoints: open, close or quarantine, peers
 * fabric/fab_progress.c  completions and progress: leader/follower turns,
 *                        fab_ep_progress, fab_ep_serve, fab_op_wait
 * fabric/fab_rma.c       posting RMA reads and writes
 * fabric/fab_dl.c        libfabric loaded on first use (preload shim only)
 */
#ifndef TP_FABRIC_FAB_INT_H
#define TP_FABRIC_FAB_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/dlist.h"
#include "fabric/fab.h"

/* See "Opening and closing" in the invariants (fabric/fab.c, top). */
extern pthread_mutex_t fab_ctl_mu;

/*
 * The signals the psm libraries' constructors catch, and whether sa is a
 * handler of theirs (fabric/fab.c, "Crash signals"); fab.c resets
 * theirs, fab_dl.c puts back the one in place before its dlopen().
 */
#define FAB_CRASH_NSIGS 5
extern const int fab_crash_sigs[FAB_CRASH_NSIGS];
struct sigaction;
bool fab_handler_is_psm(const struct sigaction *sa);

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

/* ---- time ---------------------------------------------------------- */

#define FAB_NEVER INT64_MAX

static inline int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Absolute deadline of a timeout_ms argument (-1 or below: never). */
static inline int64_t deadline_after_ms(int timeout_ms)
{
	if (timeout_ms < 0)
		return FAB_NEVER;
	return now_ns() + (int64_t)timeout_ms * 1000000;
}

/* Milliseconds until deadline, rounded up, at most cap_ms (>= 0). */
static inline int ms_until(int64_t deadline, int cap_ms)
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

static inline void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000,
			       .tv_nsec = ns % 1000000000 };

	nanosleep(&ts, NULL);
}

/* Caller holds ep->mu. */
static inline void live_unlink_locked(struct fab_ep *ep, struct fab_op *op)
{
	TP_DLIST_REMOVE(ep->live, op, prev_live, next_live);
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
static inline void op_finish(struct fab_op *op, int status)
{
	op->status = status;
	if (status)
		op->len = 0;
	if (op->done)
		op->done(op);
	__atomic_store_n(&op->complete, 1, __ATOMIC_RELEASE);
}

/* Caller holds prog_mu. Atomic only for pred_gen_moved's peek. */
static inline void gen_bump_locked(struct fab_ep *ep)
{
	__atomic_store_n(&ep->prog_gen, ep->prog_gen + 1, __ATOMIC_RELAXED);
}

/* Predicate of fab_ep_drive; called without locks, must be cheap. */
typedef bool (*ep_pred)(struct fab_ep *ep, void *arg);

/* fab.c */
void fab_grave_add_locked(struct fid *a, struct fid *b, struct fid *c);

/* fab_progress.c */
int fab_ep_cq_poll(struct fab_ep *ep);
int fab_ep_drive(struct fab_ep *ep, ep_pred pred, void *arg, int64_t deadline,
		 int block_ms, int *ncomp);
int fab_ep_progress_turn(struct fab_ep *ep, int64_t deadline);

#endif
