/* SPDX-License-Identifier: MIT */
/*
 * fabric/wire.h - the control-plane codec (spec: docs/protocol.md).
 *
 * Pure functions, no I/O, no allocation, no global state: safe from any
 * thread. A frame is a 16-byte header followed by a payload of at most
 * WIRE_MAX_PAYLOAD bytes; all integers little-endian:
 *
 *   u32 magic 'TDPL'  u8 version  u8 type  u16 flags  u32 seq  u32 len
 *
 * Every length and count inside a payload is bounded by the limits below;
 * a payload must be consumed exactly (no trailing bytes). Strings and
 * variable byte arrays travel as u16 length + bytes (no NUL on the wire);
 * fixed-size byte arrays (nonces, MACs, tickets) travel raw. encode and
 * decode check the same bounds, so encode(decode(b)) == b for every
 * accepted frame b, and decode(encode(m)) == m for every m whose strings
 * and arrays are zero-padded (as decode leaves them), ADMIN's json
 * pointer aside (it points into the buffer decoded; see struct wire_admin).
 */
#ifndef TP_FABRIC_WIRE_H
#define TP_FABRIC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WIRE_MAGIC 0x4c504454u /* "TDPL" as little-endian bytes */
#define WIRE_VERSION 1
#define WIRE_HDR_LEN 16
#define WIRE_MAX_PAYLOAD 65536u
#define WIRE_MAX_FRAME (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD)

#define WIRE_NAME_MAX 64     /* client name, incl. NUL */
#define WIRE_PROV_MAX 32     /* provider name, incl. NUL */
#define WIRE_ADDR_MAX 128    /* fabric address bytes */
#define WIRE_MSG_MAX 256     /* error text, incl. NUL */
#define WIRE_MAX_LEASES 256  /* leases in one LEASE_OK / RELEASE */
#define WIRE_ERR_MAX 4095    /* ERROR.err is 1 .. WIRE_ERR_MAX */
#define WIRE_MAX_ENDPOINTS 8 /* fabric endpoints in one HELLO_OK */
#define WIRE_MAX_NODES 8     /* per-node entries in one STATUS_OK */
/*
 * A NUMA node travels as an i32: WIRE_NODE_ANY (-1: any node, or "memd does
 * no NUMA placement"), else the operating system's node number, 0 ..
 * WIRE_NODE_MAX - 1 (Linux numbers nodes below 1024).
 */
#define WIRE_NODE_ANY (-1)
#define WIRE_NODE_MAX 1024

/*
 * Message-set versions this codec speaks, negotiated in HELLO (proto_min ..
 * proto_max). Distinct from the header's WIRE_VERSION, which names the
 * framing and changes only if the header itself does.
 */
#define WIRE_PROTO_MIN 1
#define WIRE_PROTO_MAX 6

/* Protocol 2 (docs/protocol.md, docs/cluster.md): authentication, the
 * registry's placement and admin requests, donors joining a registry. */
#define WIRE_NONCE_LEN 32     /* AUTH / AUTH_CHALLENGE nonces */
#define WIRE_MAC_LEN 32	      /* HMAC-SHA-256 proofs and ticket MACs */
#define WIRE_PASS_MAX 192     /* sealed donor pass (opaque to clients) */
#define WIRE_BOX_MAX 96	      /* a key sealed with the session key */
#define WIRE_HOSTPORT_MAX 128 /* "host:port", incl. NUL */
#define WIRE_MAX_GRANTS 16    /* donor grants in one PLACE_OK */
#define WIRE_NO_GRANT 0xffu   /* PLACE_OK layout: no replica */
#define WIRE_MAX_TENANTS 1024 /* tenant entries in one DONOR_REPORT */
#define WIRE_MAX_REDEEMED 256 /* grant ids in one DONOR_REPORT */
#define WIRE_JSON_MAX 65000u  /* ADMIN / ADMIN_OK text */
/* KV tier (docs/kv.md) */
#define WIRE_KV_KEY_LEN 32
#define WIRE_KV_BATCH 64      /* keys in one KV request */
#define WIRE_KV_MAX_LOCS 1024 /* chunk locations in one KV reply */
#define WIRE_MAX_DONORS 64    /* entries in one DONORS_OK */

/*
 * Every message type, X(NAME, VALUE) for WIRE_NAME: the enum below and
 * wire_type_name() are written from this one list. Request types are
 * < 0x80; a reply is its request | 0x80; 0xff is ERROR.
 */
