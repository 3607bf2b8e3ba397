// SPDX-License-Identifier: MIT
/*
 * libpool/paging_evict.c - transparent paging: replacement: the ring, CLOCK/FIFO, refault credit, behind-the-stream victims, budgets.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

/* ------------------------------------------------------------------ */
/* eviction                                                             */

void pg_ring_push(struct mapping *m, size_t idx)
{
	m->ring[(m->head + m->nres) % m->max_res] = idx;
	m->nres++;
	pg_eng.resident += m->psize;
	if (m->warm_deferred)
		pg_warm_deferred_check(m);
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	if (m->nres > m->st.resident_peak)
		__atomic_store_n(&m->st.resident_peak, m->nres,
				 __ATOMIC_RELAXED);
}

/* Evictions per epoch of the refault test: an eighth of the budget. */
static size_t epoch_len(const struct mapping *m)
{
	return m->max_res / 8 ? m->max_res / 8 : 1;
}

/*
 * Whether page idx, about to be fetched, was evicted recently: within
 * REFAULT_EPOCHS epochs, about one budget's worth of evictions. Epochs
 * are 1..255 and wrap: a page evicted 255 epochs ago or more may pass
 * for a recent one (a spare second chance, never a wrong byte).
 */
bool pg_page_refaulted(const struct mapping *m, size_t idx)
{
	uint8_t e = m->evicted[idx];

	return e && (uint8_t)(m->epoch - e) < REFAULT_EPOCHS;
}

/* Passes of the hand page idx, about to be fetched, is kept through:
 * CREDIT_PASSES when it was evicted within CREDIT_EPOCHS epochs. */
uint8_t pg_page_credit(const struct mapping *m, size_t idx)
{
	uint8_t e = m->evicted[idx];

	return e && (uint8_t)(m->epoch - e) < CREDIT_EPOCHS ? CREDIT_PASSES : 0;
}

/* Write-protects the sorted pages v[0..n), close ones in one range
 * (pages between them, dirty or not, lose nothing by a protection: a
 * write to one comes to wp_fault()). */
static void protect_sample(struct mapping *m, const size_t *v, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;

		while (j < n && v[j] - v[j - 1] <= WP_GAP_MAX)
			j++;
		int ret = pg_uffd_protect(m, v[i], v[j - 1] - v[i] + 1, true);

		/* Unprotected, the page only looks unused: it goes on the
		 * hand's next pass, protected first like any dirty page. */
		if (ret)
			pool_log(LOG_DEBUG, "paging: sample protect err=%s",
				 strerror(-ret));
		i = j;
	}
}

/*
 * 4 KiB pages: up to n victims chosen by CLOCK (second chance), taken
 * out of the ring; returns how many. The hand is the ring's head. A page
 * marked PG_REF (written since the hand last passed it, a demand write,
 * or fetched again soon after its eviction: pg_page_refaulted()) loses the
 * mark and goes to the tail instead. A dirty one is write-protected on
 * the way, so that its next write shows (wp_fault() marks it again): an
 * unprotected dirty page would otherwise look unused forever. Reads are
 * invisible to userfaultfd, so a page that is only read is kept only by
 * refaulting: pages a scan brings in once carry no mark and go first,
 * and a scan larger than the budget passes without flushing pages that
 * are reused (scan resistance).
 *
 * A page fetched again very soon after its eviction (pg_page_credit()) has
 * credit: the hand passes it that many times, in CLOCK and in FIFO
 * windows alike, before it is judged by its mark again. Re-protection
 * is what CLOCK's marks cost (a WP fault as costly as a fetch), and the
 * FIFO windows that avoid it evict the pages of a hot set as readily as
 * cold ones (80 % of the accesses to 60 % of the budget, the other 20 %
 * uniform over the rest: every resident page is marked, every window
 * FIFO); a refault is free, and it tells the hot pages apart: each one
 * costs a fetch per CREDIT_PASSES + 1 revolutions instead of one per
 * revolution. Credited pages count neither as marked nor unmarked in
 * clock_adapt(). LIBPOOL_PAGING_CREDIT=0 turns it off.
 */
