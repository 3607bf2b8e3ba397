/* SPDX-License-Identifier: MIT */
/*
 * libpool/internal.h - project-internal views of libpool objects, for
 * tests and benchmarks. Not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_INTERNAL_H
#define TP_LIBPOOL_INTERNAL_H

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
/* memd's fabric address as the session received it. */
int pool_session_fabric(struct pool *p, const char **provider,
			const uint8_t **addr, uint16_t *addr_len);

#endif