#define WIRE_TYPES(X)                                                          \
	X(HELLO, 0x01)                                                         \
	X(LEASE, 0x02)                                                         \
	X(RELEASE, 0x03)                                                       \
	X(HEARTBEAT, 0x04)                                                     \
	X(STATUS, 0x05)                                                        \
	X(BYE, 0x06)                                                           \
	/* protocol 2 */                                                       \
	X(AUTH, 0x07)                                                          \
	X(AUTH_PROOF, 0x08)                                                    \
	X(PLACE, 0x09)                                                         \
	X(LEASE_GRANT, 0x0a)                                                   \
	X(HEARTBEAT2, 0x0b)                                                    \
	X(DONOR_JOIN, 0x0c)                                                    \
	X(DONOR_REPORT, 0x0d)                                                  \
	X(ADMIN, 0x0e)                                                         \
	/* protocol 2, KV tier (docs/kv.md) and donor list */                  \
	X(KV_RESERVE, 0x10)                                                    \
	X(KV_COMMIT, 0x11)                                                     \
	X(KV_LOOKUP, 0x12)                                                     \
	X(KV_DONE, 0x13)                                                       \
	X(KV_EXISTS, 0x14)                                                     \
	X(KV_DELETE, 0x15)                                                     \
	X(KV_PIN, 0x16)                                                        \
	X(DONORS, 0x17)                                                        \
	X(SHM, 0x18)	  /* same-host data path (protocol.md) */              \
	X(KV_MODEL, 0x19) /* protocol 3: the client's cost model hint */       \
	X(FABRIC, 0x1a)	  /* protocol 3: fabric settings both ends share */    \
	X(KV_CLEAR, 0x1b) /* protocol 4: empty the tenant's KV store */        \
	/* protocol 5: membership (struct wire_kv, wire_donors_ok) */          \
	X(MEMBERS, 0x1c)                                                       \
	/* protocol 6: the registry tells a donor's link of a new membership \
	 * (unsolicited, seq 0, no payload: the donor reports at once) */ \
	X(DONOR_NEWS, 0x1d)                                                    \
	X(KV_RESERVE_AT, 0x20)                                                 \
	X(KV_COMMIT_AT, 0x21)                                                  \
	X(KV_LOOKUP_AT, 0x22)                                                  \
	X(KV_EXISTS_AT, 0x24)                                                  \
	X(KV_DELETE_AT, 0x25)                                                  \
	X(KV_PIN_AT, 0x26)                                                     \
	X(HELLO_OK, 0x81)                                                      \
	X(LEASE_OK, 0x82)                                                      \
	X(RELEASE_OK, 0x83)                                                    \
	X(HEARTBEAT_OK, 0x84)                                                  \
	X(STATUS_OK, 0x85)                                                     \
	X(BYE_OK, 0x86)                                                        \
	X(AUTH_CHALLENGE, 0x87) /* reply to AUTH */                            \
	X(AUTH_OK, 0x88)                                                       \
	X(PLACE_OK, 0x89)                                                      \
	X(LEASE_GRANT_OK, 0x8a) /* layout of LEASE_OK */                       \
	X(HEARTBEAT2_OK, 0x8b)	/* layout of HEARTBEAT_OK */                   \
	X(DONOR_JOIN_OK, 0x8c)                                                 \
	X(DONOR_REPORT_OK, 0x8d)                                               \
	X(ADMIN_OK, 0x8e)                                                      \
	X(KV_RESERVE_OK, 0x90)                                                 \
	X(KV_COMMIT_OK, 0x91)                                                  \
	X(KV_LOOKUP_OK, 0x92)                                                  \
	X(KV_DONE_OK, 0x93)                                                    \
	X(KV_EXISTS_OK, 0x94)                                                  \
	X(KV_DELETE_OK, 0x95)                                                  \
	X(KV_PIN_OK, 0x96)                                                     \
	X(DONORS_OK, 0x97)                                                     \
	X(SHM_OK, 0x98)                                                        \
	X(KV_MODEL_OK, 0x99) /* protocol 3; no payload */                      \
	X(FABRIC_OK, 0x9a)   /* protocol 3 */                                  \
	X(KV_CLEAR_OK, 0x9b) /* protocol 4; no payload */                      \
	X(MEMBERS_OK, 0x9c)  /* protocol 5 */                                  \
	X(KV_RESERVE_AT_OK, 0xa0)                                              \
	X(KV_COMMIT_AT_OK, 0xa1)                                               \
	X(KV_LOOKUP_AT_OK, 0xa2)                                               \
	X(KV_EXISTS_AT_OK, 0xa4)                                               \
	X(KV_DELETE_AT_OK, 0xa5)                                               \
	X(KV_PIN_AT_OK, 0xa6)                                                  \
	X(ERROR, 0xff)

enum wire_type {
#define WIRE_TYPE_ENUM(name, value) WIRE_##name = value,
	WIRE_TYPES(WIRE_TYPE_ENUM)
#undef WIRE_TYPE_ENUM
};

struct wire_hello {
	/* versions the client speaks: 1 <= proto_min <= proto_max */
	uint16_t proto_min, proto_max;
	char client[WIRE_NAME_MAX]; /* free-form, for logs: "pid 123 bench" */
};

/* One of memd's fabric endpoints: where the leases of one arena live. */
struct wire_endpoint {
	int32_t node;	   /* its arena's NUMA node; WIRE_NODE_ANY: not bound */
	uint16_t addr_len; /* 0 .. WIRE_ADDR_MAX */
	uint8_t addr[WIRE_ADDR_MAX]; /* fabric address, provider's format */
};