/*
 * Adaptive CLOCK, once per budget's worth of pages the hand passed. When
 * the hand finds more than half of the pages marked, CLOCK tells little
 * apart (nearly everything resident was used since its last pass) and
 * costs a WP fault for every dirty page it spares (protect_sample(): a
 * program that writes what it touches, CPython's reference counts, takes
 * one at once): the mapping evicts oldest first for the next window,
 * still counting the marked pages among its victims (marks from WP
 * faults of clean pages, demand writes and refaults), and goes back to
 * CLOCK when they fall to half or less. A hot set among cold pages
 * (few marked) keeps CLOCK.
 */
static void clock_adapt(struct mapping *m)
{
	size_t seen = m->clk_marked + m->clk_unmarked;

	if (!pg_eng.clock_auto || seen < m->max_res)
		return;
	m->clk_fifo = m->clk_marked * 2 > seen;
	if (m->clk_fifo)
		STAT_ADD(m, clock_fifo_windows, 1);
	m->clk_marked = m->clk_unmarked = 0;
}

static size_t clock_select(struct mapping *m, size_t n, size_t *victims,
			   bool force)
{
	/* force: n victims even if every page is marked or credited (the
	 * last revolution finds them unmarked, without credit); else one
	 * revolution at most */
	size_t got = 0, nre = 0, steps = 0;
	size_t bound = force ? (CREDIT_PASSES + 2) * m->nres + n : m->nres;
	size_t reprot[WB_BATCH];

	while (got < n && m->nres && steps++ < bound) {
		size_t idx = m->ring[m->head];
		uint8_t s = m->state[idx];

		m->head = (m->head + 1) % m->max_res;
		if (m->credit[idx] && pg_eng.clock_on) {
			m->credit[idx]--;
			m->ring[(m->head + m->nres - 1) % m->max_res] = idx;
			continue;
		}
		if (s & PG_REF)
			m->clk_marked++;
		else
			m->clk_unmarked++;
		if ((s & PG_REF) && pg_eng.clock_on && !m->clk_fifo) {
			m->state[idx] = (uint8_t)(s & ~PG_REF);
			if ((s & PG_DIRTY) && nre < WB_BATCH)
				reprot[nre++] = idx;
			/* to the tail: the slot the hand just left when
			 * the ring is full, a free one otherwise */
			m->ring[(m->head + m->nres - 1) % m->max_res] = idx;
			STAT_ADD(m, second_chances, 1);
			continue;
		}
		m->nres--;
		victims[got++] = idx;
	}
	clock_adapt(m);
	if (nre) {
		pg_sort_pages(reprot, nre);
		protect_sample(m, reprot, nre);
	}
	return got;
}

/* Victims of a failed eviction go back into the ring: they are still
 * resident (nothing was dropped). */
static void ring_restore(struct mapping *m, const size_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		pg_ring_push(m, v[i]);
}

/*
 * Evicts up to n (<= WB_BATCH) resident pages, in address order (fewer,
 * larger ranges to protect, write and drop): the oldest (huge pages:
 * FIFO, with behind_victim() choosing the head), or CLOCK's choice
 * (clock_select(); with !force only unmarked pages found in one
 * revolution, maybe none). *done: how many. Returns 0 or -errno (the
 * mapping is then failed and nothing was dropped).
 */
static int evict_list(struct mapping *m, size_t *victims, size_t n,
		      size_t *done);

static int evict_some(struct mapping *m, size_t n, bool force, size_t *done)
{
	size_t victims[WB_BATCH];

	*done = 0;
	if (n > m->nres)
		n = m->nres;
	if (m->huge) {
		for (size_t i = 0; i < n; i++)
			victims[i] = m->ring[(m->head + i) % m->max_res];
		m->head = (m->head + n) % m->max_res;
		m->nres -= n;
	} else {
		n = clock_select(m, n, victims, force);
	}
	return evict_list(m, victims, n, done);
}

