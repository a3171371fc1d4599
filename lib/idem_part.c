/*
 * idem_part.c - assigned partitions, their delivery state and offsets.
 *
 * A handful to a few hundred partitions per instance: a linear scan is simpler than a hash and
 * fast enough (it runs once per poll, not per row of SQL).
 *
 * The fetch side's state machine (enum idem_part_state) is the transition functions below: each
 * says which states it leaves from, and refuses the others by returning false without a change
 * (the table in idem_part.h and in tests/unit/test_idem_part.c).
 */
#include "idem_part.h"

#include <stdlib.h>
#include <string.h>

void idem_parts_init(struct idem_parts *ps)
{
	memset(ps, 0, sizeof(*ps));
}

static void part_free(struct idem_part *p)
{
	if (p == NULL)
		return;
	idem_batch_done(&p->batch);
	idem_batch_done(&p->inflight);
	free(p->topic);
	free(p);
}

void idem_parts_done(struct idem_parts *ps)
{
	if (ps == NULL)
		return;
	for (size_t i = 0; i < ps->n; i++)
		part_free(ps->v[i]);
	free(ps->v);
	memset(ps, 0, sizeof(*ps));
}

struct idem_part *idem_parts_find(const struct idem_parts *ps, const char *topic, int32_t partition)
{
	for (size_t i = 0; i < ps->n; i++) {
		struct idem_part *p = ps->v[i];

		if (p->partition == partition && strcmp(p->topic, topic) == 0)
			return p;
	}
	return NULL;
}

idem_status idem_parts_assign(struct idem_parts *ps, const struct idem_cfg *cfg, const char *topic,
                              int32_t partition, struct idem_part **ret_part)
{
	const struct idem_route *route;
	struct idem_part *p;

	p = idem_parts_find(ps, topic, partition);
	if (p != NULL)
		goto out;
	route = idem_cfg_route_for(cfg, topic);
	if (route == NULL)
		return IDEM_ERR_NOT_FOUND;
	if (ps->n == ps->cap) {
		size_t ncap = ps->cap ? ps->cap * 2 : 16;
		struct idem_part **nv = realloc(ps->v, ncap * sizeof(*nv));

		if (nv == NULL)
			return IDEM_ERR_NOMEM;
		ps->v = nv;
		ps->cap = ncap;
	}
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return IDEM_ERR_NOMEM;
	p->topic = strdup(topic);
	if (p->topic == NULL || idem_batch_init(&p->batch, route, topic, partition) != IDEM_OK ||
	    idem_batch_init(&p->inflight, route, topic, partition) != IDEM_OK) {
		part_free(p);
		return IDEM_ERR_NOMEM;
	}
	/* The consumer thread never waits on the registry (ARCHITECTURE.md "Avro"). */
	idem_schemas_attach_async(ps->schemas, &p->batch.doc);
	idem_schemas_attach_async(ps->schemas, &p->inflight.doc);
	p->partition = partition;
	p->route = route;
	p->fetch_next = -1;
	p->db_next = -1;
	p->stored_next = -1;
	p->commit_acked = -1;
	p->db_floor = -1;
	p->reapply_to = -1;
	p->log_first = -1;
	p->poison_at = -1;
	p->state = IDEM_PART_FETCHING;
	ps->v[ps->n++] = p;
out:
	if (ret_part != NULL)
		*ret_part = p;
	return IDEM_OK;
}

void idem_parts_revoke(struct idem_parts *ps, const char *topic, int32_t partition)
{
	for (size_t i = 0; i < ps->n; i++) {
		struct idem_part *p = ps->v[i];

		if (p->partition == partition && strcmp(p->topic, topic) == 0) {
			part_free(p);
			ps->v[i] = ps->v[--ps->n];
			return;
		}
	}
}

size_t idem_part_bytes(const struct idem_part *p)
{
	return p->batch.bytes + p->inflight.bytes;
}

size_t idem_parts_halted(const struct idem_parts *ps)
{
	size_t n = 0;

	for (size_t i = 0; i < ps->n; i++)
		n += ps->v[i]->poison_at >= 0;
	return n;
}

const char *idem_part_state_str(enum idem_part_state state)
{
	switch (state) {
	case IDEM_PART_FETCHING:
		return "fetching";
	case IDEM_PART_HELD:
		return "held";
	case IDEM_PART_RETRY_WAIT:
		return "retry_wait";
	case IDEM_PART_SCHEMA_WAIT:
		return "schema_wait";
	case IDEM_PART_HALTED:
		return "halted";
	case IDEM_PART_LEAVING:
		return "leaving";
	case IDEM_PART_STARTING:
		return "starting";
	}
	return "?";
}

/* RETRY_WAIT, SCHEMA_WAIT, HALTED: paused until wake_at_ms. */
static bool waits(const struct idem_part *p)
{
	return p->state == IDEM_PART_RETRY_WAIT || p->state == IDEM_PART_SCHEMA_WAIT ||
	       p->state == IDEM_PART_HALTED;
}

bool idem_part_hold(struct idem_part *p)
{
	if (!p->busy || (p->state != IDEM_PART_FETCHING && p->state != IDEM_PART_HELD))
		return false;
	p->state = IDEM_PART_HELD;
	return true;
}

/*
 * A batch in flight ended (committed, failed, or committed up to a poison message): every state
 * but HALTED may have had one. LEAVING takes in what came of it and stays LEAVING.
 */
