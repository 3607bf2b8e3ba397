// SPDX-License-Identifier: MIT
/*
 * memd/server_cluster.c - memd in a pool (docs/cluster.md): AUTH and
 * AUTH_PROOF, the registry's PLACE, a donor's LEASE_GRANT (ticket
 * redemption), HEARTBEAT, DONOR links, the ADMIN and DONORS requests,
 * removed tenants; the registry's and redemption's metrics writers; and
 * joining the pool at start (cluster_open, donor_start).
 */
#include "memd/server_int.h"

#include "fabric/rpc.h"

/* How long a new etcd leader tries to connect to the previous one: a
 * refusal or no answer in this time is "gone" (its donor part is not
 * waited for); an answer makes the warm-up wait for that donor part. */
#define OLD_LEADER_PROBE_MS 300

/* ------------------------------------------------------------------ */
/* protocol 2: authentication, placement, donors, admin                */

static uint64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool principal_is_tenant_name(const char *p)
{
	size_t n = strlen(p);

	if (n < 1 || n > WIRE_NAME_MAX - 1)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(p[i] >= 'a' && p[i] <= 'z') &&
		    !(p[i] >= 'A' && p[i] <= 'Z') &&
		    !(p[i] >= '0' && p[i] <= '9') && p[i] != '_' &&
		    p[i] != '.' && p[i] != '-')
			return false;
	return true;
}

/*
 * AUTH: pick the key the proof must be made with, and challenge. An
 * unknown principal or a bad pass still gets a challenge (with a random
 * key), so the answer never tells which tenant names exist.
 */
/*
 * Has the pool removed tenant_id? The registry knows at once; a donor
 * from the registry's last report (memd_donor_tenant_removed), so a
 * removed tenant's donor passes stop working within a report interval,
 * not when they expire.
 */
static bool tenant_is_removed(struct memd_server *s, uint32_t tenant_id)
{
	/* An etcd standby knows no tenants: its donor part asks the leader
	 * like any donor's. */
	if (s->reg && memd_registry_is_serving(s->reg, srv_now_ms(), NULL, 0)) {
		struct auth_pass p;
		bool gone = memd_registry_make_pass(s->reg, tenant_id, 0, &p) ==
			    -ENOENT;

		sodium_memzero(&p, sizeof(p));
		if (gone)
			return true;
	}
	return s->donor && memd_donor_tenant_removed(s->donor, tenant_id, NULL);
}

void srv_do_auth(struct memd_server *s, struct conn *c,
		 const struct wire_msg *req, struct wire_msg *rep)
{
	const struct wire_auth *a = &req->u.auth;

	if (s->mode == MODE_STANDALONE) {
		srv_send_error(
			s, c, req->seq, EOPNOTSUPP,
			"memd is standalone: it has no tenants and needs "
			"no authentication");
		return;
	}
	if (c->auth != AUTH_NONE) {
		srv_send_error(s, c, req->seq, EPROTO, "AUTH sent twice");
		c->closing = true;
		return;
	}
	if (s->reg && !a->pass_len && strcmp(a->principal, "@admin")) {
		char why[WIRE_MSG_MAX];

		/* An etcd standby (or a leader unsure of its lease) sends
		 * tenants and donors to another registry; @admin gets in
		 * for this memd's own "leases", and its registry requests
		 * are refused EAGAIN the same way (memd_registry_admin). */
		if (!memd_registry_is_serving(s->reg, srv_now_ms(), why,
					      sizeof(why))) {
			srv_send_error(s, c, req->seq, EAGAIN, "%s", why);
			c->closing = true;
			return;
		}
	}
	snprintf(c->principal, sizeof(c->principal), "%s", a->principal);
	memcpy(c->cnonce, a->cnonce, sizeof(c->cnonce));
	auth_random(c->snonce, sizeof(c->snonce));
	auth_random(c->key, sizeof(c->key));
	c->auth_fail = NULL;
	c->tenant_id = 0;
	c->via_pass = a->pass_len > 0;
	if (a->pass_len) {
		struct auth_pass pass;

		if (auth_pass_open(s->keys.pass, a->pass, a->pass_len, &pass))
			c->auth_fail = "donor pass not sealed by this pool";
		else if (strcmp(pass.tenant, a->principal))
			c->auth_fail = "donor pass is another tenant's";
		else if (unix_ms() > pass.expires_ms + TICKET_SKEW_MS)
			c->auth_fail = "donor pass expired";
		else if (tenant_is_removed(s, pass.tenant_id))
			c->auth_fail = "donor pass of a removed tenant";
		else {
			memcpy(c->key, pass.key, sizeof(c->key));
			memcpy(c->ident, pass.ident, sizeof(c->ident));
			c->role = WIRE_ROLE_TENANT;
			c->tenant_id = pass.tenant_id;
		}
		sodium_memzero(&pass, sizeof(pass));
	} else if (!strcmp(a->principal, "@admin")) {
		memcpy(c->key, s->keys.admin, sizeof(c->key));
		c->role = WIRE_ROLE_ADMIN;
	} else if (!strcmp(a->principal, "@donor")) {
		memcpy(c->key, s->keys.donor, sizeof(c->key));
		c->role = WIRE_ROLE_DONOR;
	} else if (!principal_is_tenant_name(a->principal)) {
		c->auth_fail = "not a valid principal name";
	} else if (!s->reg) {
		c->auth_fail = "a tenant key authenticates at the registry; "
			       "at a donor it needs a donor pass";
	} else if (memd_registry_tenant_key(s->reg, a->principal, &c->tenant_id,
					    c->key)) {
		c->auth_fail = "no such tenant";
	} else {
		auth_tenant_ident(c->key, c->ident);
		c->role = WIRE_ROLE_TENANT;
	}
	c->auth = AUTH_CHALLENGED;
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_AUTH_CHALLENGE;
	rep->seq = req->seq;
	memcpy(rep->u.auth_challenge.snonce, c->snonce, sizeof(c->snonce));
	if (srv_conn_send(c, rep))
		c->closing = true;
}

/*
 * Whose KV spill files are (docs/kv.md, "Spill files"): BLAKE2b keyed with
 * the pool's spill key (derived from the cluster secret; NULL for a
 * standalone memd) over the tenant's id, name and identity (a one-way
 * function of its key, auth_tenant_ident). A new registry that gives the
 * id to another tenant, or another pool, binds differently.
 */
