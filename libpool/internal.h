/* SPDX-License-Identifier: MIT */
/*
 * libpool/internal.h - project-internal views of libpool objects, for
 * tests and benchmarks. Not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_INTERNAL_H
#define TP_LIBPOOL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "fabric/wire.h"
#include "tidepool/pool.h"

/* Number of (slab, offset, length) pieces backing r. */
uint32_t pool_region_nextents(const struct pool_region *r);
/*
 * The lease behind piece i of r, where in that slab the piece starts and
 * how long it is. Returns 0 or -ERANGE.
 */
int pool_region_extent(const struct pool_region *r, uint32_t i,
		       struct wire_lease *lease, uint64_t *slab_off,
		       uint64_t *len);
/* memd's provider and the address of its endpoint 0, as the session
 * received them. */
int pool_session_fabric(struct pool *p, const char **provider,
			const uint8_t **addr, uint16_t *addr_len);
/* How many endpoints memd announced (1 .. WIRE_MAX_ENDPOINTS). */
uint16_t pool_session_nendpoints(const struct pool *p);
/* Endpoint i's node (-1: not placed) and fabric address. 0 or -ERANGE. */
int pool_session_endpoint(const struct pool *p, uint16_t i, int *node,
			  const uint8_t **addr, uint16_t *addr_len);
/* True for a cluster session (authenticated at a registry). */
bool pool_session_is_cluster(const struct pool *p);
/*
 * Which donor holds copy `copy` (0: primary, 1: replica) of piece i of r:
 * its donor id (0 in a standalone session) and control address. Returns
 * 0, -ERANGE, or -ENOENT (no such copy).
 */
int pool_region_copy(const struct pool_region *r, uint32_t i, unsigned copy,
		     uint32_t *donor_id, const char **addr);
/* Links the session holds (failed ones included). */
uint32_t pool_session_nlinks(struct pool *p);

#endif
