/*
 * idem_pool.c - worker threads committing batches.
 *
 * The consumer thread queues partitions whose batch is in flight on the ready list; a worker
 * takes a group of them, commits them in one transaction on its own connection, puts them on
 * the done list and wakes the consumer thread. Everything Kafka-side stays on the consumer
 * thread: a worker only commits and reports back.
 */
#include "idem_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_flush.h"

/* Most batches one transaction carries; it carries at most as many messages as one grown batch
 * holds (IDEM_BATCH_GROW x batch.max_messages, idem_batch.h). With many partitions each batch is
 * small (the fair take gives each partition budget / partitions a round), and 32 batches could
 * end a transaction well short of its messages: 256 partitions' batches fit in one. */
#define GROUP_MAX_BATCHES 256
/* How often an idle worker checks its connection (idem_flush_check()). */
#define IDLE_CHECK_MS 1000

struct worker {
	idem_pool *pool;
	idem_flush *pg;
	pthread_t thread;
	bool started;
	int connected;     /* idem_flush_connected() after the last commit or idle check (atomic) */
	uint64_t connects; /* idem_flush_connects() as last seen */
	/* The batches of its transaction and the keys they claim, under the pool's mu
	 * (take_group()). */
	struct idem_part **group; /* GROUP_MAX_BATCHES of them */
	size_t n_group;
	struct idem_keyset keys;
	/* The worker's own, for its transaction: GROUP_MAX_BATCHES each. */
	struct idem_batch **batches;
	struct idem_flush_stats *st;
	idem_status *rs;
	idem_error *errs;
};

struct idem_pool {
	const struct idem_cfg *cfg;
	struct worker *workers;
	size_t n_workers;
	rd_kafka_queue_t *cq; /* the consumer queue, to end a poll when a worker is done */

	/* Shared with the workers, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* ready gained a batch, or quit */
	pthread_cond_t done_cv; /* done gained a batch */
	struct idem_part *ready, **ready_tail;
	struct idem_part *done, **done_tail;
	bool quit;
	uint64_t reconnects; /* connections the workers opened again (atomic) */
	uint64_t late;       /* keys claimed late: in flight in another transaction (atomic) */
};

/* Count the connections @w opened since it last looked (its first one is no reconnect). */
static void count_reconnects(struct worker *w)
{
	uint64_t c = idem_flush_connects(w->pg);

	if (c > w->connects && w->connects > 0)
		__atomic_add_fetch(&w->pool->reconnects, c - w->connects, __ATOMIC_RELAXED);
	w->connects = c;
}

idem_status idem_pool_new(const struct idem_cfg *cfg, idem_pool **ret_pool, idem_error *err)
{
	idem_pool *pool;
	idem_status r;

	pool = calloc(1, sizeof(*pool));
	if (pool == NULL)
		return idem_error_nomem(err);
	pool->cfg = cfg;
	pool->ready_tail = &pool->ready;
	pool->done_tail = &pool->done;
	if (pthread_mutex_init(&pool->mu, NULL) != 0) {
		free(pool);
		return idem_error_set(err, IDEM_ERR_NOMEM, "cannot create a mutex");
	}
	idem_cond_init(&pool->work_cv);
	idem_cond_init(&pool->done_cv);
	pool->n_workers = (size_t)idem_cfg_workers(cfg);
	pool->workers = calloc(pool->n_workers, sizeof(*pool->workers));
	if (pool->workers == NULL) {
		r = idem_error_nomem(err);
		goto out_free;
	}
	/* Every connection is opened (and every handler prepared) before anything is consumed,
	 * so a bad conninfo or handler fails here. */
	for (size_t i = 0; i < pool->n_workers; i++) {
		struct worker *w = &pool->workers[i];

		w->pool = pool;
		w->group = calloc(GROUP_MAX_BATCHES, sizeof(*w->group));
		w->batches = calloc(GROUP_MAX_BATCHES, sizeof(*w->batches));
		w->st = calloc(GROUP_MAX_BATCHES, sizeof(*w->st));
		w->rs = calloc(GROUP_MAX_BATCHES, sizeof(*w->rs));
		w->errs = calloc(GROUP_MAX_BATCHES, sizeof(*w->errs));
		if (w->group == NULL || w->batches == NULL || w->st == NULL || w->rs == NULL ||
		    w->errs == NULL) {
			r = idem_error_nomem(err);
			goto out_free;
		}
		if ((r = idem_flush_new(cfg, &w->pg, err)) != IDEM_OK)
			goto out_free;
		w->connected = 1;
		w->connects = idem_flush_connects(w->pg);
	}
	*ret_pool = pool;
	return IDEM_OK;

out_free:
	idem_pool_free(pool);
	return r;
}