void srv_spill_binding(const uint8_t *pool_key, uint32_t tenant_id,
		       const char *name, const uint8_t ident[AUTH_IDENT_LEN],
		       uint8_t out[MEMD_KV_BIND_BYTES])
{
	static const char label[] = "tidepool spill binding v1";
	crypto_generichash_state st;
	uint8_t id[4] = { (uint8_t)tenant_id, (uint8_t)(tenant_id >> 8),
			  (uint8_t)(tenant_id >> 16),
			  (uint8_t)(tenant_id >> 24) };

	crypto_generichash_init(&st, pool_key, pool_key ? AUTH_KEY_LEN : 0,
				MEMD_KV_BIND_BYTES);
	crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label));
	crypto_generichash_update(&st, id, sizeof(id));
	crypto_generichash_update(&st, (const uint8_t *)name, strlen(name) + 1);
	crypto_generichash_update(&st, ident, AUTH_IDENT_LEN);
	crypto_generichash_final(&st, out, MEMD_KV_BIND_BYTES);
}

static void auth_refuse(struct memd_server *s, struct conn *c, uint32_t seq,
			const char *why)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	CTR_ADD(s, auth_failures, 1);
	memd_log_limited(&s->ll_auth, LOG_WARNING,
			 "auth: refused peer=%s principal=%s why=%s", c->peer,
			 memd_log_quote(c->principal, logq, sizeof(logq)), why);
	srv_send_error(s, c, seq, EACCES, "authentication failed");
	c->closing = true;
	c->auth = AUTH_NONE;
	c->role = 0;
}

void srv_do_auth_proof(struct memd_server *s, struct conn *c,
		       const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	struct wire_auth_ok *ok = &rep->u.auth_ok;
	uint64_t sid = memd_session_id(c->session);
	uint8_t mac[WIRE_MAC_LEN];

	if (c->auth != AUTH_CHALLENGED) {
		srv_send_error(s, c, req->seq, EPROTO,
			       "AUTH_PROOF without a pending AUTH");
		c->closing = true;
		return;
	}
	auth_client_proof(c->key, c->principal, sid, s->epoch, c->cnonce,
			  c->snonce, mac);
	if (!auth_mac_equal(mac, req->u.auth_proof.mac)) {
		auth_refuse(s, c, req->seq,
			    c->auth_fail ? c->auth_fail : "wrong key");
		return;
	}
	if (c->auth_fail) { /* cannot happen: the key was random */
		auth_refuse(s, c, req->seq, c->auth_fail);
		return;
	}
	if (c->role == WIRE_ROLE_TENANT) {
		/* This session is not the tenant's yet: it is not counted. */
		uint32_t n = memd_lease_tenant_sessions(s->lt, c->tenant_id) -
			     srv_kv_sessions_of(s, c->tenant_id);

		if (n >= s->cfg.max_sessions_per_tenant) {
			CTR_ADD(s, sessions_refused_tenant, 1);
			memd_log_limited(&s->ll_refuse, LOG_WARNING,
					 "auth: refused peer=%s tenant=%s "
					 "why=sessions held=%u max=%u",
					 c->peer,
					 memd_log_quote(c->principal, logq,
							sizeof(logq)),
					 n, s->cfg.max_sessions_per_tenant);
			srv_send_error(
				s, c, req->seq, EUSERS,
				"tenant %s holds %u sessions on this memd "
				"(max_sessions_per_tenant = %u)",
				c->principal, n,
				s->cfg.max_sessions_per_tenant);
			c->closing = true;
			c->auth = AUTH_NONE;
			c->role = 0;
			return;
		}
	}
	{
		bool cluster = c->role == WIRE_ROLE_ADMIN ||
			       c->role == WIRE_ROLE_DONOR;
		char why[WIRE_MSG_MAX];

		if (!srv_conn_may_establish(s, c, cluster, why, sizeof(why))) {
			srv_send_error(s, c, req->seq, EBUSY, "%s", why);
			c->closing = true;
			c->auth = AUTH_NONE;
			c->role = 0;
			return;
		}
		srv_conn_establish(s, c, cluster);
	}
	c->auth = AUTH_DONE;
	auth_session_key(c->key, c->principal, c->cnonce, c->snonce, c->skey);
	memset(rep, 0, sizeof(*rep));
	rep->type = WIRE_AUTH_OK;
	rep->seq = req->seq;
	auth_server_proof(c->key, c->principal, sid, s->epoch, c->cnonce,
			  c->snonce, ok->mac);
	ok->role = c->role;
	ok->flags = s->reg ? WIRE_AUTH_REGISTRY : 0;
	ok->tenant_id = c->tenant_id;
	if (c->role == WIRE_ROLE_TENANT) {
		memd_session_set_tenant(s->lt, c->session, c->tenant_id);
		srv_spill_binding(s->spill_pool, c->tenant_id, c->principal,
				  c->ident, c->spill_bind);
		if (s->reg && !c->via_pass) {
			struct auth_pass pass;
			int n;

			if (memd_registry_make_pass(s->reg, c->tenant_id,
						    unix_ms(), &pass)) {
				auth_refuse(s, c, req->seq,
					    "tenant removed meanwhile");
				return;
			}
			n = auth_pass_seal(s->keys.pass, &pass, ok->pass,
					   sizeof(ok->pass));
			if (n > 0) {
				ok->pass_len = (uint16_t)n;
				n = auth_seal(c->skey, pass.key,
					      sizeof(pass.key), ok->box,
					      sizeof(ok->box));
			}
			if (n <= 0) {
				auth_refuse(s, c, req->seq,
					    "cannot seal a donor pass");
				return;
			}
			ok->box_len = (uint16_t)n;
			ok->pass_ttl_ms = s->cfg.pass_ttl_ms;
			sodium_memzero(&pass, sizeof(pass));
		}
	}
	memd_log(LOG_INFO,
		 "auth: ok peer=%s session=%" PRIx64 " principal=%s role=%u "
		 "tenant=%u",
		 c->peer, sid, memd_log_quote(c->principal, logq, sizeof(logq)),
		 c->role, c->tenant_id);
	if (srv_conn_send(c, rep))
		c->closing = true;
}

void srv_do_place(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	char err[WIRE_MSG_MAX] = "";
	int r;

	if (!s->reg) {
		srv_send_error(s, c, req->seq, EOPNOTSUPP,
			       "place: this memd is not the registry");
		return;
	}
	if (c->role != WIRE_ROLE_TENANT) {
		srv_send_error(s, c, req->seq, EACCES,
			       "place: only a tenant session places memory");
		return;
	}
	memset(rep, 0, sizeof(*rep));
	r = memd_registry_place(s->reg, c->tenant_id, &req->u.place,
				srv_now_ms(), unix_ms(), &rep->u.place_ok, err,
				sizeof(err));
	if (r) {
		CTR_ADD(s, places_refused, 1);
		memd_log(LOG_INFO,
			 "place: refused tenant=%s n=%u flags=%#x err=%s: %s",
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 req->u.place.nslabs, req->u.place.flags, strerror(-r),
			 err);
		srv_send_error(s, c, req->seq, -r, "%s", err);
		return;
	}
	CTR_ADD(s, places, 1);
	srv_reply(c, rep, WIRE_PLACE_OK, req->seq);
}