struct wire_hello_ok {
	uint16_t proto; /* version chosen, >= 1 */
	uint64_t session_id;
	uint64_t epoch;	 /* random per memd boot */
	uint32_t ttl_ms; /* lease TTL, >= 1; renew every ttl_ms / 3 */
	uint64_t slab_bytes;
	char provider[WIRE_PROV_MAX]; /* fabric provider memd uses */
	uint16_t nendpoints;	      /* 1 .. WIRE_MAX_ENDPOINTS */
	struct wire_endpoint ep[WIRE_MAX_ENDPOINTS]; /* a lease names one */
};

struct wire_lease_req {
	uint32_t nslabs; /* 1 .. WIRE_MAX_LEASES */
	uint32_t flags;	 /* reserved, must be 0 */
	int32_t node;	 /* WIRE_NODE_ANY, or 0 .. WIRE_NODE_MAX - 1 */
};

/* A leased slab as the client addresses it. (epoch, slab, generation)
 * names the lease; key/base/len and the endpoint are what RMA needs. */
struct wire_lease {
	uint64_t epoch;
	uint32_t slab;
	uint32_t generation;
	uint64_t key;
	uint64_t base; /* remote address of byte 0 (0 in offset mode) */
	uint64_t len_bytes;
	uint16_t endpoint; /* index into HELLO_OK.ep, < WIRE_MAX_ENDPOINTS */
	int32_t node; /* NUMA node of the slab; WIRE_NODE_ANY: not placed */
};

struct wire_lease_ok {
	uint32_t ttl_ms; /* >= 1; the client counts it from its send time */
	uint32_t count;	 /* 0 .. WIRE_MAX_LEASES */
	struct wire_lease lease[WIRE_MAX_LEASES];
};

struct wire_lease_ref {
	uint64_t epoch;
	uint32_t slab;
	uint32_t generation;
};

struct wire_release {
	uint32_t count; /* 1 .. WIRE_MAX_LEASES */
	struct wire_lease_ref ref[WIRE_MAX_LEASES];
};

struct wire_release_ok {
	uint32_t
		released; /* 0 .. WIRE_MAX_LEASES: refs that named a live lease */
};

struct wire_heartbeat_ok {
	uint32_t ttl_ms; /* >= 1; every lease of the session renewed for this */
	uint32_t nleases; /* leases the session holds */
	uint64_t epoch;
};

/* Slabs of one of memd's arenas (one per NUMA node it serves). */
struct wire_node_slabs {
	int32_t node; /* WIRE_NODE_ANY: memd does no NUMA placement */
	uint32_t slabs_total;
	uint32_t slabs_free;
};

struct wire_status_ok {
	uint64_t epoch;
	uint64_t uptime_ms;
	uint64_t donated_bytes;
	uint64_t slab_bytes;
	uint32_t slabs_total;
	uint32_t slabs_free;
	uint32_t slabs_leased;
	uint32_t slabs_reclaiming; /* revoked, waiting to be zeroed */
	uint32_t sessions;
	uint32_t flags;		  /* WIRE_STATUS_*; unknown bits must be 0 */
	uint64_t leases_expired;  /* since boot */
	uint64_t frames_rejected; /* malformed, oversized, out of sequence */
	uint16_t nnodes;	  /* 0 .. WIRE_MAX_NODES */
	struct wire_node_slabs node[WIRE_MAX_NODES];
};
#define WIRE_STATUS_HUGEPAGES 0x1u /* donation backed by hugetlbfs pages */
#define WIRE_STATUS_DRAINING 0x2u
#define WIRE_STATUS_KNOWN (WIRE_STATUS_HUGEPAGES | WIRE_STATUS_DRAINING)

/* ---- protocol 2 ------------------------------------------------------ */

/*
 * AUTH opens the challenge-response (docs/cluster.md, "Authentication"):
 * principal is a tenant name, "@admin" or "@donor"; pass is empty when
 * the principal authenticates with its own key (at the registry), else the
 * sealed donor pass the registry issued (at a donor).
 */
struct wire_auth {
	char principal[WIRE_NAME_MAX]; /* non-empty */
	uint8_t cnonce[WIRE_NONCE_LEN];
	uint16_t pass_len; /* 0 .. WIRE_PASS_MAX */
	uint8_t pass[WIRE_PASS_MAX];
};

struct wire_auth_challenge {
	uint8_t snonce[WIRE_NONCE_LEN];
};

struct wire_auth_proof {
	uint8_t mac[WIRE_MAC_LEN];
};

enum wire_role {
	WIRE_ROLE_TENANT = 1,
	WIRE_ROLE_ADMIN = 2,
	WIRE_ROLE_DONOR = 3,
};
#define WIRE_AUTH_REGISTRY 0x1u /* AUTH_OK.flags: this memd is the registry */
#define WIRE_AUTH_KNOWN WIRE_AUTH_REGISTRY

/* A pass comes only to a tenant and never alone: pass_len, pass_ttl_ms
 * and box_len are all non-zero, or all zero. */