/*
 * Evicts victims[0..n) (n <= WB_BATCH), already taken out of the ring:
 * protects the dirty ones, writes back what changed, drops them all.
 * *done: n, or 0 on failure (the victims are then back in the ring,
 * resident, and the mapping is failed). Sorts victims.
 */
static int evict_list(struct mapping *m, size_t *victims, size_t n,
		      size_t *done)
{
	size_t wb[WB_BATCH];
	size_t nw = 0;
	int ret;
	uint64_t t = mono_ns();

	*done = 0;
	pg_eng.resident -= n * m->psize;
	pg_sort_pages(victims, n);
	/* Dirty pages are protected first: from then on a write waits
	 * for us, so the copy we send is the page's last contents. */
	ret = pg_protect_dirty(m, victims, n);
	t = phase_add(POOL_PHASE_PROTECT, t);
	if (ret) {
		ring_restore(m, victims, n);
		return ret;
	}
	for (size_t i = 0; i < n; i++) {
		size_t idx = victims[i];

		m->credit[idx] = 0; /* leaving the ring */
		if (!pg_page_needs_writeback(m, idx))
			continue;
		pg_page_copy_out(m->stage_out + nw * m->psize,
				 page_addr(m, idx), m->psize);
		wb[nw++] = idx;
	}
	t = phase_add(POOL_PHASE_COPYOUT, t);
	if (nw) {
		ret = pg_write_back(m, wb, nw);
		t = phase_add(POOL_PHASE_WRITEBACK, t);
		if (ret) {
			pg_mapping_fail(m, ret, "write-back");
			ring_restore(m, victims, n);
			return ret;
		}
		for (size_t i = 0; i < nw; i++)
			m->state[wb[i]] |= PG_REMOTE;
	}
	/* While a fork is under way the child must find every page
	 * mapped: the victims leave the ring (the budget counts them out)
	 * but stay, protected, until fork_release() drops them. */
	if (pg_eng.drop_defer && !pg_eng.fork_hold && !m->huge)
		pg_drop_late(m, victims, n);
	else if (!pg_eng.fork_hold || m->huge)
		pg_drop_pages(m, victims, n);
	phase_add(POOL_PHASE_DROP, t);
	for (size_t i = 0; i < n; i++) {
		m->state[victims[i]] &= (uint8_t)PG_REMOTE;
		if (pg_eng.fork_hold && !m->huge)
			m->state[victims[i]] |= PG_FORK;
		m->evicted[victims[i]] = m->epoch;
	}
	if (m->epoch_left <= n) {
		m->epoch = m->epoch == 255 ? 1 : (uint8_t)(m->epoch + 1);
		m->epoch_left = epoch_len(m);
	} else {
		m->epoch_left -= n;
	}
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	STAT_ADD(m, evictions, n);
	*done = n;
	return 0;
}

/* Evicts up to n pages of m's, n of them unless m has fewer. */
int pg_evict(struct mapping *m, size_t n)
{
	size_t done;

	return evict_some(m, n, true, &done);
}

/*
 * Huge pages, scan resistance. When room is made for a stream, the FIFO's
 * oldest page is the worst victim of a scan that comes round again (a
 * model's weights read every step, a loop over an array larger than the
 * budget): it is the next one the scan needs, so every page misses on
 * every pass. The page the program left most recently, at least one page
 * behind it (a stencil may still read the one just behind), is evicted
 * instead; with none behind (the start of a pass), the page farthest
 * ahead beyond what install-ahead maps. Then the pages at the start of
 * the scan stay resident and a pass misses only on the rest (the page
 * used farthest in the future goes first: optimal for a cyclic scan). A
 * stream's first fault is taken as going up. The chosen page is swapped
 * into the FIFO's head slot; the old head takes its place. A linear
 * search of the resident huge pages (at most local_bytes / 2 MiB), once
 * per 2 MiB evicted. Returns whether a page was chosen.
 */