/* Copies the replay record's stats where /metrics reads them. memd-ctl. */
static void redeem_publish(struct memd_server *s)
{
	struct memd_redeem_stats st;

	memd_redeem_get_stats(s->redeemed, &st);
	__atomic_store_n(&s->redeem_st.redeemed, st.redeemed, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.replayed, st.replayed, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.too_old, st.too_old, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.busy, st.busy, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.burnt, st.burnt, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.retired, st.retired, __ATOMIC_RELAXED);
	__atomic_store_n(&s->redeem_st.epochs, st.epochs, __ATOMIC_RELAXED);
}

/*
 * A ticket of this donor incarnation that is refused for good: its id is
 * burnt in the replay record (never redeemed here later) and the grant
 * goes to its registry epoch in a report, which drops the reservation
 * at once (docs/cluster.md, "Reservation accounting") instead of when
 * the ticket expires; without that, tickets the donors refuse after a
 * registry restart held a tenant's quota for 90 s. burn false: the id
 * is burnt already (redeemed, then the grant failed). memd-ctl.
 */
static void ticket_refused_for_good(struct memd_server *s,
				    const struct wire_ticket *t,
				    uint64_t now_unix, bool burn)
{
	uint64_t reg_epoch = 0;
	uint32_t donor_id = 0;
	bool drain, current = memd_donor_state(s->donor, &donor_id, &reg_epoch,
					       &drain) &&
			      reg_epoch == t->registry_epoch;
	int r = 0;

	if (!memd_donor_refused_room(s->donor))
		return; /* its reservation expires */
	if (burn) {
		r = memd_redeem_burn(s->redeemed, t->registry_epoch,
				     t->grant_id, t->expires_ms, now_unix,
				     current);
		redeem_publish(s);
		if (r && r != -ESTALE && r != -ETIME)
			return; /* redeemed before, or not recorded */
	}
	memd_donor_refused(s->donor, t->registry_epoch, t->grant_id,
			   t->expires_ms);
}

void srv_do_lease_grant(struct memd_server *s, struct conn *c,
			const struct wire_msg *req, struct wire_msg *rep)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	const struct wire_ticket *t = &req->u.lease_grant.ticket;
	uint64_t reg_epoch = 0, now_unix = unix_ms(), oldest = 0, late = 0;
	uint32_t donor_id = 0;
	bool drain = false, joined;
	int r;

	if (s->mode == MODE_STANDALONE) {
		srv_send_error(s, c, req->seq, EOPNOTSUPP,
			       "lease_grant: memd is standalone; use LEASE");
		return;
	}
	if (c->role != WIRE_ROLE_TENANT) {
		srv_send_error(s, c, req->seq, EACCES,
			       "lease_grant: only a tenant session leases");
		return;
	}
	if (!auth_ticket_verify(s->keys.ticket, t)) {
		CTR_ADD(s, tickets_refused, 1);
		memd_log(LOG_WARNING,
			 "ticket: bad MAC peer=%s tenant=%s grant=%" PRIu64,
			 c->peer,
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 t->grant_id);
		srv_send_error(s, c, req->seq, EACCES,
			       "ticket: not signed by this pool's registry");
		return;
	}
	if (t->tenant_id != c->tenant_id) {
		CTR_ADD(s, tickets_refused, 1);
		memd_log(LOG_WARNING,
			 "ticket: tenant %u's ticket from tenant %u peer=%s",
			 t->tenant_id, c->tenant_id, c->peer);
		srv_send_error(s, c, req->seq, EACCES,
			       "ticket: issued to another tenant");
		return;
	}
	joined = memd_donor_state(s->donor, &donor_id, &reg_epoch, &drain);
	if (!joined || t->donor_id != donor_id || t->donor_epoch != s->epoch ||
	    t->registry_epoch != reg_epoch) {
		CTR_ADD(s, tickets_refused, 1);
		/* Ours but of another registry epoch: refused for good,
		 * reported if we join that epoch. Another donor's (or
		 * incarnation's) is not ours to report. */
		if (joined && t->donor_id == donor_id &&
		    t->donor_epoch == s->epoch)
			ticket_refused_for_good(s, t, now_unix, true);
		memd_log(LOG_INFO,
			 "ticket: grant %" PRIu64 " of registry %016" PRIx64
			 " for donor %u refused: this is donor %u of registry "
			 "%016" PRIx64 "%s peer=%s",
			 t->grant_id, t->registry_epoch, t->donor_id, donor_id,
			 reg_epoch, joined ? "" : " (not joined)", c->peer);
		srv_send_error(s, c, req->seq, ESTALE,
			       "ticket: for donor %u epoch %016" PRIx64
			       " of registry %016" PRIx64 "; this is donor %u "
			       "epoch %016" PRIx64 " of registry %016" PRIx64
			       ": place again",
			       t->donor_id, t->donor_epoch, t->registry_epoch,
			       donor_id, s->epoch, reg_epoch);
		return;
	}
	/* Fencing (docs/cluster.md, "Fencing"): redeem a ticket of an
	 * etcd registry only while that registry is known to lead, i.e.
	 * within the fence of its last answered report. A leader paused
	 * past its lease (or cut off) still has tickets in clients' hands
	 * and LEASE_GRANTs queued in its own socket; another registry may
	 * lead and place the same quota by now. Checked here, on the
	 * request, so that nothing queued while this process did not run
	 * is served on what it knew before. */
	if (!memd_donor_fence(s->donor, reg_epoch, srv_now_ms(), &late)) {
		CTR_ADD(s, tickets_refused, 1);
		memd_log(LOG_WARNING,
			 "ticket: registry %016" PRIx64 " has not confirmed "
			 "it leads for %" PRIu64 " ms past its fence: "
			 "refusing grant %" PRIu64 " peer=%s",
			 reg_epoch, late, t->grant_id, c->peer);
		ticket_refused_for_good(s, t, now_unix, true);
		srv_send_error(s, c, req->seq, ESTALE,
			       "ticket: registry %016" PRIx64 " is not known "
			       "to lead (no report answered within its etcd "
			       "lease's fence): place again",
			       reg_epoch);
		return;
	}
	if (now_unix > t->expires_ms + TICKET_SKEW_MS) {
		CTR_ADD(s, tickets_refused, 1);
		ticket_refused_for_good(s, t, now_unix, false);
		srv_send_error(s, c, req->seq, ESTALE,
			       "ticket: expired %" PRIu64
			       " ms ago: place again",
			       now_unix - t->expires_ms);
		return;
	}
	if (drain) {
		CTR_ADD(s, leases_refused, 1);
		ticket_refused_for_good(s, t, now_unix, true);
		srv_send_error(s, c, req->seq, EBUSY,
			       "lease_grant: this donor is draining");
		return;
	}
	r = memd_redeem_once(s->redeemed, t->registry_epoch, t->grant_id,
			     t->expires_ms, now_unix, &oldest);
	redeem_publish(s);
	if (r) {
		CTR_ADD(s, tickets_refused, 1);
		if (r == -EALREADY)
			srv_send_error(s, c, req->seq, EACCES,
				       "ticket: already redeemed");
		else if (r == -ESTALE && !oldest)
			srv_send_error(s, c, req->seq, ESTALE,
				       "ticket: this donor retired registry "
				       "%016" PRIx64 "'s replay record for "
				       "newer incarnations: place again",
				       t->registry_epoch);
		else if (r == -ESTALE)
			srv_send_error(s, c, req->seq, ESTALE,
				       "ticket: grant %" PRIu64
				       " is too old to check for replay (this "
				       "donor checks grants from %" PRIu64
				       "): place again",
				       t->grant_id, oldest);
		else if (r == -ETIME)
			srv_send_error(s, c, req->seq, ESTALE,
				       "ticket: expired: place again");
		else if (r == -EBUSY)
			srv_send_error(
				s, c, req->seq, EBUSY,
				"ticket: this donor still holds unexpired "
				"tickets of %u other registry incarnations "
				"and 64 retired ones; retry within %u s",
				MEMD_REDEEM_EPOCHS,
				(TICKET_TTL_MS + TICKET_SKEW_MS) / 1000);
		else
			srv_send_error(s, c, req->seq, -r, "ticket: %s",
				       strerror(-r));
		return;
	}
	r = srv_grant_request(s, c, req->seq, t->nslabs, t->node,
			      WIRE_LEASE_GRANT_OK, rep);
	if (r) {
		/* the ticket is spent: its registry drops the reservation */
		ticket_refused_for_good(s, t, now_unix, false);
		return;
	}
	if (memd_donor_redeemed(s->donor, t->grant_id))
		memd_log(LOG_WARNING,
			 "donor: redeemed-grant queue full; the registry "
			 "counts grant %" PRIu64 " until it expires",
			 t->grant_id);
}