struct wire_auth_ok {
	uint8_t mac[WIRE_MAC_LEN]; /* the server's proof */
	uint8_t role;		   /* enum wire_role */
	uint32_t flags;		   /* WIRE_AUTH_*; unknown bits must be 0 */
	uint32_t tenant_id;	   /* 0 unless role is TENANT */
	uint32_t pass_ttl_ms;	   /* 0 when no pass follows */
	uint16_t pass_len;	   /* 0 .. WIRE_PASS_MAX */
	uint8_t pass[WIRE_PASS_MAX];
	uint16_t box_len; /* 0 .. WIRE_BOX_MAX: the pass key, sealed */
	uint8_t box[WIRE_BOX_MAX];
};

#define WIRE_PLACE_REPLICA 0x1u /* PLACE.flags: a second copy elsewhere */
#define WIRE_PLACE_KNOWN WIRE_PLACE_REPLICA

struct wire_place {
	uint32_t nslabs; /* 1 .. WIRE_MAX_LEASES */
	uint32_t flags;	 /* WIRE_PLACE_*; unknown bits must be 0 */
	int32_t node;	 /* as LEASE.node */
};

/* A grant ticket: what a donor needs to lease slabs to a tenant, MAC'd by
 * the registry with the cluster's ticket key. Fixed layout, 80 bytes. */
struct wire_ticket {
	uint64_t grant_id;
	uint64_t registry_epoch;
	uint32_t tenant_id;
	uint32_t donor_id;
	uint64_t donor_epoch;
	uint32_t nslabs; /* 1 .. WIRE_MAX_LEASES */
	int32_t node;
	uint64_t expires_ms; /* registry's CLOCK_REALTIME, ms since 1970 */
	uint8_t mac[WIRE_MAC_LEN];
};

struct wire_grant {
	uint32_t donor_id;
	uint64_t donor_epoch;
	char addr[WIRE_HOSTPORT_MAX]; /* donor's control address, non-empty */
	struct wire_ticket ticket;    /* ticket.nslabs slabs there */
};

/* Slab k of the placed region comes from grant layout[k].primary (the
 * next slab leased with it) and, with REPLICA, from layout[k].replica. */
struct wire_layout {
	uint8_t primary; /* < ngrants */
	uint8_t replica; /* < ngrants, or WIRE_NO_GRANT */
};

/* Consistent as a whole (else -EINVAL / -EBADMSG): grants on distinct
 * donors, each grant's ticket for its donor_id and donor_epoch and for
 * registry_epoch, and layout[] naming grant g (as primary or replica)
 * exactly grant[g].ticket.nslabs times. */
struct wire_place_ok {
	uint64_t registry_epoch;
	uint16_t ngrants; /* 1 .. WIRE_MAX_GRANTS */
	struct wire_grant grant[WIRE_MAX_GRANTS];
	uint16_t nslabs; /* 1 .. WIRE_MAX_LEASES */
	struct wire_layout layout[WIRE_MAX_LEASES];
};

struct wire_lease_grant {
	struct wire_ticket ticket;
};

/* HEARTBEAT2: HEARTBEAT with the client's RMA counters (for /metrics). */
struct wire_heartbeat2 {
	uint64_t bytes_read;
	uint64_t bytes_written;
	uint64_t ops;
};

struct wire_donor_join {
	/* both non-empty */
	char name[WIRE_NAME_MAX];     /* donor's stable name (hostname) */
	char addr[WIRE_HOSTPORT_MAX]; /* where clients reach it */
	uint64_t epoch;
	uint64_t slab_bytes;
	uint32_t slabs_total;
	uint16_t nnodes; /* 0 .. WIRE_MAX_NODES */
	struct wire_node_slabs node[WIRE_MAX_NODES];
};

struct wire_donor_join_ok {
	uint32_t donor_id;
	uint64_t registry_epoch;
	uint32_t report_ms;  /* >= 1: send DONOR_REPORT at least this often */
	uint32_t flags;	     /* WIRE_DONOR_DRAIN, WIRE_DONOR_MEMBERSHIP */
	uint64_t membership; /* with WIRE_DONOR_MEMBERSHIP only; >= 1 */
};
#define WIRE_DONOR_DRAIN 0x1u /* JOIN_OK / REPORT_OK: lease nothing new */
#define WIRE_DONOR_KNOWN WIRE_DONOR_DRAIN
/* REPORT_OK only: kv[] lists every tenant of the registry, and
 * next_tenant_id follows it: a tenant id below it that is not listed has
 * been removed (ids are never reused). */
#define WIRE_DONOR_TENANTS 0x2u
/* REPORT_OK only: fence_ms follows. The registry (on etcd) is sure to be
 * the only one placing for fence_ms after it took the report: the donor
 * redeems its tickets until fence_ms after it sent the report, and
 * refuses them after (docs/cluster.md, "Fencing"). */
#define WIRE_DONOR_FENCE 0x4u
/* JOIN_OK and REPORT_OK, protocol 5 (sent only on links that negotiated
 * it): membership follows, last. The registry's durable membership
 * sequence: it names one list of the donors that are up, and grows at
 * every change of that list (docs/kv.md, "Donors that come and go"). */
