// SPDX-License-Identifier: MIT
/*
 * memd/server_int.h - what the files of memd's server share: the server and
 * connection structures, the counters macro, and the functions one file
 * calls in another. Private to memd/server*.c; memd/server.h is the API.
 *
 * memd/server.c          the control loop's life: create, the epoll pass
 *                        (serve_once), session expiry, reload, run, destroy
 * memd/server_accept.c   accepting: listeners, shedding, displacement,
 *                        the handshake and idle deadlines
 * memd/server_dispatch.c a connection's reads and writes, frame dispatch
 *                        (handle) to the handlers below
 * memd/server_lease.c    leases over the fabric: HELLO, LEASE, RELEASE,
 *                        STATUS, registrations, progress and reclaim threads
 * memd/server_cluster.c  the pool: AUTH, PLACE, LEASE_GRANT, HEARTBEAT,
 *                        DONOR, ADMIN, DONORS; the registry's and
 *                        redemption's metrics
 * memd/server_kv.c       the KV tier's server side: KV sessions and slabs,
 *                        KV requests, the KV metrics
 * memd/server_shm.c      same-host sessions: SHM, the Unix socket that
 *                        passes slab memfds, their renewal at revocation
 * memd/server_conn.c     connections: the clock, admission's checks,
 *                        establish, close, queueing replies
 * memd/server_metrics.c  GET /metrics (srv_write_metrics)
 * memd/server_prom.c     the Prometheus text helpers (srv_put_*)
 *
 * Calls go one way: server.c -> server_accept.c, server_dispatch.c,
 * server_metrics.c -> the handlers (server_lease.c, server_cluster.c,
 * server_kv.c, server_shm.c) -> server_conn.c, server_prom.c, which
 * call no other server file, except that server_conn.c's close tells
 * server_shm.c (srv_shm_session_closed). Among the handlers
 * server_cluster.c calls server_kv.c, server_lease.c and server_shm.c;
 * server_kv.c calls server_lease.c; server_lease.c and server_shm.c call
 * each other (the slab's endpoint; a given memfd's renewal);
 * server_shm.c uses server_accept.c's shedding for its own listener.
 */
#ifndef MEMD_SERVER_INT_H
#define MEMD_SERVER_INT_H

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
	/* SHM_OK's one-time nonce, until a same-host socket binds with it */
	uint8_t shm_nonce[WIRE_NONCE_LEN];
	bool shm_offered;
	bool shm_bound; /* a same-host socket bound to this session */
	bool closing;	/* close once tx is flushed */
	bool reading;	/* EPOLLIN armed */
	bool writing;	/* EPOLLOUT armed */
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

/* A connection to the same-host socket (server_shm.c); fd -1: free. */
struct shm_conn {
	int fd;
	uint64_t session_id;  /* bound to; 0: not yet */
	pid_t pid;	      /* SO_PEERCRED, for the log */
	uid_t uid;	      /* SO_PEERCRED: whose unbound allowance */
	uint64_t accepted_ms; /* BIND within handshake_timeout of it */
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
	uint64_t reg_news;     /* the membership DONOR_NEWS last told */
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
	uint64_t kv_joins_seen; /* memd_donor_membership, KV forgotten */
	/* srv_kv_membership: in touch with the registry at the last look,
	 * and since when not (0: in touch), for its log lines */
	bool kv_in_touch;
	uint64_t kv_out_since_ms;
	uint64_t kv_ranked; /* memd_donor_members: the list applied */
	/* the forget pass of a list under way, in steps (memd-ctl): its
	 * sequence (0: none) and ranking (kv_forget_unranked) */
	uint64_t kv_pass_seq;
	struct kv_rank *kv_pass_rank;
	bool kv_pass_busy; /* a step left the pass unfinished */
	/* Admission (docs/reliability.md); memd-ctl only. */
	struct conn *hs_head, *hs_tail; /* in their handshake, oldest first */
	uint32_t ntenant; /* established, not as @admin or @donor */
	int reserve_fd;	  /* /dev/null, given up to shed at EMFILE */
	bool accept_off;  /* listener disarmed until accept_on_ms */
	uint64_t accept_on_ms;
	bool shm_accept_off; /* the same for shm_lfd */
	uint64_t shm_accept_on_ms;
	uint64_t idle_scan_ms; /* next scan for idle connections */
	struct memd_log_limit ll_accept, ll_refuse, ll_shed, ll_evict,
		ll_timeout, ll_auth, ll_frame, ll_fabric, ll_close;

	pthread_t reclaim_thread;
	bool reclaim_started;
	volatile int stop;     /* threads stop when set */
	pthread_mutex_t rlock; /* reclaim wakeups, progress fences */
	pthread_cond_t rcond;
	/* Progress fence: memd-fab<a> bumps aep[a].fence after every
	 * progress call, under rlock, and broadcasts fence_cond. */
	pthread_cond_t fence_cond;