void srv_do_heartbeat(struct memd_server *s, struct conn *c,
		      const struct wire_msg *req, struct wire_msg *rep)
{
	int r = memd_session_renew(s->lt, c->session, srv_now_ms());

	if (r < 0) {
		srv_send_error(s, c, req->seq, -r, "session expired");
		c->closing = true;
		return;
	}
	if (req->type == WIRE_HEARTBEAT2) {
		const struct wire_heartbeat2 *h = &req->u.heartbeat2;

		/* Totals since the client's session began: add the growth. */
		if (h->bytes_read >= c->hb_read)
			__atomic_add_fetch(&s->rma_read,
					   h->bytes_read - c->hb_read,
					   __ATOMIC_RELAXED);
		if (h->bytes_written >= c->hb_written)
			__atomic_add_fetch(&s->rma_written,
					   h->bytes_written - c->hb_written,
					   __ATOMIC_RELAXED);
		c->hb_read = h->bytes_read;
		c->hb_written = h->bytes_written;
	}
	memset(rep, 0, sizeof(*rep));
	rep->type = req->type == WIRE_HEARTBEAT2 ? WIRE_HEARTBEAT2_OK
						 : WIRE_HEARTBEAT_OK;
	rep->seq = req->seq;
	rep->u.heartbeat_ok.ttl_ms = s->cfg.lease_ttl_ms;
	rep->u.heartbeat_ok.nleases = (uint32_t)r;
	rep->u.heartbeat_ok.epoch = s->epoch;
	if (srv_conn_send(c, rep))
		c->closing = true;
}

void srv_do_donor(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	char err[WIRE_MSG_MAX] = "";
	int r;

	if (!s->reg) {
		srv_send_error(s, c, req->seq, EOPNOTSUPP,
			       "%s: this memd is not the registry",
			       wire_type_name(req->type));
		return;
	}
	if (c->role != WIRE_ROLE_DONOR) {
		srv_send_error(s, c, req->seq, EACCES,
			       "%s: only a donor (principal @donor) joins",
			       wire_type_name(req->type));
		return;
	}
	memset(rep, 0, sizeof(*rep));
	rep->seq = req->seq;
	if (req->type == WIRE_DONOR_JOIN) {
		r = memd_registry_donor_join(
			s->reg, &req->u.donor_join, srv_now_ms(),
			&rep->u.donor_join_ok, err, sizeof(err));
		if (!r) {
			/* the registry logs the join */
			c->donor_id = rep->u.donor_join_ok.donor_id;
			c->donor_epoch = req->u.donor_join.epoch;
			if (c->proto >= 6)
				memd_registry_donor_hears(s->reg, c->donor_id,
							  c->donor_epoch);
		}
		rep->type = WIRE_DONOR_JOIN_OK;
	} else {
		r = memd_registry_donor_report(
			s->reg, &req->u.donor_report, srv_now_ms(),
			&rep->u.donor_report_ok, err, sizeof(err));
		rep->type = WIRE_DONOR_REPORT_OK;
	}
	if (r) {
		srv_send_error(s, c, req->seq, -r, "%s", err);
		return;
	}
	/* the membership is protocol 5's (one union member each) */
	if (c->proto < 5 && rep->type == WIRE_DONOR_JOIN_OK) {
		rep->u.donor_join_ok.flags &= ~WIRE_DONOR_MEMBERSHIP;
		rep->u.donor_join_ok.membership = 0;
	} else if (c->proto < 5) {
		rep->u.donor_report_ok.flags &= ~WIRE_DONOR_MEMBERSHIP;
		rep->u.donor_report_ok.membership = 0;
	}
	if (srv_conn_send(c, rep))
		c->closing = true;
}

/* ADMIN "leases": this memd's own leases, as JSON. */
struct leases_json {
	struct memd_server *s;
	char *out;
	size_t cap, len;
	uint64_t now;
	bool first, full;
};