#define WIRE_DONOR_MEMBERSHIP 0x8u

struct wire_tenant_usage {
	uint32_t tenant_id;
	uint32_t slabs;	   /* leased to this tenant's sessions */
	uint32_t sessions; /* live sessions of this tenant */
	uint32_t kv_slabs; /* of slabs, its KV store's: <= slabs */
	uint32_t flags;	   /* WIRE_TENANT_KV */
};
#define WIRE_TENANT_KV 0x1u /* the tenant has a KV store on this donor */
#define WIRE_TENANT_KNOWN WIRE_TENANT_KV

/* DONOR_REPORT_OK: the most KV slabs the donor may hold for a tenant
 * until the next REPORT_OK (cluster.md, "KV memory and quotas"). */
struct wire_kv_allowance {
	uint32_t tenant_id;
	uint32_t kv_slabs_max;
};

struct wire_donor_report {
	uint32_t donor_id;
	uint64_t epoch;
	uint32_t slabs_free;
	uint32_t slabs_leased;
	uint32_t slabs_reclaiming;
	uint32_t flags; /* WIRE_STATUS_* (DRAINING); unknown bits must be 0 */
	uint64_t bytes_read, bytes_written; /* clients' RMA, since boot */
	uint16_t ntenants;		    /* 0 .. WIRE_MAX_TENANTS */
	struct wire_tenant_usage tenant[WIRE_MAX_TENANTS];
	uint16_t nredeemed;		      /* 0 .. WIRE_MAX_REDEEMED */
	uint64_t redeemed[WIRE_MAX_REDEEMED]; /* grant ids since last ack */
	uint64_t membership; /* with WIRE_REPORT_HEARD only; >= 1 */
};
/* DONOR_REPORT, protocol 6 (sent only on links that negotiated it):
 * membership follows, last: the membership sequence this donor has
 * acted on (it refuses requests routed by an older list, and has
 * forgotten the keys that list no longer ranks it first or second for),
 * docs/kv.md, "Donors that come and go". */
#define WIRE_REPORT_HEARD 0x4u
#define WIRE_REPORT_KNOWN (WIRE_STATUS_KNOWN | WIRE_REPORT_HEARD)

struct wire_donor_report_ok {
	uint64_t registry_epoch;
	uint32_t flags; /* WIRE_DONOR_* */
	uint16_t nkv;	/* 0 .. WIRE_MAX_TENANTS */
	struct wire_kv_allowance kv[WIRE_MAX_TENANTS];
	uint32_t next_tenant_id; /* with WIRE_DONOR_TENANTS only */
	uint32_t fence_ms;	 /* with WIRE_DONOR_FENCE only */
	uint64_t membership;	 /* with WIRE_DONOR_MEMBERSHIP only; >= 1 */
};

/* ADMIN / ADMIN_OK carry one JSON object as text. The decoder does not
 * copy it: json points into the decoded frame's buffer (valid while that
 * buffer is) and is NOT NUL-terminated; the encoder reads json_len bytes
 * from json, which must not overlap the buffer encoded into. 1 ..
 * WIRE_JSON_MAX bytes, no NUL. So two decoded ADMINs compare with memcmp
 * only when decoded from the same buffer: compare json's bytes. */
struct wire_admin {
	const char *json;
	uint32_t json_len;
};

/*
 * KV tier (docs/kv.md). One batch layout serves every KV request and
 * reply; each message type carries only the fields it uses, in the order
 * of struct wire_kv_item (protocol.md lists them per type):
 *   KV_RESERVE   key, value_len          -> status, generation, locs
 *   KV_COMMIT    key, generation, checksum -> status
 *   KV_LOOKUP    key                     -> status, value_len,
 *                                           generation, checksum, locs
 *   KV_DONE      key, generation         -> status
 *   KV_EXISTS    key                     -> count = present prefix
 *   KV_DELETE    key                     -> status
 *   KV_PIN       key (flags: PIN/UNPIN)  -> status
 * A field a type does not carry must be zero for wire_encode (-EINVAL
 * otherwise) and decodes as zero, so decode(encode(m)) == m. status is 0
 * or a negative errno, -WIRE_ERR_MAX .. 0 (an i32 on the wire). In a
 * reply with locs (RESERVE_OK, LOOKUP_OK) an item with status 0 names
 * nchunks >= 1 locations loc[first_loc .. first_loc + nchunks), inside
 * nlocs; an item with another status names none (first_loc and nchunks
 * 0). A reply has as many items as its request, in the same order
 * (EXISTS_OK: none; its count is the present prefix, 0 .. WIRE_KV_BATCH).
 */
#define WIRE_KV_HEADER_LEN 64 /* block header, below */
struct wire_kv_item {
	uint8_t key[WIRE_KV_KEY_LEN];
	uint64_t value_len;
	uint64_t generation;
	uint64_t checksum;
	int32_t status;
	uint32_t first_loc, nchunks; /* replies with locs: loc[] range */
};

