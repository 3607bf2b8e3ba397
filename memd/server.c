// SPDX-License-Identifier: MIT
/*
 * memd/server.c - the control loop, leases over the fabric, reclaim.
 *
 * DESIGN
 * One epoll loop on memd-ctl owns every connection and is the only thread
 * that decodes frames, grants, releases, renews and expires. A connection
 * has bounded buffers: rx holds at most one frame (WIRE_MAX_FRAME); while
 * more than one frame of replies waits in tx the loop stops reading that
 * client (backpressure), so a client that never reads costs at most two
 * frames of memory. A malformed frame gets an ERROR reply and the
 * connection is closed; bad magic or version closes it at once. Nothing a
 * peer sends can crash memd or make it allocate without bound. A peer
 * that shuts down its sending side (RDHUP) is served what it sent as far
 * as its socket takes the replies at once, then closed, even when the
 * EOF still sits behind a full rx: level-triggered RDHUP would otherwise
 * fire on every pass for a peer that never reads.
 *
 * Admission (docs/reliability.md): no peer can hold connection slots it
 * does not use. A connection is in its handshake from accept until HELLO
 * (standalone) or AUTH (in a pool) succeeds; those connections sit on a
 * queue in accept order. handshake_timeout after accept one is closed;
 * while max_clients are taken, a new connection displaces the oldest in
 * its handshake (an idle attacker's, before any fresh client's), and is
 * refused only when all are established. One address may have at most
 * max_clients_per_host in its handshake (the same displacement within
 * the address) and as many established, operators not counted. In a
 * pool, tenants may hold at most max_clients - reserved_clients
 * (reserved_clients at most half of max_clients), so a new @admin or
 * @donor connection always gets in while operators hold fewer than the
 * reserve. Established connections that send no request for
 * idle_timeout are closed. At EMFILE/ENFILE accept gives up a reserve
 * descriptor to take, answer and close the pending connection (else the
 * listener would fire forever); failing that, the listener is paused for
 * a tick. Lines a peer can make repeat are rate-limited (memd/log.h).
 * What a client may hold is bounded too: max_sessions_per_tenant live
 * sessions of a tenant (checked at AUTH_PROOF), max_leases_per_session
 * leases of a session (grant_request), kv_max_reserved pending KV
 * reservations of a tenant (the store).
 *
 * A lease is a slab, a fresh memory registration with a random key, and a
 * generation. Revocation (release, BYE, session expiry) closes the
 * registration first (from then on no new RMA can reach the slab), then
 * the slab waits quiesce_ms for transfers the provider had already
 * accepted, then memd-reclaim zeroes it and only then is it free again.
 *
 * NUMA: the donation is one arena per configured node (one arena, node
 * -1, without numa_nodes). Arena a holds slabs [a * per, (a + 1) * per)
 * of the one lease table, which knows them as group a. Each arena has
 * progress_threads endpoints (P; endpoints a*P .. a*P+P-1), each with its
 * own fabric domain and endpoint (bound near the node's NIC) and its own
 * progress thread memd-fab<e>, pinned to the node's CPUs; slab i of the
 * arena belongs to its endpoint i % P (slab_aep), so consecutive slabs
 * spread over the threads. A slab is registered on its endpoint's
 * domain, so its key opens it only through that endpoint. A LEASE for
 * node n grants from n's arena; for -1 from the arena with the most free
 * slabs, spilling to the next fullest.
 *
 * memd-fab<e> progresses endpoint e (fab_ep_serve): with a manual-progress
 * provider (tcp) RMA from clients is served only while someone reads the
 * CQ. After a request wakes it, it polls for busy_poll_us before it
 * sleeps again (0 by default: on a host with fewer cores than busy
 * threads the polling takes the client's core).
 *
 * memd-metrics (memd/metrics.c, only with metrics_listen) answers GET
 * /metrics from write_metrics(): it reads the counters with relaxed
 * atomics (every increment is one), the lease table under its lock, and
 * fields fixed at creation. memd_server_destroy stops it first.
 *
 * KV tier (docs/kv.md): one store (memd/kvstore) holds every tenant's
 * KV index; memd-ctl is its only caller, except memd-metrics reading its
 * statistics. The store asks for memory through kv_slab_get: a free slab
 * leased to the tenant's internal KV session (one per tenant, opened on
 * first use, renewed every tick so it never expires, counted as the
 * tenant's usage in donor reports), registered with a random key like a
 * lease, within the tenant's kv_share of the donation and, in a cluster,
 * within the KV allowance the registry last gave this donor for the
 * tenant (docs/cluster.md, "KV memory and quotas"). kv_slab_put gives
 * it back through the normal path: close the registration, release the
 * lease, quiesce, zero. A KV location is built from the slab's own
 * registration and only ever for a session of the slab's tenant.
 *
 * Invariants: srv->mr[i] != NULL iff slab i is LEASED (to a client
 * session or to a KV session); srv->mr_ro[i] != NULL iff slab i is a
 * KV slab (its read-only registration, whose key LOOKUP hands out);
 * kvs[i].used iff slab i is a KV slab; every
 * session pointer held by a connection is attached (detached on close);
 * a connection is on the handshake queue iff it is not established, and
 * ntenant counts the established ones that are not @admin or @donor;
 * the arenas are all per * slab_bytes long.
 */
#include "memd/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "fabric/auth.h"
#include "fabric/fab.h"
#include "fabric/hostport.h"
#include "fabric/wire.h"
#include "memd/donor.h"
#include "memd/kvstore.h"
#include "memd/lease.h"
#include "memd/log.h"
#include "memd/metrics.h"
#include "memd/notify.h"
#include "memd/nodes.h"
#include "memd/redeem.h"
#include "memd/registry.h"
#include "numa/place.h"

_Static_assert(MEMD_NUMA_NODES_MAX <= WIRE_MAX_ENDPOINTS &&
		       MEMD_NUMA_NODES_MAX <= WIRE_MAX_NODES,
	       "every arena needs an endpoint and a STATUS entry on the wire");
_Static_assert(WIRE_NODE_MAX == PLACE_NODE_MAX,
	       "the wire carries every node numa/ can name");

#define TX_HIGH_WATER WIRE_MAX_FRAME
#define TX_CAP (2 * WIRE_MAX_FRAME)
#define RX_INITIAL 4096
#define TICK_MS 100

/* Counters are written on memd-ctl (memd-reclaim adds slabs_zeroed) and
 * read on memd-metrics; each is a statistic of its own, so relaxed
 * atomics are all the ordering they need. */
#define CTR_ADD(s, name, n)                                                    \
	__atomic_add_fetch(&(s)->ctr.name, (n), __ATOMIC_RELAXED)

struct conn {
	int fd;
	uint8_t *rx;
	size_t rx_len, rx_cap;
	uint8_t *tx;
	size_t tx_len, tx_off;
	struct memd_session *session;
	/* the id HELLO gave session, for log lines: still set after BYE
	 * closed the session (the connection's close line names it) */
	uint64_t session_id;
	/* Authentication (docs/cluster.md). auth is AUTH_NONE until AUTH,
	 * CHALLENGED until a good AUTH_PROOF, then DONE with role set. */
	enum { AUTH_NONE = 0, AUTH_CHALLENGED, AUTH_DONE } auth;
	uint8_t role; /* enum wire_role, once DONE */
	char principal[WIRE_NAME_MAX];
	uint32_t tenant_id;	    /* role TENANT */
	uint8_t key[AUTH_KEY_LEN];  /* the principal's (or the pass) key */
	uint8_t skey[AUTH_KEY_LEN]; /* session key, once DONE */
	uint8_t cnonce[WIRE_NONCE_LEN], snonce[WIRE_NONCE_LEN];
	uint8_t ident[AUTH_IDENT_LEN]; /* the tenant's identity, at AUTH */
	/* role TENANT: whose its KV spill files are (spill_binding) */
	uint8_t spill_bind[MEMD_KV_BIND_BYTES];
	const char *auth_fail; /* why the proof will fail; NULL: it may pass */
	bool via_pass;	       /* authenticated with a donor pass */
	uint16_t proto;	       /* negotiated in HELLO */
	uint32_t donor_id;     /* at the registry: a joined donor's link */
	uint64_t donor_epoch;
	uint64_t hb_read, hb_written; /* last HEARTBEAT2 counters */
	bool closing;		      /* close once tx is flushed */
	bool reading;		      /* EPOLLIN armed */
	bool writing;		      /* EPOLLOUT armed */
	/* Admission (docs/reliability.md). A connection is in its
	 * handshake, and on the server's handshake queue, from accept
	 * until HELLO (standalone) or AUTH (in a pool) succeeds; then it
	 * is established, as an operator (@admin, @donor) or not. */
	bool established;
	bool cluster;		     /* established as @admin or @donor */
	uint64_t accepted_ms;	     /* when accepted: the handshake deadline */
	uint64_t last_rx_ms;	     /* last frame decoded: the idle deadline */
	char host[INET6_ADDRSTRLEN]; /* peer address, numeric */
	char peer[64];
	struct conn *next, *prev;
	struct conn *hs_next, *hs_prev; /* handshake queue, oldest first */
};

/*
 * One endpoint of an arena and what serves it: its own fabric domain and
 * endpoint, and the progress thread memd-fab<index>. An arena has
 * progress_threads of them (consecutive indexes); its slabs take turns
 * over them (slab_aep). fence counts that thread's finished progress
 * calls (under the server's rlock).
 */
struct arena_ep {
	struct memd_server *srv;
	uint32_t index;
	struct memd_arena *arena;
	int node;		  /* arena->node: -1 without NUMA placement */
	char bind[MEMD_BIND_MAX]; /* address the endpoint is bound to */
	struct fab_domain *fd;
	struct fab_ep *ep;
	uint8_t addr[FAB_ADDR_MAX];
	size_t addr_len;
	pthread_t thread;
	bool started;
	uint64_t fence;
	/* what memd-fab<index> did (fab_ep_serve adds, memd-metrics reads:
	 * atomics) */
	struct fab_serve_stats st;
};

struct memd_server {
	struct memd_config cfg;
	memd_config_builder rebuild;
	void *rebuild_arg;
	const struct place_topo *topo; /* NULL without NUMA placement */
	uint64_t epoch;
	uint64_t start_ms;
	/* the cost model (kv_bytes_per_token, kv_prefill_tokens_per_s):
	 * copies the metrics thread reads atomically; memd-ctl writes them
	 * at start and reload */
	uint64_t kv_cost_bpt;
	uint32_t kv_cost_tps;
	uint64_t reg_awake_ms; /* memd-ctl: when it last checked for a stall */
	uint32_t nslabs;
	uint32_t arena_slabs; /* slabs per arena */
	uint64_t donated_bytes;

	/* endpoints: arena a's are aep[a * per_arena .. + per_arena - 1] */
	struct arena_ep aep[WIRE_MAX_ENDPOINTS];
	uint32_t nep;	    /* narenas * per_arena */
	uint32_t per_arena; /* progress_threads, resolved */
	uint32_t narenas;
	struct fab_mr **mr; /* per slab; non-NULL while leased */
	uint64_t *key;	    /* per slab; valid while leased */
	/* per slab: its last registration close failed, so it must not be
	 * leased again (set on memd-ctl under the lease table lock, read by
	 * memd-reclaim after taking the slab from the table) */
	bool *mr_stuck;
	/* per KV slab: a second registration peers may only read, whose
	 * key KV_LOOKUP hands out (readers never get write access) */
	struct fab_mr **mr_ro;
	uint64_t *key_ro;

	struct memd_lease_table *lt;

	int lfd, epfd, sigfd;
	struct conn *conns;
	uint32_t nconns;
	bool draining;
	uint64_t removals_seen; /* memd_donor_tenant_removed's reports */
	uint64_t drains_seen;	/* memd_donor_drain_starts, KV forgotten */
	/* Admission (docs/reliability.md); memd-ctl only. */
	struct conn *hs_head, *hs_tail; /* in their handshake, oldest first */
	uint32_t ntenant; /* established, not as @admin or @donor */
	int reserve_fd;	  /* /dev/null, given up to shed at EMFILE */
	bool accept_off;  /* listener disarmed until accept_on_ms */
	uint64_t accept_on_ms;
	uint64_t idle_scan_ms; /* next scan for idle connections */
	struct memd_log_limit ll_accept, ll_refuse, ll_shed, ll_evict,
		ll_timeout, ll_auth, ll_frame;

	pthread_t reclaim_thread;
	bool reclaim_started;
	volatile int stop;     /* threads stop when set */
	pthread_mutex_t rlock; /* reclaim wakeups, progress fences */
	pthread_cond_t rcond;
	/* Progress fence: memd-fab<a> bumps aep[a].fence after every
	 * progress call, under rlock, and broadcasts fence_cond. */
	pthread_cond_t fence_cond;

	struct memd_counters ctr; /* written by memd-ctl; reclaim adds */
	/* busy_poll_us as the progress threads read it (atomic; memd-ctl
	 * stores it at start and on SIGHUP) */
	uint32_t busy_poll_us;

	/* cluster (docs/cluster.md) */
	enum { MODE_STANDALONE = 0, MODE_REGISTRY, MODE_DONOR } mode;
	struct auth_cluster_keys keys;
	/* KV spill binding (spill_binding): the pool's key for it (in a
	 * pool), and the one binding of a standalone memd's tenant 0 */
	uint8_t spill_pool[AUTH_KEY_LEN];
	uint8_t solo_bind[MEMD_KV_BIND_BYTES];
	struct memd_registry *reg; /* MODE_REGISTRY */
	pthread_t etcd_thread;	   /* memd-etcd: registry = etcd */
	bool etcd_started;
	struct memd_donor *donor;     /* MODE_REGISTRY and MODE_DONOR */
	struct memd_redeem *redeemed; /* redeemed tickets; memd-ctl only */
	/* its stats as memd-ctl last copied them (atomic): for /metrics */
	struct memd_redeem_stats redeem_st;
	uint64_t rma_read, rma_written; /* clients' HEARTBEAT2 totals */
	struct memd_metrics *metrics;	/* GET /metrics; NULL: not asked for */
	char bound[300];		/* listen address, port 0 resolved */

	/* KV tier. kv and kvs: memd-ctl only (memd-metrics reads kv's
	 * statistics, which has its own lock). kvt: written on memd-ctl
	 * under kvlock, read under it by memd-metrics and memd-donor. */
	struct memd_kv *kv;
	struct kv_slab {
		uint32_t generation; /* of its lease to the KV session */
		uint32_t tenant_id;
		bool used;
	} * kvs; /* per slab */
	pthread_mutex_t kvlock;
	struct kv_tenant {
		uint32_t tenant_id;
		/* KV slabs it holds: written on memd-ctl under kvlock, after
		 * the slab's lease is granted and before it is released, so
		 * a report's snapshot (under kvlock) counts each one as
		 * leased too */
		uint32_t slabs;
		struct memd_session *ses;
		uint64_t first_ms;  /* opened: the start of its rates */
		uint32_t cap_slabs; /* last kv_cap_slabs, for /metrics */
	} * kvt;
	uint32_t nkvt, kvt_cap;
};

#define TICKET_SKEW_MS 60000u /* a ticket is good this long past its end */
#define TICKET_TTL_MS 30000u  /* the registry's tickets' life */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* threads                                                              */

/* The first endpoint of arena a: what the arena's own fields are read
 * from (arena, node). */
static struct arena_ep *arena_aep(struct memd_server *s, uint32_t a)
{
	return &s->aep[a * s->per_arena];
}

/* The endpoint that serves a slab: its arena's slabs take turns over the
 * arena's endpoints, so consecutive slabs (a large region's, a tenant's
 * KV slabs) land on different progress threads. */
static struct arena_ep *slab_aep(struct memd_server *s, uint32_t slab)
{
	uint32_t a = slab / s->arena_slabs;

	return &s->aep[a * s->per_arena + slab % s->arena_slabs % s->per_arena];
}

/* Byte 0 of a slab in memd's address space. */
static uint8_t *slab_base(struct memd_server *s, uint32_t slab)
{
	struct arena_ep *a = slab_aep(s, slab);

	return (uint8_t *)a->arena->base +
	       (uint64_t)(slab % s->arena_slabs) * s->cfg.slab_bytes;
}

static void *fab_main(void *arg)
{
	struct arena_ep *a = arg;
	struct memd_server *s = a->srv;
	char name[16];

	snprintf(name, sizeof(name), "memd-fab%u", a->index);
	pthread_setname_np(pthread_self(), name);
	if (s->topo && a->node >= 0) {
		/* RMA into the node's memory is served from its own CPUs. */
		int r = place_bind_thread_to_node(s->topo, a->node);

		if (r)
			memd_log(LOG_WARNING,
				 "fabric: cannot pin thread=%s node=%d err=%s",
				 name, a->node, strerror(-r));
		else
			memd_log(LOG_DEBUG, "fabric: pinned thread=%s node=%d",
				 name, a->node);
	}
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		int r = fab_ep_serve(
			a->ep,
			__atomic_load_n(&s->busy_poll_us, __ATOMIC_RELAXED),
			TICK_MS, &a->st);

		if (r < 0 && r != -ETIMEDOUT && r != -EAGAIN) {
			memd_log(LOG_WARNING,
				 "fabric: progress endpoint=%u err=%s",
				 a->index, strerror(-r));
			usleep(10000);
		}
		pthread_mutex_lock(&s->rlock);
		a->fence++;
		pthread_cond_broadcast(&s->fence_cond);
		pthread_mutex_unlock(&s->rlock);
	}
	pthread_mutex_lock(&s->rlock);
	a->fence = UINT64_MAX; /* nobody waits on a stopped progress thread */
	pthread_cond_broadcast(&s->fence_cond);
	pthread_mutex_unlock(&s->rlock);
	return NULL;
}

/*
 * Waits until the progress thread of every endpoint in mask (bit a:
 * endpoint a)
 * has finished two progress calls that started after this call: whatever
 * the provider did with a slab's memory in a progress call under way when
 * its registration was closed is then over. Together with the quiesce
 * delay this orders the reclaimer's memset after the provider's last
 * access (design.md, "Known limits", says what remains).
 */
static void wait_progress_fence(struct memd_server *s, uint32_t mask)
{
	uint64_t target[WIRE_MAX_ENDPOINTS];
	uint32_t a;

	pthread_mutex_lock(&s->rlock);
	for (a = 0; a < s->nep; a++)
		target[a] = s->aep[a].fence >= UINT64_MAX - 2
				    ? UINT64_MAX
				    : s->aep[a].fence + 2;
	for (a = 0; a < s->nep; a++) {
		while ((mask >> a & 1) && s->aep[a].fence < target[a]) {
			struct timespec ts;

			/* An idle progress thread sleeps TICK_MS in the
			 * provider: wake it rather than wait that out, so a
			 * freed slab is free again in microseconds, not
			 * 2 * TICK_MS (docs/bench/registry.md). */
			pthread_mutex_unlock(&s->rlock);
			fab_ep_wake(s->aep[a].ep);
			pthread_mutex_lock(&s->rlock);
			if (s->aep[a].fence >= target[a])
				break;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += 2000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&s->fence_cond, &s->rlock, &ts);
		}
	}
	pthread_mutex_unlock(&s->rlock);
}

static void *reclaim_main(void *arg)
{
	struct memd_server *s = arg;
	uint32_t batch[64];

	pthread_setname_np(pthread_self(), "memd-reclaim");
	for (;;) {
		uint64_t t = now_ms();
		size_t n = memd_lease_take_reclaim(s->lt, t, batch, 64);
		uint32_t mask = 0;

		for (size_t i = 0; i < n; i++)
			mask |= 1u << slab_aep(s, batch[i])->index;
		if (n)
			wait_progress_fence(s, mask);
		for (size_t i = 0; i < n; i++) {
			uint8_t *p = slab_base(s, batch[i]);

			/* zeroed all the same: the old tenant's bytes go */
			memset(p, 0, s->cfg.slab_bytes);
			if (__atomic_load_n(&s->mr_stuck[batch[i]],
					    __ATOMIC_RELAXED)) {
				memd_lease_quarantine(s->lt, batch[i]);
				memd_log(LOG_WARNING,
					 "reclaim: slab=%u quarantined (its "
					 "registration did not close)",
					 batch[i]);
				continue;
			}
			memd_lease_reclaimed(s->lt, batch[i]);
			__atomic_add_fetch(&s->ctr.slabs_zeroed, 1,
					   __ATOMIC_RELAXED);
			memd_log(LOG_DEBUG, "reclaim: zeroed slab=%u",
				 batch[i]);
		}
		if (n) {
			/* Free again: tell the registry now, not at the next
			 * periodic report, or it refuses placements meanwhile. */
			struct memd_donor *d =
				__atomic_load_n(&s->donor, __ATOMIC_ACQUIRE);

			if (d)
				memd_donor_kick(d);
			continue;
		}
		pthread_mutex_lock(&s->rlock);
		if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
			pthread_mutex_unlock(&s->rlock);
			break;
		}
		int64_t wait = memd_lease_next_reclaim_ms(s->lt, now_ms());
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (wait < 0 || wait > 1000)
			wait = 1000;
		ts.tv_sec += wait / 1000;
		ts.tv_nsec += (wait % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->rcond, &s->rlock, &ts);
		pthread_mutex_unlock(&s->rlock);
	}
	return NULL;
}

