// SPDX-License-Identifier: MIT
/*
 * memd/server_metrics.c - GET /metrics (memd/server.c's DESIGN comment):
 * srv_write_metrics, which memd-metrics calls: the counters, the lease
 * table, the tenants and the endpoints; the KV, registry and redemption
 * sections come from server_kv.c and server_cluster.c.
 */
#include "memd/server_int.h"

/* Per-tenant usage of this memd's slabs (tenant 0: standalone sessions,
 * which authenticate as nobody). */
static void write_tenant_metrics(struct memd_metrics_buf *b,
				 struct memd_server *s)
{
	struct memd_tenant_usage *u = malloc(WIRE_MAX_TENANTS * sizeof(*u));
	size_t n = u ? memd_lease_tenant_usage(s->lt, u, WIRE_MAX_TENANTS) : 0;

	srv_put_head(b, "tenant_leased_bytes", "gauge",
		     "Memory of this memd leased to each tenant's sessions "
		     "(tenant_id 0: standalone sessions).");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(b,
				    "tidepool_memd_tenant_leased_bytes{"
				    "tenant_id=\"%u\"} %" PRIu64 "\n",
				    u[i].tenant_id,
				    (uint64_t)u[i].slabs * s->cfg.slab_bytes);
	srv_put_head(b, "tenant_sessions", "gauge",
		     "Live client sessions of each tenant on this memd.");
	for (size_t i = 0; i < n; i++)
		memd_metrics_printf(
			b,
			"tidepool_memd_tenant_sessions{"
			"tenant_id=\"%u\"} %u\n",
			u[i].tenant_id,
			u[i].sessions - srv_kv_sessions_of(s, u[i].tenant_id));
	free(u);
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

static uint64_t ep_wakeups(const struct arena_ep *a)
{
	return __atomic_load_n(&a->st.wakeups, __ATOMIC_RELAXED);
}

static uint64_t ep_starved_sleeps(const struct arena_ep *a)
{
	return __atomic_load_n(&a->st.starved_sleeps, __ATOMIC_RELAXED);
}

static uint64_t ep_busy_ns(const struct arena_ep *a)
{
	return __atomic_load_n(&a->st.busy_ns, __ATOMIC_RELAXED);
}

/* The per-endpoint (fabric progress thread) counters: a count, or
 * nanoseconds written as seconds. */
struct ep_metric {
	const char *name, *help;
	bool ns;
	uint64_t (*get)(const struct arena_ep *a);
};

static const struct ep_metric ep_metrics[] = {
	{ "fabric_wakeups_total",
	  "Times a fabric progress thread woke from sleep because a "
	  "client's request arrived (busy_poll_us avoids them).",
	  false, ep_wakeups },
	{ "fabric_starved_sleeps_total",
	  "Millisecond sleeps of a fabric progress thread instead "
	  "of polling, while memd had no file descriptor left.",
	  false, ep_starved_sleeps },
	{ "fabric_busy_poll_seconds_total",
	  "Time fabric progress threads spent polling after a request "
	  "instead of sleeping (busy_poll_us).",
	  true, ep_busy_ns },
	{ "fabric_cpu_seconds_total",
	  "CPU time of each fabric progress thread (memd-fabN): what "
	  "serving RMA costs memd.",
	  true, thread_cpu_ns },
};

/* One sample of m for endpoint ep. */
static void put_ep(struct memd_metrics_buf *b, const struct ep_metric *m,
		   uint32_t ep, uint64_t v)
{
	if (m->ns)
		memd_metrics_printf(b,
				    "tidepool_memd_%s{endpoint=\"%u\"} %" PRIu64
				    ".%06" PRIu64 "\n",
				    m->name, ep, v / 1000000000u,
				    v % 1000000000u / 1000);
	else
		memd_metrics_printf(
			b, "tidepool_memd_%s{endpoint=\"%u\"} %" PRIu64 "\n",
			m->name, ep, v);
}

void srv_write_metrics(struct memd_metrics_buf *b, void *arg)
{
	struct memd_server *s = arg;
	struct memd_lease_counts cnt;
	uint64_t slab = s->cfg.slab_bytes, up_ms = srv_now_ms() - s->start_ms;

	memd_lease_get_counts(s->lt, &cnt);

	srv_put_head(b, "info", "gauge",
		     "memd's version, data-plane provider and cluster mode.");
	memd_metrics_printf(b, "tidepool_memd_info{version=\"");
	srv_put_label(b, TP_VERSION);
	memd_metrics_printf(b, "\",provider=\"");
	srv_put_label(b, fab_domain_provider(s->aep[0].fd));
	memd_metrics_printf(b, "\",mode=\"%s\"} 1\n",
			    memd_mode_name(memd_config_mode(&s->cfg)));
	srv_put_head(b, "uptime_seconds", "gauge",
		     "Seconds since memd started.");
	memd_metrics_printf(b,
			    "tidepool_memd_uptime_seconds %" PRIu64 ".%03u\n",
			    up_ms / 1000, (unsigned int)(up_ms % 1000));

	srv_put_gauge(b, "shm_enabled",
		      "1: same-host sessions may read slabs through their "
		      "memfds (shm = auto and available).",
		      s->shm_on);
	srv_put_gauge(b, "slab_bytes", "Size of one slab, the unit of lease.",
		      slab);
	srv_put_gauge(b, "capacity_bytes", "Memory donated to the pool.",
		      s->donated_bytes);
	srv_put_gauge(b, "leased_bytes", "Memory in slabs leased to sessions.",
		      (uint64_t)cnt.leased * slab);
	srv_put_gauge(b, "free_bytes", "Memory in free slabs, ready to lease.",
		      (uint64_t)cnt.free * slab);
	srv_put_gauge(b, "reclaiming_bytes",
		      "Memory in revoked slabs waiting to be zeroed.",
		      (uint64_t)cnt.reclaiming * slab);
	srv_put_gauge(b, "slabs_quarantined",
		      "Slabs kept out of use because their memory registration "
		      "could not be closed.",
		      cnt.quarantined);
	srv_put_gauge(b, "sessions", "Open client sessions.",
		      srv_client_sessions(s, cnt.sessions));

#define X(name, help)                                                          \
	srv_put_head(b, #name "_total", "counter", help ".");                  \
	memd_metrics_printf(b, "tidepool_memd_" #name "_total %" PRIu64 "\n",  \
			    __atomic_load_n(&s->ctr.name, __ATOMIC_RELAXED));
	MEMD_COUNTERS(X)
#undef X
	srv_put_head(b, "sessions_expired_total", "counter",
		     "Sessions that expired without a heartbeat.");
	memd_metrics_printf(
		b, "tidepool_memd_sessions_expired_total %" PRIu64 "\n",
		cnt.expired_sessions);

	srv_put_head(b, "arena_slabs", "gauge",
		     "Slabs of each arena (node -1: no NUMA placement).");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(b,
				    "tidepool_memd_arena_slabs{arena=\"%u\","
				    "node=\"%d\"} %u\n",
				    a, srv_arena_aep(s, a)->node, gc.total);
	}
	srv_put_head(b, "arena_free_slabs", "gauge",
		     "Free slabs of each arena.");
	for (uint32_t a = 0; a < s->narenas; a++) {
		struct memd_lease_group_counts gc;

		memd_lease_get_group_counts(s->lt, a, &gc);
		memd_metrics_printf(
			b,
			"tidepool_memd_arena_free_slabs{arena=\"%u\","
			"node=\"%d\"} %u\n",
			a, srv_arena_aep(s, a)->node, gc.free);
	}

	for (size_t m = 0; m < sizeof(ep_metrics) / sizeof(ep_metrics[0]);
	     m++) {
		const struct ep_metric *em = &ep_metrics[m];

		srv_put_head(b, em->name, "counter", em->help);
		for (uint32_t a = 0; a < s->nep; a++)
			put_ep(b, em, a, em->get(&s->aep[a]));
	}

	srv_put_head(
		b, "rma_bytes_total", "counter",
		"Bytes clients moved by one-sided RMA, as they report them in "
		"their heartbeats (HEARTBEAT2).");
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"read\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_read, __ATOMIC_RELAXED));
	memd_metrics_printf(
		b, "tidepool_memd_rma_bytes_total{dir=\"write\"} %" PRIu64 "\n",
		__atomic_load_n(&s->rma_written, __ATOMIC_RELAXED));
	write_tenant_metrics(b, s);
	srv_write_kv_metrics(b, s);
	if (s->redeemed)
		srv_write_redeem_metrics(b, s);
	if (s->reg)
		srv_write_registry_metrics(b, s);
}