/* Where one chunk's block lives: RMA address (as with leases: base +
 * offset in the provider's addressing), key of the KV slab's
 * registration (given only to sessions of the slab's tenant), size of
 * the block (64-byte header + payload room, > WIRE_KV_HEADER_LEN),
 * endpoint index into HELLO_OK.ep (< WIRE_MAX_ENDPOINTS). */
struct wire_kv_loc {
	uint64_t raddr;
	uint64_t rkey;
	uint64_t block_bytes;
	uint16_t endpoint;
};

/*
 * The header of every KV block (docs/kv.md), 64 bytes, little-endian in
 * the block: clients write it over RMA with the payload and verify it
 * when they read, the donor's store (memd/kvstore) writes it when it
 * reloads a spilled value. Always handled through wire_kv_header_encode
 * and _decode, never by casting memory:
 *
 *   0 magic u32   4 tenant_id u32   8 key[32]   40 generation u64
 *  48 value_len u32 (the whole value)  52 chunk u16  54 nchunks u16
 *  56 checksum u64 (the client's XXH3-64 over the whole value)
 *
 * value_len, chunk and nchunks are narrower than u64/u32 so that the
 * checksum fits in 64 bytes (values are capped at 1 GiB).
 */
#define WIRE_KV_MAGIC 0x31764b54u /* "TKv1" as little-endian bytes */
struct wire_kv_header {
	uint32_t magic;
	uint32_t tenant_id;
	uint8_t key[WIRE_KV_KEY_LEN];
	uint64_t generation;
	uint32_t value_len;
	uint16_t chunk;
	uint16_t nchunks;
	uint64_t checksum;
};
void wire_kv_header_encode(const struct wire_kv_header *h,
			   uint8_t out[WIRE_KV_HEADER_LEN]);
void wire_kv_header_decode(const uint8_t in[WIRE_KV_HEADER_LEN],
			   struct wire_kv_header *h);
_Static_assert(sizeof(struct wire_kv_header) == WIRE_KV_HEADER_LEN,
	       "the KV block header is 64 bytes");

#define WIRE_KV_UNPIN 0x1u /* KV_PIN.flags: remove a pin instead */
/* KV_PIN.flags: delete the key instead, unless it is pinned (-EEXIST) */
#define WIRE_KV_DROP 0x2u
#define WIRE_KV_KNOWN (WIRE_KV_UNPIN | WIRE_KV_DROP)

/*
 * The _AT requests (protocol 5) are their plain namesakes with the
 * membership the client routed them by first (u64, >= 1: the sequence of
 * the donor list it hashed over, MEMBERS_OK); their replies have the
 * plain replies' layouts. A donor serves one only while its own
 * membership is that one (else ERROR ESTALE: docs/protocol.md).
 */
struct wire_kv {
	uint64_t membership; /* the _AT requests: >= 1; every other type: 0 */
	uint32_t flags;	     /* KV_PIN: WIRE_KV_*; every other type: 0 */
	uint16_t count;	     /* 1 .. WIRE_KV_BATCH (EXISTS_OK: prefix, 0 ..) */
	struct wire_kv_item item[WIRE_KV_BATCH];
	uint16_t nlocs; /* RESERVE_OK, LOOKUP_OK: 0 .. WIRE_KV_MAX_LOCS */
	struct wire_kv_loc loc[WIRE_KV_MAX_LOCS];
};

/* DONORS (a tenant at the registry): the donors that are up, for
 * choosing KV homes by rendezvous hashing over their names. Distinct ids
 * and distinct names; name and addr are non-empty. */
struct wire_donor_entry {
	uint32_t donor_id;
	uint64_t epoch;
	char name[WIRE_NAME_MAX];
	char addr[WIRE_HOSTPORT_MAX];
};
struct wire_donors_ok {
	/* MEMBERS_OK (protocol 5): the membership sequence of this list,
	 * >= 1, first on the wire; DONORS_OK: 0, not on the wire */
	uint64_t membership;
	uint16_t count; /* 0 .. WIRE_MAX_DONORS */
	struct wire_donor_entry donor[WIRE_MAX_DONORS];
};

/*
 * SHM: the client's host identity (its kernel's boot id); SHM_OK: where
 * memd's same-host socket is and the one-time nonce that binds a
 * connection to it to this session (docs/protocol.md, "Same-host
 * sessions").
 */
#define WIRE_BOOT_ID_LEN 16
#define WIRE_SHM_NAME_MAX 108 /* sun_path, incl. NUL */
struct wire_shm {
	uint8_t boot_id[WIRE_BOOT_ID_LEN];
};

struct wire_shm_ok {
	uint8_t nonce[WIRE_NONCE_LEN];
	/* abstract Unix socket name (without the leading NUL): 1 .. 107
	 * bytes of [A-Za-z0-9_.-] */
	char socket[WIRE_SHM_NAME_MAX];
};