static void reclaim_kick(struct memd_server *s)
{
	pthread_mutex_lock(&s->rlock);
	pthread_cond_signal(&s->rcond);
	pthread_mutex_unlock(&s->rlock);
}

/* Runs under the lease table lock for each revoked lease: from here on the
 * key opens nothing. */
static void revoke_mr(uint32_t slab, void *arg)
{
	struct memd_server *s = arg;
	int r = fab_mr_close(s->mr[slab]);
	int r_ro = fab_mr_close(s->mr_ro[slab]);

	if (!r)
		r = r_ro;
	s->mr_ro[slab] = NULL;
	s->key_ro[slab] = 0;
	if (r) {
		/* The old key may still open the slab: it must never reach
		 * another session (memd-reclaim quarantines it). */
		memd_log(LOG_ERR,
			 "fabric: mr close slab=%u err=%s: slab quarantined",
			 slab, strerror(-r));
		__atomic_store_n(&s->mr_stuck[slab], true, __ATOMIC_RELAXED);
	}
	s->mr[slab] = NULL;
	s->key[slab] = 0;
}

static void count_expired(uint32_t slab, void *arg)
{
	struct memd_server *s = arg;

	CTR_ADD(s, leases_expired, 1);
	revoke_mr(slab, arg);
}

/* The tenant's KV entry, or NULL. Caller holds kvlock (or is memd-ctl,
 * the only writer). */
static const struct kv_tenant *kv_tenant_find_locked(struct memd_server *s,
						     uint32_t tenant)
{
	for (uint32_t i = 0; i < s->nkvt; i++)
		if (s->kvt[i].tenant_id == tenant)
			return &s->kvt[i];
	return NULL;
}

/* How many of the sessions memd_lease_tenant_usage() counts for tenant
 * are KV sessions (0 or 1). Any thread. */
static uint32_t kv_sessions_of(struct memd_server *s, uint32_t tenant)
{
	uint32_t n;

	pthread_mutex_lock(&s->kvlock);
	n = kv_tenant_find_locked(s, tenant) ? 1 : 0;
	pthread_mutex_unlock(&s->kvlock);
	return n;
}

/* Client sessions: every open session but the KV sessions. */
static uint32_t client_sessions(struct memd_server *s, uint32_t sessions)
{
	uint32_t k = __atomic_load_n(&s->nkvt, __ATOMIC_RELAXED);

	return sessions > k ? sessions - k : 0;
}

/* ------------------------------------------------------------------ */
/* connections                                                          */

static int epoll_mod(struct memd_server *s, struct conn *c)
{
	struct epoll_event ev = {
		.events = (c->reading ? EPOLLIN : 0u) |
			  (c->writing ? EPOLLOUT : 0u) | EPOLLRDHUP,
		.data.ptr = c,
	};

	return epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev) ? -errno : 0;
}

/* Takes c off the handshake queue (a no-op when it is not on it). */
static void hs_remove(struct memd_server *s, struct conn *c)
{
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else if (s->hs_head == c)
		s->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	else if (s->hs_tail == c)
		s->hs_tail = c->hs_prev;
	c->hs_next = c->hs_prev = NULL;
}

/* Connections of max_clients that tenants may not hold: in a pool only,
 * and never more than half. */
static uint32_t reserved_slots(const struct memd_server *s)
{
	if (s->mode == MODE_STANDALONE)
		return 0;
	return s->cfg.reserved_clients < s->cfg.max_clients / 2
		       ? s->cfg.reserved_clients
		       : s->cfg.max_clients / 2;
}

/* Established connections from host that are not operators'. */
static uint32_t host_tenant_conns(const struct memd_server *s, const char *host)
{
	uint32_t n = 0;

	for (const struct conn *c = s->conns; c; c = c->next)
		n += c->established && !c->cluster && !strcmp(c->host, host);
	return n;
}

/*
 * May c, in its handshake, become established (as an operator when
 * cluster)? Operators always may; others within max_clients -
 * reserved_clients and max_clients_per_host. On no, err gets the reason
 * for the client and the refusal is counted and logged (rate-limited).
 */
static bool conn_may_establish(struct memd_server *s, struct conn *c,
			       bool cluster, char *err, size_t errlen)
{
	uint32_t room = s->cfg.max_clients - reserved_slots(s);

	if (cluster)
		return true;
	if (s->ntenant >= room) {
		CTR_ADD(s, conns_refused_reserved, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s why=reserved "
				 "tenants=%u max=%u reserved=%u",
				 c->peer, s->ntenant, s->cfg.max_clients,
				 reserved_slots(s));
		snprintf(err, errlen,
			 "too many clients: the last %u connections are "
			 "kept for the pool's operators and donors",
			 reserved_slots(s));
		return false;
	}
	if (host_tenant_conns(s, c->host) >= s->cfg.max_clients_per_host) {
		CTR_ADD(s, conns_refused_host, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s why=per-host max=%u",
				 c->peer, s->cfg.max_clients_per_host);
		snprintf(err, errlen,
			 "too many connections from %s (max_clients_per_host "
			 "= %u)",
			 c->host, s->cfg.max_clients_per_host);
		return false;
	}
	return true;
}

/* c's handshake is done: it leaves the handshake queue. */
static void conn_establish(struct memd_server *s, struct conn *c, bool cluster)
{
	hs_remove(s, c);
	c->established = true;
	c->cluster = cluster;
	if (!cluster)
		s->ntenant++;
}

static void conn_close(struct memd_server *s, struct conn *c, const char *why)
{
	/* A connection that never finished its handshake is noise an
	 * attacker controls: its close is a debug line (the reason, where
	 * it matters, was logged rate-limited). */
	memd_log(c->established ? LOG_INFO : LOG_DEBUG,
		 "ctl: close peer=%s session=%" PRIx64 " why=%s", c->peer,
		 c->session_id, why);
	hs_remove(s, c);
	if (c->established && !c->cluster)
		s->ntenant--;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->donor_id && s->reg)
		memd_registry_donor_lost(s->reg, c->donor_id, c->donor_epoch,
					 now_ms(),
					 "its link to the registry "
					 "closed");
	sodium_memzero(c->key, sizeof(c->key));
	sodium_memzero(c->skey, sizeof(c->skey));
	if (c->session)
		memd_session_detach(s->lt, c->session);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	free(c->rx);
	free(c->tx);
	free(c);
}

/* Queues one reply frame. -ENOBUFS when the client is not reading. */
static int conn_send(struct conn *c, const struct wire_msg *m)
{
	ssize_t n;

	if (c->tx_off && c->tx_off == c->tx_len)
		c->tx_off = c->tx_len = 0;
	if (c->tx_off > 0 && TX_CAP - c->tx_len < WIRE_MAX_FRAME) {
		memmove(c->tx, c->tx + c->tx_off, c->tx_len - c->tx_off);
		c->tx_len -= c->tx_off;
		c->tx_off = 0;
	}
	n = wire_encode(m, c->tx + c->tx_len, TX_CAP - c->tx_len);
	if (n == -ENOSPC)
		return -ENOBUFS;
	if (n < 0)
		return (int)n; /* a bug of ours: logged by the caller */
	c->tx_len += (size_t)n;
	return 0;
}

static void send_error(struct memd_server *s, struct conn *c, uint32_t seq,
		       int err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void send_error(struct memd_server *s, struct conn *c, uint32_t seq,
		       int err, const char *fmt, ...)
{
	static struct wire_msg m; /* memd-ctl only */
	char text[WIRE_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	wire_make_error(&m, seq, err, text);
	if (conn_send(c, &m))
		c->closing = true;
	(void)s;
}

/* ------------------------------------------------------------------ */
/* requests                                                             */

static void do_hello(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	const struct wire_hello *h = &req->u.hello;
	struct wire_hello_ok *ok = &rep->u.hello_ok;
	int r;

	if (c->session) {
		send_error(s, c, req->seq, EPROTO, "HELLO sent twice");
		c->closing = true;
		return;
	}
	if (h->proto_min > WIRE_PROTO_MAX || h->proto_max < WIRE_PROTO_MIN) {
		send_error(s, c, req->seq, EPROTONOSUPPORT,
			   "memd speaks protocol %d..%d, client %u..%u",
			   WIRE_PROTO_MIN, WIRE_PROTO_MAX, h->proto_min,
			   h->proto_max);
		c->closing = true;
		return;
	}
	if (s->mode != MODE_STANDALONE && h->proto_max < 2) {
		send_error(s, c, req->seq, EPROTONOSUPPORT,
			   "this memd is part of a pool and needs protocol 2 "
			   "(authentication); the client speaks %u..%u",
			   h->proto_min, h->proto_max);
		c->closing = true;
		return;
	}
	if (s->draining) {
		send_error(s, c, req->seq, EBUSY, "memd is draining");
		c->closing = true;
		return;
	}
	if (s->mode == MODE_STANDALONE) {
		char why[WIRE_MSG_MAX];

		/* Standalone, HELLO is the whole handshake. */
		if (!conn_may_establish(s, c, false, why, sizeof(why))) {
			send_error(s, c, req->seq, EBUSY, "%s", why);
			c->closing = true;
			return;
		}
		conn_establish(s, c, false);
	}
	r = memd_session_open(s->lt, now_ms(), &c->session);
	if (r) {
		send_error(s, c, req->seq, -r, "cannot open a session");
		c->closing = true;
		return;
	}
	c->session_id = memd_session_id(c->session);
	CTR_ADD(s, sessions_opened, 1);
	memd_log(LOG_INFO, "ctl: hello peer=%s session=%" PRIx64 " client=%s",
		 c->peer, c->session_id,
		 memd_log_quote(h->client, logq, sizeof(logq)));
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_HELLO_OK;
	rep->seq = req->seq;
	ok->proto =
		h->proto_max < WIRE_PROTO_MAX ? h->proto_max : WIRE_PROTO_MAX;
	c->proto = ok->proto;
	ok->session_id = memd_session_id(c->session);
	ok->epoch = s->epoch;
	ok->ttl_ms = s->cfg.lease_ttl_ms;
	ok->slab_bytes = s->cfg.slab_bytes;
	snprintf(ok->provider, sizeof(ok->provider), "%s",
		 fab_domain_provider(s->aep[0].fd));
	ok->nendpoints = (uint16_t)s->nep;
	for (uint32_t a = 0; a < s->nep; a++) {
		ok->ep[a].node = s->aep[a].node;
		ok->ep[a].addr_len = (uint16_t)s->aep[a].addr_len;
		memcpy(ok->ep[a].addr, s->aep[a].addr, s->aep[a].addr_len);
	}
	if (conn_send(c, rep))
		c->closing = true;
}

static uint64_t random_key(void)
{
	uint64_t k = 0;

	while (getrandom(&k, sizeof(k), 0) != sizeof(k))
		;
	return k;
}

/* A registration of the whole slab on its arena's domain with access
 * (FAB_ACCESS_REMOTE, or _REMOTE_READ), with a fresh random key (retried
 * while the provider says the key is taken). */
static int register_slab_access(struct memd_server *s, uint32_t slab,
				unsigned access, struct fab_mr **mr)
{
	struct arena_ep *a = slab_aep(s, slab);
	int r = -ENOKEY;

	for (int tries = 0; tries < 8 && r == -ENOKEY; tries++)
		r = fab_mr_reg(a->fd, a->ep, slab_base(s, slab),
			       s->cfg.slab_bytes, access, random_key(), mr);
	return r;
}

static int register_slab(struct memd_server *s, uint32_t slab,
			 struct fab_mr **mr)
{
	return register_slab_access(s, slab, FAB_ACCESS_REMOTE, mr);
}

/*
 * Grants one lease from arena group (MEMD_LEASE_ANY_GROUP: the fullest):
 * slab, then a registration on that arena's domain with a fresh random
 * key.
 */
static int grant_one(struct memd_server *s, struct memd_session *ses, int group,
		     struct wire_lease *out)
{
	uint32_t slab, gen;
	struct fab_mr *mr = NULL;
	struct arena_ep *a;
	int r;

	r = memd_lease_grant_in(s->lt, ses, now_ms(), group, &slab, &gen);
	if (r)
		return r;
	a = slab_aep(s, slab);
	r = register_slab(s, slab, &mr);
	if (r) {
		memd_log(LOG_ERR, "fabric: register slab=%u err=%s", slab,
			 strerror(-r));
		memd_lease_release(s->lt, ses, slab, gen, now_ms(), NULL, NULL);
		return r;
	}
	s->mr[slab] = mr;
	s->key[slab] = fab_mr_key(mr);
	out->epoch = s->epoch;
	out->slab = slab;
	out->generation = gen;
	out->key = s->key[slab];
	out->base = fab_mr_remote_base(mr);
	out->len_bytes = s->cfg.slab_bytes;
	out->endpoint = (uint16_t)a->index;
	out->node = a->node;
	return 0;
}

/* The arena serving node, or -1. */
static int arena_of_node(const struct memd_server *s, int node)
{
	for (uint32_t a = 0; a < s->narenas; a++)
		if (s->aep[a * s->per_arena].node == node)
			return (int)a;
	return -1;
}

/* "0,2" for the error texts: the nodes this memd serves. */
static void served_nodes(const struct memd_server *s, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t a = 0; a < s->narenas && used < len; a++)
		used += (size_t)snprintf(buf + used, len - used, "%s%d",
					 a ? "," : "",
					 s->aep[a * s->per_arena].node);
}

/*
 * Grants want slabs on node (all or nothing) to c's session and answers
 * seq with reply_type (LEASE_OK or LEASE_GRANT_OK) or ERROR. Returns 0
 * when granted.
 */
static int grant_request(struct memd_server *s, struct conn *c, uint32_t seq,
			 uint32_t want, int node, uint8_t reply_type,
			 struct wire_msg *rep)
{
	uint32_t i, avail, held;
	int group = MEMD_LEASE_ANY_GROUP;
	struct memd_lease_group_counts gc;
	struct memd_lease_counts cnt;
	int r = 0;

	if (node != WIRE_NODE_ANY) {
		char served[64];

		group = arena_of_node(s, node);
		if (group < 0 || arena_aep(s, (uint32_t)group)->node < 0) {
			CTR_ADD(s, leases_refused, 1);
			served_nodes(s, served, sizeof(served));
			memd_log(LOG_NOTICE,
				 "lease: refused peer=%s session=%" PRIx64
				 " node=%d why=node not served",
				 c->peer, memd_session_id(c->session), node);
			if (s->aep[0].node < 0)
				send_error(s, c, seq, EINVAL,
					   "lease: node %d: this memd does no "
					   "NUMA placement (numa_nodes is not "
					   "set); ask for node -1",
					   node);
			else
				send_error(s, c, seq, EINVAL,
					   "lease: node %d is not served by "
					   "this memd (numa_nodes: %s)",
					   node, served);
			return -EINVAL;
		}
	}
	held = memd_session_nleases(s->lt, c->session);
	if (want > s->cfg.max_leases_per_session ||
	    held > s->cfg.max_leases_per_session - want) {
		CTR_ADD(s, leases_refused, 1);
		CTR_ADD(s, leases_refused_session, 1);
		memd_log_limited(&s->ll_refuse, LOG_NOTICE,
				 "lease: refused peer=%s session=%" PRIx64
				 " why=per-session held=%u want=%u max=%u",
				 c->peer, memd_session_id(c->session), held,
				 want, s->cfg.max_leases_per_session);
		send_error(s, c, seq, EDQUOT,
			   "lease: the session holds %u lease(s) and asks %u; "
			   "max_leases_per_session is %u",
			   held, want, s->cfg.max_leases_per_session);
		return -EDQUOT;
	}
	memd_lease_get_counts(s->lt, &cnt);
	avail = cnt.free;
	if (group >= 0) {
		memd_lease_get_group_counts(s->lt, (uint32_t)group, &gc);
		avail = gc.free;
	}
	if (s->draining || want > avail) {
		CTR_ADD(s, leases_refused, 1);
		if (group < 0)
			send_error(s, c, seq, s->draining ? EBUSY : ENOSPC,
				   "%s: %u slab(s) asked, %u free of %u (%u "
				   "being zeroed)",
				   s->draining ? "memd is draining"
					       : "no free slab",
				   want, cnt.free, cnt.total, cnt.reclaiming);
		else
			send_error(s, c, seq, s->draining ? EBUSY : ENOSPC,
				   "%s: %u slab(s) asked on node %d, %u free "
				   "there; %u free of %u in all (%u being "
				   "zeroed)",
				   s->draining ? "memd is draining"
					       : "no free slab",
				   want, node, avail, cnt.free, cnt.total,
				   cnt.reclaiming);
		return s->draining ? -EBUSY : -ENOSPC;
	}
	/* Any node: stay on the fullest arena while it has slabs, so a
	 * request lands on one node when it can. */
	if (group < 0)
		group = memd_lease_fullest_group(s->lt);
	memset(rep, 0, sizeof(*rep));
	for (i = 0; i < want; i++) {
		r = grant_one(s, c->session, group, &rep->u.lease_ok.lease[i]);
		if (r == -ENOSPC && node == WIRE_NODE_ANY)
			r = grant_one(s, c->session, MEMD_LEASE_ANY_GROUP,
				      &rep->u.lease_ok.lease[i]);
		if (r)
			break;
	}
	if (r) {
		/* All or nothing: give back what this request got. */
		for (uint32_t j = 0; j < i; j++) {
			struct wire_lease *l = &rep->u.lease_ok.lease[j];

			memd_lease_release(s->lt, c->session, l->slab,
					   l->generation, now_ms(), revoke_mr,
					   s);
		}
		reclaim_kick(s);
		CTR_ADD(s, leases_refused, 1);
		send_error(s, c, seq, -r, "lease of %u slab(s) failed: %s",
			   want, strerror(-r));
		return r;
	}
	CTR_ADD(s, leases_granted, want);
	memd_log(LOG_DEBUG, "lease: granted session=%" PRIx64 " n=%u node=%d",
		 memd_session_id(c->session), want, node);
	rep->type = reply_type;
	rep->seq = seq;
	rep->u.lease_ok.ttl_ms = s->cfg.lease_ttl_ms;
	rep->u.lease_ok.count = want;
	if (conn_send(c, rep))
		c->closing = true;
	if (s->donor)
		memd_donor_kick(s->donor);
	return 0;
}

static void do_lease(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	if (s->mode != MODE_STANDALONE) {
		CTR_ADD(s, leases_refused, 1);
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "lease: this memd is part of a pool: leases need a "
			   "ticket from the registry (PLACE, then "
			   "LEASE_GRANT)");
		return;
	}
	grant_request(s, c, req->seq, req->u.lease.nslabs, req->u.lease.node,
		      WIRE_LEASE_OK, rep);
}

/*
 * RELEASE is idempotent (docs/protocol.md): references to leases that are
 * already gone are skipped; a live lease of another session is left alone
 * and answered with EPERM after the rest is processed.
 */
static void do_release(struct memd_server *s, struct conn *c,
		       const struct wire_msg *req, struct wire_msg *rep)
{
	const struct wire_release *rel = &req->u.release;
	uint32_t released = 0, foreign = 0;

	for (uint32_t i = 0; i < rel->count; i++) {
		const struct wire_lease_ref *ref = &rel->ref[i];
		int r;

		if (ref->epoch != s->epoch || ref->slab >= s->nslabs)
			continue;
		/* the key stops working (revoke_mr) before the slab is
		 * queued for zeroing, as on every other revocation */
		r = memd_lease_release(s->lt, c->session, ref->slab,
				       ref->generation, now_ms(), revoke_mr, s);
		if (r == -EPERM) {
			foreign++;
			memd_log(LOG_WARNING,
				 "lease: release of another session's lease "
				 "peer=%s session=%" PRIx64 " slab=%u",
				 c->peer, memd_session_id(c->session),
				 ref->slab);
			continue;
		}
		if (r)
			continue; /* already gone: what was asked */
		CTR_ADD(s, leases_released, 1);
		released++;
	}
	if (released)
		reclaim_kick(s);
	if (released && s->donor)
		memd_donor_kick(s->donor);
	if (foreign) {
		send_error(s, c, req->seq, EPERM,
			   "%u lease(s) belong to another session; %u of "
			   "yours released",
			   foreign, released);
		return;
	}
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_RELEASE_OK;
	rep->seq = req->seq;
	rep->u.release_ok.released = released;
	if (conn_send(c, rep))
		c->closing = true;
}