	/* Same-host sessions (server_shm.c). shm_on: the arenas are memfd
	 * slabs and the socket listens. shm_given[slab]: the slab's memfd
	 * went to its holder (set on memd-ctl while it is leased, read and
	 * cleared by memd-reclaim once the table gave it the slab: the
	 * lease table's lock orders them), so the reclaimer renews it. */
	bool shm_on;
	int shm_lfd;
	char shm_name[WIRE_SHM_NAME_MAX];
	uint8_t boot_id[WIRE_BOOT_ID_LEN];
	struct shm_conn *shm;
	/* /dev/null, given up when a renewal (memd-reclaim) meets EMFILE */
	int shm_spare_fd;
	struct memd_log_limit ll_renew; /* memd-reclaim's */
	uint32_t shm_cap;     /* max_clients bound + max_clients unbound */
	uint32_t shm_unbound; /* connections of shm[] not yet bound */
	bool *shm_given;

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
		/* the client's cost model hint (KV_MODEL, docs/capacity.md),
		 * the last one received; 0: none, memd.conf's model */
		uint32_t hint_tps;
		uint64_t hint_bpt;
	} * kvt;
	uint32_t nkvt, kvt_cap;
};

#define TICKET_SKEW_MS 60000u /* a ticket is good this long past its end */
#define TICKET_TTL_MS 30000u  /* the registry's tickets' life */
/* Shared between memd/server*.c (each defined in the file named). */

/* server_conn.c */
uint64_t srv_now_ms(void);
uint32_t srv_client_sessions(struct memd_server *s, uint32_t sessions);
bool srv_conn_may_establish(struct memd_server *s, struct conn *c, bool cluster,
			    char *err, size_t errlen);
void srv_conn_establish(struct memd_server *s, struct conn *c, bool cluster);
void srv_conn_close(struct memd_server *s, struct conn *c, const char *why);
int srv_conn_send(struct conn *c, const struct wire_msg *m);
void srv_reply(struct conn *c, struct wire_msg *rep, uint8_t type,
	       uint32_t seq);
void srv_send_error(struct memd_server *s, struct conn *c, uint32_t seq,
		    int err, const char *fmt, ...);

/* server_accept.c */
/*
 * accept(2) on listener *lfdp (&s->lfd or &s->shm_lfd) failed with EMFILE
 * or ENFILE: the pending connection stays in the backlog and the
 * listener stays readable. Gives up the reserve descriptor, takes the
 * connection, refuses it (an EBUSY frame on the control port, a close
 * on the same-host socket) and takes the reserve back. true: one was
 * shed, try the next; false: impossible, pause the listener
 * (srv_accept_pause: disarmed for a tick), never spin. memd-ctl only.
 */
bool srv_accept_shed(struct memd_server *s, int *lfdp, int err);
void srv_accept_pause(struct memd_server *s, int *lfdp);
void srv_accept_resume(struct memd_server *s, int *lfdp);
void srv_accept_one(struct memd_server *s, int fd, const char *host,
		    const char *port);
void srv_accept_all(struct memd_server *s);
void srv_conn_timers(struct memd_server *s);

/* server_dispatch.c */
void srv_reg_awake(struct memd_server *s);
/* At the registry: a new membership sequence is told to every donor link
 * of protocol 6 (DONOR_NEWS), which reports at once and confirms it
 * (docs/kv.md, "Donors that come and go"). memd-ctl, every pass. */
void srv_reg_news(struct memd_server *s);
void srv_conn_process(struct memd_server *s, struct conn *c);
int srv_conn_flush(struct conn *c);
int srv_conn_read(struct conn *c);
void srv_conn_service(struct memd_server *s, struct conn *c);

/* server_prom.c */
void srv_put_label(struct memd_metrics_buf *b, const char *v);
void srv_put_head(struct memd_metrics_buf *b, const char *name,
		  const char *type, const char *help);
void srv_put_gauge(struct memd_metrics_buf *b, const char *name,
		   const char *help, uint64_t v);

/* server_metrics.c */
void srv_write_metrics(struct memd_metrics_buf *b, void *arg);

/* server_lease.c */
struct arena_ep *srv_arena_aep(struct memd_server *s, uint32_t a);
struct arena_ep *srv_slab_aep(struct memd_server *s, uint32_t slab);
uint8_t *srv_slab_base(struct memd_server *s, uint32_t slab);
void *srv_fab_main(void *arg);
void *srv_reclaim_main(void *arg);
void srv_reclaim_kick(struct memd_server *s);
void srv_revoke_mr(uint32_t slab, void *arg);
void srv_count_expired(uint32_t slab, void *arg);
void srv_do_hello(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep);
void srv_do_fabric(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req, struct wire_msg *rep);
uint64_t srv_random_key(void);
int srv_register_slab_access(struct memd_server *s, uint32_t slab,
			     unsigned access, struct fab_mr **mr);