static void leases_json_one(void *arg, const struct memd_lease_info *l)
{
	struct leases_json *j = arg;
	int n;

	if (j->full)
		return;
	n = snprintf(j->out + j->len, j->cap - j->len,
		     "%s{\"slab\":%u,\"generation\":%u,\"node\":%d,"
		     "\"tenant_id\":%u,\"session\":\"%016" PRIx64 "\","
		     "\"expires_in_ms\":%" PRId64 ",\"path\":\"%s\"}",
		     j->first ? "" : ",", l->slab, l->generation,
		     srv_slab_aep(j->s, l->slab)->node, l->tenant_id,
		     l->session_id, (int64_t)(l->expires_ms - j->now),
		     srv_shm_is_given(j->s, l->slab) ? "shm" : "fabric");
	if (n < 0 || (size_t)n >= j->cap - j->len - 64) {
		j->full = true;
		return;
	}
	j->len += (size_t)n;
	j->first = false;
}

static int admin_leases(struct memd_server *s, char *out, size_t cap)
{
	struct leases_json j = { .s = s,
				 .out = out,
				 .cap = cap,
				 .now = srv_now_ms(),
				 .first = true };
	int n = snprintf(out, cap,
			 "{\"epoch\":\"%016" PRIx64 "\",\"slab_bytes\":%" PRIu64
			 ",\"listen\":\"%s\",\"leases\":[",
			 s->epoch, s->cfg.slab_bytes, s->bound);

	j.len = (size_t)n;
	memd_lease_foreach(s->lt, leases_json_one, &j);
	n = snprintf(out + j.len, cap - j.len, "],\"truncated\":%s}",
		     j.full ? "true" : "false");
	return (int)(j.len + (size_t)n);
}

int srv_admin_kv_report(struct memd_server *s, const json_t *req, char *out,
			size_t cap, char *err, size_t errlen);

/*
 * The request's JSON is parsed once, here, with the registry's rules
 * (duplicate keys refused); the registry reads the same object. "leases"
 * is every memd's own; the rest is the registry's, and so is saying why
 * malformed JSON is malformed (elsewhere: the not-a-registry error).
 */
void srv_do_admin(struct memd_server *s, struct conn *c,
		  const struct wire_msg *req, struct wire_msg *rep)
{
	static char out[WIRE_JSON_MAX + 1]; /* memd-ctl only */
	const struct wire_admin *a = &req->u.admin;
	char err[WIRE_MSG_MAX] = "";
	json_error_t je;
	const char *cmd;
	json_t *o;
	int n;

	if (s->mode != MODE_STANDALONE && c->role != WIRE_ROLE_ADMIN) {
		srv_send_error(s, c, req->seq, EACCES,
			       "admin: needs the principal @admin");
		return;
	}
	o = json_loadb(a->json, a->json_len, JSON_REJECT_DUPLICATES, &je);
	cmd = json_string_value(json_object_get(o, "cmd"));
	if (cmd && !strcmp(cmd, "leases")) {
		n = admin_leases(s, out, sizeof(out));
	} else if (cmd && !strcmp(cmd, "kv_report")) {
		n = srv_admin_kv_report(s, o, out, sizeof(out), err,
					sizeof(err));
	} else if (!s->reg) {
		srv_send_error(s, c, req->seq, EOPNOTSUPP,
			       "admin: this memd is not the registry (only "
			       "\"leases\" and \"kv_report\" are served here)");
		goto out;
	} else if (!o) {
		snprintf(err, sizeof(err), "malformed JSON: %s (at %d)",
			 je.text, je.position);
		n = -EINVAL;
	} else {
		n = memd_registry_admin(s->reg, o, c->skey, srv_now_ms(),
					unix_ms(), out, sizeof(out), err,
					sizeof(err));
	}
	if (n < 0) {
		srv_send_error(s, c, req->seq, -n, "%s", err);
		goto out;
	}
	CTR_ADD(s, admin_requests, 1);
	memset(rep, 0, sizeof(*rep));
	rep->u.admin.json = out;
	rep->u.admin.json_len = (uint32_t)n;
	srv_reply(c, rep, WIRE_ADMIN_OK, req->seq);
out:
	json_decref(o);
}

/* memd-donor's report: counters and tenants from the lease table. */
static void donor_snapshot(void *arg, struct wire_donor_report *rep)
{
	struct memd_server *s = arg;
	struct memd_tenant_usage *u = malloc(WIRE_MAX_TENANTS * sizeof(*u));
	struct memd_lease_counts cnt;
	size_t n = 0;

	memd_lease_get_counts(s->lt, &cnt);
	rep->slabs_free = cnt.free;
	rep->slabs_leased = cnt.leased;
	rep->slabs_reclaiming = cnt.reclaiming;
	rep->flags = __atomic_load_n(&s->draining, __ATOMIC_RELAXED)
			     ? WIRE_STATUS_DRAINING
			     : 0;
	rep->bytes_read = __atomic_load_n(&s->rma_read, __ATOMIC_RELAXED);
	rep->bytes_written = __atomic_load_n(&s->rma_written, __ATOMIC_RELAXED);
	/* Under kvlock, KV slab counts cannot move: every KV slab counted
	 * is also leased in this usage snapshot (see struct kv_tenant). */
	pthread_mutex_lock(&s->kvlock);
	if (u)
		n = memd_lease_tenant_usage(s->lt, u, WIRE_MAX_TENANTS);
	rep->ntenants = 0;
	for (size_t i = 0; i < n; i++) {
		struct wire_tenant_usage *w = &rep->tenant[rep->ntenants];
		const struct kv_tenant *k;

		if (!u[i].tenant_id)
			continue; /* sessions that never authenticated */
		k = srv_kv_tenant_find_locked(s, u[i].tenant_id);
		memset(w, 0, sizeof(*w));
		w->tenant_id = u[i].tenant_id;
		w->slabs = u[i].slabs;
		/* KV memory counts, the KV session does not */
		w->sessions = u[i].sessions - (k ? 1 : 0);
		if (k) {
			w->flags = WIRE_TENANT_KV;
			w->kv_slabs = k->slabs < w->slabs ? k->slabs : w->slabs;
		}
		rep->ntenants++;
	}
	pthread_mutex_unlock(&s->kvlock);
	free(u);
}

/*
 * DONORS (MEMBERS in protocol 5: with the membership sequence): the
 * published donor list, for rendezvous hashing (protocol.md, kv.md).
 */