static void fill_status(struct memd_server *s, struct wire_status_ok *st)
{
	struct memd_lease_counts cnt;

	memd_lease_get_counts(s->lt, &cnt);
	memset(st, 0, sizeof(*st));
	st->epoch = s->epoch;
	st->uptime_ms = now_ms() - s->start_ms;
	st->donated_bytes = s->donated_bytes;
	st->slab_bytes = s->cfg.slab_bytes;
	st->slabs_total = cnt.total;
	st->slabs_free = cnt.free;
	st->slabs_leased = cnt.leased;
	st->slabs_reclaiming = cnt.reclaiming;
	st->sessions = client_sessions(s, cnt.sessions);
	st->flags = s->draining ? WIRE_STATUS_DRAINING : 0;
	/* HUGEPAGES: every arena is backed by hugetlbfs pages. */
	st->flags |= WIRE_STATUS_HUGEPAGES;
	for (uint32_t a = 0; a < s->narenas; a++)
		if (!arena_aep(s, a)->arena->hugetlb)
			st->flags &= ~WIRE_STATUS_HUGEPAGES;
	st->leases_expired = s->ctr.leases_expired;
	st->frames_rejected = s->ctr.frames_rejected;
	st->nnodes = (uint16_t)s->narenas;
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		st->node[a].node = arena_aep(s, a)->node;
		st->node[a].slabs_total = gc.total;
		st->node[a].slabs_free = gc.free;
	}
}

/* ------------------------------------------------------------------ */
/* protocol 2: authentication, placement, donors, admin                */

static uint64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool principal_is_tenant_name(const char *p)
{
	size_t n = strlen(p);

	if (n < 1 || n > WIRE_NAME_MAX - 1)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(p[i] >= 'a' && p[i] <= 'z') &&
		    !(p[i] >= 'A' && p[i] <= 'Z') &&
		    !(p[i] >= '0' && p[i] <= '9') && p[i] != '_' &&
		    p[i] != '.' && p[i] != '-')
			return false;
	return true;
}

/*
 * AUTH: pick the key the proof must be made with, and challenge. An
 * unknown principal or a bad pass still gets a challenge (with a random
 * key), so the answer never tells which tenant names exist.
 */
/*
 * Has the pool removed tenant_id? The registry knows at once; a donor
 * from the registry's last report (memd_donor_tenant_removed), so a
 * removed tenant's donor passes stop working within a report interval,
 * not when they expire.
 */
static bool tenant_is_removed(struct memd_server *s, uint32_t tenant_id)
{
	/* An etcd standby knows no tenants: its donor part asks the leader
	 * like any donor's. */
	if (s->reg && memd_registry_is_serving(s->reg, now_ms(), NULL, 0)) {
		struct auth_pass p;
		bool gone = memd_registry_make_pass(s->reg, tenant_id, 0, &p) ==
			    -ENOENT;

		sodium_memzero(&p, sizeof(p));
		if (gone)
			return true;
	}
	return s->donor && memd_donor_tenant_removed(s->donor, tenant_id, NULL);
}

static void do_auth(struct memd_server *s, struct conn *c,
		    const struct wire_msg *req, struct wire_msg *rep)
{
	const struct wire_auth *a = &req->u.auth;

	if (s->mode == MODE_STANDALONE) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "memd is standalone: it has no tenants and needs "
			   "no authentication");
		return;
	}
	if (c->auth != AUTH_NONE) {
		send_error(s, c, req->seq, EPROTO, "AUTH sent twice");
		c->closing = true;
		return;
	}
	if (s->reg && !a->pass_len && strcmp(a->principal, "@admin")) {
		char why[WIRE_MSG_MAX];

		/* An etcd standby (or a leader unsure of its lease) sends
		 * tenants and donors to another registry; @admin gets in
		 * for this memd's own "leases", and its registry requests
		 * are refused EAGAIN the same way (memd_registry_admin). */
		if (!memd_registry_is_serving(s->reg, now_ms(), why,
					      sizeof(why))) {
			send_error(s, c, req->seq, EAGAIN, "%s", why);
			c->closing = true;
			return;
		}
	}
	snprintf(c->principal, sizeof(c->principal), "%s", a->principal);
	memcpy(c->cnonce, a->cnonce, sizeof(c->cnonce));
	auth_random(c->snonce, sizeof(c->snonce));
	auth_random(c->key, sizeof(c->key));
	c->auth_fail = NULL;
	c->tenant_id = 0;
	c->via_pass = a->pass_len > 0;
	if (a->pass_len) {
		struct auth_pass pass;

		if (auth_pass_open(s->keys.pass, a->pass, a->pass_len, &pass))
			c->auth_fail = "donor pass not sealed by this pool";
		else if (strcmp(pass.tenant, a->principal))
			c->auth_fail = "donor pass is another tenant's";
		else if (unix_ms() > pass.expires_ms + TICKET_SKEW_MS)
			c->auth_fail = "donor pass expired";
		else if (tenant_is_removed(s, pass.tenant_id))
			c->auth_fail = "donor pass of a removed tenant";
		else {
			memcpy(c->key, pass.key, sizeof(c->key));
			memcpy(c->ident, pass.ident, sizeof(c->ident));
			c->role = WIRE_ROLE_TENANT;
			c->tenant_id = pass.tenant_id;
		}
		sodium_memzero(&pass, sizeof(pass));
	} else if (!strcmp(a->principal, "@admin")) {
		memcpy(c->key, s->keys.admin, sizeof(c->key));
		c->role = WIRE_ROLE_ADMIN;
	} else if (!strcmp(a->principal, "@donor")) {
		memcpy(c->key, s->keys.donor, sizeof(c->key));
		c->role = WIRE_ROLE_DONOR;
	} else if (!principal_is_tenant_name(a->principal)) {
		c->auth_fail = "not a valid principal name";
	} else if (!s->reg) {
		c->auth_fail = "a tenant key authenticates at the registry; "
			       "at a donor it needs a donor pass";
	} else if (memd_registry_tenant_key(s->reg, a->principal, &c->tenant_id,
					    c->key)) {
		c->auth_fail = "no such tenant";
	} else {
		auth_tenant_ident(c->key, c->ident);
		c->role = WIRE_ROLE_TENANT;
	}
	c->auth = AUTH_CHALLENGED;
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_AUTH_CHALLENGE;
	rep->seq = req->seq;
	memcpy(rep->u.auth_challenge.snonce, c->snonce, sizeof(c->snonce));
	if (conn_send(c, rep))
		c->closing = true;
}

/*
 * Whose KV spill files are (docs/kv.md, "Spill files"): BLAKE2b keyed with
 * the pool's spill key (derived from the cluster secret; NULL for a
 * standalone memd) over the tenant's id, name and identity (a one-way
 * function of its key, auth_tenant_ident). A new registry that gives the
 * id to another tenant, or another pool, binds differently.
 */
static void spill_binding(const uint8_t *pool_key, uint32_t tenant_id,
			  const char *name, const uint8_t ident[AUTH_IDENT_LEN],
			  uint8_t out[MEMD_KV_BIND_BYTES])
{
	static const char label[] = "tidepool spill binding v1";
	crypto_generichash_state st;
	uint8_t id[4] = { (uint8_t)tenant_id, (uint8_t)(tenant_id >> 8),
			  (uint8_t)(tenant_id >> 16),
			  (uint8_t)(tenant_id >> 24) };

	crypto_generichash_init(&st, pool_key, pool_key ? AUTH_KEY_LEN : 0,
				MEMD_KV_BIND_BYTES);
	crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label));
	crypto_generichash_update(&st, id, sizeof(id));
	crypto_generichash_update(&st, (const uint8_t *)name, strlen(name) + 1);
	crypto_generichash_update(&st, ident, AUTH_IDENT_LEN);
	crypto_generichash_final(&st, out, MEMD_KV_BIND_BYTES);
}

static void auth_refuse(struct memd_server *s, struct conn *c, uint32_t seq,
			const char *why)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	CTR_ADD(s, auth_failures, 1);
	memd_log_limited(&s->ll_auth, LOG_WARNING,
			 "auth: refused peer=%s principal=%s why=%s", c->peer,
			 memd_log_quote(c->principal, logq, sizeof(logq)), why);
	send_error(s, c, seq, EACCES, "authentication failed");
	c->closing = true;
	c->auth = AUTH_NONE;
	c->role = 0;
}

static void do_auth_proof(struct memd_server *s, struct conn *c,
			  const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct wire_auth_ok *ok = &rep->u.auth_ok;
	uint64_t sid = memd_session_id(c->session);
	uint8_t mac[WIRE_MAC_LEN];

	if (c->auth != AUTH_CHALLENGED) {
		send_error(s, c, req->seq, EPROTO,
			   "AUTH_PROOF without a pending AUTH");
		c->closing = true;
		return;
	}
	auth_client_proof(c->key, c->principal, sid, s->epoch, c->cnonce,
			  c->snonce, mac);
	if (!auth_mac_equal(mac, req->u.auth_proof.mac)) {
		auth_refuse(s, c, req->seq,
			    c->auth_fail ? c->auth_fail : "wrong key");
		return;
	}
	if (c->auth_fail) { /* cannot happen: the key was random */
		auth_refuse(s, c, req->seq, c->auth_fail);
		return;
	}
	if (c->role == WIRE_ROLE_TENANT) {
		/* This session is not the tenant's yet: it is not counted. */
		uint32_t n = memd_lease_tenant_sessions(s->lt, c->tenant_id) -
			     kv_sessions_of(s, c->tenant_id);

		if (n >= s->cfg.max_sessions_per_tenant) {
			CTR_ADD(s, sessions_refused_tenant, 1);
			memd_log_limited(&s->ll_refuse, LOG_WARNING,
					 "auth: refused peer=%s tenant=%s "
					 "why=sessions held=%u max=%u",
					 c->peer,
					 memd_log_quote(c->principal, logq,
							sizeof(logq)),
					 n, s->cfg.max_sessions_per_tenant);
			send_error(s, c, req->seq, EUSERS,
				   "tenant %s holds %u sessions on this memd "
				   "(max_sessions_per_tenant = %u)",
				   c->principal, n,
				   s->cfg.max_sessions_per_tenant);
			c->closing = true;
			c->auth = AUTH_NONE;
			c->role = 0;
			return;
		}
	}
	{
		bool cluster = c->role == WIRE_ROLE_ADMIN ||
			       c->role == WIRE_ROLE_DONOR;
		char why[WIRE_MSG_MAX];

		if (!conn_may_establish(s, c, cluster, why, sizeof(why))) {
			send_error(s, c, req->seq, EBUSY, "%s", why);
			c->closing = true;
			c->auth = AUTH_NONE;
			c->role = 0;
			return;
		}
		conn_establish(s, c, cluster);
	}
	c->auth = AUTH_DONE;
	auth_session_key(c->key, c->principal, c->cnonce, c->snonce, c->skey);
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_AUTH_OK;
	rep->seq = req->seq;
	auth_server_proof(c->key, c->principal, sid, s->epoch, c->cnonce,
			  c->snonce, ok->mac);
	ok->role = c->role;
	ok->flags = s->reg ? WIRE_AUTH_REGISTRY : 0;
	ok->tenant_id = c->tenant_id;
	if (c->role == WIRE_ROLE_TENANT) {
		memd_session_set_tenant(s->lt, c->session, c->tenant_id);
		spill_binding(s->spill_pool, c->tenant_id, c->principal,
			      c->ident, c->spill_bind);
		if (s->reg && !c->via_pass) {
			struct auth_pass pass;
			int n;

			if (memd_registry_make_pass(s->reg, c->tenant_id,
						    unix_ms(), &pass)) {
				auth_refuse(s, c, req->seq,
					    "tenant removed meanwhile");
				return;
			}
			n = auth_pass_seal(s->keys.pass, &pass, ok->pass,
					   sizeof(ok->pass));
			if (n > 0) {
				ok->pass_len = (uint16_t)n;
				n = auth_seal(c->skey, pass.key,
					      sizeof(pass.key), ok->box,
					      sizeof(ok->box));
			}
			if (n <= 0) {
				auth_refuse(s, c, req->seq,
					    "cannot seal a donor pass");
				return;
			}
			ok->box_len = (uint16_t)n;
			ok->pass_ttl_ms = s->cfg.pass_ttl_ms;
			sodium_memzero(&pass, sizeof(pass));
		}
	}
	memd_log(LOG_INFO,
		 "auth: ok peer=%s session=%" PRIx64 " principal=%s role=%u "
		 "tenant=%u",
		 c->peer, sid, memd_log_quote(c->principal, logq, sizeof(logq)),
		 c->role, c->tenant_id);
	if (conn_send(c, rep))
		c->closing = true;
}

static void do_place(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	char err[WIRE_MSG_MAX] = "";
	int r;

	if (!s->reg) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "place: this memd is not the registry");
		return;
	}
	if (c->role != WIRE_ROLE_TENANT) {
		send_error(s, c, req->seq, EACCES,
			   "place: only a tenant session places memory");
		return;
	}
	memset(rep, 0, sizeof(*rep));
	r = memd_registry_place(s->reg, c->tenant_id, &req->u.place, now_ms(),
				unix_ms(), &rep->u.place_ok, err, sizeof(err));
	if (r) {
		CTR_ADD(s, places_refused, 1);
		memd_log(LOG_INFO,
			 "place: refused tenant=%s n=%u flags=%#x err=%s: %s",
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 req->u.place.nslabs, req->u.place.flags, strerror(-r),
			 err);
		send_error(s, c, req->seq, -r, "%s", err);
		return;
	}
	CTR_ADD(s, places, 1);
	rep->type = WIRE_PLACE_OK;
	rep->seq = req->seq;
	if (conn_send(c, rep))
		c->closing = true;
}

/* Copies the replay record's stats where /metrics reads them. memd-ctl. */
static void redeem_publish(struct memd_server *s)
{
	struct memd_redeem_stats st;

	memd_redeem_get_stats(s->redeemed, &st);
	__atomic_store_n(&s->redeem_st.redeemed, st.redeemed, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.replayed, st.replayed, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.too_old, st.too_old, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.busy, st.busy, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.epochs, st.epochs, __ATOMIC_RELAXED);
}

static void do_lease_grant(struct memd_server *s, struct conn *c,
			   const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	const struct wire_ticket *t = &req->u.lease_grant.ticket;
	uint64_t reg_epoch = 0, now_unix = unix_ms(), oldest = 0;
	uint32_t donor_id = 0;
	bool drain = false, joined;
	int r;

	if (s->mode == MODE_STANDALONE) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "lease_grant: memd is standalone; use LEASE");
		return;
	}
	if (c->role != WIRE_ROLE_TENANT) {
		send_error(s, c, req->seq, EACCES,
			   "lease_grant: only a tenant session leases");
		return;
	}
	if (!auth_ticket_verify(s->keys.ticket, t)) {
		CTR_ADD(s, tickets_refused, 1);
		memd_log(LOG_WARNING,
			 "ticket: bad MAC peer=%s tenant=%s grant=%" PRIu64,
			 c->peer,
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 t->grant_id);
		send_error(s, c, req->seq, EACCES,
			   "ticket: not signed by this pool's registry");
		return;
	}
	if (t->tenant_id != c->tenant_id) {
		CTR_ADD(s, tickets_refused, 1);
		memd_log(LOG_WARNING,
			 "ticket: tenant %u's ticket from tenant %u peer=%s",
			 t->tenant_id, c->tenant_id, c->peer);
		send_error(s, c, req->seq, EACCES,
			   "ticket: issued to another tenant");
		return;
	}
	joined = memd_donor_state(s->donor, &donor_id, &reg_epoch, &drain);
	if (!joined || t->donor_id != donor_id || t->donor_epoch != s->epoch ||
	    t->registry_epoch != reg_epoch) {
		CTR_ADD(s, tickets_refused, 1);
		send_error(s, c, req->seq, ESTALE,
			   "ticket: for donor %u epoch %016" PRIx64
			   " of registry %016" PRIx64 "; this is donor %u "
			   "epoch %016" PRIx64 " of registry %016" PRIx64
			   ": place again",
			   t->donor_id, t->donor_epoch, t->registry_epoch,
			   donor_id, s->epoch, reg_epoch);
		return;
	}
	if (now_unix > t->expires_ms + TICKET_SKEW_MS) {
		CTR_ADD(s, tickets_refused, 1);
		send_error(s, c, req->seq, ESTALE,
			   "ticket: expired %" PRIu64 " ms ago: place again",
			   now_unix - t->expires_ms);
		return;
	}
	if (drain) {
		CTR_ADD(s, leases_refused, 1);
		send_error(s, c, req->seq, EBUSY,
			   "lease_grant: this donor is draining");
		return;
	}
	r = memd_redeem_once(s->redeemed, t->registry_epoch, t->grant_id,
			     t->expires_ms, now_unix, &oldest);
	redeem_publish(s);
	if (r) {
		CTR_ADD(s, tickets_refused, 1);
		if (r == -EALREADY)
			send_error(s, c, req->seq, EACCES,
				   "ticket: already redeemed");
		else if (r == -ESTALE)
			send_error(s, c, req->seq, ESTALE,
				   "ticket: grant %" PRIu64
				   " is too old to check for replay (this "
				   "donor checks grants from %" PRIu64
				   "): place again",
				   t->grant_id, oldest);
		else if (r == -ETIME)
			send_error(s, c, req->seq, ESTALE,
				   "ticket: expired: place again");
		else if (r == -EBUSY)
			send_error(s, c, req->seq, EBUSY,
				   "ticket: this donor still holds unexpired "
				   "tickets of %u other registry incarnations; "
				   "retry within %u s",
				   MEMD_REDEEM_EPOCHS,
				   (TICKET_TTL_MS + TICKET_SKEW_MS) / 1000);
		else
			send_error(s, c, req->seq, -r, "ticket: %s",
				   strerror(-r));
		return;
	}
	r = grant_request(s, c, req->seq, t->nslabs, t->node,
			  WIRE_LEASE_GRANT_OK, rep);
	if (r)
		return; /* the ticket is spent; its reservation expires */
	if (memd_donor_redeemed(s->donor, t->grant_id))
		memd_log(LOG_WARNING,
			 "donor: redeemed-grant queue full; the registry "
			 "counts grant %" PRIu64 " until it expires",
			 t->grant_id);
}

static void do_heartbeat(struct memd_server *s, struct conn *c,
			 const struct wire_msg *req, struct wire_msg *rep)
{
	int r = memd_session_renew(s->lt, c->session, now_ms());

	if (r < 0) {
		send_error(s, c, req->seq, -r, "session expired");
		c->closing = true;
		return;
	}
	if (req->type == WIRE_HEARTBEAT2) {
		const struct wire_heartbeat2 *h = &req->u.heartbeat2;

		/* Totals since the client's session began: add the growth. */
		if (h->bytes_read >= c->hb_read)
			__atomic_add_fetch(&s->rma_read,
					   h->bytes_read - c->hb_read,
					   __ATOMIC_RELAXED);
		if (h->bytes_written >= c->hb_written)
			__atomic_add_fetch(&s->rma_written,
					   h->bytes_written - c->hb_written,
					   __ATOMIC_RELAXED);
		c->hb_read = h->bytes_read;
		c->hb_written = h->bytes_written;
	}
	memset(rep, 0, sizeof(*rep));
	rep->type = req->type == WIRE_HEARTBEAT2 ? WIRE_HEARTBEAT2_OK
						 : WIRE_HEARTBEAT_OK;
	rep->seq = req->seq;
	rep->u.heartbeat_ok.ttl_ms = s->cfg.lease_ttl_ms;
	rep->u.heartbeat_ok.nleases = (uint32_t)r;
	rep->u.heartbeat_ok.epoch = s->epoch;
	if (conn_send(c, rep))
		c->closing = true;
}

