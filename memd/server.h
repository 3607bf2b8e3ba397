/* SPDX-License-Identifier: MIT */
/*
 * memd/server.h - memd's control server and data plane: the event loop
 * that speaks the wire protocol, the fabric endpoints clients RMA into
 * (one per arena, i.e. per NUMA node served), the lease table, and the
 * reclaimer that zeroes revoked slabs.
 *
 * Threads (all named):
 *   memd-ctl      the caller of memd_server_run: accepts, reads, decodes,
 *                 grants/releases/renews, expires sessions, signals.
 *   memd-fabN     progresses the fabric endpoint of arena N (one-sided RMA
 *                 from clients is served only while it runs); pinned to
 *                 the CPUs of the arena's node when it has one.
 *   memd-reclaim  zeroes slabs once their quiesce delay is over.
 *   memd-metrics  answers GET /metrics (memd/metrics.h), when
 *                 metrics_listen is set; reads counters, lease counts and
 *                 the KV store's per-tenant statistics.
 */
#ifndef TP_MEMD_SERVER_H
#define TP_MEMD_SERVER_H

#include <stdint.h>

#include "memd/arena.h"
#include "memd/config.h"

struct memd_server;
struct place_topo;

/* Counters: one list, so STATUS, /metrics and the man page agree. */
#define MEMD_COUNTERS(X)                                                       \
	X(conns_accepted, "control connections accepted")                      \
	X(conns_refused, "connections refused over max_clients or draining")   \
	X(conns_refused_host, "connections refused over max_clients_per_host") \
	X(conns_refused_reserved,                                              \
	  "tenant connections refused to keep reserved_clients for the pool")  \
	X(conns_shed,                                                          \
	  "connections closed at accept, memd being out of file descriptors")  \
	X(conns_displaced,                                                     \
	  "connections closed in their handshake to admit a newer one")        \
	X(handshake_timeouts, "connections closed without HELLO and AUTH "     \
			      "within handshake_timeout")                      \
	X(idle_timeouts,                                                       \
	  "connections closed after idle_timeout without a request")           \
	X(sessions_refused_tenant,                                             \
	  "tenant sessions refused over max_sessions_per_tenant")              \
	X(leases_refused_session,                                              \
	  "lease requests refused over max_leases_per_session")                \
	X(kv_reserve_refused, "KV reservations refused over kv_max_reserved")  \
	X(sessions_revoked,                                                    \
	  "tenant sessions closed because the registry removed the tenant")    \
	X(frames_in, "control frames decoded")                                 \
	X(frames_rejected, "malformed or oversized frames")                    \
	X(sessions_opened, "sessions opened")                                  \
	X(leases_granted, "slab leases granted")                               \
	X(leases_released, "slab leases released by their client")             \
	X(leases_expired, "slab leases revoked because the session expired")   \
	X(leases_refused, "lease requests refused (no free slab, bad node)")   \
	X(slabs_zeroed, "revoked slabs zeroed and returned to the free list")  \
	X(shm_offers, "same-host offers made (SHM answered with SHM_OK)")      \
	X(shm_refused, "same-host requests refused: shm off, other host, "     \
		       "bad or foreign binding, lease not held")               \
	X(shm_binds, "same-host socket connections bound to a session")        \
	X(shm_displaced, "unbound same-host connections closed to admit a "    \
			 "newer one")                                          \
	X(shm_fds_passed, "slab memfds passed to same-host sessions")          \
	X(shm_kv_fds_passed,                                                   \
	  "KV slab files passed to same-host sessions of their tenant")        \
	X(shm_slabs_renewed,                                                   \
	  "revoked slabs given a fresh memfd (theirs had been passed out)")    \
	X(auth_failures, "authentications refused, and requests before one")   \
	X(places, "placements granted (registry)")                             \
	X(places_refused, "placements refused: quota, space (registry)")       \
	X(tickets_refused, "grant tickets refused: forged, stale, replayed")   \
	X(admin_requests, "admin requests answered")                           \
	X(kv_requests, "KV requests answered (one batch each)")                \
	X(kv_refused, "KV requests refused whole: role, tier off, stale")      \
	X(kv_reserved, "KV keys reserved for a put")                           \
	X(kv_committed, "KV keys committed")                                   \
	X(kv_hits, "KV lookups that found their key")                          \
	X(kv_misses, "KV lookups that missed")                                 \
	X(kv_deleted, "KV keys deleted")                                       \
	X(kv_spill_refused,                                                    \
	  "KV spill files (or entries) dropped as another pool's or tenant's") \
	X(kv_tenants_removed, "tenants whose KV entries and spill files were " \
			      "deleted because the pool removed them")         \
	X(kv_slabs_taken, "slabs taken for tenants' KV stores")                \
	X(kv_slabs_returned, "slabs tenants' KV stores gave back")             \
	X(kv_allowance_refusals,                                               \
	  "KV slabs refused at the registry's allowance (the store evicted)")  \
	X(kv_trimmed, "KV entries evicted to come down to a lower allowance")