void srv_do_donors(struct memd_server *s, struct conn *c,
		   const struct wire_msg *req, struct wire_msg *rep)
{
	char why[WIRE_MSG_MAX] = "";
	uint32_t n;
	int r;

	if (!s->reg) {
		srv_send_error(s, c, req->seq, EOPNOTSUPP,
			       "%s: this memd is not the registry%s",
			       wire_type_name(req->type),
			       s->mode == MODE_STANDALONE
				       ? " (standalone: it is the only donor)"
				       : "");
		return;
	}
	/* a donor's link asks too (MEMBERS): for the keys it no longer
	 * ranks first or second for (docs/kv.md) */
	if (c->role != WIRE_ROLE_TENANT &&
	    !(c->role == WIRE_ROLE_DONOR && req->type == WIRE_MEMBERS)) {
		srv_send_error(s, c, req->seq, EACCES,
			       "%s: only a tenant session asks",
			       wire_type_name(req->type));
		return;
	}
	memset(rep, 0, sizeof(*rep));
	/* a donor's link gets the newest list, which it confirms before
	 * clients get it */
	r = memd_registry_members(s->reg, srv_now_ms(),
				  c->role == WIRE_ROLE_DONOR, &rep->u.donors_ok,
				  &n, why, sizeof(why));
	if (r) {
		srv_send_error(s, c, req->seq, -r, "%s", why);
		return;
	}
	if (n > WIRE_MAX_DONORS) {
		srv_send_error(s, c, req->seq, EOVERFLOW,
			       "donors: %u donors are up, more than one reply "
			       "holds (%d)",
			       n, WIRE_MAX_DONORS);
		return;
	}
	if (req->type == WIRE_MEMBERS) {
		rep->type = WIRE_MEMBERS_OK;
	} else {
		rep->type = WIRE_DONORS_OK;
		rep->u.donors_ok.membership = 0;
	}
	rep->seq = req->seq;
	if (srv_conn_send(c, rep))
		c->closing = true;
}

void srv_reg_news(struct memd_server *s)
{
	struct wire_msg news = { .type = WIRE_DONOR_NEWS, .seq = 0 };
	uint64_t m;

	if (!s->reg)
		return;
	m = memd_registry_membership(s->reg);
	if (m == s->reg_news)
		return;
	s->reg_news = m;
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->role != WIRE_ROLE_DONOR || !c->donor_id ||
		    c->proto < 6 || c->closing)
			continue;
		if (srv_conn_send(c, &news))
			c->closing = true;
		srv_conn_service(s, c); /* may close c */
	}
}

/*
 * After each new REPORT_OK: tenants the registry has removed lose their
 * sessions here (connections closed, leases revoked: their donor passes
 * no longer open any, see srv_do_auth) and their KV entries and spill files.
 * memd-ctl, every tick (cheap until a new report arrives).
 */
void srv_tenants_removed(struct memd_server *s)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	static uint32_t ids[1024]; /* memd-ctl only */
	uint64_t reports = 0;
	size_t n;

	if (!s->donor)
		return;
	memd_donor_tenant_removed(s->donor, 0, &reports);
	if (reports == s->removals_seen)
		return;
	s->removals_seen = reports;
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->auth != AUTH_DONE || c->role != WIRE_ROLE_TENANT ||
		    !memd_donor_tenant_removed(s->donor, c->tenant_id, NULL))
			continue;
		CTR_ADD(s, sessions_revoked, 1);
		memd_log(LOG_NOTICE,
			 "auth: tenant=%s id=%u removed by the registry: "
			 "session=%" PRIx64 " peer=%s closed",
			 memd_log_quote(c->principal, logq, sizeof(logq)),
			 c->tenant_id, c->session_id, c->peer);
		if (c->session) {
			memd_session_close(s->lt, c->session, srv_now_ms(),
					   srv_revoke_mr, s);
			c->session = NULL;
			srv_reclaim_kick(s);
		}
		srv_conn_close(s, c, "tenant removed");
	}
	if (!s->kv)
		return;
	n = memd_kv_tenant_ids(s->kv, ids, sizeof(ids) / sizeof(ids[0]));
	for (size_t i = 0; i < n; i++) {
		ssize_t r;

		if (!memd_donor_tenant_removed(s->donor, ids[i], NULL))
			continue;
		r = memd_kv_remove_tenant(s->kv, ids[i], srv_now_ms());
		CTR_ADD(s, kv_tenants_removed, 1);
		memd_log(LOG_NOTICE,
			 "kv: tenant=%u removed by the registry: entries=%zd "
			 "and its spill files deleted",
			 ids[i], r);
	}
}

struct reg_metrics {
	struct memd_metrics_buf *b;
	int what;
};

static void reg_tenant_metric(void *arg,
			      const struct memd_registry_tenant_info *t)
{
	struct reg_metrics *m = arg;
	static const char *const names[] = { "quota_bytes", "used_bytes",
					     "reserved_bytes" };
	uint64_t v = m->what == 0   ? t->quota_bytes
		     : m->what == 1 ? t->used_bytes
				    : t->reserved_bytes;

	memd_metrics_printf(m->b, "tidepool_registry_tenant_%s{tenant=\"",
			    names[m->what]);
	srv_put_label(m->b, t->name);
	memd_metrics_printf(m->b, "\",tenant_id=\"%u\"} %" PRIu64 "\n", t->id,
			    v);
}

struct reg_donor_metrics {
	struct memd_metrics_buf *b;
	uint64_t slab_bytes;
	int what;
};

static void reg_donor_metric(void *arg,
			     const struct memd_registry_donor_info *d)
{
	struct reg_donor_metrics *m = arg;

	if (m->what == 0) {
		memd_metrics_printf(m->b,
				    "tidepool_registry_donor_state{donor=\"");
		srv_put_label(m->b, d->name);
		memd_metrics_printf(m->b, "\",state=\"%s\"} 1\n",
				    memd_donor_state_name(d->state));
	} else {
		memd_metrics_printf(m->b,
				    "tidepool_registry_donor_%s_bytes{donor=\"",
				    m->what == 1 ? "capacity" : "free");
		srv_put_label(m->b, d->name);
		memd_metrics_printf(m->b, "\"} %" PRIu64 "\n",
				    (uint64_t)(m->what == 1 ? d->slabs_total
							    : d->slabs_free) *
					    m->slab_bytes);
	}
}