static void do_donor(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	char err[WIRE_MSG_MAX] = "";
	int r;

	if (!s->reg) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "%s: this memd is not the registry",
			   wire_type_name(req->type));
		return;
	}
	if (c->role != WIRE_ROLE_DONOR) {
		send_error(s, c, req->seq, EACCES,
			   "%s: only a donor (principal @donor) joins",
			   wire_type_name(req->type));
		return;
	}
	memset(rep, 0, sizeof(*rep));
	rep->seq = req->seq;
	if (req->type == WIRE_DONOR_JOIN) {
		r = memd_registry_donor_join(s->reg, &req->u.donor_join,
					     now_ms(), &rep->u.donor_join_ok,
					     err, sizeof(err));
		if (!r) {
			/* the registry logs the join */
			c->donor_id = rep->u.donor_join_ok.donor_id;
			c->donor_epoch = req->u.donor_join.epoch;
		}
		rep->type = WIRE_DONOR_JOIN_OK;
	} else {
		r = memd_registry_donor_report(
			s->reg, &req->u.donor_report, now_ms(),
			&rep->u.donor_report_ok, err, sizeof(err));
		rep->type = WIRE_DONOR_REPORT_OK;
	}
	if (r) {
		send_error(s, c, req->seq, -r, "%s", err);
		return;
	}
	if (conn_send(c, rep))
		c->closing = true;
}

/* ADMIN "leases": this memd's own leases, as JSON. */
struct leases_json {
	struct memd_server *s;
	char *out;
	size_t cap, len;
	uint64_t now;
	bool first, full;
};

static void leases_json_one(void *arg, const struct memd_lease_info *l)
{
	struct leases_json *j = arg;
	int n;

	if (j->full)
		return;
	n = snprintf(j->out + j->len, j->cap - j->len,
		     "%s{\"slab\":%u,\"generation\":%u,\"node\":%d,"
		     "\"tenant_id\":%u,\"session\":\"%016" PRIx64 "\","
		     "\"expires_in_ms\":%" PRId64 "}",
		     j->first ? "" : ",", l->slab, l->generation,
		     slab_aep(j->s, l->slab)->node, l->tenant_id, l->session_id,
		     (int64_t)(l->expires_ms - j->now));
	if (n < 0 || (size_t)n >= j->cap - j->len - 64) {
		j->full = true;
		return;
	}
	j->len += (size_t)n;
	j->first = false;
}

static int admin_leases(struct memd_server *s, char *out, size_t cap)
{
	struct leases_json j = {
		.s = s, .out = out, .cap = cap, .now = now_ms(), .first = true
	};
	int n = snprintf(out, cap,
			 "{\"epoch\":\"%016" PRIx64 "\",\"slab_bytes\":%" PRIu64
			 ",\"listen\":\"%s\",\"leases\":[",
			 s->epoch, s->cfg.slab_bytes, s->bound);

	j.len = (size_t)n;
	memd_lease_foreach(s->lt, leases_json_one, &j);
	n = snprintf(out + j.len, cap - j.len, "],\"truncated\":%s}",
		     j.full ? "true" : "false");
	return (int)(j.len + (size_t)n);
}

static int admin_kv_report(struct memd_server *s, const json_t *req, char *out,
			   size_t cap, char *err, size_t errlen);

/*
 * The request's JSON is parsed once, here, with the registry's rules
 * (duplicate keys refused); the registry reads the same object. "leases"
 * is every memd's own; the rest is the registry's, and so is saying why
 * malformed JSON is malformed (elsewhere: the not-a-registry error).
 */
static void do_admin(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep)
{
	static char out[WIRE_JSON_MAX + 1]; /* memd-ctl only */
	const struct wire_admin *a = &req->u.admin;
	char err[WIRE_MSG_MAX] = "";
	json_error_t je;
	const char *cmd;
	json_t *o;
	int n;

	if (s->mode != MODE_STANDALONE && c->role != WIRE_ROLE_ADMIN) {
		send_error(s, c, req->seq, EACCES,
			   "admin: needs the principal @admin");
		return;
	}
	o = json_loadb(a->json, a->json_len, JSON_REJECT_DUPLICATES, &je);
	cmd = json_string_value(json_object_get(o, "cmd"));
	if (cmd && !strcmp(cmd, "leases")) {
		n = admin_leases(s, out, sizeof(out));
	} else if (cmd && !strcmp(cmd, "kv_report")) {
		n = admin_kv_report(s, o, out, sizeof(out), err, sizeof(err));
	} else if (!s->reg) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "admin: this memd is not the registry (only "
			   "\"leases\" and \"kv_report\" are served here)");
		goto out;
	} else if (!o) {
		snprintf(err, sizeof(err), "malformed JSON: %s (at %d)",
			 je.text, je.position);
		n = -EINVAL;
	} else {
		n = memd_registry_admin(s->reg, o, c->skey, now_ms(), unix_ms(),
					out, sizeof(out), err, sizeof(err));
	}
	if (n < 0) {
		send_error(s, c, req->seq, -n, "%s", err);
		goto out;
	}
	CTR_ADD(s, admin_requests, 1);
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_ADMIN_OK;
	rep->seq = req->seq;
	rep->u.admin.json = out;
	rep->u.admin.json_len = (uint32_t)n;
	if (conn_send(c, rep))
		c->closing = true;
out:
	json_decref(o);
}

/* ---- capacity planning (docs/capacity.md) ------------------------- */

/* The sizes every report and /metrics give the curve at, as multiples of
 * the tenant's KV capacity on this memd. */
static const double kv_cap_mult[] = { 0.25, 0.5, 1, 2, 4 };
#define KV_NMULT (sizeof(kv_cap_mult) / sizeof(kv_cap_mult[0]))

static uint32_t kv_cap_slabs(struct memd_server *s, uint32_t tenant,
			     bool *by_registry);

/*
 * The bytes of blocks the tenant's store may hold here: cap_slabs slabs
 * at the packing of its blocks (their mean size: floor(slab / block)
 * blocks a slab; a chunked value fills whole slabs), which is what the
 * curve's sizes count.
 */
static uint64_t kv_cap_bytes(uint64_t slab, uint32_t cap_slabs,
			     const struct memd_kv_stats *st)
{
	uint64_t n = st->entries + st->reserved;
	double eff = 1, avg;

	if (n && st->bytes_used) {
		avg = (double)st->bytes_used / (double)n;
		if (avg < (double)slab)
			eff = (double)(uint64_t)((double)slab / avg) * avg /
			      (double)slab;
	}
	return (uint64_t)((double)cap_slabs * (double)slab * eff);
}

/* Seconds of prefill that bytes of KV served save (the cost model). */
static double kv_saved_s(struct memd_server *s, uint64_t bytes)
{
	uint64_t bpt = __atomic_load_n(&s->kv_cost_bpt, __ATOMIC_RELAXED);
	uint32_t tps = __atomic_load_n(&s->kv_cost_tps, __ATOMIC_RELAXED);

	return (double)bytes / (double)(bpt ? bpt : 1) /
	       (double)(tps ? tps : 1);
}

static json_t *kv_report_tenant(struct memd_server *s, uint32_t tenant,
				bool points, uint64_t now)
{
	struct memd_kv_stats st;
	struct memd_kv_curve *cv = calloc(1, sizeof(*cv));
	const struct kv_tenant *kt;
	uint64_t sizes[KV_NMULT], first = s->start_ms, cap;
	double at[KV_NMULT], period_s;
	json_t *o, *j, *arr;
	bool by_registry;
	uint32_t cap_slabs;

	if (!cv)
		return NULL;
	memd_kv_get_stats(s->kv, tenant, &st);
	pthread_mutex_lock(&s->kvlock);
	kt = kv_tenant_find_locked(s, tenant);
	if (kt)
		first = kt->first_ms;
	pthread_mutex_unlock(&s->kvlock);
	period_s = (double)(now - first) / 1000.0;
	cap_slabs = kv_cap_slabs(s, tenant, &by_registry);
	cap = kv_cap_bytes(s->cfg.slab_bytes, cap_slabs, &st);
	for (size_t i = 0; i < KV_NMULT; i++)
		sizes[i] = (uint64_t)(kv_cap_mult[i] * (double)cap);
	o = json_object();
	j = json_object();
	if (!o || !j)
		goto fail;
#define X(name, help)                                                          \
	json_object_set_new(j, #name, json_integer((json_int_t)st.name));
	MEMD_KV_STATS(X)
#undef X
	json_object_set_new(o, "stats", j);
	j = NULL; /* o holds it */
	json_object_set_new(o, "tenant_id", json_integer(tenant));
	json_object_set_new(o, "cap_slabs", json_integer(cap_slabs));
	json_object_set_new(o, "cap_by_registry", json_boolean(by_registry));
	json_object_set_new(o, "cap_bytes", json_integer((json_int_t)cap));
	json_object_set_new(o, "period_s", json_real(period_s));
	json_object_set_new(o, "hit_ratio",
			    st.requests ? json_real((double)st.request_hits /
						    (double)st.requests)
					: json_null());
	json_object_set_new(o, "saved_s",
			    json_real(kv_saved_s(s, st.hit_bytes)));
	json_object_set_new(o, "saved_s_per_hour",
			    period_s > 0
				    ? json_real(kv_saved_s(s, st.hit_bytes) *
						3600.0 / period_s)
				    : json_null());
	json_object_set_new(o, "oneshot_put_s",
			    json_real((double)st.oneshot_put_ms / 1000.0));
	if (memd_kv_curve(s->kv, tenant, sizes, at, KV_NMULT, cv)) {
		json_object_set_new(o, "curve", json_null());
		goto out;
	}
	j = json_pack("{sf sI sI sI sf sI sI}", "rate", cv->info.rate,
		      "sample_max", (json_int_t)cv->info.sample_max, "tracked",
		      (json_int_t)cv->info.tracked, "window_samples",
		      (json_int_t)cv->info.window_samples, "window_requests",
		      cv->info.window_requests, "window_refs",
		      (json_int_t)cv->info.window_refs, "memory_bytes",
		      (json_int_t)cv->info.bytes);
	arr = json_array();
	if (!j || !arr) {
		json_decref(arr);
		goto fail; /* frees j */
	}
	/* what the curve predicts: memd's own eviction (memd/mrc.h) */
	json_object_set_new(j, "policy", json_string("S3-FIFO"));
	for (size_t i = 0; i < KV_NMULT; i++)
		json_array_append_new(arr, json_pack("{sf sI sf}", "mult",
						     kv_cap_mult[i], "bytes",
						     (json_int_t)sizes[i],
						     "hit", at[i]));
	json_object_set_new(j, "at", arr);
	if (points) {
		arr = json_array();
		for (size_t i = 0; arr && i < cv->npoints; i++)
			json_array_append_new(
				arr,
				json_pack("[I f]", (json_int_t)cv->bytes[i],
					  cv->hit[i]));
		json_object_set_new(j, "points", arr ? arr : json_null());
	}
	json_object_set_new(o, "curve", j);
out:
	free(cv);
	return o;
fail:
	free(cv);
	json_decref(o);
	json_decref(j);
	return NULL;
}

/*
 * ADMIN {"cmd": "kv_report", "tenant_id": N?, "points": bool?}: the KV
 * capacity statistics of one tenant (with the curve's points unless
 * "points" is false) or of every tenant of this memd's KV store (without
 * points unless "points" is true). Any memd serves it, for its own store.
 * Returns the reply's length, or -errno with err set.
 */
static int admin_kv_report(struct memd_server *s, const json_t *req, char *out,
			   size_t cap, char *err, size_t errlen)
{
	const json_t *jt = json_object_get(req, "tenant_id");
	const json_t *jp = json_object_get(req, "points");
	uint32_t ids[WIRE_MAX_TENANTS];
	json_t *rep, *arr;
	uint64_t now = now_ms();
	size_t n = 0, len;
	bool points;

	const char *k;
	json_t *v;

	if (!req) {
		snprintf(err, errlen, "kv_report: malformed JSON");
		return -EINVAL;
	}
	json_object_foreach((json_t *)req, k, v)
	{
		if (strcmp(k, "cmd") && strcmp(k, "tenant_id") &&
		    strcmp(k, "points")) {
			snprintf(err, errlen,
				 "kv_report: unknown field '%.64s' (it takes "
				 "tenant_id and points)",
				 k);
			return -EINVAL;
		}
	}
	if (jt && (!json_is_integer(jt) || json_integer_value(jt) < 0 ||
		   json_integer_value(jt) > UINT32_MAX)) {
		snprintf(err, errlen,
			 "kv_report: tenant_id must be a tenant id (a whole "
			 "number from 0 to 4294967295)");
		return -EINVAL;
	}
	if (jp && !json_is_boolean(jp)) {
		snprintf(err, errlen,
			 "kv_report: points must be true or false");
		return -EINVAL;
	}
	if (!s->kv) {
		snprintf(err, errlen,
			 "kv_report: the KV tier is off on this memd (kv_share "
			 "= 0)");
		return -EOPNOTSUPP;
	}
	points = jp ? json_is_true(jp) : jt != NULL;
	n = memd_kv_tenant_ids(s->kv, ids, WIRE_MAX_TENANTS);
	if (jt) {
		uint32_t want = (uint32_t)json_integer_value(jt);
		bool found = false;

		for (size_t i = 0; i < n && !found; i++)
			found = ids[i] == want;
		if (!found) {
			snprintf(err, errlen,
				 "kv_report: tenant_id %u has no KV store on "
				 "this memd (no KV request yet)",
				 want);
			return -ENOENT;
		}
		ids[0] = want;
		n = 1;
	}
	rep = json_pack(
		"{sI sI sI sI sI s[]}", "slab_bytes",
		(json_int_t)s->cfg.slab_bytes, "nslabs", (json_int_t)s->nslabs,
		"kv_share", (json_int_t)s->cfg.kv_share, "prefill_tokens_per_s",
		(json_int_t)s->cfg.kv_prefill_tokens_per_s, "bytes_per_token",
		(json_int_t)s->cfg.kv_bytes_per_token, "tenants");
	arr = rep ? json_object_get(rep, "tenants") : NULL;
	for (size_t i = 0; arr && i < n; i++) {
		json_t *t = kv_report_tenant(s, ids[i], points, now);

		if (!t || json_array_append_new(arr, t)) {
			json_decref(rep);
			rep = NULL;
		}
	}
	if (!rep) {
		snprintf(err, errlen, "kv_report: out of memory");
		return -ENOMEM;
	}
	len = json_dumpb(rep, out, cap, JSON_COMPACT);
	json_decref(rep);
	if (len == 0 || len > cap) {
		snprintf(err, errlen,
			 "kv_report: the report does not fit one reply; ask "
			 "for one tenant, or without points");
		return -EMSGSIZE;
	}
	return (int)len;
}

/* memd-donor's report: counters and tenants from the lease table. */
static void donor_snapshot(void *arg, struct wire_donor_report *rep)
{
	struct memd_server *s = arg;
	struct memd_tenant_usage *u = malloc(WIRE_MAX_TENANTS * sizeof(*u));
	struct memd_lease_counts cnt;
	size_t n = 0;

	memd_lease_get_counts(s->lt, &cnt);
	rep->slabs_free = cnt.free;
	rep->slabs_leased = cnt.leased;
	rep->slabs_reclaiming = cnt.reclaiming;
	rep->flags = __atomic_load_n(&s->draining, __ATOMIC_RELAXED)
			     ? WIRE_STATUS_DRAINING
			     : 0;
	rep->bytes_read = __atomic_load_n(&s->rma_read, __ATOMIC_RELAXED);
	rep->bytes_written = __atomic_load_n(&s->rma_written, __ATOMIC_RELAXED);
	/* Under kvlock, KV slab counts cannot move: every KV slab counted
	 * is also leased in this usage snapshot (see struct kv_tenant). */
	pthread_mutex_lock(&s->kvlock);
	if (u)
		n = memd_lease_tenant_usage(s->lt, u, WIRE_MAX_TENANTS);
	rep->ntenants = 0;
	for (size_t i = 0; i < n; i++) {
		struct wire_tenant_usage *w = &rep->tenant[rep->ntenants];
		const struct kv_tenant *k;

		if (!u[i].tenant_id)
			continue; /* sessions that never authenticated */
		k = kv_tenant_find_locked(s, u[i].tenant_id);
		memset(w, 0, sizeof(*w));
		w->tenant_id = u[i].tenant_id;
		w->slabs = u[i].slabs;
		/* KV memory counts, the KV session does not */
		w->sessions = u[i].sessions - (k ? 1 : 0);
		if (k) {
			w->flags = WIRE_TENANT_KV;
			w->kv_slabs = k->slabs < w->slabs ? k->slabs : w->slabs;
		}
		rep->ntenants++;
	}
	pthread_mutex_unlock(&s->kvlock);
	free(u);
}

/* ------------------------------------------------------------------ */
/* KV tier (docs/kv.md)                                                 */

/* The tenant's KV entry, opening its KV session when create is set.
 * NULL: none (or no memory for one). memd-ctl only. */
static struct kv_tenant *kv_tenant(struct memd_server *s, uint32_t tenant,
				   bool create)
{
	struct memd_session *ses;
	struct kv_tenant *t;

	for (uint32_t i = 0; i < s->nkvt; i++)
		if (s->kvt[i].tenant_id == tenant)
			return &s->kvt[i];
	if (!create || memd_session_open(s->lt, now_ms(), &ses))
		return NULL;
	memd_session_set_tenant(s->lt, ses, tenant);
	pthread_mutex_lock(&s->kvlock);
	if (s->nkvt == s->kvt_cap) {
		uint32_t cap = s->kvt_cap ? 2 * s->kvt_cap : 8;

		t = realloc(s->kvt, cap * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&s->kvlock);
			memd_session_close(s->lt, ses, now_ms(), revoke_mr, s);
			return NULL;
		}
		s->kvt = t;
		s->kvt_cap = cap;
	}
	t = &s->kvt[s->nkvt];
	*t = (struct kv_tenant){ .tenant_id = tenant,
				 .ses = ses,
				 .first_ms = now_ms() };
	__atomic_store_n(&s->nkvt, s->nkvt + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->kvlock);
	memd_log(LOG_INFO, "kv: store opened tenant=%u session=%" PRIx64,
		 tenant, memd_session_id(ses));
	if (s->donor) /* the registry allots KV memory to reported stores */
		memd_donor_kick(s->donor);
	return t;
}

/* Slabs one tenant's KV store may hold: kv_share percent of the slabs. */
static uint32_t kv_share_slabs(const struct memd_server *s)
{
	return (uint32_t)((uint64_t)s->nslabs * s->cfg.kv_share / 100);
}

/*
 * In a cluster, what a tenant's KV store may hold here until the registry
 * says otherwise: one slab (docs/cluster.md, "KV memory and quotas").
 */
#define KV_BOOTSTRAP_SLABS 1u

/*
 * Slabs tenant's KV store may hold on this memd: its kv_share, and in a
 * cluster no more than the registry's allowance (KV_BOOTSTRAP_SLABS
 * before there is one). *by_registry: the allowance is the tighter cap.
 */
static uint32_t kv_cap_slabs(struct memd_server *s, uint32_t tenant,
			     bool *by_registry)
{
	uint32_t cap = kv_share_slabs(s), allow;

	*by_registry = false;
	if (!s->donor)
		return cap; /* standalone: the share is the only cap */
	if (!memd_donor_kv_allowance(s->donor, tenant, &allow))
		allow = KV_BOOTSTRAP_SLABS;
	if (allow < cap) {
		cap = allow;
		*by_registry = true;
	}
	return cap;
}

/* The store's slab_get: runs on memd-ctl, under the store's lock. */
static int kv_slab_get(void *arg, uint32_t tenant, uint32_t *slabp,
		       uint8_t **base)
{
	struct memd_server *s = arg;
	struct kv_tenant *t = kv_tenant(s, tenant, true);
	uint32_t slab, gen, id, cap;
	struct fab_mr *mr = NULL, *mr_ro = NULL;
	uint64_t reg_epoch;
	bool drain = false, by_registry;
	int group, r;

	if (!t)
		return -ENOMEM;
	if (s->donor)
		memd_donor_state(s->donor, &id, &reg_epoch, &drain);
	if (s->draining || drain)
		return -ENOSPC;
	cap = kv_cap_slabs(s, tenant, &by_registry);
	if (t->cap_slabs != cap) {
		pthread_mutex_lock(&s->kvlock);
		t->cap_slabs = cap;
		pthread_mutex_unlock(&s->kvlock);
	}
	if (t->slabs >= cap) {
		/* the store evicts the tenant's own blocks; a fresh report
		 * brings a fresh allowance if the quota has room */
		if (by_registry) {
			CTR_ADD(s, kv_allowance_refusals, 1);
			memd_donor_kick(s->donor);
		}
		return -ENOSPC;
	}
	group = memd_lease_fullest_group(s->lt);
	if (group < 0)
		return -ENOSPC;
	r = memd_lease_grant_in(s->lt, t->ses, now_ms(), group, &slab, &gen);
	if (r)
		return r == -ENOSPC ? -ENOSPC : r;
	r = register_slab(s, slab, &mr);
	if (!r) {
		r = register_slab_access(s, slab, FAB_ACCESS_REMOTE_READ,
					 &mr_ro);
		if (r)
			fab_mr_close(mr);
	}
	if (r) {
		memd_log(LOG_ERR, "fabric: register kv slab=%u err=%s", slab,
			 strerror(-r));
		memd_lease_release(s->lt, t->ses, slab, gen, now_ms(), NULL,
				   NULL);
		reclaim_kick(s);
		return r;
	}
	s->mr[slab] = mr;
	s->key[slab] = fab_mr_key(mr);
	s->mr_ro[slab] = mr_ro;
	s->key_ro[slab] = fab_mr_key(mr_ro);
	s->kvs[slab] = (struct kv_slab){ .generation = gen,
					 .tenant_id = tenant,
					 .used = true };
	pthread_mutex_lock(&s->kvlock);
	t->slabs++;
	pthread_mutex_unlock(&s->kvlock);
	CTR_ADD(s, kv_slabs_taken, 1);
	memd_log(LOG_DEBUG, "kv: slab taken tenant=%u slab=%u held=%u", tenant,
		 slab, t->slabs);
	if (s->donor)
		memd_donor_kick(s->donor);
	*slabp = slab;
	*base = slab_base(s, slab);
	return 0;
}