static bool behind_victim(struct mapping *m)
{
	size_t best = SIZE_MAX, far = SIZE_MAX, bi = 0, fi = 0;
	size_t b = m->behind, reach = m->ahead_max + 1;
	bool up = m->behind_dir > 0;

	if (!m->huge || !m->behind_dir || !m->nres)
		return false;
	for (size_t i = 0; i < m->nres; i++) {
		size_t v = m->ring[(m->head + i) % m->max_res];

		/* behind: the most recently left, one page of margin */
		if ((up ? v + 1 < b : v > b + 1) &&
		    (best == SIZE_MAX || (up ? v > best : v < best))) {
			best = v;
			bi = i;
		}
		/* else, ahead beyond what install-ahead maps: the farthest
		 * (at the start of a pass nothing is behind) */
		if ((up ? v > b + reach : v + reach < b) &&
		    (far == SIZE_MAX || (up ? v > far : v < far))) {
			far = v;
			fi = i;
		}
	}
	if (best == SIZE_MAX) {
		best = far;
		bi = fi;
	}
	if (best == SIZE_MAX)
		return false;
	m->ring[(m->head + bi) % m->max_res] = m->ring[m->head];
	m->ring[m->head] = best;
	return true;
}

/* Pages of margin behind a stream's last fault that behind_select()
 * leaves alone (a stencil, or a loop body, may still read them). */
#define BEHIND_MARGIN RA_MAX

/*
 * 4 KiB pages, eviction behind a stream (MRU for scans). While room is
 * made for an established stream that fetches pages evicted before (a
 * fault continuing it at full read-ahead on such a page, or a run
 * installed ahead of it: a pass over data that did not fit), the
 * victims are the resident pages the stream left most recently: those
 * just below m->behind less BEHIND_MARGIN going up, just above it going
 * down. A scan read once loses nothing by it (the pages behind it are
 * done), and a loop over more pages than the budget keeps the pages at
 * the start of its range for the next pass: each pass then misses on
 * about N - budget pages instead of all N, which CLOCK, FIFO and LRU do
 * (the page they evict is always the one needed next). CLOCK still
 * chooses for faults that continue no stream (random access), for a
 * stream's first pass and for fills: a program that writes one buffer,
 * then another, then uses the second wants LRU's choice there. Looks at
 * most pg_res_cap() state bytes; takes the victims out of the ring (a pass
 * over its tail, back to the oldest victim: O(resident) at worst).
 * Returns how many, at most n.
 */
static size_t behind_select(struct mapping *m, size_t n, size_t *victims)
{
	size_t got = 0, b = m->behind, look = pg_res_cap(m);
	bool up = m->behind_dir > 0;

	if (up ? b < BEHIND_MARGIN + 1 : b + BEHIND_MARGIN + 1 >= m->npages)
		return 0;
	for (size_t i = up ? b - BEHIND_MARGIN - 1 : b + BEHIND_MARGIN + 1;
	     got < n && look--; i = up ? i - 1 : i + 1) {
		if ((m->state[i] & (PG_RESIDENT | PG_CLAIM)) == PG_RESIDENT) {
			m->state[i] |= PG_VICTIM;
			victims[got++] = i;
		}
		if (up ? i == 0 : i + 1 >= m->npages)
			break;
	}
	if (!got)
		return 0;
	/* Out of the ring. The victims were mostly installed last (the
	 * stream's own pages): look for them from the tail, and close
	 * the gaps only from the lowest position one was found at. */
	{
		size_t found = 0, lo = m->nres, kept;

		for (size_t i = m->nres; i-- > 0 && found < got;) {
			if (m->state[m->ring[(m->head + i) % m->max_res]] &
			    PG_VICTIM) {
				found++;
				lo = i;
			}
		}
		kept = lo;
		for (size_t i = lo; i < m->nres; i++) {
			size_t idx = m->ring[(m->head + i) % m->max_res];

			if (m->state[idx] & PG_VICTIM)
				m->state[idx] &= (uint8_t)~PG_VICTIM;
			else
				m->ring[(m->head + kept++) % m->max_res] = idx;
		}
		m->nres = kept;
	}
	STAT_ADD(m, behind_evictions, got);
	return got;
}

/* Evicts up to n (<= WB_BATCH) pages behind m's stream (behind_select());
 * *done: how many (0: none behind it). */