static bool batch_ended(struct idem_part *p, enum idem_part_state to, int64_t wake_at_ms)
{
	if (p->state == IDEM_PART_HALTED || p->state == IDEM_PART_STARTING)
		return false;
	if (p->state != IDEM_PART_LEAVING)
		p->state = to;
	p->wake_at_ms = wake_at_ms;
	return true;
}

bool idem_part_release(struct idem_part *p)
{
	if (!batch_ended(p, IDEM_PART_FETCHING, 0))
		return false;
	p->failures = 0;
	p->poison_at = -1;
	return true;
}

bool idem_part_retry_at(struct idem_part *p, int64_t when_ms)
{
	if (!batch_ended(p, IDEM_PART_RETRY_WAIT, when_ms))
		return false;
	p->failures++;
	return true;
}

bool idem_part_wait_schema(struct idem_part *p, int64_t when_ms)
{
	if (p->state != IDEM_PART_FETCHING && p->state != IDEM_PART_HELD &&
	    p->state != IDEM_PART_SCHEMA_WAIT)
		return false;
	p->state = IDEM_PART_SCHEMA_WAIT;
	p->wake_at_ms = when_ms;
	return true;
}

bool idem_part_halt(struct idem_part *p, int64_t when_ms, int64_t offset)
{
	if (!batch_ended(p, IDEM_PART_HALTED, when_ms))
		return false;
	p->failures = 0;
	p->poison_at = offset;
	return true;
}

bool idem_part_due(struct idem_part *p, int64_t now_ms)
{
	if (!waits(p) || p->busy || now_ms < p->wake_at_ms)
		return false;
	p->state = IDEM_PART_FETCHING;
	p->wake_at_ms = 0;
	return true;
}

bool idem_part_wake_now(struct idem_part *p, int64_t now_ms)
{
	if (!waits(p) || p->busy || p->wake_at_ms <= now_ms)
		return false;
	p->wake_at_ms = now_ms;
	return true;
}

bool idem_part_leave(struct idem_part *p)
{
	p->state = IDEM_PART_LEAVING;
	return true;
}

bool idem_part_fetching(const struct idem_part *p)
{
	return p->state == IDEM_PART_FETCHING || p->state == IDEM_PART_HELD;
}

bool idem_part_paused(const struct idem_part *p)
{
	return waits(p) || (p->state == IDEM_PART_LEAVING && p->wake_at_ms != 0);
}

bool idem_part_leaving(const struct idem_part *p)
{
	return p->state == IDEM_PART_LEAVING;
}

/* What is in hand is dropped and the partition read again from elsewhere: nothing pending. */
static void restart(struct idem_part *p)
{
	idem_batch_reset(&p->batch);
	idem_batch_reset(&p->inflight);
	if (p->state != IDEM_PART_LEAVING)
		p->state = IDEM_PART_FETCHING;
	p->wake_at_ms = 0;
	p->poison_at = -1;
	p->failures = 0;
}

/* The delivery state lives in the partition, so the two batches trade places whole. */
static void swap_batches(struct idem_part *p)
{
	struct idem_batch t = p->batch;

	p->batch = p->inflight;
	p->inflight = t;
}

void idem_part_hand_over(struct idem_part *p, int64_t now_ms)
{
	const struct idem_batch *b;

	swap_batches(p);
	b = &p->inflight;
	p->busy = true;
	p->job.first = b->n_msgs > 0 ? b->msgs[0].offset : -1;
	p->job.last = b->n_msgs > 0 ? b->msgs[b->n_msgs - 1].offset : -1;
	p->job.next = NULL;
	p->job.t0 = now_ms;
	p->job.stall_warnings = 0;
}

void idem_part_take_back(struct idem_part *p)
{
	struct idem_batch *b = &p->batch;

	idem_batch_reset(b);
	swap_batches(p);
	/* What the flush cut off (on_poison: halt) is fetched again, too. */
	p->fetch_next = b->n_msgs > 0 ? b->msgs[b->n_msgs - 1].offset + 1 : p->job.first;
}

bool idem_part_committed(struct idem_part *p, int64_t next)
{
	if (next > p->db_next)
		p->db_next = next;
	if (next > p->db_floor)
		p->db_floor = next;
	if (p->reapply_to >= 0 && p->db_next >= p->reapply_to)
		p->reapply_to = -1;
	return p->db_next > p->stored_next;
}

void idem_part_stored(struct idem_part *p, int64_t next)
{
	if (next > p->stored_next)
		p->stored_next = next;
}

bool idem_part_commit_due(const struct idem_part *p, bool only_leaving)
{
	if (p->stored_next < 0 || p->stored_next == p->commit_acked)
		return false;
	return !only_leaving || p->state == IDEM_PART_LEAVING;
}

bool idem_part_await_start(struct idem_part *p)
{
	if (p->busy || p->state == IDEM_PART_LEAVING)
		return false;
	restart(p);
	p->state = IDEM_PART_STARTING;
	p->db_floor = p->db_next = p->stored_next = p->fetch_next = p->reapply_to = -1;
	return true;
}

bool idem_part_start(struct idem_part *p, int64_t offset)
{
	if (p->state != IDEM_PART_STARTING)
		return false;
	p->state = IDEM_PART_FETCHING;
	p->fetch_next = offset;
	p->start_wait = 0;
	p->start_logged_ms = 0;
	p->went_back = false;
	return true;
}

bool idem_part_starting(const struct idem_part *p)
{
	return p->state == IDEM_PART_STARTING;
}