/* The store's slab_put: the slab goes the way of a released lease. */
static void kv_slab_put(void *arg, uint32_t slab)
{
	struct memd_server *s = arg;
	struct kv_slab *k = &s->kvs[slab];
	struct kv_tenant *t = kv_tenant(s, k->tenant_id, false);

	if (!k->used || !t) {
		memd_log(LOG_ERR, "kv: slab=%u given back but not a kv slab",
			 slab);
		return;
	}
	pthread_mutex_lock(&s->kvlock);
	t->slabs--; /* before the lease goes: see struct kv_tenant */
	pthread_mutex_unlock(&s->kvlock);
	if (memd_lease_release(s->lt, t->ses, slab, k->generation, now_ms(),
			       revoke_mr, s)) {
		memd_log(LOG_ERR, "kv: release slab=%u tenant=%u failed", slab,
			 k->tenant_id);
		revoke_mr(slab, s); /* whatever the table says, the key goes */
	}
	k->used = false;
	CTR_ADD(s, kv_slabs_returned, 1);
	memd_log(LOG_DEBUG, "kv: slab returned tenant=%u slab=%u held=%u",
		 k->tenant_id, slab, t->slabs);
	reclaim_kick(s);
	if (s->donor)
		memd_donor_kick(s->donor);
}

/*
 * In a cluster, a tenant's store holding more than the registry's latest
 * allowance evicts its own entries down to it (the quota moved: another
 * PLACE, a lower quota, a donor more in the split). memd-ctl, every tick.
 */
static void kv_trim(struct memd_server *s)
{
	if (!s->donor)
		return; /* standalone: kv_share only limits growth */
	for (uint32_t i = 0; i < s->nkvt; i++) {
		uint32_t tenant = s->kvt[i].tenant_id, cap;
		bool by_registry;
		ssize_t n;

		/* without an allowance (a registry not heard from since
		 * joining) a store keeps what it holds */
		if (!memd_donor_kv_allowance(s->donor, tenant, &cap))
			continue;
		cap = kv_cap_slabs(s, tenant, &by_registry);
		if (!by_registry || s->kvt[i].slabs <= cap)
			continue;
		n = memd_kv_trim(s->kv, tenant, cap, now_ms());
		if (n > 0) {
			CTR_ADD(s, kv_trimmed, (uint64_t)n);
			memd_log(LOG_INFO,
				 "kv: trimmed tenant=%u to allowance=%u "
				 "evicted=%zd held=%u",
				 tenant, cap, n, s->kvt[i].slabs);
		}
	}
}

/* KV sessions never expire: renewed on every tick, before expiry runs. */
static void kv_renew(struct memd_server *s)
{
	for (uint32_t i = 0; i < s->nkvt; i++)
		if (memd_session_renew(s->lt, s->kvt[i].ses, now_ms()) < 0)
			memd_log(LOG_ERR, "kv: session of tenant=%u expired",
				 s->kvt[i].tenant_id);
}

static void kv_cost_publish(struct memd_server *s)
{
	__atomic_store_n(&s->kv_cost_bpt, s->cfg.kv_bytes_per_token,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&s->kv_cost_tps, s->cfg.kv_prefill_tokens_per_s,
			 __ATOMIC_RELAXED);
}

/*
 * A drain begun (docs/kv.md, "Drain"): the registry has taken this donor
 * out of the donors clients hash keys over, so its KV entries can no
 * longer be reached, deleted or replaced, and after an undrain they would
 * answer again with whatever they held before: values deleted or put
 * anew elsewhere meanwhile. Every tenant's entries are forgotten and
 * their spill files deleted now; the KV slabs go back (reclaim), which is
 * what a drain is for.
 */
static void kv_drained(struct memd_server *s)
{
	static uint32_t ids[1024]; /* memd-ctl only */
	uint64_t starts;
	size_t n;

	if (!s->donor || !s->kv)
		return;
	starts = memd_donor_drain_starts(s->donor);
	if (starts == s->drains_seen)
		return;
	s->drains_seen = starts;
	n = memd_kv_tenant_ids(s->kv, ids, sizeof(ids) / sizeof(ids[0]));
	for (size_t i = 0; i < n; i++) {
		ssize_t r = memd_kv_forget_tenant(s->kv, ids[i], now_ms());

		memd_log(LOG_NOTICE,
			 "kv: draining: tenant=%u entries=%zd forgotten and "
			 "its spill files deleted (an undrained donor starts "
			 "empty)",
			 ids[i], r);
	}
}

static int kv_open(struct memd_server *s, char *err, size_t errlen)
{
	struct memd_kv_options o = {
		.slab_bytes = s->cfg.slab_bytes,
		.epoch = s->epoch,
		.reserve_ms = s->cfg.kv_reserve_ms,
		.max_reserved = s->cfg.kv_max_reserved,
		.lease_ms = s->cfg.kv_lease_ms,
		.slab_get = kv_slab_get,
		.slab_put = kv_slab_put,
		.slab_arg = s,
		.spill_dir =
			s->cfg.kv_spill_dir[0] ? s->cfg.kv_spill_dir : NULL,
		.spill_bytes = s->cfg.kv_spill_bytes,
		.policy = MEMD_KV_POLICY_S3FIFO,
		.mrc_samples = s->cfg.kv_mrc_samples,
	};
	struct memd_kv_scan_result sr = { 0 };
	int r;

	s->kvs = calloc(s->nslabs, sizeof(*s->kvs));
	if (!s->kvs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	kv_cost_publish(s);
	r = memd_kv_create(&o, &s->kv);
	if (r) {
		snprintf(err, errlen, "kv store%s%s: %s",
			 o.spill_dir ? " with kv_spill_dir " : "",
			 o.spill_dir ? o.spill_dir : "", strerror(-r));
		return r;
	}
	r = memd_kv_scan_spill(s->kv, &sr);
	if (r) {
		snprintf(err, errlen, "kv_spill_dir %s: %s", o.spill_dir,
			 strerror(-r));
		return r;
	}
	if (o.spill_dir)
		memd_log(LOG_NOTICE,
			 "kv: spill dir=%s files=%" PRIu64 " bytes=%" PRIu64
			 " deleted=%" PRIu64 " dropped=%" PRIu64,
			 o.spill_dir, sr.files, sr.bytes, sr.deleted,
			 sr.dropped);
	return 0;
}

/*
 * One KV location for a session of tenant: the block's RMA address in the
 * slab's registration. -EIO (logged) if the slab is not that tenant's KV
 * slab: the store's bookkeeping and ours disagree, and no key of another
 * tenant's slab may leave memd.
 */
static int kv_fill_loc(struct memd_server *s, uint32_t tenant,
		       const struct memd_kv_loc *l, bool write,
		       struct wire_kv_loc *out)
{
	if (l->slab >= s->nslabs || !s->kvs[l->slab].used ||
	    s->kvs[l->slab].tenant_id != tenant || !s->mr[l->slab] ||
	    !s->mr_ro[l->slab]) {
		memd_log(LOG_ERR,
			 "kv: location slab=%u is not a kv slab of tenant=%u",
			 l->slab, tenant);
		return -EIO;
	}
	/* a reader gets the read-only registration's key, a writer (KV
	 * RESERVE) the one that writes */
	out->raddr =
		fab_mr_remote_base(write ? s->mr[l->slab] : s->mr_ro[l->slab]) +
		l->offset;
	out->rkey = write ? s->key[l->slab] : s->key_ro[l->slab];
	out->block_bytes = l->block_bytes;
	out->endpoint = (uint16_t)slab_aep(s, l->slab)->index;
	return 0;
}

static void do_kv(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	static struct memd_kv_item items[WIRE_KV_BATCH]; /* memd-ctl only */
	static struct memd_kv_loc locs[WIRE_KV_MAX_LOCS];
	static uint8_t keys[WIRE_KV_BATCH][MEMD_KV_KEY_BYTES];
	const struct wire_kv *in = &req->u.kv;
	struct wire_kv *out = &rep->u.kv;
	uint32_t tenant = c->tenant_id;
	uint64_t now = now_ms();
	size_t n = in->count;
	uint32_t j;
	ssize_t r;

	if (s->mode != MODE_STANDALONE && c->role != WIRE_ROLE_TENANT) {
		CTR_ADD(s, kv_refused, 1);
		send_error(s, c, req->seq, EACCES,
			   "%s: only a tenant session uses the KV tier",
			   wire_type_name(req->type));
		return;
	}
	if (!s->cfg.kv_share) {
		CTR_ADD(s, kv_refused, 1);
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "%s: the KV tier is off on this memd (kv_share = "
			   "0)",
			   wire_type_name(req->type));
		return;
	}
	/* Before anything of the tenant's is served: its spill files must
	 * be its own (another pool's or tenant's are deleted). */
	r = memd_kv_bind_tenant(
		s->kv, tenant,
		s->mode == MODE_STANDALONE ? s->solo_bind : c->spill_bind, now);
	if (r > 0) {
		CTR_ADD(s, kv_spill_refused, (uint64_t)r);
		memd_log(LOG_NOTICE,
			 "kv: tenant=%u bound: dropped=%zd entries or spill "
			 "files of another pool or tenant",
			 tenant, r);
	}
	memset(items, 0, n * sizeof(items[0]));
	for (size_t i = 0; i < n; i++) {
		memcpy(items[i].key, in->item[i].key, MEMD_KV_KEY_BYTES);
		memcpy(keys[i], in->item[i].key, MEMD_KV_KEY_BYTES);
		items[i].value_len = in->item[i].value_len;
		items[i].generation = in->item[i].generation;
		items[i].checksum = in->item[i].checksum;
	}
	switch (req->type) {
	case WIRE_KV_RESERVE:
		r = memd_kv_reserve(s->kv, tenant, items, n, locs,
				    WIRE_KV_MAX_LOCS, now);
		break;
	case WIRE_KV_COMMIT:
		r = memd_kv_commit(s->kv, tenant, items, n, now);
		break;
	case WIRE_KV_LOOKUP:
		r = memd_kv_lookup(s->kv, tenant, items, n, locs,
				   WIRE_KV_MAX_LOCS, now);
		break;
	case WIRE_KV_DONE:
		r = memd_kv_done(s->kv, tenant, items, n, now);
		break;
	case WIRE_KV_EXISTS:
		r = memd_kv_exists(s->kv, tenant,
				   (const uint8_t(*)[MEMD_KV_KEY_BYTES])keys,
				   n);
		break;
	case WIRE_KV_DELETE:
		r = memd_kv_delete(s->kv, tenant, items, n, now);
		break;
	default: /* WIRE_KV_PIN */
		if ((in->flags & WIRE_KV_UNPIN) && (in->flags & WIRE_KV_DROP)) {
			send_error(s, c, req->seq, EINVAL,
				   "KV_PIN: UNPIN and DROP together");
			return;
		}
		r = in->flags & WIRE_KV_DROP
			    ? memd_kv_drop(s->kv, tenant, items, n, now)
		    : in->flags & WIRE_KV_UNPIN
			    ? memd_kv_unpin(s->kv, tenant, items, n)
			    : memd_kv_pin(s->kv, tenant, items, n, now);
		break;
	}
	if (r < 0) { /* the batch itself: cannot happen for a decoded one */
		send_error(s, c, req->seq, (int)-r, "%s: %s",
			   wire_type_name(req->type), strerror((int)-r));
		return;
	}
	CTR_ADD(s, kv_requests, 1);
	memset(rep, 0, sizeof(*rep));
	rep->type = (uint8_t)(req->type | 0x80);
	rep->seq = req->seq;
	if (req->type == WIRE_KV_EXISTS) {
		out->count = (uint16_t)r;
		goto send;
	}
	out->count = (uint16_t)n;
	for (size_t i = 0; i < n; i++) {
		const struct memd_kv_item *it = &items[i];
		struct wire_kv_item *o = &out->item[i];
		bool ok = it->status == 0;

		o->status = it->status;
		switch (req->type) {
		case WIRE_KV_RESERVE:
			o->generation = ok || it->status == -EEXIST
						? it->generation
						: 0;
			if (ok)
				CTR_ADD(s, kv_reserved, 1);
			if (it->status == -EDQUOT)
				CTR_ADD(s, kv_reserve_refused, 1);
			break;
		case WIRE_KV_LOOKUP:
			if (ok) {
				o->value_len = it->value_len;
				o->generation = it->generation;
				o->checksum = it->checksum;
			}
			if (ok)
				CTR_ADD(s, kv_hits, 1);
			else
				CTR_ADD(s, kv_misses, 1);
			break;
		case WIRE_KV_COMMIT:
			if (ok)
				CTR_ADD(s, kv_committed, 1);
			break;
		case WIRE_KV_DELETE:
			if (ok)
				CTR_ADD(s, kv_deleted, 1);
			break;
		}
		if (!ok || (req->type != WIRE_KV_RESERVE &&
			    req->type != WIRE_KV_LOOKUP))
			continue;
		/* This key's chunks, packed after the previous key's. */
		o->first_loc = out->nlocs;
		o->nchunks = it->nchunks;
		for (j = 0; j < it->nchunks; j++)
			if (kv_fill_loc(s, tenant, &locs[it->first_loc + j],
					req->type == WIRE_KV_RESERVE,
					&out->loc[out->nlocs + j]))
				break;
		if (j < it->nchunks) {
			memset(o, 0, sizeof(*o));
			o->status = -EIO;
			memset(&out->loc[out->nlocs], 0,
			       j * sizeof(out->loc[0]));
			continue;
		}
		out->nlocs = (uint16_t)(out->nlocs + j);
	}
send:
	if (conn_send(c, rep)) {
		memd_log(LOG_ERR, "kv: reply %s does not encode",
			 wire_type_name(rep->type));
		c->closing = true;
	}
}

/* DONORS: the up donors, for rendezvous hashing (protocol.md). */
struct donors_list {
	struct wire_donors_ok *out;
	uint32_t up;
};

static void donors_one(void *arg, const struct memd_registry_donor_info *d)
{
	struct donors_list *l = arg;
	struct wire_donor_entry *e;

	if (d->state != MEMD_DONOR_UP)
		return;
	if (l->up++ >= WIRE_MAX_DONORS)
		return;
	e = &l->out->donor[l->out->count++];
	e->donor_id = d->id;
	e->epoch = d->epoch;
	snprintf(e->name, sizeof(e->name), "%s", d->name);
	snprintf(e->addr, sizeof(e->addr), "%s", d->addr);
}

static void do_donors(struct memd_server *s, struct conn *c,
		      const struct wire_msg *req, struct wire_msg *rep)
{
	struct donors_list l = { .out = &rep->u.donors_ok };

	if (!s->reg) {
		send_error(s, c, req->seq, EOPNOTSUPP,
			   "donors: this memd is not the registry%s",
			   s->mode == MODE_STANDALONE
				   ? " (standalone: it is the only donor)"
				   : "");
		return;
	}
	if (c->role != WIRE_ROLE_TENANT) {
		send_error(s, c, req->seq, EACCES,
			   "donors: only a tenant session asks");
		return;
	}
	memset(rep, 0, sizeof(*rep));
	memd_registry_foreach_donor(s->reg, donors_one, &l);
	if (l.up > WIRE_MAX_DONORS) {
		send_error(s, c, req->seq, EOVERFLOW,
			   "donors: %u donors are up, more than one reply "
			   "holds (%d)",
			   l.up, WIRE_MAX_DONORS);
		return;
	}
	rep->type = WIRE_DONORS_OK;
	rep->seq = req->seq;
	if (conn_send(c, rep))
		c->closing = true;
}

static void handle(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req)
{
	static struct wire_msg rep; /* memd-ctl only; PLACE_OK is ~5 KiB */
	bool v2 = (req->type >= WIRE_AUTH && req->type <= WIRE_ADMIN) ||
		  (req->type >= WIRE_KV_RESERVE && req->type <= WIRE_DONORS);

	CTR_ADD(s, frames_in, 1);
	c->last_rx_ms = now_ms();
	if (req->type != WIRE_HELLO && !c->session) {
		send_error(s, c, req->seq, EPROTO, "%s before HELLO",
			   wire_type_name(req->type));
		c->closing = true;
		return;
	}
	if (c->session && memd_session_is_dead(s->lt, c->session)) {
		send_error(s, c, req->seq, ESTALE,
			   "session expired: no heartbeat within the lease "
			   "TTL; its leases are gone");
		c->closing = true;
		return;
	}
	if (v2 && c->proto < 2) {
		send_error(s, c, req->seq, EPROTO,
			   "%s is not in protocol %u (negotiated in HELLO)",
			   wire_type_name(req->type), c->proto);
		c->closing = true;
		return;
	}
	if (s->mode != MODE_STANDALONE && c->auth != AUTH_DONE &&
	    req->type != WIRE_HELLO && req->type != WIRE_AUTH &&
	    req->type != WIRE_AUTH_PROOF) {
		CTR_ADD(s, auth_failures, 1);
		memd_log_limited(&s->ll_auth, LOG_NOTICE,
				 "auth: %s before authentication peer=%s",
				 wire_type_name(req->type), c->peer);
		send_error(s, c, req->seq, EACCES,
			   "%s before authentication: this memd is part of a "
			   "pool; authenticate first (tenant and secret)",
			   wire_type_name(req->type));
		c->closing = true;
		return;
	}
	switch (req->type) {
	case WIRE_HELLO:
		do_hello(s, c, req, &rep);
		return;
	case WIRE_LEASE:
		do_lease(s, c, req, &rep);
		return;
	case WIRE_RELEASE:
		do_release(s, c, req, &rep);
		return;
	case WIRE_HEARTBEAT:
	case WIRE_HEARTBEAT2:
		do_heartbeat(s, c, req, &rep);
		return;
	case WIRE_AUTH:
		do_auth(s, c, req, &rep);
		return;
	case WIRE_AUTH_PROOF:
		do_auth_proof(s, c, req, &rep);
		return;
	case WIRE_PLACE:
		do_place(s, c, req, &rep);
		return;
	case WIRE_LEASE_GRANT:
		do_lease_grant(s, c, req, &rep);
		return;
	case WIRE_DONOR_JOIN:
	case WIRE_DONOR_REPORT:
		do_donor(s, c, req, &rep);
		return;
	case WIRE_ADMIN:
		do_admin(s, c, req, &rep);
		return;
	case WIRE_KV_RESERVE:
	case WIRE_KV_COMMIT:
	case WIRE_KV_LOOKUP:
	case WIRE_KV_DONE:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
	case WIRE_KV_PIN:
		do_kv(s, c, req, &rep);
		return;
	case WIRE_DONORS:
		do_donors(s, c, req, &rep);
		return;
	case WIRE_STATUS:
		memset(&rep, 0, sizeof(rep));
		rep.type = WIRE_STATUS_OK;
		rep.seq = req->seq;
		fill_status(s, &rep.u.status_ok);
		break;
	case WIRE_BYE:
		memd_session_close(s->lt, c->session, now_ms(), revoke_mr, s);
		c->session = NULL;
		reclaim_kick(s);
		if (s->donor)
			memd_donor_kick(s->donor);
		memset(&rep, 0, sizeof(rep));
		rep.type = WIRE_BYE_OK;
		rep.seq = req->seq;
		c->closing = true;
		break;
	default:
		/* A reply type sent to us: decodable, but not a request. */
		CTR_ADD(s, frames_rejected, 1);
		send_error(s, c, req->seq, EBADMSG, "%s is not a request",
			   wire_type_name(req->type));
		c->closing = true;
		return;
	}
	if (conn_send(c, &rep))
		c->closing = true;
}

