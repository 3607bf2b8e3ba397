/* SPDX-License-Identifier: MIT */
/*
 * libpool/internal.h - project-internal views of libpool objects, for
 * tests and benchmarks. Not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_INTERNAL_H
#define TP_LIBPOOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/wire.h"
#include "tidepool/pool.h"

/*
 * Sessions connected after this set up each link's fabric (libfabric
 * domain and endpoint) in the link's heartbeat thread instead of in
 * pool_connect(): pool_connect returns after HELLO, leases work at once,
 * and the first transfer waits until the fabric is up (or
 * pool_fabric_prepare() asks for it earlier). A fabric that
 * cannot be set up then fails the link (-ENOTCONN) instead of
 * pool_connect. The preload shim turns it on (LIBPOOL_FABRIC_BACKGROUND,
 * libpool-preload(8)); default off. Any thread; process-wide.
 */
void pool_set_fabric_background(bool on);
/* True while a link of p has not set up its fabric (see above). */
bool pool_fabric_is_pending(struct pool *p);
/* Asks every link of p whose fabric is not set up to set it up now, in
 * its heartbeat thread (not same-host links, whose transfers go through
 * slab memfds, nor after pool_fabric_exit()); never waits: false when
 * p's lock was busy (ask again later), true when asked. */
bool pool_fabric_prepare(struct pool *p);
/* Waits until no link of p is setting up its fabric. */
void pool_fabric_settle(struct pool *p);
/* The same for exit(), whose destructors must not unload libfabric under
 * a thread still in it: a set-up nobody waits for
 * (pool_fabric_prepare()'s) is cancelled first: not begun, it never
 * starts; begun, it stops once libfabric is loaded (the load holds
 * exit's destructors anyway). A transfer that needs the fabric later
 * still sets it up; pool_fabric_prepare() asks no more. */
void pool_fabric_exit(struct pool *p);

/*
 * Where this process maps bytes [off, off + len) of r (the same-host
 * path with LIBPOOL_SHM=map), checked as a read through that mapping
 * would be and counted as one: the caller copies from it at once. NULL
 * with *err 0 when no mapping serves all of them (read them instead),
 * with *err < 0 for what a read would have failed with. For the paging
 * engine (libpool/pool_io.c).
 */
const uint8_t *pool_region_mapped(struct pool *p, struct pool_region *r,
				  uint64_t off, size_t len, int *err);
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
/* Links the session holds (failed ones not yet reaped included). */
uint32_t pool_session_nlinks(struct pool *p);
/* Failed links the session has closed and freed so far. */
uint64_t pool_session_links_reaped(struct pool *p);
/* Milliseconds the session's donor pass has left now, or (at_last_open)
 * had left when the session last opened a donor link with it; cluster
 * sessions. < 0: it had run out. */
int64_t pool_session_pass_left_ms(struct pool *p, bool at_last_open);

/*
 * For other modules of libpool (the KV tier, kv*.c): the session's links.
 * pool_link_get hands out a link with a reference; it lives until its
 * last reference is dropped with pool_link_put (or pool_close), so a
 * pointer to one may be kept while its reference is. Once lost it stays
 * lost (pool_link_is_lost) and a new pool_link_get opens another; pool_link.c
 * reaps a failed link when no slab and no reference remains.
 */
struct plink;
struct fab_op;
struct fab_mr;

/* Something that lives on the session and is destroyed first by
 * pool_close (e.g. a KV handle); destroy must not call into p but for
 * pool_link_put on links it still holds. */
struct pool_attached {
	struct pool_attached *next;
	void (*destroy)(struct pool_attached *a);
};
void pool_attach(struct pool *p, struct pool_attached *a);

int pool_timeout_ms(const struct pool *p);
uint64_t pool_slab_bytes(const struct pool *p);
/* Largest single RMA transfer for every link of p. */
size_t pool_xfer_bytes(struct pool *p);
/* DONORS (MEMBERS on a protocol-5 registry: with its membership) at the
 * registry into *rep (DONORS_OK / MEMBERS_OK). -EOPNOTSUPP standalone. */
int pool_donors(struct pool *p, struct wire_msg *rep);
/*
 * The link to donor incarnation (donor_id, epoch) at addr, opened (with
 * the donor pass) on first use; in a standalone session the one link
 * whatever the arguments; with a reference the caller drops with
 * pool_link_put. 0 and *out, -ENOTCONN (standalone link lost), or the
 * errors of opening a link.
 */
int pool_link_get(struct pool *p, uint32_t donor_id, uint64_t epoch,
		  const char *addr, struct plink **out);
/* Another reference to lk, which the caller holds a reference to. */
void pool_link_hold(struct plink *lk);
/* Drops a reference (NULL: nothing); lk may be freed if it was lost. */
void pool_link_put(struct plink *lk);
bool pool_link_is_lost(struct plink *lk);
void pool_link_fail(struct plink *lk, int err, const char *why);
uint32_t pool_link_tenant_id(const struct plink *lk);
uint16_t pool_link_nendpoints(const struct plink *lk);
/* Whether lk moves KV blocks through memd's files (a same-host link):
 * its transfers complete in pool_link_post. */
