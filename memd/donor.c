// SPDX-License-Identifier: MIT
/*
 * memd/donor.c - a donor's link to its registry (see donor.h).
 *
 * DESIGN
 * One thread, blocking calls (fabric/rpc) with timeouts. States:
 *   connect -> HELLO -> AUTH "@donor" -> DONOR_JOIN -> report loop
 * Any failure closes the connection and starts over after a backoff of
 * 100 ms doubling to 2 s; a report answered ESTALE (the registry restarted
 * or marked us down) joins again on the same connection. With a list of
 * registries (registry = a:p,b:p: several registries on one etcd, of
 * which one leads), a failure moves on to the next one after 100 ms, and
 * the backoff applies once the whole list has failed; a standby answers
 * EAGAIN, so the donor ends at the leader (and while only standbys answer,
 * an election under way, the backoff stays at 100 ms).
 *
 * Redeemed grant ids wait in a FIFO until a report that carried them is
 * acknowledged; a report carries the oldest WIRE_MAX_REDEEMED. The ids are
 * taken BEFORE the usage snapshot: memd-ctl grants the leases before it
 * queues the id, so a reported id's slabs are always in the reported
 * counts (the registry never counts them zero times; it may count an id
 * queued after the ids were taken twice, for one report interval, which
 * errs on refusing, never on overshooting a quota).
 *
 * Tickets memd-ctl refused for good (memd_donor_refused: it burnt their
 * ids in its replay record first) ride in the same redeemed[] list, to
 * the registry epoch that issued them only, so that it drops their
 * reservations at once instead of when they expire (docs/cluster.md,
 * "Reservation accounting"). Those of an epoch we are not joined to
 * wait, in case we join it, until they expire.
 *
 * Fencing: an etcd registry's REPORT_OK says how long it is sure to be
 * the only one placing (fence_ms); memd_donor_fence says whether that
 * time, counted from when the report was sent, still runs. The link
 * reports at least every half fence so that it does not run out while
 * the registry leads.
 */
#include "memd/donor.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fabric/hostport.h"
#include "fabric/rpc.h"
#include "memd/log.h"
#include "fabric/locked.h"

#define QUEUE_MAX 4096
#define REFUSED_MAX 1024
#define TICKET_SKEW_MS 60000u /* as memd-ctl's expiry check */
#define CALL_TIMEOUT_MS 5000
#define KICK_COALESCE_MS 50
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define MAX_REGISTRIES 9 /* 8 peers and ourselves */

struct memd_donor {
	struct memd_donor_opts o;
	char registry[WIRE_HOSTPORT_MAX]; /* the one tried now */
	char regs[MAX_REGISTRIES][WIRE_HOSTPORT_MAX];
	int nregs, cur;
	char name[WIRE_NAME_MAX];
	char advertise[WIRE_HOSTPORT_MAX];
	char listen[WIRE_HOSTPORT_MAX];

	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, kicked;
	int wake;	    /* eventfd: a kick or stop, for the link's poll */
	uint32_t report_ms; /* memd-donor only: from DONOR_JOIN_OK */
	/* memd-donor only: the protocol of the link in use, the membership
	 * its last report confirmed, and the registry's pushes seen */
	uint16_t proto;
	uint64_t heard_sent;
	uint64_t pushes_seen;