/* Decodes and handles complete frames in rx while tx has room. */
/*
 * A registry that did not run (stopped, a paused VM, a pass that blocked)
 * must not take its own silence for its donors' before it reads what
 * they sent: memd-ctl checks how long it has been since it last looked
 * before every request it handles and before the liveness tick, wherever
 * in a pass the process was stopped (memd_registry_loop_gap).
 */
static void reg_awake(struct memd_server *s)
{
	uint64_t now = now_ms();

	if (!s->reg)
		return;
	if (!s->reg_awake_ms) /* first pass (the fuzzing seam's too) */
		s->reg_awake_ms = now;
	memd_registry_loop_gap(s->reg, now - s->reg_awake_ms);
	s->reg_awake_ms = now;
}

static void conn_process(struct memd_server *s, struct conn *c)
{
	static struct wire_msg req; /* memd-ctl only */
	size_t off = 0;

	while (!c->closing && c->tx_len - c->tx_off < TX_HIGH_WATER) {
		ssize_t n = wire_decode(c->rx + off, c->rx_len - off, &req);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			CTR_ADD(s, frames_rejected, 1);
			memd_log_limited(&s->ll_frame, LOG_NOTICE,
					 "ctl: bad frame peer=%s err=%s",
					 c->peer, strerror((int)-n));
			/* wire_decode left the header's seq in req */
			if (n == -EMSGSIZE)
				send_error(s, c, req.seq, EMSGSIZE,
					   "frame longer than %u bytes",
					   WIRE_MAX_FRAME);
			else if (n == -EBADMSG)
				send_error(s, c, req.seq, EBADMSG,
					   "malformed frame");
			/* Bad magic or version: not our protocol, no reply. */
			c->closing = true;
			if (n != -EMSGSIZE && n != -EBADMSG)
				c->tx_len = c->tx_off = 0;
			break;
		}
		reg_awake(s);
		handle(s, c, &req);
		off += (size_t)n;
	}
	if (off) {
		memmove(c->rx, c->rx + off, c->rx_len - off);
		c->rx_len -= off;
	}
}

static int conn_flush(struct conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = send(c->fd, c->tx + c->tx_off,
				 c->tx_len - c->tx_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c->tx_off += (size_t)n;
	}
	c->tx_off = c->tx_len = 0;
	return 0;
}

/*
 * Reads what the socket has, growing rx up to one full frame. Returns 0,
 * 1 when the peer has closed its side (what arrived before still counts),
 * or -errno.
 */
static int conn_read(struct conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->rx_len == c->rx_cap) {
			size_t cap = c->rx_cap * 2;
			uint8_t *p;

			if (cap > WIRE_MAX_FRAME)
				cap = WIRE_MAX_FRAME;
			if (cap <= c->rx_cap)
				return 0; /* a whole frame is buffered */
			p = realloc(c->rx, cap);
			if (!p)
				return -ENOMEM;
			c->rx = p;
			c->rx_cap = cap;
		}
		n = recv(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len, 0);
		if (n == 0)
			return 1;
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c->rx_len += (size_t)n;
		if (c->rx_len < c->rx_cap)
			return 0;
	}
}

/* After any event: process, flush, re-arm or close. */
static void conn_service(struct memd_server *s, struct conn *c)
{
	bool reading, writing;
	int r;

	conn_process(s, c);
	r = conn_flush(c);
	if (r) {
		conn_close(s, c, "send failed");
		return;
	}
	if (c->closing && c->tx_off == c->tx_len) {
		conn_close(s, c, "done");
		return;
	}
	reading = !c->closing && c->tx_len - c->tx_off < TX_HIGH_WATER;
	writing = c->tx_off < c->tx_len;
	if (reading != c->reading || writing != c->writing) {
		c->reading = reading;
		c->writing = writing;
		if (epoll_mod(s, c))
			conn_close(s, c, "epoll");
	}
}

/* Tells a connection we will not serve why (best effort: one error frame
 * if the socket takes it now), and closes it. */
static void refuse_fd(int fd, const char *why)
{
	struct wire_msg m;
	uint8_t buf[WIRE_HDR_LEN + WIRE_MSG_MAX + 16];
	ssize_t n;

	wire_make_error(&m, 0, EBUSY, why);
	n = wire_encode(&m, buf, sizeof(buf));
	if (n > 0)
		(void)!send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

/* Stops watching the listener for a while (TICK_MS: the loop's tick
 * re-arms it), so an accept error that repeats cannot spin memd-ctl. */
static void accept_pause(struct memd_server *s)
{
	struct epoll_event ev = { .events = 0, .data.ptr = &s->lfd };

	if (s->accept_off)
		return;
	epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &ev);
	s->accept_off = true;
	s->accept_on_ms = now_ms() + TICK_MS;
}

static void accept_resume(struct memd_server *s)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->lfd };

	if (!s->accept_off || now_ms() < s->accept_on_ms)
		return;
	if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &ev) == 0)
		s->accept_off = false;
	else
		s->accept_on_ms = now_ms() + TICK_MS;
}

/*
 * accept(2) failed with EMFILE or ENFILE: the pending connection stays in
 * the backlog and the listener stays readable. Give up the reserve
 * descriptor, take the connection, tell it and close it, take the reserve
 * back. Returns true when a connection was shed (try the next one); false
 * when that was impossible (the caller pauses the listener).
 */
static bool accept_shed(struct memd_server *s, int err)
{
	int fd;

	if (s->reserve_fd < 0)
		s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (s->reserve_fd < 0) {
		memd_log_limited(
			&s->ll_shed, LOG_ERR,
			"ctl: out of file descriptors (%s), no reserve "
			"left: pausing accept clients=%u",
			strerror(err), s->nconns);
		return false;
	}
	close(s->reserve_fd);
	fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	refuse_fd(fd, "memd is out of file descriptors");
	CTR_ADD(s, conns_shed, 1);
	memd_log_limited(&s->ll_shed, LOG_ERR,
			 "ctl: out of file descriptors (%s): shedding new "
			 "connections clients=%u max_clients=%u; raise "
			 "RLIMIT_NOFILE (LimitNOFILE=)",
			 strerror(err), s->nconns, s->cfg.max_clients);
	return true;
}

/*
 * Closes the oldest connection still in its handshake, from host when
 * host is not NULL, to admit a newer one. False when there is none.
 */
static bool displace_oldest(struct memd_server *s, const char *host)
{
	struct conn *v = s->hs_head;

	while (v && host && strcmp(v->host, host))
		v = v->hs_next;
	if (!v)
		return false;
	CTR_ADD(s, conns_displaced, 1);
	memd_log_limited(&s->ll_evict, LOG_NOTICE,
			 "ctl: displaced peer=%s age_ms=%" PRIu64 " why=%s",
			 v->peer, now_ms() - v->accepted_ms,
			 host ? "max_clients_per_host" : "max_clients");
	conn_close(s, v, "displaced in its handshake");
	return true;
}

/* Connections in their handshake from host. */
static uint32_t host_hs_conns(const struct memd_server *s, const char *host)
{
	uint32_t n = 0;

	for (const struct conn *c = s->hs_head; c; c = c->hs_next)
		n += !strcmp(c->host, host);
	return n;
}

/*
 * Admits one accepted connection fd from host:port (numeric): displaces
 * or refuses as admission says (docs/reliability.md), else adds it to the
 * loop in its handshake. Takes fd in every case.
 */
static void accept_one(struct memd_server *s, int fd, const char *host,
		       const char *port)
{
	struct epoll_event ev;
	struct conn *c;
	int one = 1;

	/* One address never holds more than max_clients_per_host
	 * connections in their handshake; the table is never so
	 * full of handshakes that a new client cannot get in. */
	if (!s->draining &&
	    host_hs_conns(s, host) >= s->cfg.max_clients_per_host)
		displace_oldest(s, host);
	if (s->nconns >= s->cfg.max_clients && !s->draining)
		displace_oldest(s, NULL);
	if (s->nconns >= s->cfg.max_clients || s->draining) {
		refuse_fd(fd, s->draining ? "memd is draining"
					  : "too many clients");
		CTR_ADD(s, conns_refused, 1);
		memd_log_limited(&s->ll_refuse, LOG_WARNING,
				 "ctl: refused peer=%s:%s clients=%u "
				 "max=%u",
				 host, port, s->nconns, s->cfg.max_clients);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->rx = malloc(RX_INITIAL);
	if (c)
		c->tx = malloc(TX_CAP);
	if (!c || !c->rx || !c->tx) {
		if (c) {
			free(c->rx);
			free(c->tx);
		}
		free(c);
		close(fd);
		memd_log_limited(&s->ll_accept, LOG_ERR,
				 "ctl: out of memory for a client");
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->rx_cap = RX_INITIAL;
	c->reading = true;
	c->accepted_ms = c->last_rx_ms = now_ms();
	snprintf(c->host, sizeof(c->host), "%s", host);
	snprintf(c->peer, sizeof(c->peer), "%s:%s", host, port);
	ev.events = EPOLLIN | EPOLLRDHUP;
	ev.data.ptr = c;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		memd_log_limited(&s->ll_accept, LOG_ERR,
				 "ctl: epoll add err=%s", strerror(errno));
		close(fd);
		free(c->rx);
		free(c->tx);
		free(c);
		return;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	c->hs_prev = s->hs_tail;
	if (s->hs_tail)
		s->hs_tail->hs_next = c;
	else
		s->hs_head = c;
	s->hs_tail = c;
	CTR_ADD(s, conns_accepted, 1);
	memd_log(LOG_DEBUG, "ctl: accept peer=%s", c->peer);
}

static void accept_all(struct memd_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			int e = errno;

			if (e == EAGAIN || e == EWOULDBLOCK)
				return;
			if (e == EINTR || e == ECONNABORTED)
				continue;
			if ((e == EMFILE || e == ENFILE) && accept_shed(s, e))
				continue;
			if (e != EMFILE && e != ENFILE)
				memd_log_limited(&s->ll_accept, LOG_WARNING,
						 "ctl: accept err=%s",
						 strerror(e));
			accept_pause(s);
			return;
		}
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host),
			    port, sizeof(port),
			    NI_NUMERICHOST | NI_NUMERICSERV);
		accept_one(s, fd, host, port);
	}
}

/*
 * Closes connections past their deadline: handshake_timeout after accept
 * for those still in their handshake (the queue is in accept order, so
 * only its head needs looking at), idle_timeout after their last request
 * for established ones (scanned once a second).
 */
static void conn_timers(struct memd_server *s)
{
	uint64_t now = now_ms();

	while (s->hs_head &&
	       now - s->hs_head->accepted_ms >= s->cfg.handshake_timeout_ms) {
		struct conn *c = s->hs_head;

		CTR_ADD(s, handshake_timeouts, 1);
		memd_log_limited(&s->ll_timeout, LOG_NOTICE,
				 "ctl: handshake timeout peer=%s after_ms=%u",
				 c->peer, s->cfg.handshake_timeout_ms);
		conn_close(s, c, "handshake timeout");
	}
	if (!s->cfg.idle_timeout_ms || now < s->idle_scan_ms)
		return;
	s->idle_scan_ms = now + 1000;
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (!c->established ||
		    now - c->last_rx_ms < s->cfg.idle_timeout_ms)
			continue;
		CTR_ADD(s, idle_timeouts, 1);
		memd_log_limited(&s->ll_timeout, LOG_NOTICE,
				 "ctl: idle timeout peer=%s after_ms=%u",
				 c->peer, s->cfg.idle_timeout_ms);
		conn_close(s, c, "idle timeout");
	}
}

/* Closes the connections of sessions that expired while attached. */
static void expire_sessions(struct memd_server *s)
{
	uint32_t n = memd_lease_expire(s->lt, now_ms(), count_expired, s);

	if (!n)
		return;
	memd_log(LOG_NOTICE, "lease: expired sessions=%u", n);
	reclaim_kick(s);
	if (s->donor)
		memd_donor_kick(s->donor);
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->session && memd_session_is_dead(s->lt, c->session)) {
			memd_log(LOG_NOTICE,
				 "lease: session=%" PRIx64 " peer=%s expired "
				 "without heartbeat",
				 memd_session_id(c->session), c->peer);
			conn_close(s, c, "session expired");
		}
	}
}

/*
 * After each new REPORT_OK: tenants the registry has removed lose their
 * sessions here (connections closed, leases revoked: their donor passes
 * no longer open any, see do_auth) and their KV entries and spill files.
 * memd-ctl, every tick (cheap until a new report arrives).
 */
static void tenants_removed(struct memd_server *s)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	static uint32_t ids[1024]; /* memd-ctl only */
	uint64_t reports = 0;
	size_t n;

	if (!s->donor)
		return;
	memd_donor_tenant_removed(s->donor, 0, &reports);
	if (reports == s->removals_seen)
		return;
	s->removals_seen = reports;
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->auth != AUTH_DONE || c->role != WIRE_ROLE_TENANT ||
		    !memd_donor_tenant_removed(s->donor, c->tenant_id, NULL))
			continue;
		CTR_ADD(s, sessions_revoked, 1);
		memd_log(LOG_NOTICE,
			 "auth: tenant=%s id=%u removed by the registry: "
			 "session=%" PRIx64 " peer=%s closed",
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 c->tenant_id, c->session_id, c->peer);
		if (c->session) {
			memd_session_close(s->lt, c->session, now_ms(),
					   revoke_mr, s);
			c->session = NULL;
			reclaim_kick(s);
		}
		conn_close(s, c, "tenant removed");
	}
	if (!s->kv)
		return;
	n = memd_kv_tenant_ids(s->kv, ids, sizeof(ids) / sizeof(ids[0]));
	for (size_t i = 0; i < n; i++) {
		ssize_t r;

		if (!memd_donor_tenant_removed(s->donor, ids[i], NULL))
			continue;
		r = memd_kv_remove_tenant(s->kv, ids[i], now_ms());
		CTR_ADD(s, kv_tenants_removed, 1);
		memd_log(LOG_NOTICE,
			 "kv: tenant=%u removed by the registry: entries=%zd "
			 "and its spill files deleted",
			 ids[i], r);
	}
}

/*
 * Every client may cost two descriptors (its control connection and, with
 * the tcp provider, its fabric connection), plus those memd keeps for
 * itself. Raises the soft RLIMIT_NOFILE toward the hard limit to fit
 * max_clients, and says so clearly when it cannot: past the limit
 * connections are shed at accept (accept_shed), never spun on.
 */
#define NOFILE_PER_CLIENT 2
#define NOFILE_OWN 128
static void check_nofile(struct memd_server *s)
{
	rlim_t want =
		(rlim_t)s->cfg.max_clients * NOFILE_PER_CLIENT + NOFILE_OWN;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;

		up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
				      ? want
				      : rl.rlim_max;
		if (up.rlim_cur > rl.rlim_cur && !setrlimit(RLIMIT_NOFILE, &up))
			rl = up;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		memd_log(LOG_WARNING,
			 "memd: max_clients=%u wants %llu file descriptors but "
			 "RLIMIT_NOFILE allows %llu (hard limit %llu): past "
			 "them new connections are shed; raise LimitNOFILE= "
			 "or ulimit -n, or lower max_clients",
			 s->cfg.max_clients, (unsigned long long)want,
			 (unsigned long long)rl.rlim_cur,
			 (unsigned long long)rl.rlim_max);
	else
		memd_log(LOG_DEBUG, "memd: nofile limit=%llu want=%llu",
			 (unsigned long long)rl.rlim_cur,
			 (unsigned long long)want);
}

static void reload_note(void *arg, const char *key, const char *old_value,
			const char *new_value, bool applied)
{
	(void)arg;
	if (applied)
		memd_log(LOG_NOTICE, "config: reload key=%s old=%s new=%s", key,
			 old_value, new_value);
	else
		memd_log(LOG_WARNING,
			 "config: key=%s changed (%s -> %s) but needs a "
			 "restart; keeping %s",
			 key, old_value, new_value, old_value);
}

/* SIGHUP: defaults + file + flags again; reloadable keys take effect. */
static void reload(struct memd_server *s)
{
	struct memd_config next;
	char err[1024];
	int n;

	if (!s->rebuild) {
		memd_log(LOG_NOTICE, "config: SIGHUP: nothing to reload");
		return;
	}
	/* the service manager waits for READY=1 after RELOADING=1 */
	memd_notify("RELOADING=1\nMONOTONIC_USEC=%" PRIu64
		    "\nSTATUS=Reloading the configuration",
		    memd_notify_monotonic_usec());
	if (s->rebuild(&next, err, sizeof(err), s->rebuild_arg)) {
		memd_log(LOG_ERR,
			 "config: reload failed, keeping the running "
			 "config: %s",
			 err);
		memd_notify("READY=1\nSTATUS=Reload failed, running config "
			    "kept: %s",
			    err);
		return;
	}
	n = memd_config_reload(&s->cfg, &next, reload_note, s);
	kv_cost_publish(s);
	check_nofile(s);
	__atomic_store_n(&memd_log_level, s->cfg.log_level, __ATOMIC_RELAXED);
	memd_lease_set_quiesce(s->lt, s->cfg.quiesce_ms);
	__atomic_store_n(&s->busy_poll_us, s->cfg.busy_poll_us,
			 __ATOMIC_RELAXED);
	memd_log(LOG_NOTICE, "config: reloaded changed=%d", n);
	memd_notify("READY=1\nSTATUS=Serving on %s; reloaded, %d key(s) "
		    "applied",
		    s->bound, n);
}

/* ------------------------------------------------------------------ */
/* metrics                                                              */

/* A Prometheus label value: backslash, quote and newline escaped. */
static void put_label(struct memd_metrics_buf *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			memd_metrics_printf(b, "\\%c", *v);
		else if (*v == '\n')
			memd_metrics_printf(b, "\\n");
		else
			memd_metrics_printf(b, "%c", *v);
	}
}

static void put_head(struct memd_metrics_buf *b, const char *name,
		     const char *type, const char *help)
{
	memd_metrics_printf(b, "# HELP tidepool_memd_%s %s\n", name, help);
	memd_metrics_printf(b, "# TYPE tidepool_memd_%s %s\n", name, type);
}

static void put_gauge(struct memd_metrics_buf *b, const char *name,
		      const char *help, uint64_t v)
{
	put_head(b, name, "gauge", help);
	memd_metrics_printf(b, "tidepool_memd_%s %" PRIu64 "\n", name, v);
}

/* Per-tenant usage of this memd's slabs (tenant 0: standalone sessions,
 * which authenticate as nobody). */
static void write_tenant_metrics(struct memd_metrics_buf *b,
				 struct memd_server *s)
{
	struct memd_tenant_usage *u = malloc(WIRE_MAX_TENANTS * sizeof(*u));
	size_t n = u ? memd_lease_tenant_usage(s->lt, u, WIRE_MAX_TENANTS) : 0;

	put_head(b, "tenant_leased_bytes", "gauge",
		 "Memory of this memd leased to each tenant's sessions "
		 "(tenant_id 0: standalone sessions).");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_tenant_leased_bytes{"
				    "tenant_id=\"%u\"} %" PRIu64 "\n",
				    u[i].tenant_id,
				    (uint64_t)u[i].slabs * s->cfg.slab_bytes);
	put_head(b, "tenant_sessions", "gauge",
		 "Live client sessions of each tenant on this memd.");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_tenant_sessions{"
				    "tenant_id=\"%u\"} %u\n",
				    u[i].tenant_id,
				    u[i].sessions -
					    kv_sessions_of(s, u[i].tenant_id));
	free(u);
}

/* The KV statistics that only grow are counters; the rest are gauges. */
static bool kv_stat_is_counter(const char *name)
{
	static const char *const counters[] = {
		"hits",		 "misses",    "evictions", "spills",
		"spill_errors",	 "reloads",   "expired",   "requests",
		"request_hits",	 "hit_bytes", "oneshot",   "oneshot_bytes",
		"oneshot_put_ms"
	};

	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		if (!strcmp(name, counters[i]))
			return true;
	return false;
}

/* Per-tenant statistics of the KV store (memd/kvstore.h's X-macro). */
static void write_kv_capacity_metrics(struct memd_metrics_buf *b,
				      struct memd_server *s,
				      const uint32_t *ids, const uint32_t *caps,
				      const struct memd_kv_stats *st,
				      uint32_t n);

