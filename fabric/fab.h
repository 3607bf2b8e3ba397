/* SPDX-License-Identifier: MIT */
/*
 * fabric/fab.h - the libfabric data plane, behind our own types.
 *
 * Only fabric/fab*.c include <rdma/...>. Callers (memd, libpool) see three
 * opaque objects:
 *
 *   fab_domain  provider + fabric + domain. Thread-safe.
 *   fab_ep      one RDM endpoint with its address vector and completion
 *               queue. Thread-safe: any thread may post and progress.
 *   fab_mr      one memory registration. Not thread-safe; one owner.
 *
 * Teardown order is the reverse of creation: every fab_mr bound to an
 * endpoint, then the endpoint, then the domain. An MR is closed before its
 * buffer is freed.
 *
 * Remote addressing. A target registers memory and advertises to clients
 * (key, base, length) where base = fab_mr_remote_base(): the buffer's
 * virtual address when the provider uses FI_MR_VIRT_ADDR, else 0 (offset
 * addressing, e.g. Debian's tcp provider with mr_mode 0). The initiator
 * always targets base + offset; it never needs to know the mode.
 *
 * Errors: every function returns 0 / a count, or -errno. Provider errors
 * (-FI_E*) are mapped by fab_errno() right where they happen.
 */
#ifndef TP_FABRIC_FAB_H
#define TP_FABRIC_FAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fab_domain;
struct fab_ep;
struct fab_mr;

/* Largest endpoint address we carry (sockaddr_in6 is 28 bytes). */
#define FAB_ADDR_MAX 128
/* Longest provider name we carry ("verbs;ofi_rxm" and friends). */
#define FAB_PROV_MAX 32
/* FI_OFI_RXM_BUFFER_SIZE that fab_domain_open() sets where the user did
 * not (fab.c, "Provider tuning"): memd and clients must agree on it. */
#define FAB_RXM_BUFFER_SIZE "1024"

/*
 * This process's effective FI_OFI_RXM_BUFFER_SIZE: the user's value where
 * set, else FAB_RXM_BUFFER_SIZE, which it sets first if nothing has (the
 * same defaulting as fab_domain_open(), so memd and clients compare what
 * their providers will use). 0 where the variable holds something that
 * is not a size in bytes (1 .. UINT32_MAX): not known, compare nothing.
 * libfabric reads the variable once per process, at its first use, so a
 * change after that is not what the provider uses. Thread-safe.
 */
uint32_t fab_rxm_buffer_size(void);

/* Whether provider (fab_domain_provider(), a HELLO_OK's provider) is
 * layered on ofi_rxm, which FI_OFI_RXM_BUFFER_SIZE concerns. */
bool fab_provider_is_rxm(const char *provider);

/* Our view of the provider's mr_mode (FI_MR_* mapped to these bits). */
#define FAB_MR_VIRT_ADDR 0x01u /* remote address is the target's vaddr */
#define FAB_MR_PROV_KEY 0x02u  /* provider picks the key */
#define FAB_MR_LOCAL 0x04u     /* local buffers need a registration */
#define FAB_MR_ALLOCATED 0x08u /* only allocated memory registers */
#define FAB_MR_ENDPOINT 0x10u  /* MR must be bound to an endpoint */

/* Access of a registration. */
#define FAB_ACCESS_LOCAL 0x1u	    /* local buffer of our own read/write */
#define FAB_ACCESS_REMOTE 0x2u	    /* peers may read and write it */
#define FAB_ACCESS_REMOTE_READ 0x4u /* peers may read it, not write it */

struct fab_opts {
	/* fi_info name: "tcp" (default when NULL), "net", "shm",
	 * "verbs;ofi_rxm", ... */
	const char *provider;
	const char *node;    /* local address to bind the endpoint, or NULL */
	const char *service; /* local port, or NULL for an ephemeral one */
	/* FAB_HMEM_* interfaces the domain must move directly (FI_HMEM, see
	 * "Device memory" below); 0: host memory only, as before. */
	unsigned hmem;
};