	/* under lock */
	bool joined;
	uint32_t donor_id;
	uint64_t registry_epoch;
	bool drain;
	uint64_t drain_starts;	   /* drain seen going from false to true */
	uint64_t queue[QUEUE_MAX]; /* ring of redeemed ids */
	uint32_t qhead, qlen;
	/* KV allowances of the last REPORT_OK since the last join */
	uint16_t nkv;
	struct wire_kv_allowance kv[WIRE_MAX_TENANTS];
	/* of that REPORT_OK with WIRE_DONOR_TENANTS (kv[] lists every
	 * tenant); 0 without */
	uint32_t next_tenant_id;
	uint64_t reports; /* REPORT_OKs read: memd-ctl sees news */
	/* Membership (memd_donor_membership): each JOIN_OK begins one */
	bool linked;	/* joined on the connection in use now */
	uint64_t joins; /* JOIN_OKs read that began a membership */
	/* the registry's membership sequence of the last JOIN_OK or
	 * REPORT_OK (protocol 5); 0: it sent none */
	uint64_t membership;
	/* the donor list (MEMBERS_OK) last fetched for a new membership:
	 * its sequence (0: none yet), asked for (the fetch is done for
	 * that sequence, listed or not), and its names */
	uint64_t list_membership, list_asked;
	uint16_t nlist;
	char list[WIRE_MAX_DONORS][WIRE_NAME_MAX];
	/* the newest list memd-ctl has acted on (memd_donor_applied;
	 * UINT64_MAX: it keeps no KV) */
	uint64_t applied;
	uint64_t ok_ms;	      /* last JOIN_OK or REPORT_OK (mono_ms) */
	uint32_t interval_ms; /* report_ms, for other threads */
	/* fencing: the last REPORT_OK had WIRE_DONOR_FENCE; tickets of
	 * registry_epoch are good until fence_until_ms (monotonic) */
	bool fenced;
	uint32_t fence_ms;
	uint64_t fence_until_ms;
	/* tickets refused for good, for their registry's next report */
	struct refused {
		uint64_t registry_epoch, grant_id, expires_ms;
	} refused[REFUSED_MAX];
	uint32_t nrefused;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void rpc_log_to_memd(void *arg, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	(void)arg;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	memd_log(level, "donor: %s", line);
}

/* Sleeps up to ms, or until stop (returns true) or a kick. */
static bool wait_ms(struct memd_donor *d, uint64_t ms, bool wake_on_kick)
{
	struct timespec ts;
	bool stop;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&d->lock);
	while (!d->stop && !(wake_on_kick && d->kicked) &&
	       pthread_cond_timedwait(&d->cond, &d->lock, &ts) != ETIMEDOUT)
		;
	stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	return stop;
}

/*
 * The address clients reach us at: advertise, else listen; a wildcard
 * listen host becomes the address our connection to the registry leaves
 * from.
 */
static void advertised(struct memd_donor *d, const char *local_host, char *out,
		       size_t len)
{
	char host[WIRE_HOSTPORT_MAX];
	uint16_t port = 0;

	if (d->advertise[0]) {
		snprintf(out, len, "%s", d->advertise);
		return;
	}
	if (wire_split_hostport(d->listen, host, sizeof(host), &port) ||
	    !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !host[0]) {
		if (strchr(local_host, ':'))
			snprintf(out, len, "[%s]:%u", local_host, port);
		else
			snprintf(out, len, "%s:%u", local_host, port);
		return;
	}
	snprintf(out, len, "%s", d->listen);
}

/* HELLO + AUTH as "@donor". 0 or -errno (-EACCES: wrong cluster secret). */
static int handshake(struct memd_donor *d, struct rpc *c, char *text,
		     size_t textlen)
{
	uint8_t skey[AUTH_KEY_LEN];
	char client[WIRE_NAME_MAX];

	struct wire_hello_ok hello = { 0 };
	int r;

	snprintf(client, sizeof(client), "memd-donor %.52s", d->name);
	r = rpc_handshake(c, client, 2, "@donor", d->o.donor_key,
			  WIRE_ROLE_DONOR, CALL_TIMEOUT_MS, &hello, NULL, skey,
			  text, textlen);
	d->proto = hello.proto;
	d->pushes_seen = 0;
	pthread_mutex_lock(&d->lock);
	d->heard_sent = 0;
	pthread_mutex_unlock(&d->lock);
	return r;
}

/* The membership this donor has acted on (protocol 6, WIRE_REPORT_HEARD):
 * the sequence its link last read, once memd-ctl has acted on that
 * sequence's list (or a newer one). d->lock held. */
static uint64_t heard_locked(const struct memd_donor *d)
{
	return d->membership < d->applied ? d->membership : d->applied;
}

/* Wakes memd-donor: its poll (wait_link) and its timed waits. d->lock
 * held. */
static void wake_locked(struct memd_donor *d)
{
	uint64_t one = 1;

	pthread_cond_broadcast(&d->cond);
	if (write(d->wake, &one, sizeof(one)) < 0) {
		/* the counter is full: it is readable anyway */
	}
}