/* The registry's view: tenants' quotas and usage, donors' states. */
void srv_write_registry_metrics(struct memd_metrics_buf *b,
				struct memd_server *s)
{
	static const char *const th[] = {
		"Quota of each tenant.",
		"Memory each tenant holds, as donors report it.",
		"Memory granted to each tenant and not yet redeemed.",
	};
	static const char *const tn[] = { "tenant_quota_bytes",
					  "tenant_used_bytes",
					  "tenant_reserved_bytes" };
	static const char *const dh[] = {
		"State of each donor (up, draining, down).",
		"Memory each donor donates.",
		"Free memory of each donor, as it reports it.",
	};
	static const char *const dn[] = { "donor_state", "donor_capacity_bytes",
					  "donor_free_bytes" };

	for (int w = 0; w < 3; w++) {
		struct reg_metrics m = { .b = b, .what = w };

		memd_metrics_printf(b,
				    "# HELP tidepool_registry_%s %s\n"
				    "# TYPE tidepool_registry_%s gauge\n",
				    tn[w], th[w], tn[w]);
		memd_registry_foreach_tenant(s->reg, reg_tenant_metric, &m);
	}
	for (int w = 0; w < 3; w++) {
		struct reg_donor_metrics m = { .b = b,
					       .slab_bytes = s->cfg.slab_bytes,
					       .what = w };

		memd_metrics_printf(b,
				    "# HELP tidepool_registry_%s %s\n"
				    "# TYPE tidepool_registry_%s gauge\n",
				    dn[w], dh[w], dn[w]);
		memd_registry_foreach_donor(s->reg, reg_donor_metric, &m);
	}
}

/*
 * The exposition of GET /metrics, on memd-metrics. It reads only what is
 * safe from that thread: the lease table (its own lock), the counters
 * (relaxed atomics), and fields fixed at creation (slab size, donation,
 * arenas, provider, start time). memd(8), METRICS, lists every name.
 */
/* Replay checks of grant tickets (memd/redeem.c), cluster modes. */
void srv_write_redeem_metrics(struct memd_metrics_buf *b, struct memd_server *s)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} c[] = {
		{ "tickets_redeemed_total",
		  "Grant tickets redeemed (passed the replay check).",
		  offsetof(struct memd_redeem_stats, redeemed) },
		{ "tickets_replayed_total",
		  "Grant tickets refused as already redeemed.",
		  offsetof(struct memd_redeem_stats, replayed) },
		{ "tickets_too_old_total",
		  "Grant tickets refused as too old to check for replay.",
		  offsetof(struct memd_redeem_stats, too_old) },
		{ "tickets_busy_total",
		  "Grant tickets refused for want of a registry epoch slot.",
		  offsetof(struct memd_redeem_stats, busy) },
		{ "tickets_burnt_total",
		  "Grant tickets refused for good and reported to their "
		  "registry (their ids can never be redeemed here).",
		  offsetof(struct memd_redeem_stats, burnt) },
		{ "redeem_epochs_retired_total",
		  "Registry epochs whose replay record was dropped for a "
		  "newer one while their tickets were live (their tickets "
		  "are refused until they expire).",
		  offsetof(struct memd_redeem_stats, retired) },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint64_t *v = (uint64_t *)((char *)&s->redeem_st + c[i].off);

		srv_put_head(b, c[i].name, "counter", c[i].help);
		memd_metrics_printf(b, "tidepool_memd_%s %" PRIu64 "\n",
				    c[i].name,
				    __atomic_load_n(v, __ATOMIC_RELAXED));
	}
	srv_put_gauge(b, "redeem_epochs",
		      "Registry epochs this memd checks tickets' replays for.",
		      __atomic_load_n(&s->redeem_st.epochs, __ATOMIC_RELAXED));
}

/*
 * Registry and donor modes (docs/cluster.md): the cluster keys from the
 * secret file, the registry's directory. Standalone: nothing.
 */
static void donor_name(const struct memd_server *s, uint16_t port,
		       char name[WIRE_NAME_MAX]);

int srv_cluster_open(struct memd_server *s, char *err, size_t errlen)
{
	char self_name[WIRE_NAME_MAX];
	uint8_t *secret;
	int n, r;

	if (!s->cfg.registry[0])
		return 0;
	s->mode = memd_config_mode(&s->cfg) == MEMD_MODE_REGISTRY
			  ? MODE_REGISTRY
			  : MODE_DONOR;
	if (auth_init()) {
		snprintf(err, errlen, "libsodium failed to initialize");
		return -EIO;
	}
	secret = sodium_malloc(AUTH_SECRET_MAX);
	if (!secret) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	n = auth_read_secret_file(s->cfg.cluster_secret_file, secret, err,
				  errlen);
	if (n < 0) {
		sodium_free(secret);
		return n;
	}
	auth_cluster_keys(secret, (size_t)n, &s->keys);
	{
		static const char label[] = "tidepool spill pool v1";

		crypto_generichash(s->spill_pool, sizeof(s->spill_pool),
				   (const uint8_t *)label, sizeof(label) - 1,
				   s->keys.pass, sizeof(s->keys.pass));
	}
	sodium_free(secret);
	if (memd_redeem_create(MEMD_REDEEM_WINDOW_IDS, MEMD_REDEEM_EPOCHS,
			       TICKET_SKEW_MS, &s->redeemed)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (s->mode == MODE_REGISTRY) {
		struct memd_registry_opts ro = {
			.state_dir = s->cfg.state_dir,
			.slab_bytes = s->cfg.slab_bytes,
			.report_ms = s->cfg.report_interval_ms,
			.ticket_ttl_ms = TICKET_TTL_MS,
			.pass_ttl_ms = s->cfg.pass_ttl_ms,
			.keys = &s->keys,
		};
		struct memd_etcd_opts eo = {
			.endpoints = s->cfg.etcd_endpoints,
			.cacert = s->cfg.etcd_cacert,
			.cert = s->cfg.etcd_cert,
			.key = s->cfg.etcd_key,
			.user = s->cfg.etcd_user,
			.password_file = s->cfg.etcd_password_file,
			/* a step of the election (3 endpoints) stays within
			 * the lease */
			.timeout_ms = s->cfg.etcd_lease_ms / 4,
		};

		if (memd_config_registry_is_etcd(&s->cfg)) {
			char host[256];
			uint16_t port = 0;

			wire_split_hostport(s->bound, host, sizeof(host),
					    &port);
			donor_name(s, port, self_name);
			ro.self_donor = self_name;
			ro.etcd = &eo;
			ro.etcd_prefix = s->cfg.etcd_prefix;
			ro.etcd_lease_ms = s->cfg.etcd_lease_ms;
			ro.advertise = s->cfg.advertise[0] ? s->cfg.advertise
							   : s->bound;
		}
		r = memd_registry_open(&ro, srv_now_ms(), &s->reg, err, errlen);
		if (r)
			return r;
		if (ro.etcd)
			memd_log(LOG_NOTICE,
				 "registry: open etcd=%s prefix=%s "
				 "lease_ms=%u: standby until elected",
				 s->cfg.etcd_endpoints, s->cfg.etcd_prefix,
				 s->cfg.etcd_lease_ms);
		else
			memd_log(LOG_NOTICE,
				 "registry: open state_dir=%s "
				 "registry_epoch=%016" PRIx64,
				 s->cfg.state_dir, memd_registry_epoch(s->reg));
	}
	return 0;
}

/* This memd's name as a donor: donor_name, else the host name and the
 * control port (stable for one config, distinct for several memds on
 * one host). */
static void donor_name(const struct memd_server *s, uint16_t port,
		       char name[WIRE_NAME_MAX])
{
	char hn[WIRE_NAME_MAX] = "memd";

	if (s->cfg.donor_name[0]) {
		snprintf(name, WIRE_NAME_MAX, "%.63s", s->cfg.donor_name);
		return;
	}
	gethostname(hn, sizeof(hn) - 8);
	hn[sizeof(hn) - 8] = '\0';
	for (char *p = hn; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
		      *p == '_'))
			*p = '_';
	snprintf(name, WIRE_NAME_MAX, "%.55s-%u", hn, port);
}