/*
 * Opens the provider named in opts (RDM endpoint, RMA read/write, both
 * directions). Returns 0 and *out, or
 *   -ENODATA   no provider of that name offers RDM + RMA here
 *   -EINVAL    opts is malformed
 *   -errno     mapped provider error
 * Honours FI_* environment variables (e.g. FI_TCP_IFACE) as libfabric does.
 */
int fab_domain_open(const struct fab_opts *opts, struct fab_domain **out);
/*
 * Loads libfabric now where it is opened on first use (the preload shim,
 * fabric/fab_dl.c: the load alone takes 0.2 s with Debian's 1.17, whose
 * libinfinipath calibrates a clock); a no-op where it is linked. Any
 * thread; once.
 */
void fab_load(void);
/* Closes the domain. Every ep and MR on it must be closed. NULL is a no-op. */
void fab_domain_close(struct fab_domain *d);
/* The provider name libfabric chose, e.g. "tcp;ofi_rxm". */
const char *fab_domain_provider(const struct fab_domain *d);
/* FAB_MR_* bits of the provider's mr_mode. */
unsigned fab_domain_mr_mode(const struct fab_domain *d);
/* Key size in bytes the provider accepts for requested keys (<= 8). */
size_t fab_domain_key_size(const struct fab_domain *d);
/* Largest single RMA transfer the provider allows (bytes). */
size_t fab_domain_max_msg(const struct fab_domain *d);

/*
 * Remote base a target advertises for a buffer at vaddr under mr_mode:
 * vaddr for FAB_MR_VIRT_ADDR, else 0. Pure; what fab_mr_remote_base() uses.
 */
uint64_t fab_mr_base_for_mode(unsigned mr_mode, const void *vaddr);

/*
 * Registers [buf, buf+len) with access FAB_ACCESS_*. requested_key is used
 * unless the provider picks keys (FAB_MR_PROV_KEY); it is masked to the
 * provider's key size. ep must be given when the provider has
 * FAB_MR_ENDPOINT (the MR is then bound to it and enabled), may be NULL
 * otherwise. Returns 0 and *out, or
 *   -ENOKEY    requested_key is in use: pick another and retry
 *   -EINVAL    bad arguments
 *   -errno     mapped provider error
 */
int fab_mr_reg(struct fab_domain *d, struct fab_ep *ep, void *buf, size_t len,
	       unsigned access, uint64_t requested_key, struct fab_mr **out);
/* Closes a registration: from its return on, no new RMA can reach the
 * buffer through its key. NULL is a no-op. Returns 0 or -errno; a failed
 * close may leave the key working (memd quarantines the slab). Test only:
 * TP_TEST_FAIL_MR_CLOSE=N in the environment makes the process's first N
 * closes report -EIO. */
int fab_mr_close(struct fab_mr *mr);
uint64_t fab_mr_key(const struct fab_mr *mr);
/* Local descriptor to pass with operations on this buffer (may be NULL). */
void *fab_mr_desc(const struct fab_mr *mr);
/* What a peer adds offsets to (see the top of this file). */
uint64_t fab_mr_remote_base(const struct fab_mr *mr);

/*
 * One RMA operation in flight. The caller owns the memory and fills done
 * and arg; fab fills status and len and sets complete. done runs on
 * whichever thread progresses the endpoint (it must be short and must not
 * post to or progress the same endpoint). The object and the data buffer
 * must live until complete is true (or the endpoint is closed).
 *
 * Order at completion: status and len, then done(op), then complete
 * (release store); after that store fab never touches the op again. So a
 * thread that sees complete knows done has returned; and done must not
 * free or reuse the op, nor let another thread do so before that thread
 * has seen complete (a done that wakes a waiter: the waiter still checks
 * complete with acquire before it frees the op).
 */
struct fab_op {
	void *prov[8]; /* provider context; private */
	void (*done)(struct fab_op *op);
	void *arg;
	int status; /* 0 or -errno, valid once complete */
	/* Bytes transferred, valid once complete: the requested length on
	 * success, 0 on error. */
	size_t len;
	struct fab_op *next_live, *prev_live; /* private: posted list */
	unsigned kind;			      /* private: read or write */
	volatile int complete; /* set (release) last, read with acquire */
};

