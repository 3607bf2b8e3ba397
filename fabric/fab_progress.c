// SPDX-License-Identifier: MIT
/*
 * fabric/fab_progress.c - progress: reading the CQ and completing ops,
 * the leader/follower turns (fab_ep_progress, fab_op_wait) and the
 * target's loop with busy polling (fab_ep_serve). The design notes
 * (the progress model) and invariants are fabric/fab.c's top comment.
 */
#include "fabric/fab_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

/* ---- progress ------------------------------------------------------ */

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

int fab_ep_cq_poll(struct fab_ep *ep)
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
		ret = fab_ep_cq_poll(ep);
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
		ret = fab_ep_cq_poll(ep);
		if (ret)
			return ret;
		if (nap < FAB_POLL_SLEEP_MAX_NS)
			nap *= 2;
		t = now_ns();
	}
	return 0;
}

/*
 * Progresses ep until pred holds or the deadline passes. Each round this
 * thread either becomes the leader for one turn (ep_lead) or, while
 * another thread leads, sleeps on prog_cv until that leader steps down.
 * block_ms caps a leader's sleep in the provider. *ncomp (may be NULL)
 * accumulates the operations this thread completed.
 * Returns 0 when pred held, -ETIMEDOUT, or -errno from the CQ.
 */
int fab_ep_drive(struct fab_ep *ep, ep_pred pred, void *arg, int64_t deadline,
		 int block_ms, int *ncomp)
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
int fab_ep_progress_turn(struct fab_ep *ep, int64_t deadline)
{
	uint64_t gen = __atomic_load_n(&ep->prog_gen, __ATOMIC_RELAXED);

	return fab_ep_drive(ep, pred_gen_moved, &gen, deadline,
			    FAB_RETRY_BLOCK_MS, NULL);
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
		ret = fab_ep_cq_poll(ep);
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
		ret = fab_ep_drive(ep, pred_gen_moved, &gen, deadline,
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
		ret = fab_ep_cq_poll(ep);
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
	ret = fab_ep_drive(ep, pred_op_complete, op,
			   deadline_after_ms(timeout_ms), FAB_BLOCK_MAX_MS,
			   NULL);
	if (ret == 0)
		return op->status;
	/* The op may have completed in the turn that hit the deadline. */
	if (__atomic_load_n(&op->complete, __ATOMIC_ACQUIRE))
		return op->status;
	return ret;
}
