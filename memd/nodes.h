/* SPDX-License-Identifier: MIT */
/*
 * memd/nodes.h - where memd's arenas go: the NUMA nodes that numa_nodes
 * names on this host, and for each node the address its fabric endpoint
 * binds to (an address of the nearest NIC). memd goes through numa/place.h
 * for the topology, never through hwloc or libnuma.
 *
 * Used at start-up only, from one thread; every function is reentrant.
 */
#ifndef TP_MEMD_NODES_H
#define TP_MEMD_NODES_H

#include <stdbool.h>
#include <stddef.h>

#include "memd/config.h"

struct place_topo;

/* Room for a numeric IPv6 address with a zone, or a host name. */
#define MEMD_BIND_MAX MEMD_CONF_STR_MAX

/*
 * The nodes of c->numa_nodes on the host topology t, in increasing order,
 * into nodes[0 .. max). Returns their count (>= 1), 0 when numa_nodes is
 * empty (no NUMA placement; t is then not used and may be NULL), or
 *   -ENXIO   a listed node is not a node of t (err names it and the
 *            nodes t has)
 *   -E2BIG   "all" is more nodes than max (err says so)
 * err gets "key 'numa_nodes': ..." on failure.
 */
int memd_nodes_resolve(const struct place_topo *t, const struct memd_config *c,
		       int *nodes, size_t max, char *err, size_t errlen);

/*
 * The address the fabric endpoint of node's arena binds to, in out, and in
 * why a few words on how it was chosen (for the log):
 *   1. fabric_node, when the operator set it (every endpoint binds there);
 *   2. listen_host, when the control listener is on loopback (a one-host
 *      setup: clients reach memd there), when node is -1 (no placement)
 *      or t is NULL;
 *   3. an address of the NIC nearest to node (place_nearest_nic(); RDMA
 *      NICs first for providers other than tcp, udp and shm): its first
 *      interface that has an address, of listen_host's family when that
 *      is a literal address, else IPv4 before IPv6, never link-local;
 *   4. listen_host again when no NIC is known near node or it has no
 *      usable address.
 * Returns 0, or -ENOSPC when out is too small.
 */
int memd_nodes_bind_addr(const struct place_topo *t, int node,
			 const char *provider, const char *listen_host,
			 const char *fabric_node, char *out, size_t outlen,
			 char *why, size_t whylen);

/*
 * A numeric address of network interface ifname (getifaddrs): family
 * AF_INET or AF_INET6, or AF_UNSPEC for IPv4 first, then IPv6. Link-local
 * IPv6 addresses are skipped (they need a zone to be reached). Returns 0,
 * -ENOENT (no such interface or no such address), -ENOSPC (out too
 * small), or -errno of getifaddrs.
 */
int memd_nodes_ifaddr(const char *ifname, int family, char *out, size_t outlen);

/* Whether host is a loopback address or "localhost". */
bool memd_nodes_is_loopback(const char *host);

#endif