/*
 * Opens an RDM endpoint with its own AV and CQ. max_inflight bounds posted
 * but uncompleted operations (0: the provider's tx size, capped at 256).
 */
int fab_ep_open(struct fab_domain *d, unsigned max_inflight,
		struct fab_ep **out);
/*
 * Closes the endpoint. Operations still in flight complete with -ECANCELED
 * (their done callbacks run here); their buffers are no longer touched once
 * this returns. No other thread may use ep (post, wait, progress) during or
 * after the call; MRs bound to it (FAB_MR_ENDPOINT) are closed first. NULL
 * is a no-op.
 *
 * With a read in flight on libfabric < 1.18's tcp (or net) provider, the
 * endpoint is first progressed for up to 100 ms; a read still
 * in flight then makes the endpoint (and later its domain) stay open,
 * never progressed again, until the process exits ("quarantined", counted
 * by fab_quarantined_eps): closing it could crash inside the provider
 * (fabric/fab.c, "Closing mid-read"). Its buffers are not touched either
 * way. Returns true when the endpoint was quarantined, else false.
 */
bool fab_ep_close(struct fab_ep *ep);
/* Endpoints this process kept open in fab_ep_close instead of closing. */
unsigned fab_quarantined_eps(void);
/* Whether d's provider is one fab_ep_close quarantines mid-read. */
bool fab_domain_close_hazard(const struct fab_domain *d);
/* Copies this endpoint's address into addr (*len in: capacity, out: size).
 * -ENOSPC when it does not fit. */
int fab_ep_name(struct fab_ep *ep, void *addr, size_t *len);
/* Inserts a peer address; *peer is what operations take. */
int fab_ep_av_insert(struct fab_ep *ep, const void *addr, size_t len,
		     uint64_t *peer);
/* Forgets a peer (no operation to it may be in flight); *peer handles of
 * it become invalid. Returns 0 or -errno. */
int fab_ep_av_remove(struct fab_ep *ep, uint64_t peer);

/*
 * Posts an RMA read of len bytes from (peer, raddr, key) into buf (desc:
 * fab_mr_desc() of a registration covering buf, or NULL when the provider
 * has no FAB_MR_LOCAL). When max_inflight operations are already posted, it
 * progresses the endpoint until one completes (at most timeout_ms; -1 waits
 * as long as it takes). Returns 0 when posted (completion comes through
 * op), or -ETIMEDOUT, -EMSGSIZE (len > max msg), -ESHUTDOWN (endpoint
 * broken), -errno. Not posted means op is untouched by fab afterwards.
 *
 * Completion status, besides 0: -ECANCELED only from fab_ep_close;
 * -ECONNABORTED when the provider flushed the op because its connection
 * went down (tcp: the target refused a bad key or range, or died);
 * -ENOTCONN, -ECONNRESET, -EIO and the like as the provider reports them.
 * On libfabric 1.17 tcp a refused RMA leaves the connection to that peer
 * broken for good (every later op: -ENOTCONN); a new endpoint recovers.
 */
int fab_ep_read(struct fab_ep *ep, void *buf, size_t len, void *desc,
		uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		int timeout_ms);
/* Same, writing len bytes from buf to (peer, raddr, key). The write
 * completes once the bytes are in the target's memory (delivery complete),
 * not merely sent. */
int fab_ep_write(struct fab_ep *ep, const void *buf, size_t len, void *desc,
		 uint64_t peer, uint64_t raddr, uint64_t key, struct fab_op *op,
		 int timeout_ms);

/*
 * Reads completions and runs their callbacks. Waits up to timeout_ms for
 * at least one event (0: poll once; -1: forever) without burning a core.
 * Returns the number of operations completed, or -errno. This is also what
 * a target (memd) must call in a loop: RMA from peers makes progress only
 * while someone progresses the target's endpoint.
 */
int fab_ep_progress(struct fab_ep *ep, int timeout_ms);

/* What fab_ep_serve() did. It adds to the fields with relaxed atomic
 * adds as it goes, so another thread may read them (atomically) during a
 * call. */