const struct idem_pg_search_path *idem_pool_search_path(const idem_pool *pool)
{
	return idem_flush_search_path(pool->workers[0].pg);
}

size_t idem_pool_size(const idem_pool *pool)
{
	return pool->n_workers;
}

void idem_pool_submit(idem_pool *pool, struct idem_part *p)
{
	idem_batch_key_hashes(&p->inflight);
	pthread_mutex_lock(&pool->mu);
	*pool->ready_tail = p;
	pool->ready_tail = &p->job.next;
	pthread_cond_signal(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);
}

struct idem_part *idem_pool_collect(idem_pool *pool)
{
	struct idem_part *p;

	pthread_mutex_lock(&pool->mu);
	p = pool->done;
	pool->done = NULL;
	pool->done_tail = &pool->done;
	pthread_mutex_unlock(&pool->mu);
	return p;
}

void idem_pool_wait(idem_pool *pool, int ms)
{
	struct timespec ts = idem_cond_deadline(ms);

	pthread_mutex_lock(&pool->mu);
	if (pool->done == NULL)
		pthread_cond_timedwait(&pool->done_cv, &pool->mu, &ts);
	pthread_mutex_unlock(&pool->mu);
}

uint64_t idem_pool_reconnects(const idem_pool *pool)
{
	return __atomic_load_n(&pool->reconnects, __ATOMIC_RELAXED);
}

uint64_t idem_pool_late(const idem_pool *pool)
{
	return __atomic_load_n(&pool->late, __ATOMIC_RELAXED);
}

bool idem_pool_connected(const idem_pool *pool)
{
	for (size_t i = 0; i < pool->n_workers; i++) {
		if (!__atomic_load_n(&pool->workers[i].connected, __ATOMIC_RELAXED))
			return false;
	}
	return true;
}

int64_t idem_pool_stalled_ms(const struct idem_parts *ps, int64_t now_ms)
{
	int64_t oldest = 0;

	for (size_t i = 0; i < ps->n; i++) {
		const struct idem_part *p = ps->v[i];

		if (p->busy && now_ms - p->job.t0 > oldest)
			oldest = now_ms - p->job.t0;
	}
	return oldest;
}

/*
 * Take the next group of ready batches into @w's transaction, under pool->mu, and mark late the
 * keys that another worker's transaction claims too (idem_batch_mark_late()): @w's claim takes
 * them after its other keys (idem_bind_claim()), ARCHITECTURE.md "The transaction", 1. Each
 * worker's keys are one set (w->keys), so a group is marked with one probe per key and other
 * transaction, however many batches (partitions) each holds.
 */