/*
 * Waits up to ms on the link: until stop (1), a kick (when wake_on_kick),
 * the registry's news (a push read: report now), or the time (0); -errno
 * when the link failed meanwhile (closed by the registry).
 */
static int wait_link(struct memd_donor *d, struct rpc *c, uint64_t ms,
		     bool wake_on_kick)
{
	uint64_t until = mono_ms() + ms, now;

	while ((now = mono_ms()) < until) {
		struct pollfd p[2] = { { .fd = d->wake, .events = POLLIN },
				       { .fd = rpc_fd(c), .events = POLLIN } };
		uint64_t v;
		bool stop, kicked;
		int r;

		r = poll(p, 2, (int)(until - now));
		if (r < 0 && errno != EINTR)
			return -errno;
		if (p[0].revents & POLLIN) {
			if (read(d->wake, &v, sizeof(v)) < 0) {
				/* drained by another read: nothing to do */
			}
		}
		if (p[1].revents) {
			r = rpc_read_pushes(c);
			if (r)
				return r;
			if (rpc_pushes(c) != d->pushes_seen)
				return 0; /* donor_main reports at once */
		}
		pthread_mutex_lock(&d->lock);
		stop = d->stop;
		kicked = d->kicked;
		pthread_mutex_unlock(&d->lock);
		if (stop)
			return 1;
		if (wake_on_kick && kicked)
			return 0;
	}
	return 0;
}

static int join(struct memd_donor *d, struct rpc *c, const char *local_host,
		struct wire_msg *req, struct wire_msg *rep, char *text,
		size_t textlen)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct wire_donor_join *j = &req->u.donor_join;
	bool drain, cont;
	int r;

	memset(req, 0, sizeof(*req));
	req->type = WIRE_DONOR_JOIN;
	snprintf(j->name, sizeof(j->name), "%s", d->name);
	advertised(d, local_host, j->addr, sizeof(j->addr));
	j->epoch = d->o.epoch;
	j->slab_bytes = d->o.slab_bytes;
	j->slabs_total = d->o.slabs_total;
	j->nnodes = d->o.nnodes;
	memcpy(j->node, d->o.node, sizeof(j->node));
	r = rpc_call(c, req, rep, WIRE_DONOR_JOIN_OK, CALL_TIMEOUT_MS, text,
		     textlen);
	if (r)
		return r;
	pthread_mutex_lock(&d->lock);
	if (d->joined &&
	    d->registry_epoch != rep->u.donor_join_ok.registry_epoch) {
		d->qlen = 0; /* a new registry knows none of those grants */
		d->fence_until_ms = 0; /* until its first REPORT_OK */
	}
	d->joined = true;
	d->linked = true;
	/* A JOIN_OK under the very membership this link last read (the
	 * registry restarted, or the link failed, and no donor came or went
	 * meanwhile: a sequence names one list for good) continues it;
	 * any other begins a new one (docs/kv.md). */
	cont = d->membership &&
	       (rep->u.donor_join_ok.flags & WIRE_DONOR_MEMBERSHIP) &&
	       rep->u.donor_join_ok.membership == d->membership;
	if (!cont)
		d->joins++;
	d->membership = rep->u.donor_join_ok.flags & WIRE_DONOR_MEMBERSHIP
				? rep->u.donor_join_ok.membership
				: 0;
	d->ok_ms = mono_ms();
	d->interval_ms = rep->u.donor_join_ok.report_ms;
	d->nkv = 0; /* until this membership's first REPORT_OK */
	d->next_tenant_id = 0;
	d->donor_id = rep->u.donor_join_ok.donor_id;
	d->registry_epoch = rep->u.donor_join_ok.registry_epoch;
	drain = rep->u.donor_join_ok.flags & WIRE_DONOR_DRAIN;
	d->drain_starts += drain && !d->drain;
	d->drain = drain;
	pthread_mutex_unlock(&d->lock);
	d->report_ms = rep->u.donor_join_ok.report_ms;
	memd_log(LOG_NOTICE,
		 "donor: joined registry=%s donor_id=%u name=%s addr=%s "
		 "registry_epoch=%016" PRIx64 " drain=%d membership=%" PRIu64
		 "%s",
		 d->registry, rep->u.donor_join_ok.donor_id,
		 memd_log_quote(d->name, logq, sizeof(logq)),
		 req->u.donor_join.addr, rep->u.donor_join_ok.registry_epoch,
		 d->drain, rep->u.donor_join_ok.membership,
		 cont ? " (continued)" : "");
	return 0;
}