static void write_kv_metrics(struct memd_metrics_buf *b, struct memd_server *s)
{
	uint32_t ids[WIRE_MAX_TENANTS], caps[WIRE_MAX_TENANTS], n = 0;
	struct memd_kv_stats *st;

	pthread_mutex_lock(&s->kvlock);
	for (uint32_t i = 0; i < s->nkvt && n < WIRE_MAX_TENANTS; i++) {
		caps[n] = s->kvt[i].cap_slabs;
		ids[n++] = s->kvt[i].tenant_id;
	}
	pthread_mutex_unlock(&s->kvlock);
	st = calloc(n ? n : 1, sizeof(*st));
	if (!st)
		return;
	for (uint32_t i = 0; i < n; i++)
		memd_kv_get_stats(s->kv, ids[i], &st[i]);
#define X(name, help)                                                          \
	{                                                                      \
		bool ctr = kv_stat_is_counter(#name);                          \
		const char *sfx = ctr ? "_total" : "";                         \
		memd_metrics_printf(b,                                         \
				    "# HELP tidepool_memd_kv_tenant_" #name    \
				    "%s KV store of each tenant: " help        \
				    ".\n# TYPE tidepool_memd_kv_tenant_" #name \
				    "%s %s\n",                                 \
				    sfx, sfx, ctr ? "counter" : "gauge");      \
		for (uint32_t i = 0; i < n; i++)                               \
			memd_metrics_printf(b,                                 \
					    "tidepool_memd_kv_tenant_" #name   \
					    "%s{tenant_id=\"%u\"} %" PRIu64    \
					    "\n",                              \
					    sfx, ids[i], st[i].name);          \
	}
	MEMD_KV_STATS(X)
#undef X
	write_kv_capacity_metrics(b, s, ids, caps, st, n);
	free(st);
}

/* Capacity planning gauges (docs/capacity.md): hit ratio, saved seconds,
 * the curve at 1/4 .. 4 x the tenant's KV capacity. */
static void write_kv_capacity_metrics(struct memd_metrics_buf *b,
				      struct memd_server *s,
				      const uint32_t *ids, const uint32_t *caps,
				      const struct memd_kv_stats *st,
				      uint32_t n)
{
	struct memd_kv_curve *cv = malloc(sizeof(*cv));

	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_hit_ratio Keys found of "
		   "the keys each tenant asked for (request_hits / "
		   "requests).\n# TYPE tidepool_memd_kv_tenant_hit_ratio "
		   "gauge\n");
	for (uint32_t i = 0; i < n; i++)
		if (st[i].requests)
			memd_metrics_printf(
				b,
				"tidepool_memd_kv_tenant_hit_ratio{tenant_id="
				"\"%u\"} %.6f\n",
				ids[i],
				(double)st[i].request_hits /
					(double)st[i].requests);
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_saved_seconds Prefill "
		   "seconds the KV bytes served saved (hit_bytes / "
		   "kv_bytes_per_token / kv_prefill_tokens_per_s).\n# TYPE "
		   "tidepool_memd_kv_tenant_saved_seconds gauge\n");
	for (uint32_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_kv_tenant_saved_seconds{"
				    "tenant_id=\"%u\"} %.3f\n",
				    ids[i], kv_saved_s(s, st[i].hit_bytes));
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_capacity_bytes Bytes of "
		   "blocks each tenant's KV store may hold here.\n# TYPE "
		   "tidepool_memd_kv_tenant_capacity_bytes gauge\n");
	for (uint32_t i = 0; i < n; i++)
		memd_metrics_printf(
			b,
			"tidepool_memd_kv_tenant_capacity_bytes{"
			"tenant_id=\"%u\"} %" PRIu64 "\n",
			ids[i],
			kv_cap_bytes(s->cfg.slab_bytes, caps[i], &st[i]));
	memd_metrics_printf(
		b, "# HELP tidepool_memd_kv_tenant_curve_hit_ratio The hit "
		   "ratio each tenant's miss-ratio curve predicts (memd's "
		   "S3-FIFO, miniature simulations) at "
		   "a multiple of its KV capacity.\n# TYPE "
		   "tidepool_memd_kv_tenant_curve_hit_ratio gauge\n");
	for (uint32_t i = 0; cv && i < n; i++) {
		uint64_t cap = kv_cap_bytes(s->cfg.slab_bytes, caps[i], &st[i]);
		uint64_t sizes[KV_NMULT];
		double at[KV_NMULT];

		for (size_t k = 0; k < KV_NMULT; k++)
			sizes[k] = (uint64_t)(kv_cap_mult[k] * (double)cap);
		if (memd_kv_curve(s->kv, ids[i], sizes, at, KV_NMULT, cv))
			continue;
		for (size_t k = 0; k < KV_NMULT; k++)
			memd_metrics_printf(
				b,
				"tidepool_memd_kv_tenant_curve_hit_ratio{"
				"tenant_id=\"%u\",capacity=\"%g\"} %.6f\n",
				ids[i], kv_cap_mult[k], at[k]);
	}
	free(cv);
}

struct reg_metrics {
	struct memd_metrics_buf *b;
	int what;
};

static void reg_tenant_metric(void *arg,
			      const struct memd_registry_tenant_info *t)
{
	struct reg_metrics *m = arg;
	static const char *const names[] = { "quota_bytes", "used_bytes",
					     "reserved_bytes" };
	uint64_t v = m->what == 0   ? t->quota_bytes
		     : m->what == 1 ? t->used_bytes
				    : t->reserved_bytes;

	memd_metrics_printf(m->b, "tidepool_registry_tenant_%s{tenant=\"",
			    names[m->what]);
	put_label(m->b, t->name);
	memd_metrics_printf(m->b, "\",tenant_id=\"%u\"} %" PRIu64 "\n", t->id,
			    v);
}

struct reg_donor_metrics {
	struct memd_metrics_buf *b;
	uint64_t slab_bytes;
	int what;
};

static void reg_donor_metric(void *arg,
			     const struct memd_registry_donor_info *d)
{
	struct reg_donor_metrics *m = arg;

	if (m->what == 0) {
		memd_metrics_printf(m->b,
				    "tidepool_registry_donor_state{donor=\"");
		put_label(m->b, d->name);
		memd_metrics_printf(m->b, "\",state=\"%s\"} 1\n",
				    memd_donor_state_name(d->state));
	} else {
		memd_metrics_printf(m->b,
				    "tidepool_registry_donor_%s_bytes{donor=\"",
				    m->what == 1 ? "capacity" : "free");
		put_label(m->b, d->name);
		memd_metrics_printf(m->b, "\"} %" PRIu64 "\n",
				    (uint64_t)(m->what == 1 ? d->slabs_total
							    : d->slabs_free) *
					    m->slab_bytes);
	}
}

/* The registry's view: tenants' quotas and usage, donors' states. */
static void write_registry_metrics(struct memd_metrics_buf *b,
				   struct memd_server *s)
{
	static const char *const th[] = {
		"Quota of each tenant.",
		"Memory each tenant holds, as donors report it.",
		"Memory granted to each tenant and not yet redeemed.",
	};
	static const char *const tn[] = { "tenant_quota_bytes",
					  "tenant_used_bytes",
					  "tenant_reserved_bytes" };
	static const char *const dh[] = {
		"State of each donor (up, draining, down).",
		"Memory each donor donates.",
		"Free memory of each donor, as it reports it.",
	};
	static const char *const dn[] = { "donor_state", "donor_capacity_bytes",
					  "donor_free_bytes" };

	for (int w = 0; w < 3; w++) {
		struct reg_metrics m = { .b = b, .what = w };

		memd_metrics_printf(b,
				    "# HELP tidepool_registry_%s %s\n"
				    "# TYPE tidepool_registry_%s gauge\n",
				    tn[w], th[w], tn[w]);
		memd_registry_foreach_tenant(s->reg, reg_tenant_metric, &m);
	}
	for (int w = 0; w < 3; w++) {
		struct reg_donor_metrics m = { .b = b,
					       .slab_bytes = s->cfg.slab_bytes,
					       .what = w };

		memd_metrics_printf(b,
				    "# HELP tidepool_registry_%s %s\n"
				    "# TYPE tidepool_registry_%s gauge\n",
				    dn[w], dh[w], dn[w]);
		memd_registry_foreach_donor(s->reg, reg_donor_metric, &m);
	}
}

/*
 * The exposition of GET /metrics, on memd-metrics. It reads only what is
 * safe from that thread: the lease table (its own lock), the counters
 * (relaxed atomics), and fields fixed at creation (slab size, donation,
 * arenas, provider, start time). memd(8), METRICS, lists every name.
 */
/* Replay checks of grant tickets (memd/redeem.c), cluster modes. */
static void write_redeem_metrics(struct memd_metrics_buf *b,
				 struct memd_server *s)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} c[] = {
		{ "tickets_redeemed_total",
		  "Grant tickets redeemed (passed the replay check).",
		  offsetof(struct memd_redeem_stats, redeemed) },
		{ "tickets_replayed_total",
		  "Grant tickets refused as already redeemed.",
		  offsetof(struct memd_redeem_stats, replayed) },
		{ "tickets_too_old_total",
		  "Grant tickets refused as too old to check for replay.",
		  offsetof(struct memd_redeem_stats, too_old) },
		{ "tickets_busy_total",
		  "Grant tickets refused for want of a registry epoch slot.",
		  offsetof(struct memd_redeem_stats, busy) },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint64_t *v = (uint64_t *)((char *)&s->redeem_st + c[i].off);

		put_head(b, c[i].name, "counter", c[i].help);
		memd_metrics_printf(b, "tidepool_memd_%s %" PRIu64 "\n",
				    c[i].name,
				    __atomic_load_n(v, __ATOMIC_RELAXED));
	}
	put_gauge(b, "redeem_epochs",
		  "Registry epochs this memd checks tickets' replays for.",
		  __atomic_load_n(&s->redeem_st.epochs, __ATOMIC_RELAXED));
}

/* CPU time of a's progress thread so far; 0 when it is not running. The
 * thread outlives memd-metrics (memd_server_destroy stops that first). */