/* memd-donor: the link to the registry (ours, in registry mode). */
int srv_donor_start(struct memd_server *s, char *err, size_t errlen)
{
	struct memd_donor_opts o = {
		.advertise = s->cfg.advertise,
		.listen = s->bound,
		.epoch = s->epoch,
		.slab_bytes = s->cfg.slab_bytes,
		.slabs_total = s->nslabs,
		.snapshot = donor_snapshot,
		.arg = s,
	};
	char self[WIRE_HOSTPORT_MAX + MEMD_CONF_STR_MAX + 1];
	char name[WIRE_NAME_MAX], host[256];
	uint16_t port = 0;

	if (s->mode == MODE_STANDALONE)
		return 0;
	if (wire_split_hostport(s->bound, host, sizeof(host), &port)) {
		snprintf(err, errlen, "bound address '%s' is not HOST:PORT",
			 s->bound);
		return -EINVAL;
	}
	if (s->mode == MODE_REGISTRY) {
		/* Our own donor part joins us over loopback. */
		if (!strcmp(host, "0.0.0.0") || !host[0])
			snprintf(self, sizeof(self), "127.0.0.1:%u", port);
		else if (!strcmp(host, "::"))
			snprintf(self, sizeof(self), "[::1]:%u", port);
		else
			snprintf(self, sizeof(self), "%.127s", s->bound);
		/* registry = etcd: whichever registry leads, us first */
		if (s->cfg.registry_peers[0])
			snprintf(self + strlen(self),
				 sizeof(self) - strlen(self), ",%s",
				 s->cfg.registry_peers);
		o.registry = self;
	} else {
		o.registry = s->cfg.registry;
	}
	donor_name(s, port, name);
	o.name = name;
	memcpy(o.donor_key, s->keys.donor, sizeof(o.donor_key));
	o.nnodes = (uint16_t)s->narenas;
	for (uint32_t a = 0; a < s->narenas; a++) {
		o.node[a].node = srv_arena_aep(s, a)->node;
		o.node[a].slabs_total = s->arena_slabs;
		o.node[a].slabs_free = s->arena_slabs;
	}
	{
		struct memd_donor *d;
		int r = memd_donor_start(&o, &d, err, errlen);

		if (!r) /* memd-reclaim reads it too */
			__atomic_store_n(&s->donor, d, __ATOMIC_RELEASE);
		return r;
	}
}

/* memd-etcdw: watches PREFIX/ so that memd-etcd campaigns as soon as the
 * leader key goes, and a leader steps down as soon as someone else writes
 * the state (memd_registry_etcd_watch). A broken watch is opened again,
 * 100 ms later doubling to 2 s while it keeps failing. */
static void *srv_etcd_watch_main(void *arg)
{
	struct memd_server *s = arg;
	uint32_t backoff = 100;
	int64_t rev = 0;
	char err[256], last[256] = "";

	pthread_setname_np(pthread_self(), "memd-etcdw");
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		int r = memd_registry_etcd_watch(s->reg, &rev, 60000, &s->stop,
						 err, sizeof(err));
		uint64_t until;

		if (!r) {
			backoff = 100;
			last[0] = '\0';
			continue;
		}
		if (strcmp(err, last))
			memd_log(LOG_INFO, "registry: etcd: %s; watching again",
				 err);
		snprintf(last, sizeof(last), "%s", err);
		until = srv_now_ms() + backoff;
		while (srv_now_ms() < until &&
		       !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
			usleep(20000);
		backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
	}
	return NULL;
}

/* memd-etcd: the registry's election and lease in etcd (registry =
 * etcd); it resigns (revokes its lease) when memd stops. It runs
 * memd-etcdw, whose events make it step before its time. */
void *srv_etcd_main(void *arg)
{
	struct memd_server *s = arg;
	pthread_t watch;
	bool watching;

	pthread_setname_np(pthread_self(), "memd-etcd");
	watching = !pthread_create(&watch, NULL, srv_etcd_watch_main, s);
	if (!watching)
		memd_log(LOG_WARNING,
			 "registry: etcd: no watch thread: polling only");
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint64_t until = srv_now_ms() +
				 memd_registry_etcd_step(s->reg, srv_now_ms());
		uint64_t next_probe = 0;
		char old[WIRE_HOSTPORT_MAX];

		while (srv_now_ms() < until &&
		       !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) &&
		       !memd_registry_etcd_kicked(s->reg)) {
			/* Took over: is the previous leader still there
			 * (only cut off etcd, its donor part holding leases)
			 * or gone (dead, or stopping: its listener closes)? */
			if (srv_now_ms() >= next_probe &&
			    memd_registry_etcd_old_leader(
				    s->reg, old, sizeof(old), srv_now_ms())) {
				struct rpc *c = NULL;
				int r = rpc_connect(old, OLD_LEADER_PROBE_MS,
						    &c, NULL, 0);

				if (r)
					memd_registry_etcd_old_leader_gone(
						s->reg, strerror(-r));
				rpc_close(c);
				next_probe = srv_now_ms() + 100;
				continue;
			}
			usleep(20000);
		}
	}
	if (watching)
		pthread_join(watch, NULL);
	memd_registry_etcd_resign(s->reg);
	return NULL;
}