static size_t take_group(idem_pool *pool, struct worker *w)
{
	size_t n = 0, msgs = 0, late = 0;
	size_t cap = (size_t)pool->cfg->batch_max_messages * IDEM_BATCH_GROW;

	while (pool->ready != NULL && n < GROUP_MAX_BATCHES &&
	       (n == 0 || msgs + pool->ready->inflight.n_msgs <= cap)) {
		struct idem_part *p = pool->ready;

		pool->ready = p->job.next;
		if (pool->ready == NULL)
			pool->ready_tail = &pool->ready;
		msgs += p->inflight.n_msgs;
		w->group[n++] = p;
	}
	w->n_group = n;
	for (size_t o = 0; o < pool->n_workers; o++) {
		const struct worker *other = &pool->workers[o];

		for (size_t i = 0; other != w && other->n_group > 0 && i < n; i++)
			late += idem_batch_mark_late(&w->group[i]->inflight, &other->keys);
	}
	/* Out of memory, the set is empty: the groups taken next do not wait for its keys
	 * last, only at them. */
	for (size_t i = 0; i < n; i++)
		w->batches[i] = &w->group[i]->inflight;
	(void)idem_keyset_build(&w->keys, w->batches, n);
	if (late > 0)
		__atomic_add_fetch(&pool->late, late, __ATOMIC_RELAXED);
	return n;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	idem_pool *pool = w->pool;
	struct idem_flush_stats *st = w->st;
	idem_status *rs = w->rs;
	idem_error *errs = w->errs;

	pthread_mutex_lock(&pool->mu);
	for (;;) {
		struct timespec idle_until = idem_cond_deadline(IDLE_CHECK_MS);
		int64_t begin_us, end_us;
		size_t n;

		/* Idle, the connection is checked every IDLE_CHECK_MS, so that readiness
		 * (idem_pool_connected()) says how it is now rather than as of the last commit: a
		 * connection dropped after a failed batch is reopened without waiting for work,
		 * and one the server closed meanwhile is noticed. */
		while (pool->ready == NULL && !pool->quit) {
			if (pthread_cond_timedwait(&pool->work_cv, &pool->mu, &idle_until) !=
			            ETIMEDOUT ||
			    pool->ready != NULL || pool->quit)
				continue;
			pthread_mutex_unlock(&pool->mu);
			__atomic_store_n(&w->connected, idem_flush_check(w->pg), __ATOMIC_RELAXED);
			count_reconnects(w);
			pthread_mutex_lock(&pool->mu);
			idle_until = idem_cond_deadline(IDLE_CHECK_MS);
		}
		if (pool->ready == NULL)
			break;
		n = take_group(pool, w);
		pthread_mutex_unlock(&pool->mu);

		begin_us = idem_mono_us();
		idem_flush_many(w->pg, w->batches, n, st, rs, errs);
		end_us = idem_mono_us();
		__atomic_store_n(&w->connected, idem_flush_connected(w->pg), __ATOMIC_RELAXED);
		count_reconnects(w);

		pthread_mutex_lock(&pool->mu);
		for (size_t i = 0; i < n; i++) {
			struct idem_part *p = w->group[i];

			p->job.r = rs[i];
			p->job.st = st[i];
			p->job.err = errs[i];
			p->job.begin_us = begin_us;
			p->job.end_us = end_us;
			p->job.next = NULL;
			*pool->done_tail = p;
			pool->done_tail = &p->job.next;
		}
		w->n_group = 0;
		idem_keyset_clear(&w->keys);
		pthread_cond_signal(&pool->done_cv);
		/* Wake the consumer thread out of its poll. */
		rd_kafka_queue_yield(pool->cq);
	}
	pthread_mutex_unlock(&pool->mu);
	return NULL;
}

idem_status idem_pool_start(idem_pool *pool, rd_kafka_t *rk, idem_error *err)
{
	pool->cq = rd_kafka_queue_get_consumer(rk);
	for (size_t i = 0; i < pool->n_workers; i++) {
		if (idem_thread_start(&pool->workers[i].thread, worker_main, &pool->workers[i]) !=
		    0)
			return idem_error_set(err, IDEM_ERR_NOMEM, "cannot start worker thread");
		pool->workers[i].started = true;
	}
	return IDEM_OK;
}

void idem_pool_stop(idem_pool *pool)
{
	if (pool == NULL)
		return;
	pthread_mutex_lock(&pool->mu);
	pool->quit = true;
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);
	for (size_t i = 0; pool->workers != NULL && i < pool->n_workers; i++) {
		if (pool->workers[i].started)
			pthread_join(pool->workers[i].thread, NULL);
		pool->workers[i].started = false;
	}
	if (pool->cq != NULL)
		rd_kafka_queue_destroy(pool->cq);
	pool->cq = NULL;
}

void idem_pool_free(idem_pool *pool)
{
	if (pool == NULL)
		return;
	idem_pool_stop(pool);
	for (size_t i = 0; pool->workers != NULL && i < pool->n_workers; i++) {
		struct worker *w = &pool->workers[i];

		idem_flush_free(w->pg);
		idem_keyset_free(&w->keys);
		free(w->group);
		free(w->batches);
		free(w->st);
		free(w->rs);
		free(w->errs);
	}
	free(pool->workers);
	pthread_cond_destroy(&pool->work_cv);
	pthread_cond_destroy(&pool->done_cv);
	pthread_mutex_destroy(&pool->mu);
	free(pool);
}