/* One report. Returns 0, -ESTALE (join again) or another -errno. */
static int report(struct memd_donor *d, struct rpc *c, struct wire_msg *req,
		  struct wire_msg *rep, char *text, size_t textlen)
{
	struct wire_donor_report *dr = &req->u.donor_report;
	uint32_t taken, nref = 0, ref_at[WIRE_MAX_REDEEMED];
	uint64_t sent, now_unix = unix_ms(), heard = 0;
	bool drain;
	int r;

	memset(req, 0, sizeof(*req));
	req->type = WIRE_DONOR_REPORT;
	pthread_mutex_lock(&d->lock);
	dr->donor_id = d->donor_id;
	taken = d->qlen < WIRE_MAX_REDEEMED ? d->qlen : WIRE_MAX_REDEEMED;
	for (uint32_t i = 0; i < taken; i++)
		dr->redeemed[i] = d->queue[(d->qhead + i) % QUEUE_MAX];
	/* refused tickets of this registry epoch; those of others that
	 * have expired are dropped (no registry will ask for them) */
	for (uint32_t i = 0; i < d->nrefused;) {
		struct refused *f = &d->refused[i];

		if (f->registry_epoch == d->registry_epoch) {
			if (taken + nref < WIRE_MAX_REDEEMED) {
				ref_at[nref] = i;
				dr->redeemed[taken + nref++] = f->grant_id;
			}
			i++;
		} else if (now_unix > f->expires_ms + TICKET_SKEW_MS) {
			*f = d->refused[--d->nrefused];
		} else {
			i++;
		}
	}
	dr->nredeemed = (uint16_t)(taken + nref);
	d->kicked = false;
	pthread_mutex_unlock(&d->lock);
	dr->epoch = d->o.epoch;
	d->o.snapshot(d->o.arg, dr);
	if (d->proto >= 6) {
		pthread_mutex_lock(&d->lock);
		heard = heard_locked(d);
		pthread_mutex_unlock(&d->lock);
		if (heard) {
			dr->flags |= WIRE_REPORT_HEARD;
			dr->membership = heard;
		}
	}
	sent = mono_ms();
	r = rpc_call(c, req, rep, WIRE_DONOR_REPORT_OK, CALL_TIMEOUT_MS, text,
		     textlen);
	if (r)
		return r;
	pthread_mutex_lock(&d->lock);
	/* The ids taken are the oldest ones: drop them. memd-ctl only
	 * appends to refused[] meanwhile: the entries taken are where they
	 * were; drop them from the highest index down. */
	d->qhead = (d->qhead + taken) % QUEUE_MAX;
	d->qlen -= taken;
	while (nref--)
		d->refused[ref_at[nref]] = d->refused[--d->nrefused];
	if (rep->u.donor_report_ok.flags & WIRE_DONOR_FENCE) {
		d->fenced = true;
		d->fence_ms = rep->u.donor_report_ok.fence_ms;
		d->fence_until_ms = sent + d->fence_ms;
	} else {
		d->fenced = false;
	}
	drain = rep->u.donor_report_ok.flags & WIRE_DONOR_DRAIN;
	if (drain != d->drain)
		memd_log(LOG_NOTICE, "donor: registry says drain=%d", drain);
	d->drain_starts += drain && !d->drain;
	d->drain = drain;
	d->nkv = rep->u.donor_report_ok.nkv;
	memcpy(d->kv, rep->u.donor_report_ok.kv, d->nkv * sizeof(d->kv[0]));
	d->next_tenant_id = rep->u.donor_report_ok.flags & WIRE_DONOR_TENANTS
				    ? rep->u.donor_report_ok.next_tenant_id
				    : 0;
	d->membership = rep->u.donor_report_ok.flags & WIRE_DONOR_MEMBERSHIP
				? rep->u.donor_report_ok.membership
				: 0;
	d->reports++;
	d->ok_ms = mono_ms();
	d->heard_sent = heard;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/*
 * The donor list of the membership the link last read, when that is new
 * (protocol 5, MEMBERS on the donor's link): memd-ctl forgets the entries
 * of keys it no longer ranks first or second for (docs/kv.md). EAGAIN
 * (the registry waits for a restored list's donors) asks again after the
 * next report; another refusal gives up on that sequence. Returns 0 or
 * -errno when the link failed.
 */
static int members(struct memd_donor *d, struct rpc *c, struct wire_msg *req,
		   struct wire_msg *rep, char *text, size_t textlen)
{
	uint64_t want;
	int r;

