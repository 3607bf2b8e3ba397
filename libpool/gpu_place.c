// SPDX-License-Identifier: MIT
/*
 * libpool/gpu_place.c - NUMA placement of a GPU prefetch engine
 * (pool_gpu_opts.numa_node): the node of the device, from its PCI bus id
 * and the topology (or as asked for), the staging ring allocated on that
 * node and pinned by the backend. The worker pins itself to the node's
 * CPUs (gpu_pipeline.c). numa/ is the only code that talks to hwloc and
 * libnuma.
 *
 * Threads: pool_gpu_open()'s caller and pool_gpu_close()'s.
 */
#include "libpool/gpu_int.h"

#include <errno.h>
#include <string.h>

#include "libpool/log.h"
#include "numa/place.h"

/*
 * Chooses the node of the staging ring and the worker (see
 * pool_gpu_opts.numa_node) from g->bus_id or o->pci_bus_id. When the
 * placement is to be applied (the topology is this host's), g->place
 * stays open for the worker to pin itself. Returns 0 (also when nothing
 * is placed: logged at info) or -errno for a request that cannot hold.
 */
int gpu_numa_choose(struct pool_gpu *g, const struct pool_gpu_opts *o)
{
	const char *bus = o->pci_bus_id[0] ? o->pci_bus_id : g->bus_id;
	const char *bad = NULL, *why = NULL;
	struct place_topo *t = NULL;
	int node = -1, r;

	g->numa_node = -1;
	if (o->numa_node == POOL_GPU_NUMA_OFF) {
		pool_log(LOG_INFO, "gpu: numa: placement off (numa_node=off); "
				   "staging and worker not placed");
		return 0;
	}
	g->numa_explicit = o->numa_node >= 0;
	r = place_topo_open(o->topology_xml, &t);
	if (r) {
		pool_log(g->numa_explicit || o->topology_xml ? LOG_WARNING
							     : LOG_INFO,
			 "gpu: numa: no topology xml=%s err=%s%s",
			 o->topology_xml ? o->topology_xml : "(this host)",
			 strerror(-r),
			 g->numa_explicit || o->topology_xml
				 ? ""
				 : "; staging and worker not placed");
		return g->numa_explicit || o->topology_xml ? r : 0;
	}
	r = place_topo_apply_env(t, &bad);
	if (r) {
		pool_log(LOG_WARNING, "gpu: numa: bad %s err=%s",
			 bad ? bad : "TIDEPOOL_GPU_NODE", strerror(-r));
		goto out;
	}
	if (g->numa_explicit) {
		node = o->numa_node;
		if (!place_topo_has_node(t, node)) {
			pool_log(LOG_WARNING, "gpu: numa: no node %d here",
				 node);
			r = -ENXIO;
			goto out;
		}
	} else if (!bus[0]) {
		why = "the device has no PCI bus id (see pci_bus_id)";
	} else if (place_topo_nnodes(t) < 2) {
		why = "this machine has one NUMA node";
	} else {
		node = place_gpu_node(t, bus);
		if (node == -ENODATA)
			why = "hwloc gives the device no single node "
			      "(set TIDEPOOL_GPU_NODE or numa_node)";
		else if (node == -ENOENT)
			why = "no PCI device at that bus id in the topology";
		else if (node < 0)
			why = strerror(-node);
	}
	if (node < 0) {
		pool_log(LOG_INFO,
			 "gpu: numa: node unknown pci=%s: %s; staging and "
			 "worker not placed",
			 bus[0] ? bus : "-", why);
		goto out;
	}
	g->numa_node = node;
	r = place_node_cpulist(t, node, g->numa_cpus, sizeof(g->numa_cpus));
	if (r < 0 && r != -ENOSPC) /* -ENOSPC: truncated, still useful */
		g->numa_cpus[0] = '\0';
	r = 0;
	if (!place_topo_is_host(t)) {
		pool_log(LOG_INFO,
			 "gpu: numa: node=%d cpus=%s pci=%s from topology %s: "
			 "computed, not applied (not this host)",
			 node, g->numa_cpus, bus[0] ? bus : "-",
			 o->topology_xml ? o->topology_xml : "$HWLOC_XMLFILE");
		goto out;
	}
	g->numa_apply = true;
	g->place = t;
	t = NULL;
out:
	place_topo_close(t);
	return r;
}

/*
 * One staging buffer: on the chosen node (bound there, then pinned by
 * the backend), else the backend's own pinned allocation, as without
 * NUMA. An automatic placement that fails is logged and given up.
 */
int gpu_staging_alloc(struct pool_gpu *g, struct slot *s)
{
	size_t len = g->staging_bytes;
	void *p = NULL;
	int r;

	if (g->numa_apply) {
		r = place_alloc_on_node(len, g->numa_node, PLACE_MEM_POPULATE,
					&p);
		if (!r) {
			r = g->be->host_register(g->dev, p, len);
			if (r)
				place_free(p, len);
		}
		if (!r) {
			s->buf = p;
			s->placed = true;
			return 0;
		}
		pool_log(g->numa_explicit ? LOG_WARNING : LOG_INFO,
			 "gpu: numa: staging not placed node=%d len=%zu err=%s",
			 g->numa_node, len, strerror(-r));
		if (g->numa_explicit)
			return r;
		g->numa_apply = false;
	}
	return g->be->pinned_alloc(g->dev, len, &s->buf);
}

void gpu_staging_free(struct pool_gpu *g, struct slot *s)
{
	if (!s->buf)
		return;
	if (s->placed) {
		g->be->host_unregister(g->dev, s->buf, g->staging_bytes);
		place_free(s->buf, g->staging_bytes);
	} else {
		g->be->pinned_free(g->dev, s->buf);
	}
	s->buf = NULL;
}