struct fab_serve_stats {
	uint64_t wakeups; /* returns from a blocking wait with work */
	uint64_t busy_ns; /* time spent polling inside busy windows */
	/* sleeps instead of polls while the process had no descriptor
	 * left (a provider's listener that cannot accept stays readable) */
	uint64_t starved_sleeps;
};

/*
 * A target's progress call (memd's progress threads): like
 * fab_ep_progress() for timeout_ms, except that after every wake-up
 * (a peer's request arrived while the thread slept) it keeps polling for
 * busy_us microseconds, extended while requests keep coming, before it
 * sleeps again: a peer's next small request then costs no scheduler
 * wake-up, at the price of a core busy for at most busy_us after the
 * last request. busy_us 0: sleep whenever nothing is pending. Returns
 * early, like fab_ep_progress(), on a completion or fab_ep_wake().
 * Providers without a wait fd (shm) get fab_ep_progress(). st (may be
 * NULL) is added to (see above). Returns completions, or -errno. One
 * thread per ep.
 */
int fab_ep_serve(struct fab_ep *ep, unsigned busy_us, int timeout_ms,
		 struct fab_serve_stats *st);

/*
 * Makes a fab_ep_progress() call blocked on ep return soon, whether or not
 * anything completed (memd's reclaimer uses it to get its progress fence
 * without waiting out the progress thread's timeout). Any thread; a wake
 * with nobody waiting makes the next blocking wait return early at most
 * once. 0 or -EINVAL.
 */
int fab_ep_wake(struct fab_ep *ep);
/*
 * Waits until op completes, progressing the endpoint (several threads may
 * wait at once; one progresses, the others sleep). Returns op->status once
 * complete, or -ETIMEDOUT after timeout_ms (-1: forever; 0: one poll) with
 * op still in flight: wait again, or close the endpoint to reclaim it.
 */
int fab_op_wait(struct fab_ep *ep, struct fab_op *op, int timeout_ms);

struct fab_ep_stats {
	uint64_t reads, writes;		  /* posted */
	uint64_t read_bytes, write_bytes; /* completed successfully */
	uint64_t errors;		  /* completions with an error */
	unsigned inflight;
};
void fab_ep_get_stats(struct fab_ep *ep, struct fab_ep_stats *st);

/* --- Device memory (FI_HMEM) ------------------------------------------
 *
 * A provider with FI_HMEM reads and writes device memory (GPU HBM) itself:
 * verbs with GPUDirect RDMA or dma-buf, efa, cxi. Ask for it with
 * fab_opts.hmem; a provider that cannot do it for those interfaces is not
 * chosen (fab_domain_open() returns -ENODATA, e.g. tcp on libfabric 1.17),
 * so a caller that can live without it opens a second domain without.
 * Device buffers are registered with their interface and device ordinal:
 * pass fab_mr_desc() of that registration with every operation on them.
 */
#define FAB_HMEM_CUDA 0x1u /* FI_HMEM_CUDA: CUDA device memory */

/*
 * Whether d moves memory of interface iface directly: FAB_HMEM_CUDA when
 * d was opened with it in fab_opts.hmem and the provider granted FI_HMEM;
 * 0 (host memory) always. Pure.
 */
bool fab_domain_has_hmem(const struct fab_domain *d, unsigned iface);
/*
 * As fab_mr_reg(), for memory of interface iface (0: host memory, i.e.
 * FI_HMEM_SYSTEM; FAB_HMEM_CUDA: device memory of CUDA ordinal device),
 * through fi_mr_regattr. Returns 0 and *out, or
 *   -EOPNOTSUPP  iface is not host memory and d lacks it (has_hmem)
 *   -EINVAL, -ENOKEY, -errno as fab_mr_reg()
 */
int fab_mr_reg_hmem(struct fab_domain *d, struct fab_ep *ep, void *buf,
		    size_t len, unsigned access, unsigned iface, int device,
		    uint64_t requested_key, struct fab_mr **out);

/* Maps a libfabric return (-FI_E*, or a positive FI_E* from an error
 * completion) to -errno. 0 stays 0. */
int fab_errno(int fi_ret);

#endif