bool pool_link_is_same_host(const struct plink *lk);
/* The protocol version lk's memd negotiated in HELLO. */
uint16_t pool_link_proto(const struct plink *lk);
const char *pool_link_addr(const struct plink *lk);
/* rpc_call on lk's control connection with the session timeout; a
 * broken connection or a timeout fails the link. */
int pool_link_call(struct plink *lk, struct wire_msg *req, struct wire_msg *rep,
		   int expect, char *text, size_t textlen);
/* pool_link_call in two halves (rpc_send, rpc_recv: fabric/rpc.h): after
 * pool_link_send returns 0 the calling thread must call pool_link_recv
 * on lk, and meanwhile holds lk's control connection; a thread sending
 * on several links sends in ascending order of their addresses. */
int pool_link_send(struct plink *lk, struct wire_msg *req);
int pool_link_recv(struct plink *lk, struct wire_msg *rep, int expect,
		   char *text, size_t textlen);
/* A local registration of buf in lk's domain when its provider needs one
 * (FAB_MR_LOCAL), else *mr = NULL. 0 or -errno. */
int pool_link_mr(struct plink *lk, void *buf, size_t len, struct fab_mr **mr);
/* Drops the KV slab files a same-host link keeps (after a block read
 * through one failed its checks: the next get asks memd again). */
void pool_link_kv_shm_forget(struct plink *lk);
/* Posts one RMA (f->arg becomes lk) to lk's memd endpoint. 0 when
 * posted; -ENOTCONN (link lost, or the post broke it), -EPROTO (no such
 * endpoint), -errno. On a same-host link the transfer goes through the
 * KV slab's file (WIRE_SHM_KV) where memd gives it, complete at once. */
int pool_link_post(struct plink *lk, bool write, void *buf, size_t len,
		   void *desc, uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		   struct fab_op *f);
/* pool_link_post through the KV slab's file only, never over the
 * fabric: 0 when done (f complete), 1 when the same-host path cannot
 * take it (not a same-host link, memd refused the file), -EPROTO,
 * -ENOTCONN, -errno. For memory that must not be written after the call
 * (pool_kv_get_to). */
int pool_link_post_local(struct plink *lk, bool write, void *buf, size_t len,
			 uint16_t endpoint, uint64_t raddr, uint64_t rkey,
			 struct fab_op *f);
/* Tests: the bytes this session moved through memd's files (leases and
 * KV blocks). */
uint64_t pool_shm_bytes(struct pool *p);
/* Whether a transfer at (endpoint, rkey) would go through the KV slab's
 * file: a same-host link whose memd gives that file (asked once and
 * kept, as pool_link_post does). */
bool pool_link_kv_local(struct plink *lk, uint16_t endpoint, uint64_t rkey);
/* Waits for f (posted on lk) up to timeout_ms; a transfer still running
 * then fails the link (which completes it). Returns f's status, mapped as
 * pool_wait does (-ENOTCONN for a lost link). */
int pool_link_wait(struct plink *lk, struct fab_op *f, int timeout_ms);

/*
 * Streams (LIBPOOL_KV_STREAMS; docs/kv.md, "Striped gets over tcp"):
 * stream 0 is lk's endpoint, streams 1 .. n-1 more endpoints on its
 * domain, each with its own connections to memd. pool_link_streams opens
 * them on first use (a fabric link only; the session's setting, fewer
 * where one would not open) and returns how many lk has now: 1 on a
 * same-host or lost link. A stream shares the link's fate: a transfer
 * error on any fails the link, and failing it closes them all.
 */
#define POOL_STREAMS_MAX 8
unsigned pool_link_streams(struct plink *lk);
/* pool_link_post and pool_link_wait on stream s (< pool_link_streams);
 * stream 0 is what they use. A stream s >= 1 whose connection failed
 * (a transport error posting or completing on it, a transfer timed out
 * there) is closed alone, its transfers in flight complete with an
 * error, and from then on posting to it returns -ENOLINK without
 * touching f: post that transfer on stream 0. */
int pool_link_post_on(struct plink *lk, unsigned s, bool write, void *buf,
		      size_t len, void *desc, uint16_t endpoint, uint64_t raddr,
		      uint64_t rkey, struct fab_op *f);
int pool_link_wait_on(struct plink *lk, unsigned s, struct fab_op *f,
		      int timeout_ms);
/* Progresses stream s once without waiting (completions of transfers
 * another stream's wait would not read). */
void pool_link_poke(struct plink *lk, unsigned s);
/* Tests: RMA reads stream s of lk has posted (0: no such stream). */
uint64_t pool_link_stream_reads(struct plink *lk, unsigned s);

/* The KV tier (kv.c): the name of key's home donor ("standalone" in a
 * standalone session). 0, -ENOENT (no donor up) or -EBADF. */
struct pool_kv;
struct pool_kv_key;
int pool_kv_home(struct pool_kv *kv, const struct pool_kv_key *key, char *name,
		 size_t cap);
/* The name of key's second choice, where its replica lives (with
 * replicas 2): 0, -ENOENT (fewer than two donors up) or -EBADF. */
int pool_kv_second(struct pool_kv *kv, const struct pool_kv_key *key,
		   char *name, size_t cap);
/* Tests: deletes one copy of key only, the home's or (second) the
 * replica's. The key's status (0, -ENOENT, ...) or a call error. */
int pool_kv_delete_copy(struct pool_kv *kv, const struct pool_kv_key *key,
			bool second);

#endif