struct memd_counters {
#define X(name, help) uint64_t name;
	MEMD_COUNTERS(X)
#undef X
};

/*
 * Builds the configuration afresh (defaults, file, flags) for a SIGHUP
 * reload. Returns 0 or -errno with err explaining.
 */
typedef int (*memd_config_builder)(struct memd_config *out, char *err,
				   size_t errlen, void *arg);

/*
 * Opens one fabric domain and endpoint per arena (arenas[0 .. narenas),
 * 1 .. MEMD_NUMA_NODES_MAX of them, all the same size, a multiple of
 * slab_size), each bound to the address memd_nodes_bind_addr() picks for
 * the arena's node; registers nothing yet (each lease gets its own
 * registration); binds the control listener, starts the /metrics server
 * when cfg->metrics_listen is set, and, when ready_file is not NULL,
 * writes "HOST:PORT\n" to it once listening, followed by
 * "metrics HOST:PORT\n" when /metrics is served. topo is the host
 * topology when arenas are bound to nodes (NULL otherwise); it is used to
 * find NICs and to pin the progress threads, and must outlive the server.
 * The server copies cfg and uses (does not own) the arenas. On SIGHUP it
 * calls rebuild (may be NULL) and applies the keys memd.conf(5) marks
 * reloadable. Returns 0 and *out, or -errno with err explaining (-EINVAL:
 * a configuration value cannot be used here).
 */
int memd_server_create(const struct memd_config *cfg, struct memd_arena *arenas,
		       uint32_t narenas, const struct place_topo *topo,
		       memd_config_builder rebuild, void *rebuild_arg,
		       const char *ready_file, struct memd_server **out,
		       char *err, size_t errlen);

/*
 * Runs the control loop on the calling thread until SIGTERM or SIGINT
 * (which the caller must have blocked in every thread before
 * memd_server_create). Returns 0 after a clean drain, -errno on failure.
 */
int memd_server_run(struct memd_server *s);

/* The control address, "HOST:PORT" with port 0 resolved (what the ready
 * file says). Valid until memd_server_destroy. */
const char *memd_server_addr(const struct memd_server *s);

/* Stops the threads, closes every registration, endpoint and socket. */
void memd_server_destroy(struct memd_server *s);

#ifdef TP_FUZZ
/*
 * Fuzzing seam, compiled only into the libFuzzer build (-DTP_FUZZ=ON,
 * tests/fuzz/fuzz_server.c); memd itself never has it. A harness feeds a
 * connection without a listener: memd_server_fuzz_adopt admits fd (a
 * non-blocking stream socket, e.g. one end of a socketpair; the server
 * takes it) exactly as accept would a peer at 127.0.0.1, and
 * memd_server_fuzz_step runs one pass of the control loop without
 * waiting (the events ready now, then the timers) and returns how many
 * events it served, or -errno. memd-ctl only, like memd_server_run.
 */
void memd_server_fuzz_adopt(struct memd_server *s, int fd);
int memd_server_fuzz_step(struct memd_server *s);
#endif

#endif
