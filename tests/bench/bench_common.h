/*
 * bench_common.h - helpers shared by the benchmark programs (tests/bench/README.md): clocks,
 * CPU accounting from /proc, decoding of the payment messages. idemd's own statements come from
 * lib/idem_sql.h, the very table idemd runs.
 *
 * Not part of libidem: nothing here is used by idemd itself.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "idem_batch.h"
#include "idem_bind.h"
#include "idem_common.h"
#include "idem_sql.h"

/*
 * The payments handlers, built from sql/examples/payments_row.sql and payments_set.sql:
 * row mode ($1 business key, $2 account, $3 amount) and set mode (the same as text[]).
 */
extern const char bench_sql_payments_row[];
extern const char bench_sql_payments_set[];

/* @brief Monotonic time in seconds. */
double bench_now(void);

/* @brief CPU seconds (user + system, all threads) this process has used so far. */
double bench_self_cpu(void);

/*
 * @brief CPU seconds used so far by process @pid (utime + stime from /proc/PID/stat, all its
 * threads); with @children also the CPU of its children that it has waited for.
 * @returns -1 if the process does not exist.
 */
double bench_proc_cpu(pid_t pid, bool children);

/*
 * @brief CPU seconds used so far by a Postgres cluster: the postmaster @postmaster with the
 * exited children it reaped, plus every living child (backends, walwriter, checkpointer,
 * autovacuum). The difference of two readings is the cluster's CPU in between.
 */
double bench_pg_cpu(pid_t postmaster);

/* @brief Peak resident set size (VmHWM) of @pid in KiB, or -1. */
long bench_proc_hwm_kib(pid_t pid);

/* One decoded payment message: what idemd extracts from it with the benchmark's route. */
struct bench_payment {
	char payment_id[64]; /* the business key, json:/payment_id */
	char account[64];    /* json:/account */
	char amount[24];     /* json:/amount, as decimal text */
	char hash[2 * IDEM_BATCH_HASH_BYTES +
	          1]; /* idemd's payload_hash of the value, lowercase hex */
};

/*
 * @brief Decode a payment value ({"payment_id":..,"account":..,"amount":..}) and hash it.
 * @returns false (and a message in @errbuf) if a field is missing or too long.
 */
bool bench_payment_decode(const void *value, size_t len, struct bench_payment *ret_pay,
                          char *errbuf, size_t errlen);

/* One message of a benchmark batch: where it was read and what idemd extracts from it. */
struct bench_msg {
	int32_t partition;
	int64_t offset;
	struct bench_payment pay;
};

enum bench_state { BENCH_PENDING, BENCH_DUP_IN_BATCH, BENCH_APPLIED };

/*
 * One transaction's messages of one partition, in offset order, claimed as idemd claims them
 * (the fast path of ARCHITECTURE.md, "The transaction"): keys sorted, a key given twice in the
 * batch kept at its lowest offset. The arrays hold at least @n elements each.
 */
struct bench_batch {
	const struct bench_msg *msgs;
	size_t n;
	enum bench_state *state;
	size_t *order; /* unique keys, sorted by key (the claim order) */
	size_t n_order;
	size_t *applied; /* newly claimed messages, in offset order */
	size_t n_applied;
};

/* The arrays a batch binds, reused from batch to batch. */
struct bench_bufs {
	struct idem_buf keys, offs, hashes;     /* the claim's (binary, as idem_bind_claim()) */
	struct idem_buf ids, accounts, amounts; /* the set handler's text[] */
};

/* @brief Every message pending; b->order = the unique keys sorted (as idem_batch_collapse). */
void bench_batch_collapse(struct bench_batch *b);

/*
 * @brief IDEM_SQL_CLAIM's parameters for @b (the arrays in @bf, the partition's text in @part):
 * @cv[0..5].
 */
void bench_claim_params(const struct bench_batch *b, const char *consumer, const char *topic,
                        struct bench_bufs *bf, char part[16], struct idem_bind_claim *cv);

/* @brief The claim's rows (the offsets newly claimed) applied: b->applied, in offset order. */
void bench_batch_claimed(struct bench_batch *b, const PGresult *res);

/*
 * @brief Round trip 1 of idemd's transaction in pipeline mode (entered here): BEGIN and the
 * claim with parameters @cv, then bench_batch_claimed(). false: a deadlock or serialization
 * failure; the caller then calls bench_pipeline_abort(conn, false) and runs the batch again.
 */
bool bench_claim_round_trip(PGconn *conn, struct bench_batch *b, const struct idem_bind_claim *cv);

/* @brief The set handler's text[] parameters over b->applied: @sv[0..2]. */
void bench_set_params(const struct bench_batch *b, struct bench_bufs *bf, const char *sv[3]);

void bench_bufs_done(struct bench_bufs *bf);

/* @brief idem_pgarray_add() of a C string, as lib/idem_pg.c builds its array literals. */
IDEM_NODISCARD idem_status bench_arr_add(struct idem_buf *a, const char *s);

/* @brief rd_kafka_conf_set(); exits the program with a message on failure. */
void bench_kafka_set(rd_kafka_conf_t *conf, const char *name, const char *value);

/* @brief Connect to @conninfo; exits the program with a message on failure. */
PGconn *bench_pg_connect(const char *conninfo);

/* @brief PQprepare @sql as @name; exits the program with a message on failure. */
void bench_pg_prepare(PGconn *conn, const char *name, const char *sql);

/* @brief Print "PROG: MESSAGE" on stderr and exit 1. */
IDEM_NORETURN void bench_die(const char *fmt, ...) IDEM_PRINTF(1, 2);

/* @brief Set the program name used in messages. */
void bench_set_prog(const char *name);

/*
 * @brief @out = idemd's payload hash of a value whose SHA-256 is @md (32 bytes): its first
 * IDEM_BATCH_HASH_BYTES bytes in lowercase hex, NUL-terminated.
 */
void bench_hash_hex(const unsigned char *md, char out[2 * IDEM_BATCH_HASH_BYTES + 1]);

/* @brief Is @res a deadlock or serialization failure, which a transaction is run again for? */
bool bench_retryable(const PGresult *res);

/*
 * @brief The next result of a pipeline, which must have status @want (@what names it): NULL for
 * a deadlock or serialization failure (the rest of that query's results drained), exits on any
 * other failure.
 */
PGresult *bench_next_result(PGconn *conn, ExecStatusType want, const char *what);

/*
 * @brief After a failure in pipeline mode: drain to the sync (sent first unless @sync_sent),
 * leave pipeline mode, roll back.
 */
void bench_pipeline_abort(PGconn *conn, bool sync_sent);

/* @brief Exit on IDEM_ERR_NOMEM (the benchmark does not recover from it). */
void bench_check(idem_status r);

#endif