static uint64_t thread_cpu_ns(const struct arena_ep *a)
{
	struct timespec ts;
	clockid_t cid;

	if (!a->started || pthread_getcpuclockid(a->thread, &cid) ||
	    clock_gettime(cid, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One sample of a per-endpoint counter kept in nanoseconds. */
static void put_seconds_ep(struct memd_metrics_buf *b, const char *name,
			   uint32_t ep, uint64_t ns)
{
	memd_metrics_printf(
		b,
		"tidepool_memd_%s{endpoint=\"%u\"} %" PRIu64 ".%06" PRIu64 "\n",
		name, ep, ns / 1000000000u, ns % 1000000000u / 1000);
}

static void write_metrics(struct memd_metrics_buf *b, void *arg)
{
	struct memd_server *s = arg;
	struct memd_lease_counts cnt;
	uint64_t slab = s->cfg.slab_bytes, up_ms = now_ms() - s->start_ms;

	memd_lease_get_counts(s->lt, &cnt);

	put_head(b, "info", "gauge",
		 "memd's version, data-plane provider and cluster mode.");
	memd_metrics_printf(b, "tidepool_memd_info{version=\"");
	put_label(b, TP_VERSION);
	memd_metrics_printf(b, "\",provider=\"");
	put_label(b, fab_domain_provider(s->aep[0].fd));
	memd_metrics_printf(b, "\",mode=\"%s\"} 1\n",
			    memd_mode_name(memd_config_mode(&s->cfg)));
	put_head(b, "uptime_seconds", "gauge", "Seconds since memd started.");
	memd_metrics_printf(b,
			    "tidepool_memd_uptime_seconds %" PRIu64 ".%03u\n",
			    up_ms / 1000, (unsigned int)(up_ms % 1000));

	put_gauge(b, "slab_bytes", "Size of one slab, the unit of lease.",
		  slab);
	put_gauge(b, "capacity_bytes", "Memory donated to the pool.",
		  s->donated_bytes);
	put_gauge(b, "leased_bytes", "Memory in slabs leased to sessions.",
		  (uint64_t)cnt.leased * slab);
	put_gauge(b, "free_bytes", "Memory in free slabs, ready to lease.",
		  (uint64_t)cnt.free * slab);
	put_gauge(b, "reclaiming_bytes",
		  "Memory in revoked slabs waiting to be zeroed.",
		  (uint64_t)cnt.reclaiming * slab);
	put_gauge(b, "slabs_quarantined",
		  "Slabs kept out of use because their memory registration "
		  "could not be closed.",
		  cnt.quarantined);
	put_gauge(b, "sessions", "Open client sessions.",
		  client_sessions(s, cnt.sessions));

#define X(name, help)                                                          \
	put_head(b, #name "_total", "counter", help ".");                      \
	memd_metrics_printf(b, "tidepool_memd_" #name "_total %" PRIu64 "\n",  \
			    __atomic_load_n(&s->ctr.name, __ATOMIC_RELAXED));
	MEMD_COUNTERS(X)
#undef X
	put_head(b, "sessions_expired_total", "counter",
		 "Sessions that expired without a heartbeat.");
	memd_metrics_printf(
		b, "tidepool_memd_sessions_expired_total %" PRIu64 "\n",
		cnt.expired_sessions);

	put_head(b, "arena_slabs", "gauge",
		 "Slabs of each arena (node -1: no NUMA placement).");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(b,
				    "tidepool_memd_arena_slabs{arena=\"%u\","
				    "node=\"%d\"} %u\n",
				    a, arena_aep(s, a)->node, gc.total);
	}
	put_head(b, "arena_free_slabs", "gauge", "Free slabs of each arena.");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(
			b,
			"tidepool_memd_arena_free_slabs{arena=\"%u\","
			"node=\"%d\"} %u\n",
			a, arena_aep(s, a)->node, gc.free);
	}

	put_head(b, "fabric_wakeups_total", "counter",
		 "Times a fabric progress thread woke from sleep because a "
		 "client's request arrived (busy_poll_us avoids them).");
	for (uint32_t a = 0; a < s->nep; a++)
		memd_metrics_printf(
			b,
			"tidepool_memd_fabric_wakeups_total{endpoint=\"%u\"} "
			"%" PRIu64 "\n",
			a,
			__atomic_load_n(&s->aep[a].st.wakeups,
					__ATOMIC_RELAXED));
	put_head(b, "fabric_busy_poll_seconds_total", "counter",
		 "Time fabric progress threads spent polling after a request "
		 "instead of sleeping (busy_poll_us).");
	for (uint32_t a = 0; a < s->nep; a++)
		put_seconds_ep(b, "fabric_busy_poll_seconds_total", a,
			       __atomic_load_n(&s->aep[a].st.busy_ns,
					       __ATOMIC_RELAXED));
	put_head(b, "fabric_cpu_seconds_total", "counter",
		 "CPU time of each fabric progress thread (memd-fabN): what "
		 "serving RMA costs memd.");
	for (uint32_t a = 0; a < s->nep; a++)
		put_seconds_ep(b, "fabric_cpu_seconds_total", a,
			       thread_cpu_ns(&s->aep[a]));

	put_head(b, "rma_bytes_total", "counter",
		 "Bytes clients moved by one-sided RMA, as they report them in "
		 "their heartbeats (HEARTBEAT2).");
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"read\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_read, __ATOMIC_RELAXED));
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"write\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_written, __ATOMIC_RELAXED));
	write_tenant_metrics(b, s);
	write_kv_metrics(b, s);
	if (s->redeemed)
		write_redeem_metrics(b, s);
	if (s->reg)
		write_registry_metrics(b, s);
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                            */

static int listen_on(struct memd_server *s, char *bound, size_t boundlen,
		     char *err, size_t errlen)
{
	char host[MEMD_CONF_STR_MAX], hbuf[INET6_ADDRSTRLEN], pbuf[8];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char port[8];
	uint16_t p;
	int fd = -1, one = 1, r;

	if (wire_split_hostport(s->cfg.listen, host, sizeof(host), &p)) {
		snprintf(err, errlen, "listen '%s' is not HOST:PORT",
			 s->cfg.listen);
		return -EINVAL;
	}
	snprintf(port, sizeof(port), "%u", p);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r) {
		snprintf(err, errlen, "listen '%s': %s", s->cfg.listen,
			 gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 512) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		r = -errno;
		snprintf(err, errlen, "listen on %s: %s", s->cfg.listen,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf,
		    sizeof(pbuf), NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(bound, boundlen,
		 ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, pbuf);
	s->lfd = fd;
	return 0;
}

/* "HOST:PORT\n" of the control server, then "metrics HOST:PORT\n" when
 * /metrics is served (memd(8), --ready-file). */
static int write_ready_file(const char *path, const char *addr,
			    const char *metrics_addr)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", addr);
	if (metrics_addr)
		fprintf(f, "metrics %s\n", metrics_addr);
	if (fflush(f) || fsync(fileno(f))) {
		int r = -errno;

		fclose(f);
		unlink(tmp);
		return r;
	}
	fclose(f);
	if (rename(tmp, path)) {
		int r = -errno;

		unlink(tmp);
		return r;
	}
	return 0;
}

/*
 * Opens arena a's domain and endpoint, bound where memd_nodes_bind_addr()
 * says. If the provider cannot bind to a NIC's address (one without IP
 * addressing), the endpoint falls back to the listen host, as without
 * NUMA placement.
 */
static int open_endpoint(struct memd_server *s, struct arena_ep *a,
			 const char *listen_host, char *err, size_t errlen)
{
	struct fab_opts fo = { .provider = s->cfg.provider };
	char why[160];
	int r;

	r = memd_nodes_bind_addr(s->topo, a->node, s->cfg.provider, listen_host,
				 s->cfg.fabric_node, a->bind, sizeof(a->bind),
				 why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "fabric endpoint %u: address: %s",
			 a->index, strerror(-r));
		return r;
	}
	fo.node = a->bind;
	r = fab_domain_open(&fo, &a->fd);
	if (r == -ENODATA && strcmp(a->bind, listen_host) &&
	    !s->cfg.fabric_node[0]) {
		memd_log(LOG_WARNING,
			 "fabric: endpoint=%u node=%d provider=%s cannot bind "
			 "%s (%s); binding the listen host %s instead",
			 a->index, a->node, s->cfg.provider, a->bind, why,
			 listen_host);
		snprintf(a->bind, sizeof(a->bind), "%s", listen_host);
		snprintf(why, sizeof(why),
			 "fallback: provider refused the "
			 "NIC's address");
		fo.node = a->bind;
		r = fab_domain_open(&fo, &a->fd);
	}
	if (r) {
		snprintf(err, errlen, "fabric provider '%s' on node '%s': %s%s",
			 s->cfg.provider, fo.node, strerror(-r),
			 r == -ENODATA ? " (fi_info -l lists the providers "
					 "here)"
				       : "");
		return r;
	}
	if (a->index == 0 && !strncmp(fab_domain_provider(a->fd), "shm", 3))
		/* Measured with libfabric 1.17 (tests/test_fab.c): shm's
		 * fast RMA path checks no keys, so closing a lease's MR
		 * does not stop a former holder from reading it. */
		memd_log(LOG_WARNING,
			 "fabric: provider=shm does not enforce memory keys; "
			 "revoked leases stay readable by local processes; "
			 "use it only when every client is trusted");
	r = fab_ep_open(a->fd, 0, &a->ep);
	if (!r) {
		a->addr_len = sizeof(a->addr);
		r = fab_ep_name(a->ep, a->addr, &a->addr_len);
	}
	if (r) {
		snprintf(err, errlen, "fabric endpoint %u: %s", a->index,
			 strerror(-r));
		return r;
	}
	if (a->addr_len > WIRE_ADDR_MAX) {
		snprintf(err, errlen, "fabric address of %zu bytes is too long",
			 a->addr_len);
		return -EOVERFLOW;
	}
	memd_log(LOG_NOTICE,
		 "fabric: endpoint=%u node=%d bind=%s why=%s slabs=%u-%u "
		 "every=%u",
		 a->index, a->node, a->bind, why,
		 a->index / s->per_arena * s->arena_slabs +
			 a->index % s->per_arena,
		 (a->index / s->per_arena + 1) * s->arena_slabs - 1,
		 s->per_arena);
	return 0;
}

/*
 * Registry and donor modes (docs/cluster.md): the cluster keys from the
 * secret file, the registry's directory. Standalone: nothing.
 */
static void donor_name(const struct memd_server *s, uint16_t port,
		       char name[WIRE_NAME_MAX]);

static int cluster_open(struct memd_server *s, char *err, size_t errlen)
{
	char self_name[WIRE_NAME_MAX];
	uint8_t *secret;
	int n, r;

	if (!s->cfg.registry[0])
		return 0;
	s->mode = memd_config_mode(&s->cfg) == MEMD_MODE_REGISTRY
			  ? MODE_REGISTRY
			  : MODE_DONOR;
	if (auth_init()) {
		snprintf(err, errlen, "libsodium failed to initialize");
		return -EIO;
	}
	secret = sodium_malloc(AUTH_SECRET_MAX);
	if (!secret) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	n = auth_read_secret_file(s->cfg.cluster_secret_file, secret, err,
				  errlen);
	if (n < 0) {
		sodium_free(secret);
		return n;
	}
	auth_cluster_keys(secret, (size_t)n, &s->keys);
	{
		static const char label[] = "tidepool spill pool v1";

		crypto_generichash(s->spill_pool, sizeof(s->spill_pool),
				   (const uint8_t *)label, sizeof(label) - 1,
				   s->keys.pass, sizeof(s->keys.pass));
	}
	sodium_free(secret);
	if (memd_redeem_create(MEMD_REDEEM_WINDOW_IDS, MEMD_REDEEM_EPOCHS,
			       TICKET_SKEW_MS, &s->redeemed)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (s->mode == MODE_REGISTRY) {
		struct memd_registry_opts ro = {
			.state_dir = s->cfg.state_dir,
			.slab_bytes = s->cfg.slab_bytes,
			.report_ms = s->cfg.report_interval_ms,
			.ticket_ttl_ms = TICKET_TTL_MS,
			.pass_ttl_ms = s->cfg.pass_ttl_ms,
			.keys = &s->keys,
		};
		struct memd_etcd_opts eo = {
			.endpoints = s->cfg.etcd_endpoints,
			.cacert = s->cfg.etcd_cacert,
			.cert = s->cfg.etcd_cert,
			.key = s->cfg.etcd_key,
			/* a step of the election (3 endpoints) stays within
			 * the lease */
			.timeout_ms = s->cfg.etcd_lease_ms / 4,
		};

		if (memd_config_registry_is_etcd(&s->cfg)) {
			char host[256];
			uint16_t port = 0;

			wire_split_hostport(s->bound, host, sizeof(host),
					    &port);
			donor_name(s, port, self_name);
			ro.self_donor = self_name;
			ro.etcd = &eo;
			ro.etcd_prefix = s->cfg.etcd_prefix;
			ro.etcd_lease_ms = s->cfg.etcd_lease_ms;
			ro.advertise = s->cfg.advertise[0] ? s->cfg.advertise
							   : s->bound;
		}
		r = memd_registry_open(&ro, now_ms(), &s->reg, err, errlen);
		if (r)
			return r;
		if (ro.etcd)
			memd_log(LOG_NOTICE,
				 "registry: open etcd=%s prefix=%s "
				 "lease_ms=%u: standby until elected",
				 s->cfg.etcd_endpoints, s->cfg.etcd_prefix,
				 s->cfg.etcd_lease_ms);
		else
			memd_log(LOG_NOTICE,
				 "registry: open state_dir=%s "
				 "registry_epoch=%016" PRIx64,
				 s->cfg.state_dir, memd_registry_epoch(s->reg));
	}
	return 0;
}

/* This memd's name as a donor: donor_name, else the host name and the
 * control port (stable for one config, distinct for several memds on
 * one host). */
static void donor_name(const struct memd_server *s, uint16_t port,
		       char name[WIRE_NAME_MAX])
{
	char hn[WIRE_NAME_MAX] = "memd";

	if (s->cfg.donor_name[0]) {
		snprintf(name, WIRE_NAME_MAX, "%.63s", s->cfg.donor_name);
		return;
	}
	gethostname(hn, sizeof(hn) - 8);
	hn[sizeof(hn) - 8] = '\0';
	for (char *p = hn; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
		      *p == '_'))
			*p = '_';
	snprintf(name, WIRE_NAME_MAX, "%.55s-%u", hn, port);
}

/* memd-donor: the link to the registry (ours, in registry mode). */
static int donor_start(struct memd_server *s, char *err, size_t errlen)
{
	struct memd_donor_opts o = {
		.advertise = s->cfg.advertise,
		.listen = s->bound,
		.epoch = s->epoch,
		.slab_bytes = s->cfg.slab_bytes,
		.slabs_total = s->nslabs,
		.snapshot = donor_snapshot,
		.arg = s,
	};
	char self[WIRE_HOSTPORT_MAX + MEMD_CONF_STR_MAX + 1];
	char name[WIRE_NAME_MAX], host[256];
	uint16_t port = 0;

	if (s->mode == MODE_STANDALONE)
		return 0;
	if (wire_split_hostport(s->bound, host, sizeof(host), &port)) {
		snprintf(err, errlen, "bound address '%s' is not HOST:PORT",
			 s->bound);
		return -EINVAL;
	}
	if (s->mode == MODE_REGISTRY) {
		/* Our own donor part joins us over loopback. */
		if (!strcmp(host, "0.0.0.0") || !host[0])
			snprintf(self, sizeof(self), "127.0.0.1:%u", port);
		else if (!strcmp(host, "::"))
			snprintf(self, sizeof(self), "[::1]:%u", port);
		else
			snprintf(self, sizeof(self), "%.127s", s->bound);
		/* registry = etcd: whichever registry leads, us first */
		if (s->cfg.registry_peers[0])
			snprintf(self + strlen(self),
				 sizeof(self) - strlen(self), ",%s",
				 s->cfg.registry_peers);
		o.registry = self;
	} else {
		o.registry = s->cfg.registry;
	}
	donor_name(s, port, name);
	o.name = name;
	memcpy(o.donor_key, s->keys.donor, sizeof(o.donor_key));
	o.nnodes = (uint16_t)s->narenas;
	for (uint32_t a = 0; a < s->narenas; a++) {
		o.node[a].node = arena_aep(s, a)->node;
		o.node[a].slabs_total = s->arena_slabs;
		o.node[a].slabs_free = s->arena_slabs;
	}
	{
		struct memd_donor *d;
		int r = memd_donor_start(&o, &d, err, errlen);

		if (!r) /* memd-reclaim reads it too */
			__atomic_store_n(&s->donor, d, __ATOMIC_RELEASE);
		return r;
	}
}

/*
 * Endpoints per arena: progress_threads, or from the cores (one per 8 of
 * the first arena's node's CPUs, all online CPUs without NUMA placement,
 * 1 to 4, and no more than WIRE_MAX_ENDPOINTS allow). An explicit value
 * that does not fit is a start-up error.
 */
static int resolve_per_arena(const struct memd_config *cfg,
			     const struct memd_arena *arenas, uint32_t narenas,
			     const struct place_topo *topo, uint32_t *out,
			     char *err, size_t errlen)
{
	uint32_t fit = WIRE_MAX_ENDPOINTS / narenas, n;
	long cpus;

	if (cfg->progress_threads) {
		if (cfg->progress_threads > fit) {
			snprintf(err, errlen,
				 "progress_threads = %u with %u arenas is %u "
				 "endpoints; at most %d fit in HELLO_OK (use "
				 "%u or fewer)",
				 cfg->progress_threads, narenas,
				 cfg->progress_threads * narenas,
				 WIRE_MAX_ENDPOINTS, fit);
			return -EINVAL;
		}
		*out = cfg->progress_threads;
		return 0;
	}
	if (topo && arenas[0].node >= 0)
		cpus = (long)place_node_cpus(topo, arenas[0].node, NULL, 0);
	else
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
	n = cpus >= 8 ? (uint32_t)(cpus / 8) : 1;
	if (n > 4)
		n = 4;
	*out = n < fit ? n : fit;
	return 0;
}

/* memd-etcd: the registry's election and lease in etcd (registry =
 * etcd); it resigns (revokes its lease) when memd stops. */
static void *etcd_main(void *arg)
{
	struct memd_server *s = arg;

	pthread_setname_np(pthread_self(), "memd-etcd");
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint64_t until =
			now_ms() + memd_registry_etcd_step(s->reg, now_ms());

		while (now_ms() < until &&
		       !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
			usleep(20000);
	}
	memd_registry_etcd_resign(s->reg);
	return NULL;
}

int memd_server_create(const struct memd_config *cfg, struct memd_arena *arenas,
		       uint32_t narenas, const struct place_topo *topo,
		       memd_config_builder rebuild, void *rebuild_arg,
		       const char *ready_file, struct memd_server **out,
		       char *err, size_t errlen)
{
	struct memd_server *s;
	char host[MEMD_CONF_STR_MAX], bound[300], nodes[64];
	struct epoll_event ev;
	sigset_t mask;
	uint16_t port;
	uint32_t per_arena;
	bool hugetlb = true;
	int r;

	*out = NULL;
	if (narenas < 1 || narenas > MEMD_NUMA_NODES_MAX) {
		snprintf(err, errlen, "%u arenas: memd serves 1 to %d", narenas,
			 MEMD_NUMA_NODES_MAX);
		return -EINVAL;
	}
	for (uint32_t a = 0; a < narenas; a++) {
		if (arenas[a].len_bytes != arenas[0].len_bytes ||
		    arenas[a].len_bytes % cfg->slab_bytes ||
		    arenas[a].len_bytes < cfg->slab_bytes) {
			snprintf(err, errlen,
				 "arenas must be equal multiples of "
				 "slab_size");
			return -EINVAL;
		}
	}
	r = resolve_per_arena(cfg, arenas, narenas, topo, &per_arena, err,
			      errlen);
	if (r)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->busy_poll_us = cfg->busy_poll_us;
	s->rebuild = rebuild;
	s->rebuild_arg = rebuild_arg;
	s->topo = topo;
	s->lfd = s->epfd = s->sigfd = s->reserve_fd = -1;
	s->start_ms = now_ms();
	s->epoch = random_key();
	s->narenas = narenas;
	s->per_arena = per_arena;
	s->nep = narenas * per_arena;
	s->arena_slabs = (uint32_t)(arenas[0].len_bytes / cfg->slab_bytes);
	s->nslabs = s->arena_slabs * narenas;
	s->donated_bytes = arenas[0].len_bytes * narenas;
	for (uint32_t e = 0; e < s->nep; e++) {
		struct memd_arena *ar = &arenas[e / per_arena];

		s->aep[e].srv = s;
		s->aep[e].index = e;
		s->aep[e].arena = ar;
		s->aep[e].node = ar->node;
	}
	for (uint32_t a = 0; a < narenas; a++)
		hugetlb = hugetlb && arenas[a].hugetlb;
	pthread_mutex_init(&s->rlock, NULL);
	pthread_mutex_init(&s->kvlock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->rcond, &ca);
		pthread_cond_init(&s->fence_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	s->mr = calloc(s->nslabs, sizeof(*s->mr));
	s->key = calloc(s->nslabs, sizeof(*s->key));
	s->mr_stuck = calloc(s->nslabs, sizeof(*s->mr_stuck));
	s->mr_ro = calloc(s->nslabs, sizeof(*s->mr_ro));
	s->key_ro = calloc(s->nslabs, sizeof(*s->key_ro));
	if (!s->mr || !s->key || !s->mr_stuck || !s->mr_ro || !s->key_ro) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	r = memd_lease_table_create_groups(
		s->nslabs, narenas, cfg->lease_ttl_ms, cfg->lease_grace_ms,
		cfg->quiesce_ms, &s->lt);
	if (r) {
		snprintf(err, errlen, "lease table: %s", strerror(-r));
		goto fail;
	}

	if (wire_split_hostport(cfg->listen, host, sizeof(host), &port)) {
		r = -EINVAL;
		snprintf(err, errlen, "listen '%s' is not HOST:PORT",
			 cfg->listen);
		goto fail;
	}
	for (uint32_t a = 0; a < s->nep; a++) {
		r = open_endpoint(s, &s->aep[a], host, err, errlen);
		if (r)
			goto fail;
	}

	r = listen_on(s, bound, sizeof(bound), err, errlen);
	if (r)
		goto fail;
	snprintf(s->bound, sizeof(s->bound), "%s", bound);
	r = cluster_open(s, err, errlen);
	if (r)
		goto fail;
	{
		static const uint8_t none[AUTH_IDENT_LEN];

		spill_binding(NULL, 0, "", none, s->solo_bind);
	}
	r = kv_open(s, err, errlen);
	if (r)
		goto fail;
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	s->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->epfd < 0 || s->sigfd < 0) {
		r = -errno;
		snprintf(err, errlen, "epoll/signalfd: %s", strerror(errno));
		goto fail;
	}
	/* the descriptor accept_shed gives up to refuse a client cleanly */
	s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	check_nofile(s);
	ev.events = EPOLLIN;
	ev.data.ptr = &s->lfd;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev);
	ev.data.ptr = &s->sigfd;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sigfd, &ev);

	for (uint32_t a = 0; a < s->nep; a++) {
		r = pthread_create(&s->aep[a].thread, NULL, fab_main,
				   &s->aep[a]);
		if (r) {
			r = -r;
			snprintf(err, errlen, "fabric thread %u: %s", a,
				 strerror(-r));
			goto fail;
		}
		s->aep[a].started = true;
	}
	r = pthread_create(&s->reclaim_thread, NULL, reclaim_main, s);
	if (r) {
		r = -r;
		snprintf(err, errlen, "reclaim thread: %s", strerror(-r));
		goto fail;
	}
	s->reclaim_started = true;
	if (s->reg && memd_config_registry_is_etcd(&s->cfg)) {
		r = pthread_create(&s->etcd_thread, NULL, etcd_main, s);
		if (r) {
			r = -r;
			snprintf(err, errlen, "etcd thread: %s", strerror(-r));
			goto fail;
		}
		s->etcd_started = true;
	}
	r = donor_start(s, err, errlen);
	if (r)
		goto fail;

	if (cfg->metrics_listen[0]) {
		r = memd_metrics_start(cfg->metrics_listen, write_metrics, s,
				       &s->metrics, err, errlen);
		if (r)
			goto fail;
		memd_log(LOG_NOTICE, "metrics: listen=%s path=/metrics",
			 memd_metrics_addr(s->metrics));
	}
	snprintf(s->bound, sizeof(s->bound), "%s", bound);
	if (ready_file) {
		r = write_ready_file(ready_file, bound,
				     s->metrics ? memd_metrics_addr(s->metrics)
						: NULL);
		if (r) {
			snprintf(err, errlen, "ready file %s: %s", ready_file,
				 strerror(-r));
			goto fail;
		}
	}
	served_nodes(s, nodes, sizeof(nodes));
	memd_log(LOG_NOTICE,
		 "memd: ready listen=%s provider=%s mr_mode=%#x donate=%" PRIu64
		 " slab=%" PRIu64 " slabs=%u hugetlb=%d ttl_ms=%u nodes=%s "
		 "endpoints=%u progress_threads=%u epoch=%016" PRIx64,
		 bound, fab_domain_provider(s->aep[0].fd),
		 fab_domain_mr_mode(s->aep[0].fd), s->donated_bytes,
		 cfg->slab_bytes, s->nslabs, hugetlb, cfg->lease_ttl_ms, nodes,
		 s->nep, s->per_arena, s->epoch);
	/* Once, at start: every lease's key is then the provider's, not
	 * the random one memd asks for (docs/reliability.md says what
	 * protects a slab then). */
	if (fab_domain_mr_mode(s->aep[0].fd) & FAB_MR_PROV_KEY)
		memd_log(LOG_WARNING,
			 "fabric: provider=%s picks memory keys itself "
			 "(FI_MR_PROV_KEY): lease keys are the provider's, "
			 "possibly sequential, not memd's random ones; only "
			 "the fabric's own isolation and the registration's "
			 "close protect a slab (docs/reliability.md)",
			 fab_domain_provider(s->aep[0].fd));
	*out = s;
	return 0;
fail:
	memd_server_destroy(s);
	return r;
}

const char *memd_server_addr(const struct memd_server *s)
{
	return s->bound;
}

/*
 * One pass of the control loop: waits up to timeout_ms for events,
 * serves them, then the timers. Returns how many events it served, or
 * -errno when epoll_wait fails.
 */
static int serve_once(struct memd_server *s, int timeout_ms)
{
	struct epoll_event evs[64];
	int n = epoll_wait(s->epfd, evs, 64, timeout_ms);
	bool listener = false;

	if (n < 0 && errno != EINTR) {
		int e = errno;

		memd_log(LOG_ERR, "ctl: epoll_wait err=%s", strerror(e));
		return -e;
	}
	/* a registry stopped (SIGSTOP, a stalled VM) credits its donors
	 * with the time it did not run before it reads their reports */
	reg_awake(s);
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == &s->lfd) {
			/* after this batch: accepting may close
			 * connections that have events in it */
			listener = true;
		} else if (p == &s->sigfd) {
			struct signalfd_siginfo si;

			while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGHUP) {
					reload(s);
					continue;
				}
				memd_log(LOG_NOTICE, "memd: signal=%s draining",
					 strsignal((int)si.ssi_signo));
				memd_notify("STOPPING=1\nSTATUS="
					    "Draining (%s)",
					    strsignal((int)si.ssi_signo));
				__atomic_store_n(&s->draining, true,
						 __ATOMIC_RELAXED);
			}
		} else {
			struct conn *c = p;
			int r = 0;

			if (evs[i].events &
			    (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				r = conn_read(c);
			if (r < 0) {
				conn_close(s, c, strerror(-r));
				continue;
			}
			if (r == 1 || (evs[i].events &
				       (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
				/* The peer sends nothing more: serve
				 * what came before (a last BYE) as far
				 * as the socket takes the replies now,
				 * then let go. Even when rx is full
				 * and EOF is still unread behind it:
				 * waiting for a peer that may never
				 * read would keep the level-triggered
				 * RDHUP firing on every pass. */
				conn_process(s, c);
				(void)conn_flush(c);
				conn_close(s, c, "peer closed");
				continue;
			}
			conn_service(s, c);
		}
	}
	if (listener)
		accept_all(s);
	accept_resume(s);
	conn_timers(s);
	kv_renew(s);
	expire_sessions(s);
	memd_kv_expire(s->kv, now_ms());
	kv_trim(s);
	tenants_removed(s);
	kv_drained(s);
	if (s->reg) {
		reg_awake(s);
		memd_registry_tick(s->reg, now_ms());
	}
	return n < 0 ? 0 : n;
}

int memd_server_run(struct memd_server *s)
{
	pthread_setname_np(pthread_self(), "memd-ctl");
	s->reg_awake_ms = now_ms();
	while (!s->draining) {
		int r = serve_once(s, TICK_MS);

		if (r < 0)
			return r;
	}
	/* Drain: every client is told by its socket closing; leases die with
	 * the process (memory is unmapped, registrations closed). */
	while (s->conns)
		conn_close(s, s->conns, "memd stopping");
	memd_log(LOG_NOTICE, "memd: drained");
	return 0;
}

#ifdef TP_FUZZ
/* The fuzzing seam (server.h): the real admission and the real loop,
 * with the caller as the only client. */
void memd_server_fuzz_adopt(struct memd_server *s, int fd)
{
	accept_one(s, fd, "127.0.0.1", "fuzz");
}

int memd_server_fuzz_step(struct memd_server *s)
{
	return serve_once(s, 0);
}
#endif

void memd_server_destroy(struct memd_server *s)
{
	if (!s)
		return;
	/* first: it reads the lease table and the endpoints */
	memd_metrics_stop(s->metrics);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	if (s->reclaim_started) {
		reclaim_kick(s);
		pthread_join(s->reclaim_thread, NULL);
	}
	for (uint32_t a = 0; a < s->nep; a++)
		if (s->aep[a].started)
			pthread_join(s->aep[a].thread, NULL);
	if (s->etcd_started) /* resigns: a standby takes over at once */
		pthread_join(s->etcd_thread, NULL);
	/* After memd-reclaim (which kicks it), before the lease table goes
	 * (its reports read it). */
	memd_donor_stop(s->donor);
	s->donor = NULL;
	while (s->conns)
		conn_close(s, s->conns, "memd stopping");
	/* Gives every KV slab back (closing its registration) while the
	 * lease table and the domains still exist. */
	memd_kv_destroy(s->kv);
	for (uint32_t i = 0; s->mr && i < s->nslabs; i++)
		fab_mr_close(s->mr[i]);
	for (uint32_t i = 0; s->mr_ro && i < s->nslabs; i++)
		fab_mr_close(s->mr_ro[i]);
	/* Reverse order of creation; the first arena's domain was first. */
	for (uint32_t a = s->nep; a-- > 0;) {
		fab_ep_close(s->aep[a].ep);
		fab_domain_close(s->aep[a].fd);
	}
	memd_lease_table_destroy(s->lt);
	memd_registry_close(s->reg);
	memd_redeem_destroy(s->redeemed);
	sodium_memzero(&s->keys, sizeof(s->keys));
	sodium_memzero(s->spill_pool, sizeof(s->spill_pool));
	if (s->sigfd >= 0)
		close(s->sigfd);
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->reserve_fd >= 0)
		close(s->reserve_fd);
	pthread_cond_destroy(&s->rcond);
	pthread_cond_destroy(&s->fence_cond);
	pthread_mutex_destroy(&s->rlock);
	pthread_mutex_destroy(&s->kvlock);
	free(s->kvs);
	free(s->kvt);
	free(s->mr);
	free(s->key);
	free(s->mr_stuck);
	free(s->mr_ro);
	free(s->key_ro);
	free(s);
}
