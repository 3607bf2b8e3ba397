/* SPDX-License-Identifier: MIT */
/*
 * libpool/thread_role.h - which threads are libpool's own.
 *
 * libpool's threads (heartbeat, KV and GPU workers, the paging engine's
 * pool-uffd and pool-warm) mark themselves first thing. Under the preload
 * shim such a thread allocates from libc, never pooled memory: memory it
 * (or libfabric under it) allocates must not be pooled memory that could
 * fault while it holds a lock the fault path needs (docs/paging.md).
 *
 * A leaf: it depends on nothing in libpool, so the session code
 * (pool_link.c), the KV and GPU workers and the paging engine all use it
 * without the session code depending on the paging engine, which sits on
 * top of it (paging.c calls the pool_* API; nothing below calls paging).
 */
#ifndef TP_LIBPOOL_THREAD_ROLE_H
#define TP_LIBPOOL_THREAD_ROLE_H

#include <stdbool.h>

/* Whether the calling thread is one of libpool's own. */
bool pool_thread_is_internal(void);

/* Makes the calling thread count as libpool's own, for its whole life. */
void pool_thread_mark_internal(void);

/* Sets the calling thread's mark for a while; returns the one before. */
bool pool_thread_set_internal(bool on);

#endif
