// SPDX-License-Identifier: MIT
/*
 * memd/nodes.c - NUMA nodes of the arenas and their endpoints' addresses
 * (see nodes.h).
 *
 * Threads: none of its own; called by memd's main thread at start-up.
 * The topology is read-only here (place_topo is shared-read-safe).
 *
 * Why the nearest NIC's address: libfabric's IP providers (tcp, verbs over
 * IPoIB/RoCE) pick the device from the address an endpoint binds to, so
 * binding each arena's endpoint to an address of the NIC on (or nearest
 * to) the arena's node keeps RMA to that memory off the inter-socket link.
 * On loopback, or without a NIC we can name, the endpoint binds where the
 * control listener does, which is what memd did before it knew nodes.
 */
#include "memd/nodes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "numa/place.h"

int memd_nodes_resolve(const struct place_topo *t, const struct memd_config *c,
		       int *nodes, size_t max, char *err, size_t errlen)
{
	int listed[MEMD_NUMA_NODES_MAX];
	char have[256];
	size_t used = 0;
	int n;

	n = memd_config_numa_nodes(c, listed);
	if (n == 0)
		return 0;
	/* What the host has, for the error messages. */
	have[0] = '\0';
	for (int i = 0; i < place_topo_nnodes(t) && used < sizeof(have); i++)
		used += (size_t)snprintf(have + used, sizeof(have) - used,
					 "%s%d", i ? "," : "",
					 place_topo_node_id(t, i));
	if (n < 0) {
		n = place_topo_nnodes(t);
		if ((size_t)n > max) {
			snprintf(err, errlen,
				 "key 'numa_nodes': 'all' is %d nodes on this "
				 "host (%s); memd serves at most %zu (one "
				 "fabric endpoint each): list the ones to use",
				 n, have, max);
			return -E2BIG;
		}
		for (int i = 0; i < n; i++)
			nodes[i] = place_topo_node_id(t, i);
		return n;
	}
	if ((size_t)n > max) {
		snprintf(err, errlen, "key 'numa_nodes': more than %zu nodes",
			 max);
		return -E2BIG;
	}
	for (int i = 0; i < n; i++) {
		if (!place_topo_has_node(t, listed[i])) {
			snprintf(err, errlen,
				 "key 'numa_nodes': node %d is not a NUMA "
				 "node of this host (it has %s %s)",
				 listed[i],
				 place_topo_nnodes(t) == 1 ? "node" : "nodes",
				 have);
			return -ENXIO;
		}
		nodes[i] = listed[i];
	}
	return n;
}

bool memd_nodes_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!strcmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

/* AF_INET / AF_INET6 for a literal address, AF_UNSPEC for a name. */
static int literal_family(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return AF_INET;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return AF_INET6;
	return AF_UNSPEC;
}

static int ifaddr_of_family(const struct ifaddrs *list, const char *ifname,
			    int family, char *out, size_t outlen)
{
	for (const struct ifaddrs *a = list; a; a = a->ifa_next) {
		char host[NI_MAXHOST];
		socklen_t sl;

		if (!a->ifa_addr || a->ifa_addr->sa_family != family ||
		    strcmp(a->ifa_name, ifname))
			continue;
		if (family == AF_INET6) {
			const struct sockaddr_in6 *s6 =
				(const struct sockaddr_in6 *)(const void *)
					a->ifa_addr;

			if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
				continue;
			sl = sizeof(struct sockaddr_in6);
		} else {
			sl = sizeof(struct sockaddr_in);
		}
		if (getnameinfo(a->ifa_addr, sl, host, sizeof(host), NULL, 0,
				NI_NUMERICHOST))
			continue;
		if ((size_t)snprintf(out, outlen, "%s", host) >= outlen)
			return -ENOSPC;
		return 0;
	}
	return -ENOENT;
}

int memd_nodes_ifaddr(const char *ifname, int family, char *out, size_t outlen)
{
	struct ifaddrs *list;
	int r;

	if (getifaddrs(&list))
		return -errno;
	if (family == AF_UNSPEC) {
		r = ifaddr_of_family(list, ifname, AF_INET, out, outlen);
		if (r == -ENOENT)
			r = ifaddr_of_family(list, ifname, AF_INET6, out,
					     outlen);
	} else {
		r = ifaddr_of_family(list, ifname, family, out, outlen);
	}
	freeifaddrs(list);
	return r;
}

static bool provider_is_ip_only(const char *provider)
{
	return !strncmp(provider, "tcp", 3) || !strncmp(provider, "udp", 3) ||
	       !strcmp(provider, "shm");
}

static int copy_out(char *out, size_t outlen, const char *s)
{
	return (size_t)snprintf(out, outlen, "%s", s) >= outlen ? -ENOSPC : 0;
}

int memd_nodes_bind_addr(const struct place_topo *t, int node,
			 const char *provider, const char *listen_host,
			 const char *fabric_node, char *out, size_t outlen,
			 char *why, size_t whylen)
{
	struct place_nic_info nic;
	char names[PLACE_NAMES_LEN], *name, *save = NULL;
	int r;

	if (fabric_node && *fabric_node) {
		snprintf(why, whylen, "fabric_node is set");
		return copy_out(out, outlen, fabric_node);
	}
	if (memd_nodes_is_loopback(listen_host)) {
		snprintf(why, whylen, "control listener on loopback");
		return copy_out(out, outlen, listen_host);
	}
	if (!t || node < 0) {
		snprintf(why, whylen, "no NUMA placement");
		return copy_out(out, outlen, listen_host);
	}
	r = -ENOENT;
	if (!provider_is_ip_only(provider))
		r = place_nearest_nic(t, node, PLACE_NIC_RDMA, &nic);
	if (r)
		r = place_nearest_nic(t, node, 0, &nic);
	if (r) {
		snprintf(why, whylen, "no NIC known near node %d", node);
		return copy_out(out, outlen, listen_host);
	}
	snprintf(names, sizeof(names), "%s", nic.ifnames);
	for (name = strtok_r(names, ",", &save); name;
	     name = strtok_r(NULL, ",", &save)) {
		r = memd_nodes_ifaddr(name, literal_family(listen_host), out,
				      outlen);
		if (r == -ENOSPC)
			return r;
		if (!r) {
			snprintf(why, whylen, "nearest NIC %s (%s, node %d)",
				 nic.name, name, nic.node);
			return 0;
		}
	}
	snprintf(why, whylen, "nearest NIC %s has no usable address here",
		 nic.name);
	return copy_out(out, outlen, listen_host);
}