/*
 * The same-host socket's messages (SOCK_SEQPACKET, one per packet, fixed
 * length, little-endian; not framed like the TCP protocol). A request
 * BINDs the connection to (session_id, nonce) once, then asks for the
 * memfd of a slab it holds (SLAB: slab, generation); a reply echoes op,
 * slab and generation, with err 0 (and, for SLAB, the descriptor as
 * SCM_RIGHTS) or a positive errno.
 */
enum wire_shm_op {
	WIRE_SHM_BIND = 1,
	WIRE_SHM_SLAB = 2,
	/* the file of the KV slab behind a KV location (endpoint, rkey)
	 * of the bound session's tenant; the reply adds the location
	 * base (file offset = raddr - base) */
	WIRE_SHM_KV = 3,
};
#define WIRE_SHM_REQ_LEN 56
#define WIRE_SHM_REP_LEN 20    /* BIND, SLAB */
#define WIRE_SHM_REP_KV_LEN 28 /* KV */
#define WIRE_SHM_REP_MAX 28
struct wire_shm_req {
	uint16_t op; /* enum wire_shm_op */
	uint64_t session_id;
	uint32_t slab, generation;     /* SLAB */
	uint8_t nonce[WIRE_NONCE_LEN]; /* BIND */
	uint64_t rkey;		       /* KV: the location's key */
	uint16_t endpoint;	       /* KV: the location's endpoint */
};
struct wire_shm_rep {
	uint16_t op;
	int32_t err; /* 0 or a positive errno, 1 .. WIRE_ERR_MAX */
	uint32_t slab, generation;
	uint64_t base; /* KV: raddr - base is the offset in the file */
};
/*
 * A kernel boot id as /proc/sys/kernel/random/boot_id gives it (32 hex
 * digits with dashes anywhere, then an optional newline) into 16 bytes.
 * Returns 0, or -EINVAL for anything else. Pure.
 */
int wire_boot_id_parse(const char *text, size_t len,
		       uint8_t out[WIRE_BOOT_ID_LEN]);
#define WIRE_BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
/*
 * Reads and parses the boot id in the file at path (WIRE_BOOT_ID_PATH:
 * this host's), for memd and libpool alike. 0, -errno of open, -EIO
 * (empty or unreadable), or -EINVAL (not a boot id). The one function
 * of the codec that touches a file.
 */
int wire_boot_id_read(const char *path, uint8_t out[WIRE_BOOT_ID_LEN]);

/* Encodes into out; returns WIRE_SHM_REQ_LEN, or -EINVAL (unknown op). */
ssize_t wire_shm_req_encode(const struct wire_shm_req *q,
			    uint8_t out[WIRE_SHM_REQ_LEN]);
/* Decodes one packet; 0, or -EBADMSG (wrong length, magic or op). */
int wire_shm_req_decode(const void *buf, size_t len, struct wire_shm_req *q);
/* Encodes into out; returns WIRE_SHM_REP_LEN (BIND, SLAB) or
 * WIRE_SHM_REP_KV_LEN (KV), or -EINVAL. */
ssize_t wire_shm_rep_encode(const struct wire_shm_rep *p,
			    uint8_t out[WIRE_SHM_REP_MAX]);
int wire_shm_rep_decode(const void *buf, size_t len, struct wire_shm_rep *p);

struct wire_error {
	int32_t err;		/* positive Linux errno, 1 .. WIRE_ERR_MAX */
	char msg[WIRE_MSG_MAX]; /* for logs; never parsed, never secret */
};

/*
 * KV_MODEL (protocol 3): the client's hint of its model's cost, for the
 * capacity reports' "recompute seconds saved" (docs/capacity.md). The
 * codec bounds only flags (reserved, 0); memd refuses values outside
 * 1 .. WIRE_KV_TPS_MAX and 1 .. WIRE_KV_BPT_MAX with ERROR EINVAL (the
 * bounds of memd.conf's kv_prefill_tokens_per_s and kv_bytes_per_token).
 */
#define WIRE_KV_TPS_MAX 1000000000u
#define WIRE_KV_BPT_MAX (1ull << 30)
struct wire_kv_model {
	uint32_t flags; /* reserved, must be 0 */
	uint32_t prefill_tokens_per_s;
	uint64_t bytes_per_token;
};

/*
 * FABRIC and FABRIC_OK (protocol 3): the fabric settings a client and
 * memd must share for the client's RMA to connect. rxm_buffer_size is
 * the sender's effective FI_OFI_RXM_BUFFER_SIZE (fab_rxm_buffer_size());
 * in FABRIC_OK 0 when memd's provider is not rxm-based, in FABRIC 0 when
 * the client does not know its own. tcp;ofi_rxm refuses a connection
 * between ends that differ (docs/protocol.md, "FABRIC"). The codec
 * bounds only flags (reserved, 0).
 */
struct wire_fabric {
	uint32_t flags; /* reserved, must be 0 */
	uint32_t rxm_buffer_size;
};