	pthread_mutex_lock(&d->lock);
	want = d->membership;
	pthread_mutex_unlock(&d->lock);
	if (!want || want == d->list_asked)
		return 0;
	memset(req, 0, sizeof(*req));
	req->type = WIRE_MEMBERS;
	r = rpc_call(c, req, rep, WIRE_MEMBERS_OK, CALL_TIMEOUT_MS, text,
		     textlen);
	if (r == -EAGAIN)
		return 0;
	d->list_asked = want;
	if (r == -EACCES || r == -EOPNOTSUPP || r == -EOVERFLOW) {
		memd_log(LOG_WARNING,
			 "donor: registry=%s refused MEMBERS (%s): keys whose "
			 "homes moved past this donor are kept",
			 d->registry, text);
		return 0;
	}
	if (r)
		return r;
	pthread_mutex_lock(&d->lock);
	d->list_membership = rep->u.donors_ok.membership;
	d->nlist = rep->u.donors_ok.count;
	for (uint16_t i = 0; i < d->nlist; i++) {
		memcpy(d->list[i], rep->u.donors_ok.donor[i].name,
		       WIRE_NAME_MAX);
		d->list[i][WIRE_NAME_MAX - 1] = '\0';
	}
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void *donor_main(void *arg)
{
	struct memd_donor *d = arg;
	struct wire_msg *req = malloc(sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	uint64_t backoff = BACKOFF_MIN_MS;
	int last_err = 0;

	pthread_setname_np(pthread_self(), "memd-donor");
	if (!req || !rep) {
		memd_log(LOG_ERR, "donor: out of memory; not joining");
		goto out;
	}
	for (;;) {
		char local[128] = "", text[WIRE_MSG_MAX] = "";
		struct rpc *c = NULL;
		uint64_t last = 0;
		int r;

		r = rpc_connect(d->registry, CALL_TIMEOUT_MS, &c, local,
				sizeof(local));
		if (!r) {
			rpc_set_log(c, rpc_log_to_memd, d);
			r = handshake(d, c, text, sizeof(text));
		}
		if (!r)
			r = join(d, c, local, req, rep, text, sizeof(text));
		if (!r)
			r = members(d, c, req, rep, text, sizeof(text));
		while (!r) {
			uint64_t now = mono_ms(), due, every = d->report_ms;
			uint64_t pushes;
			bool kicked;

			backoff = BACKOFF_MIN_MS;
			last_err = 0;
			pushes = rpc_pushes(c);
			pthread_mutex_lock(&d->lock);
			/* the registry's news, or a membership acted on
			 * since the last report: confirm it now */
			if (pushes != d->pushes_seen ||
			    (d->proto >= 6 &&
			     heard_locked(d) > d->heard_sent)) {
				d->pushes_seen = pushes;
				d->kicked = true;
			}
			kicked = d->kicked;
			/* renew the fence well before it runs out */
			if (d->fenced && d->fence_ms / 2 < every)
				every = d->fence_ms / 2 ? d->fence_ms / 2 : 1;
			pthread_mutex_unlock(&d->lock);
			due = kicked ? last + KICK_COALESCE_MS : last + every;
			if (last && now < due) {
				r = wait_link(d, c, due - now, !kicked);
				if (r == 1)
					goto stopped;
				continue;
			}
			r = report(d, c, req, rep, text, sizeof(text));
			last = mono_ms();
			if (r == -ESTALE) {
				/* out of the membership until the JOIN_OK
				 * says which one it is in */
				pthread_mutex_lock(&d->lock);
				d->linked = false;
				pthread_mutex_unlock(&d->lock);
				memd_log(LOG_NOTICE,
					 "donor: registry answered ESTALE "
					 "(%s); joining again",
					 text);
				r = join(d, c, local, req, rep, text,
					 sizeof(text));
			}
			if (!r)
				r = members(d, c, req, rep, text, sizeof(text));
		}
		pthread_mutex_lock(&d->lock);
		d->linked = false;
		pthread_mutex_unlock(&d->lock);
		if (r != last_err)
			memd_log(r == -EACCES ? LOG_ERR : LOG_WARNING,
				 "donor: registry=%s err=%s%s%s; retrying",
				 d->registry, strerror(-r), text[0] ? ": " : "",
				 text);
		last_err = r;
		rpc_close(c);
		if (d->nregs > 1) {
			d->cur = (d->cur + 1) % d->nregs;
			memcpy(d->registry, d->regs[d->cur],
			       sizeof(d->registry));
			if (d->cur) {
				if (wait_ms(d, BACKOFF_MIN_MS, false))
					break;
				continue;
			}
		}
		if (wait_ms(d, backoff, false))
			break;
		/* A standby (EAGAIN) is alive and may lead any moment: keep
		 * asking at the shortest interval, so that donors are back
		 * within ~200 ms of an election (docs/cluster.md). */
		if (r == -EAGAIN)
			backoff = BACKOFF_MIN_MS;
		else
			backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
							       : backoff * 2;
		continue;
	stopped:
		rpc_close(c);
		break;
	}
out:
	free(req);
	free(rep);
	return NULL;
}

int memd_donor_start(const struct memd_donor_opts *o, struct memd_donor **out,
		     char *err, size_t errlen)
{
	struct memd_donor *d;
	pthread_condattr_t ca;
	int r;

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->o = *o;
	for (const char *p = o->registry; *p && d->nregs < MAX_REGISTRIES;) {
		size_t n = strcspn(p, ",");

		if (n && n < WIRE_HOSTPORT_MAX)
			snprintf(d->regs[d->nregs++], WIRE_HOSTPORT_MAX, "%.*s",
				 (int)n, p);
		p += n;
		if (*p)
			p++;
	}
	if (!d->nregs) {
		free(d);
		snprintf(err, errlen, "no registry address");
		return -EINVAL;
	}
	memcpy(d->registry, d->regs[0], sizeof(d->registry));
	snprintf(d->name, sizeof(d->name), "%s", o->name);
	snprintf(d->advertise, sizeof(d->advertise), "%s",
		 o->advertise ? o->advertise : "");
	snprintf(d->listen, sizeof(d->listen), "%s", o->listen);
	d->report_ms = 1000;
	d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake < 0) {
		r = -errno;
		snprintf(err, errlen, "donor: eventfd: %s", strerror(-r));
		free(d);
		return r;
	}
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	r = pthread_create(&d->thread, NULL, donor_main, d);
	if (r) {
		snprintf(err, errlen, "donor thread: %s", strerror(r));
		pthread_cond_destroy(&d->cond);
		pthread_mutex_destroy(&d->lock);
		close(d->wake);
		free(d);
		return -r;
	}
	*out = d;
	return 0;
}

void memd_donor_stop(struct memd_donor *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	wake_locked(d);
	pthread_mutex_unlock(&d->lock);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	close(d->wake);
	free(d);
}

void memd_donor_kick(struct memd_donor *d)
{
	pthread_mutex_lock(&d->lock);
	d->kicked = true;
	wake_locked(d);
	pthread_mutex_unlock(&d->lock);
}

void memd_donor_applied(struct memd_donor *d, uint64_t membership)
{
	pthread_mutex_lock(&d->lock);
	if (membership > d->applied) {
		d->applied = membership;
		if (heard_locked(d) > d->heard_sent) {
			d->kicked = true;
			wake_locked(d);
		}
	}
	pthread_mutex_unlock(&d->lock);
}

bool memd_donor_state(struct memd_donor *d, uint32_t *donor_id,
		      uint64_t *registry_epoch, bool *drain)
{
	bool joined;

	pthread_mutex_lock(&d->lock);
	joined = d->joined;
	*donor_id = d->donor_id;
	*registry_epoch = d->registry_epoch;
	*drain = d->drain;
	pthread_mutex_unlock(&d->lock);
	return joined;
}

uint64_t memd_donor_members(struct memd_donor *d, char (*names)[WIRE_NAME_MAX],
			    uint16_t *n, char *self, size_t selflen)
{
	uint64_t m;

	pthread_mutex_lock(&d->lock);
	m = d->list_membership;
	*n = d->nlist;
	memcpy(names, d->list, (size_t)d->nlist * WIRE_NAME_MAX);
	pthread_mutex_unlock(&d->lock);
	snprintf(self, selflen, "%s", d->name);
	return m;
}

bool memd_donor_membership(struct memd_donor *d, uint64_t *joins,
			   uint64_t *membership)
{
	uint64_t now = mono_ms();
	bool up;

	pthread_mutex_lock(&d->lock);
	*joins = d->joins;
	if (membership)
		*membership = d->membership;
	/* the registry marks a donor down after 3 missed reports, counted
	 * from the last one it received: before the REPORT_OK we read */
	up = d->linked && now - d->ok_ms <= 3 * (uint64_t)d->interval_ms -
						    d->interval_ms / 2;
	pthread_mutex_unlock(&d->lock);
	return up;
}

uint64_t memd_donor_report_age_ms(struct memd_donor *d, unsigned *interval_ms)
{
	uint64_t now = mono_ms(), age;

	pthread_mutex_lock(&d->lock);
	age = d->ok_ms ? now - d->ok_ms : UINT64_MAX;
	*interval_ms = (unsigned)d->interval_ms;
	pthread_mutex_unlock(&d->lock);
	return age;
}

bool memd_donor_fence(struct memd_donor *d, uint64_t registry_epoch,
		      uint64_t now_ms, uint64_t *late_ms)
{
	bool ok;

	pthread_mutex_lock(&d->lock);
	ok = d->joined && d->registry_epoch == registry_epoch &&
	     (!d->fenced || now_ms < d->fence_until_ms);
	if (late_ms)
		*late_ms = ok || now_ms < d->fence_until_ms
				   ? 0
				   : now_ms - d->fence_until_ms;
	pthread_mutex_unlock(&d->lock);
	return ok;
}

int memd_donor_refused(struct memd_donor *d, uint64_t registry_epoch,
		       uint64_t grant_id, uint64_t expires_ms)
{
	int r = 0;

	pthread_mutex_lock(&d->lock);
	if (d->nrefused == REFUSED_MAX)
		r = -EBUSY;
	else
		d->refused[d->nrefused++] =
			(struct refused){ registry_epoch, grant_id,
					  expires_ms };
	if (!r && d->joined && d->registry_epoch == registry_epoch) {
		d->kicked = true;
		wake_locked(d);
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

bool memd_donor_refused_room(struct memd_donor *d)
{
	return TP_LOCKED_READ(&d->lock, d->nrefused < REFUSED_MAX);
}

uint64_t memd_donor_drain_starts(struct memd_donor *d)
{
	return TP_LOCKED_READ(&d->lock, d->drain_starts);
}

int memd_donor_redeemed(struct memd_donor *d, uint64_t grant_id)
{
	int r = 0;

	pthread_mutex_lock(&d->lock);
	if (d->qlen == QUEUE_MAX)
		r = -EBUSY;
	else
		d->queue[(d->qhead + d->qlen++) % QUEUE_MAX] = grant_id;
	pthread_mutex_unlock(&d->lock);
	return r;
}

bool memd_donor_tenant_removed(struct memd_donor *d, uint32_t tenant,
			       uint64_t *reports)
{
	bool removed = false;

	pthread_mutex_lock(&d->lock);
	if (reports)
		*reports = d->reports;
	if (tenant && tenant < d->next_tenant_id) {
		removed = true;
		for (uint16_t i = 0; i < d->nkv && removed; i++)
			removed = d->kv[i].tenant_id != tenant;
	}
	pthread_mutex_unlock(&d->lock);
	return removed;
}

bool memd_donor_kv_allowance(struct memd_donor *d, uint32_t tenant,
			     uint32_t *max_slabs)
{
	bool found = false;

	pthread_mutex_lock(&d->lock);
	for (uint16_t i = 0; i < d->nkv && !found; i++) {
		if (d->kv[i].tenant_id == tenant) {
			*max_slabs = d->kv[i].kv_slabs_max;
			found = true;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return found;
}