int srv_register_slab(struct memd_server *s, uint32_t slab, struct fab_mr **mr);
void srv_served_nodes(const struct memd_server *s, char *buf, size_t len);
int srv_grant_request(struct memd_server *s, struct conn *c, uint32_t seq,
		      uint32_t want, int node, uint8_t reply_type,
		      struct wire_msg *rep);
void srv_do_lease(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep);
void srv_do_release(struct memd_server *s, struct conn *c,
		    const struct wire_msg *req, struct wire_msg *rep);
void srv_fill_status(struct memd_server *s, struct wire_status_ok *st);
int srv_open_endpoint(struct memd_server *s, struct arena_ep *a,
		      const char *listen_host, char *err, size_t errlen);

/* server_cluster.c */
void srv_do_auth(struct memd_server *s, struct conn *c,
		 const struct wire_msg *req, struct wire_msg *rep);
void srv_spill_binding(const uint8_t *pool_key, uint32_t tenant_id,
		       const char *name, const uint8_t ident[AUTH_IDENT_LEN],
		       uint8_t out[MEMD_KV_BIND_BYTES]);
void srv_do_auth_proof(struct memd_server *s, struct conn *c,
		       const struct wire_msg *req, struct wire_msg *rep);
void srv_do_place(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep);
void srv_do_lease_grant(struct memd_server *s, struct conn *c,
			const struct wire_msg *req, struct wire_msg *rep);
void srv_do_heartbeat(struct memd_server *s, struct conn *c,
		      const struct wire_msg *req, struct wire_msg *rep);
void srv_do_donor(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep);
void srv_do_admin(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep);
void srv_do_donors(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req, struct wire_msg *rep);
void srv_tenants_removed(struct memd_server *s);
void srv_write_registry_metrics(struct memd_metrics_buf *b,
				struct memd_server *s);
void srv_write_redeem_metrics(struct memd_metrics_buf *b,
			      struct memd_server *s);
int srv_cluster_open(struct memd_server *s, char *err, size_t errlen);
int srv_donor_start(struct memd_server *s, char *err, size_t errlen);
void *srv_etcd_main(void *arg);

/* server_kv.c */
const struct kv_tenant *srv_kv_tenant_find_locked(struct memd_server *s,
						  uint32_t tenant);
uint32_t srv_kv_sessions_of(struct memd_server *s, uint32_t tenant);
int srv_admin_kv_report(struct memd_server *s, const json_t *req, char *out,
			size_t cap, char *err, size_t errlen);
struct kv_tenant *srv_kv_tenant(struct memd_server *s, uint32_t tenant,
				bool create);
void srv_kv_trim(struct memd_server *s);
void srv_kv_renew(struct memd_server *s);
void srv_kv_cost_publish(struct memd_server *s);
void srv_kv_drained(struct memd_server *s);
int srv_kv_membership(struct memd_server *s);
/* A step of the forget pass under way (docs/kv.md, "Donors that come and
 * go", 6.); true while one is (memd-ctl then polls without waiting). */
bool srv_kv_pass_step(struct memd_server *s);
int srv_kv_open(struct memd_server *s, char *err, size_t errlen);
void srv_do_kv(struct memd_server *s, struct conn *c,
	       const struct wire_msg *req, struct wire_msg *rep);
void srv_do_kv_clear(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep);
void srv_do_kv_model(struct memd_server *s, struct conn *c,
		     const struct wire_msg *req, struct wire_msg *rep);
void srv_write_kv_metrics(struct memd_metrics_buf *b, struct memd_server *s);

/* server_shm.c */
int srv_shm_open(struct memd_server *s, struct memd_arena *arenas,
		 uint32_t narenas, char *err, size_t errlen);
/* closes the socket and its connections (memd-ctl, at drain) */
void srv_shm_close(struct memd_server *s);
/* and frees what memd-reclaim reads: after it has stopped */
void srv_shm_free(struct memd_server *s);
bool srv_shm_owns(struct memd_server *s, void *ptr);
void srv_shm_accept(struct memd_server *s);
void srv_shm_serve(struct memd_server *s, void *ptr, uint32_t events);
void srv_shm_session_closed(struct memd_server *s, uint64_t session_id);
void srv_shm_timers(struct memd_server *s);
void srv_do_shm(struct memd_server *s, struct conn *c,
		const struct wire_msg *req, struct wire_msg *rep);
int srv_shm_zero(struct memd_server *s, uint32_t slab);
bool srv_shm_is_given(struct memd_server *s, uint32_t slab);

#endif