struct wire_msg {
	uint8_t type;	/* enum wire_type */
	uint16_t flags; /* header flags; 0 in version 1 */
	uint32_t seq;	/* a reply echoes its request's seq */
	union {
		struct wire_hello hello;
		struct wire_hello_ok hello_ok;
		struct wire_lease_req lease;
		struct wire_lease_ok lease_ok;
		struct wire_release release;
		struct wire_release_ok release_ok;
		struct wire_heartbeat_ok heartbeat_ok;
		struct wire_status_ok status_ok;
		struct wire_error error;
		/* protocol 2 */
		struct wire_auth auth;
		struct wire_auth_challenge auth_challenge;
		struct wire_auth_proof auth_proof;
		struct wire_auth_ok auth_ok;
		struct wire_place place;
		struct wire_place_ok place_ok;
		struct wire_lease_grant lease_grant;
		struct wire_heartbeat2 heartbeat2;
		struct wire_donor_join donor_join;
		struct wire_donor_join_ok donor_join_ok;
		struct wire_donor_report donor_report;
		struct wire_donor_report_ok donor_report_ok;
		struct wire_admin admin; /* ADMIN and ADMIN_OK */
		struct wire_kv kv;	 /* every KV_* request and reply */
		struct wire_donors_ok donors_ok; /* DONORS_OK, MEMBERS_OK */
		struct wire_shm shm;
		struct wire_shm_ok shm_ok;
		/* protocol 3 */
		struct wire_kv_model kv_model;
		struct wire_fabric fabric; /* FABRIC and FABRIC_OK */
	} u; /* HEARTBEAT, STATUS, BYE, BYE_OK, DONORS, KV_MODEL_OK, KV_CLEAR,
	      * KV_CLEAR_OK, MEMBERS carry no payload */
};

/*
 * Length of the frame starting at buf from its header alone. Returns the
 * total length (header + payload), or
 *   -EAGAIN          fewer than WIRE_HDR_LEN bytes
 *   -EPROTO          bad magic
 *   -EPROTONOSUPPORT version other than WIRE_VERSION
 *   -EMSGSIZE        payload longer than WIRE_MAX_PAYLOAD
 */
ssize_t wire_frame_len(const void *buf, size_t len);

/*
 * Decodes one frame from buf into *m. Returns the bytes consumed, or the
 * errors of wire_frame_len (-EAGAIN: need more bytes, also when the header
 * is complete but the payload is not), or -EBADMSG for non-zero header
 * flags, an unknown type, a payload on a type that has none, a field out
 * of bounds, a string longer than its array allows or containing a NUL, or
 * a payload not consumed exactly.
 *
 * *m is zeroed before it is filled, so decoding is deterministic (padding
 * and unused array tails included) and messages compare with memcmp
 * (ADMIN / ADMIN_OK: json points into buf, see struct wire_admin). On
 * -EMSGSIZE and -EBADMSG, *m holds the header's type, flags and seq with a
 * zero payload, so the caller can answer ERROR to that seq; on the other
 * errors *m is unspecified.
 */
ssize_t wire_decode(const void *buf, size_t len, struct wire_msg *m);

/*
 * Encodes *m into buf. Returns the frame length, or -EINVAL when m breaks
 * a bound (it would not decode; checked first, whatever cap is), or
 * -ENOSPC when cap is too small. A string must be NUL-terminated inside
 * its array; bytes after the NUL and the union of payload-less types are
 * ignored. buf is written only on success.
 */
ssize_t wire_encode(const struct wire_msg *m, void *buf, size_t cap);

/*
 * The bytes a ticket's MAC covers: every field but mac, in wire order and
 * encoding (the first WIRE_TICKET_BODY_LEN bytes of its 80-byte wire form).
 */
#define WIRE_TICKET_BODY_LEN 48
void wire_ticket_body(const struct wire_ticket *t,
		      uint8_t out[WIRE_TICKET_BODY_LEN]);

/* "HELLO", "LEASE_OK", ... or "UNKNOWN". */
const char *wire_type_name(uint8_t type);

/*
 * Protocol 5's _AT forms (struct wire_kv): wire_kv_at gives the _AT type
 * of a plain KV request or reply that has one (RESERVE, COMMIT, LOOKUP,
 * EXISTS, DELETE, PIN and their replies), else 0; wire_kv_plain gives the
 * plain type of an _AT type, and any other type unchanged. Pure.
 */
uint8_t wire_kv_at(uint8_t type);
uint8_t wire_kv_plain(uint8_t type);

/*
 * Whether s is a pool name: tenant and donor names, as the registry
 * accepts them (docs/cluster.md): 1 to WIRE_NAME_MAX - 1 characters, each
 * a letter, a digit, '_', '.' or '-'. Pure; s must be NUL-terminated.
 */
bool wire_name_is_valid(const char *s);

/*
 * Convenience: fills *m (all of it) as an ERROR reply to seq. err may be a
 * negative errno as our functions return it, or positive; a value whose
 * magnitude is 0 or above WIRE_ERR_MAX becomes EIO. text may be NULL
 * (empty) and is cut to WIRE_MSG_MAX - 1 bytes. The result always encodes.
 */
void wire_make_error(struct wire_msg *m, uint32_t seq, int err,
		     const char *text);

#endif