static int evict_behind(struct mapping *m, size_t n, size_t *done)
{
	size_t victims[WB_BATCH];

	*done = 0;
	n = behind_select(m, n > m->nres ? m->nres : n, victims);
	return n ? evict_list(m, victims, n, done) : 0;
}

/* Sets where the stream room is made for stands (behind_victim(),
 * behind_select()): page at, going dir. 4 KiB pages only for an
 * established stream (established) and with LIBPOOL_PAGING_BEHIND on. */
void pg_behind_set(struct mapping *m, size_t at, int dir, bool established)
{
	m->behind = at;
	m->behind_dir = m->huge || (established && pg_eng.behind_on)
				? (dir < 0 ? -1 : 1)
				: 0;
}

/* The mapping that gives up pages for the process budget next: each
 * in turn (pg_eng.cursor), skipping those with nothing resident. */
static struct mapping *budget_victim(void)
{
	struct mapping *v = pg_eng.cursor ? pg_eng.cursor : pg_eng.maps;

	for (size_t i = 0; i < pg_eng.nmaps && v; i++) {
		struct mapping *next = v->enext ? v->enext : pg_eng.maps;

		/* a failed mapping cannot write back: its pages stay */
		if (v->nres && !v->failed) {
			pg_eng.cursor = next;
			return v;
		}
		v = next;
	}
	return NULL;
}

/*
 * Evicts until the process budget takes need more pages of m's. Each
 * mapping in turn gives up a batch of pages its CLOCK finds unmarked in
 * one revolution; when a round of every mapping finds none (all marked,
 * now unmarked), the next one gives up a batch regardless. So a mapping
 * whose pages are all in use keeps them while another has cold ones.
 */
static int make_room_process(struct mapping *m, size_t need)
{
	while (pg_eng.budget != SIZE_MAX &&
	       pg_eng.resident + need * m->psize > pg_eng.budget) {
		struct mapping *v = NULL;
		size_t done = 0;
		int ret;

		for (size_t i = 0; i < pg_eng.nmaps && !done; i++) {
			v = budget_victim();
			if (!v)
				break;
			ret = evict_some(v, v->huge ? 1 : v->batch, false,
					 &done);
			if (ret)
				return ret;
		}
		if (done)
			continue;
		v = budget_victim();
		if (!v)
			break; /* nothing left to evict: need > budget */
		ret = evict_some(v, v->huge ? 1 : v->batch, true, &done);
		if (ret)
			return ret;
		if (!done)
			break;
	}
	return 0;
}

/* The most pages m may hold: its own budget, or the process's when less. */
size_t pg_res_cap(const struct mapping *m)
{
	size_t p = pg_eng.budget == SIZE_MAX ? SIZE_MAX
					     : pg_eng.budget >> m->shift;

	return p < m->max_res ? (p ? p : 1) : m->max_res;
}

static int do_make_room(struct mapping *m, size_t need);

/* Evicts in rounds of m->batch pages (more when more are needed at
 * once) until need more pages fit, in m's budget and then in the
 * process's (do_make_room()); its time is the step "room". */
int pg_make_room(struct mapping *m, size_t need)
{
	uint64_t t0 = mono_ns();
	int ret = do_make_room(m, need);

	phase_add(POOL_PHASE_ROOM, t0);
	return ret;
}

static int do_make_room(struct mapping *m, size_t need)
{
	while (m->nres + need > m->max_res) {
		size_t over = m->nres + need - m->max_res;
		int ret;

		size_t want = over > m->wb_max	? m->wb_max
			      : over < m->batch ? m->batch
						: over;

		if (behind_victim(m)) {
			ret = pg_evict(m, 1);
			if (ret)
				return ret;
			continue;
		}
		if (!m->huge && m->behind_dir) {
			size_t done;

			ret = evict_behind(m, want, &done);
			if (ret)
				return ret;
			if (done)
				continue;
		}
		ret = pg_evict(m, want);

		if (ret)
			return ret;
	}
	return make_room_process(m, need);
}
