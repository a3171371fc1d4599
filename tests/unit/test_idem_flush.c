/*
 * Unit tests for idem_flush: how the batch transaction reads the answers of its round trips and
 * what it hands its statements, without a server (ARCHITECTURE.md "The transaction"). Answers are
 * real PGresults made by libpq's own constructors (PQmakeEmptyPGresult, PQsetResultAttrs,
 * PQsetvalue), as the server would have sent them; the steps are those of the fast path, in its
 * order: reset and collapse, the progress read and the floor, the claim's answer, the claims of
 * the duplicates and their classification, the handlers' results, the quarantine's answers, the
 * counters and the progress rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <arpa/inet.h>
#include <cmocka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "idem_flush_int.h"
#include "idem_sql.h"

/*
 * Four batches: payments/0 and payments/1 of route 0 (row mode, consumer c1), orders/0 and
 * orders/1 of route 1 (set mode, consumer c2), each in pg->many[k] in that order.
 */
#define N_BATCHES 4

struct fixture {
	struct idem_cfg cfg;
	struct idem_route routes[2];
	struct idem_field params[2];
	struct idem_batch b[N_BATCHES];
	idem_flush *pg;
};

static int setup(void **state)
{
	static struct fixture fx;
	static char rname0[] = "r0", rname1[] = "r1", cname1[] = "c1", cname2[] = "c2";
	static const char *const topics[N_BATCHES] = { "payments", "payments", "orders", "orders" };
	static const int32_t parts[N_BATCHES] = { 0, 1, 0, 1 };
	char errbuf[256];

	memset(&fx, 0, sizeof(fx));
	fx.cfg.max_key_bytes = 64;
	fx.cfg.max_message_bytes = 1024;
	fx.cfg.max_attempts = 3;
	fx.cfg.routes = fx.routes;
	fx.cfg.n_routes = 2;
	assert_int_equal(idem_field_parse("business_key", &fx.params[0], errbuf, sizeof(errbuf)),
	                 IDEM_OK);
	assert_int_equal(idem_field_parse("value", &fx.params[1], errbuf, sizeof(errbuf)), IDEM_OK);
	for (size_t r = 0; r < 2; r++) {
		struct idem_route *rt = &fx.routes[r];

		rt->name = r == 0 ? rname0 : rname1;
		rt->consumer = r == 0 ? cname1 : cname2;
		rt->handler_mode = r == 0 ? IDEM_CFG_MODE_ROW : IDEM_CFG_MODE_SET;
		rt->params = fx.params;
		rt->n_params = 2;
		assert_int_equal(idem_template_parse("${key}", &rt->key, errbuf, sizeof(errbuf)),
		                 IDEM_OK);
	}
	for (size_t k = 0; k < N_BATCHES; k++)
		assert_int_equal(idem_batch_init(&fx.b[k], &fx.routes[k / 2], topics[k], parts[k]),
		                 IDEM_OK);
	/* The session without its connection: idem_flush_free() frees what the flush grew. */
	fx.pg = calloc(1, sizeof(*fx.pg));
	assert_non_null(fx.pg);
	fx.pg->cfg = &fx.cfg;
	idem_bind_init(&fx.pg->bind);
	assert_int_equal(idem__flush_need_many(fx.pg, N_BATCHES), IDEM_OK);
	for (size_t k = 0; k < N_BATCHES; k++)
		fx.pg->many[k].b = &fx.b[k];
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	idem_flush_free(fx->pg);
	for (size_t k = 0; k < N_BATCHES; k++)
		idem_batch_done(&fx->b[k]);
	for (size_t r = 0; r < 2; r++)
		idem_template_done(&fx->routes[r].key);
	idem_field_done(&fx->params[0]);
	idem_field_done(&fx->params[1]);
	return 0;
}

/* Add a message to batch @k; @key NULL makes it undecodable (no business key). */
static void add(struct fixture *fx, size_t k, int64_t offset, const char *key, const char *value)
{
	struct idem_batch *b = &fx->b[k];
	struct idem_msgview m = { 0 };

	m.topic = b->topic;
	m.partition = b->partition;
	m.offset = offset;
	m.timestamp_ms = 1000;
	m.key = key;
	m.key_len = key ? strlen(key) : 0;
	m.value = value;
	m.value_len = strlen(value);
	assert_int_equal(idem_batch_add(b, &m, &fx->cfg, 0), IDEM_OK);
}

static struct flush_ctx *ctx_of(struct fixture *fx, size_t k)
{
	return &fx->pg->many[k];
}

/* What the fast path does to a batch before round trip 1: reset, collapse, room for indices. */
static void prep(struct fixture *fx, size_t k)
{
	struct flush_ctx *ctx = ctx_of(fx, k);

	idem__flush_reset(ctx);
	assert_int_equal(idem_batch_collapse(ctx->b), IDEM_OK);
	assert_int_equal(idem__flush_need_idx(ctx, ctx->b->n_msgs), IDEM_OK);
}

static const char *hash_of(const struct idem_batch *b, size_t i)
{
	return idem_batch_ptr(b, b->msgs[i].hash);
}

/*
 * A result as libpq would have read it from the server: @nf text columns, @nrows rows of
 * cells[row * nf + field], NULL for SQL NULL. Built by libpq itself; the caller clears it.
 */
static PGresult *result(int nf, int nrows, const char *const *cells)
{
	static char name[] = "col";
	PGresAttDesc attrs[8];
	PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);

	assert_non_null(res);
	assert_true(nf > 0 && nf <= 8);
	for (int f = 0; f < nf; f++)
		attrs[f] = (PGresAttDesc){
			.name = name, .format = 0, .typid = 25, .typlen = -1, .atttypmod = -1
		};
	assert_int_equal(PQsetResultAttrs(res, nf, attrs), 1);
	for (int r = 0; r < nrows; r++) {
		for (int f = 0; f < nf; f++) {
			const char *v = cells[r * nf + f];
			char buf[256];

			/* PQsetvalue() copies the value, but takes it as char *. */
			if (v != NULL)
				snprintf(buf, sizeof(buf), "%s", v);
			assert_int_equal(
			        PQsetvalue(res, r, f, v ? buf : NULL, v ? (int)strlen(v) : -1), 1);
		}
	}
	return res;
}

/*
 * The claim's answer for one batch (IDEM_SQL_CLAIM: the offsets newly claimed): exactly the
 * messages at the offsets it returns are APPLIED, in offset order whatever the rows' order; the
 * other claimed keys ran into a claim (DUPLICATE); an in-batch duplicate and an undecodable
 * message keep their state.
 */
static void test_claim_single_batch(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	static const char *const rows[] = { "13", "10" };
	PGresult *res;
	idem_error err = { 0 };

	add(fx, 0, 10, "a", "v");
	add(fx, 0, 11, "b", "v");
	add(fx, 0, 12, "a", "v");
	add(fx, 0, 13, "c", "v");
	add(fx, 0, 14, NULL, "v");
	prep(fx, 0);
	assert_int_equal(b->n_order, 3);
	res = result(1, 2, rows);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, &err), IDEM_OK);
	PQclear(res);
	idem__flush_split_claimed(ctx);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_APPLIED);
	assert_int_equal(b->msgs[1].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b->msgs[2].state, IDEM_MSG_DUP_IN_BATCH);
	assert_int_equal(b->msgs[2].winner, 0);
	assert_int_equal(b->msgs[3].state, IDEM_MSG_APPLIED);
	assert_int_equal(b->msgs[4].state, IDEM_MSG_BAD);
	/* The handlers run in offset order, not in the order the claim returned the keys. */
	assert_int_equal(ctx->n_apply, 2);
	assert_int_equal(ctx->applied[0], 0);
	assert_int_equal(ctx->applied[1], 3);
	assert_int_equal(err.code, IDEM_OK); /* written only on failure */
}

/* Nothing claimed (every key known already): every message with a key is a duplicate. */
static void test_claim_nothing_new(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	PGresult *res;

	add(fx, 0, 1, "a", "v");
	add(fx, 0, 2, "b", "v");
	prep(fx, 0);
	res = result(1, 0, NULL);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, NULL), IDEM_OK);
	PQclear(res);
	idem__flush_split_claimed(ctx);
	assert_int_equal(ctx->n_apply, 0);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b->msgs[1].state, IDEM_MSG_DUPLICATE);
}

/*
 * An offset the claim returns that is no message's being claimed fails the flush: its claim
 * would commit without its handler. So does the offset of a message that was not claimed (an
 * in-batch duplicate), and text that is no offset.
 */
static void test_claim_unknown_offset_fails(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	static const char *const other[] = { "2" }, *const in_batch[] = { "3" },
	                         *const junk[] = { "1x" };
	PGresult *res;
	idem_error err = { 0 };

	add(fx, 0, 1, "ab", "v");
	add(fx, 0, 3, "ab", "v");
	prep(fx, 0);
	res = result(1, 1, other);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, &err), IDEM_ERR_PG);
	PQclear(res);
	assert_int_equal(err.code, IDEM_ERR_PG);
	assert_non_null(strstr(err.msg, "partition 0 offset 2 of no message"));
	res = result(1, 1, in_batch);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, &err), IDEM_ERR_PG);
	PQclear(res);
	assert_non_null(strstr(err.msg, "offset 3 of no message"));
	res = result(1, 1, junk);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, &err), IDEM_ERR_PG);
	PQclear(res);
	assert_non_null(strstr(err.msg, "offset 1x of no message"));
	assert_int_equal(ctx->b->msgs[0].state, IDEM_MSG_PENDING);
}

/* How many elements the claim's binary array parameter @p of element type @oid has. */
static size_t bin_count(const struct idem_bind_claim *c, int p, uint32_t oid)
{
	const unsigned char *u = (const unsigned char *)c->vals[p];
	const char *e;
	size_t n, count = 0;
	bool null;

	assert_int_equal(c->fmts[p], 1);
	assert_true(c->lens[p] >= 12);
	assert_int_equal((uint32_t)u[8] << 24 | (uint32_t)u[9] << 16 | (uint32_t)u[10] << 8 | u[11],
	                 oid);
	(void)idem_pgbin_get(c->vals[p], (size_t)c->lens[p], 0, &e, &n, &null, &count);
	return count;
}

/* The claim's binary array parameter @p as {a,b,...} in @out[256]: text as is, numbers. */
static const char *bin_text(const struct idem_bind_claim *c, int p, uint32_t oid, char *out)
{
	size_t count = bin_count(c, p, oid), len = 0;

	out[len++] = '{';
	for (size_t k = 0; k < count; k++) {
		const char *e;
		size_t n;
		bool null;
		int64_t v = 0;

		assert_true(idem_pgbin_get(c->vals[p], (size_t)c->lens[p], k, &e, &n, &null, NULL));
		assert_false(null);
		if (k > 0)
			out[len++] = ',';
		if (oid == IDEM_OID_TEXT) {
			assert_true(len + n < 250);
			memcpy(out + len, e, n);
			len += n;
			continue;
		}
		assert_int_equal(n, oid == IDEM_OID_INT4 ? 4 : 8);
		for (size_t i = 0; i < n; i++)
			v = v << 8 | (unsigned char)e[i];
		len += (size_t)snprintf(out + len, 256 - len, "%" PRId64, v);
	}
	out[len++] = '}';
	out[len] = '\0';
	return out;
}

/*
 * What IDEM_SQL_CLAIM_MANY is given for several batches: every key with its own consumer, topic,
 * partition and offset, in one global order (key bytes, consumer, batch), so that the first
 * batch wins a key two batches of one consumer carry.
 */
static void test_claim_many_arrays(void **state)
{
	struct fixture *fx = *state;
	const struct idem_batch *const *list;
	struct idem_bind_claim c;
	char t[256];
	bool one = true;

	add(fx, 0, 5, "k", "v");
	add(fx, 0, 6, "n", "v");
	add(fx, 1, 7, "k", "v");
	add(fx, 1, 8, "m", "v");
	add(fx, 2, 1, "k", "v");
	for (size_t k = 0; k < 3; k++)
		prep(fx, k);
	list = idem__flush_batch_list(fx->pg, fx->pg->many, 3);
	assert_ptr_equal(list, fx->pg->many_b);
	assert_ptr_equal(list[1], &fx->b[1]);
	assert_int_equal(idem_bind_claim_many(&fx->pg->bind, list, 3, 5, &c, &one), IDEM_OK);
	assert_false(one);
	assert_string_equal(bin_text(&c, 0, IDEM_OID_TEXT, t), "{c1,c1,c2,c1,c1}");
	assert_string_equal(bin_text(&c, 1, IDEM_OID_TEXT, t), "{k,k,k,m,n}");
	assert_string_equal(bin_text(&c, 2, IDEM_OID_TEXT, t),
	                    "{payments,payments,orders,payments,payments}");
	assert_string_equal(bin_text(&c, 3, IDEM_OID_INT4, t), "{0,1,0,1,0}");
	assert_string_equal(bin_text(&c, 4, IDEM_OID_INT8, t), "{5,7,1,8,6}");
	assert_int_equal(bin_count(&c, 5, IDEM_OID_BYTEA), 5);
	/* The first two batches share consumer c1 and topic payments: IDEM_SQL_CLAIM_PARTS takes
	 * both once, as text, the rest per key as before. */
	assert_int_equal(idem_bind_claim_many(&fx->pg->bind, list, 2, 4, &c, &one), IDEM_OK);
	assert_true(one);
	assert_string_equal(c.vals[0], "c1");
	assert_int_equal(c.fmts[0], 0);
	assert_string_equal(bin_text(&c, 1, IDEM_OID_TEXT, t), "{k,k,m,n}");
	assert_string_equal(c.vals[2], "payments");
	assert_int_equal(c.fmts[2], 0);
	assert_string_equal(bin_text(&c, 3, IDEM_OID_INT4, t), "{0,1,1,0}");
	assert_string_equal(bin_text(&c, 4, IDEM_OID_INT8, t), "{5,7,8,6}");
	assert_int_equal(bin_count(&c, 5, IDEM_OID_BYTEA), 4);
	/* Keys another transaction in flight claims too (c1's k and n) come last, in the same
	 * order among themselves. */
	list = idem__flush_batch_list(fx->pg, fx->pg->many, 3);
	fx->b[0].msgs[0].late = fx->b[0].msgs[1].late = fx->b[1].msgs[0].late = true;
	assert_int_equal(idem_bind_claim_many(&fx->pg->bind, list, 3, 5, &c, &one), IDEM_OK);
	assert_string_equal(bin_text(&c, 0, IDEM_OID_TEXT, t), "{c2,c1,c1,c1,c1}");
	assert_string_equal(bin_text(&c, 1, IDEM_OID_TEXT, t), "{k,m,k,k,n}");
	assert_string_equal(bin_text(&c, 4, IDEM_OID_INT8, t), "{1,8,5,7,6}");
	/* One batch alone uses pg->one's list. */
	fx->pg->one.b = &fx->b[3];
	list = idem__flush_batch_list(fx->pg, &fx->pg->one, 1);
	assert_ptr_equal(list, fx->pg->one_b);
	assert_ptr_equal(list[0], &fx->b[3]);
}

/*
 * IDEM_SQL_CLAIM_MANY's answer (partition, offset, topic): each row marks the message of the
 * batch it names, by topic and partition both; the same key in another batch is a duplicate. A
 * row naming a partition not in the transaction fails. IDEM_SQL_CLAIM_PARTS's rows have no
 * topic: it is the batches' one.
 */
static void test_claim_many_rows_name_their_batch(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	struct idem_batch *b = fx->b;
	/* The server's answer to test_claim_many_arrays' claim, out of order. */
	static const char *const first[] = {
		"0", "6", "payments", "0", "1", "orders",
		"1", "8", "payments", "0", "5", "payments",
	};
	/* Had the answer named payments/1 for k, its message would be the one applied: the
	 * row decides, not the order of the batches. */
	static const char *const second[] = { "1", "7", "payments" };
	static const char *const stranger[] = { "9", "7", "payments" };
	/* The same answers without topics (IDEM_SQL_CLAIM_PARTS): batches 0 and 1 only. */
	static const char *const parts[] = { "1", "8", "0", "5" };
	PGresult *res;
	idem_error err = { 0 };

	add(fx, 0, 5, "k", "v");
	add(fx, 0, 6, "n", "v");
	add(fx, 1, 7, "k", "v");
	add(fx, 1, 8, "m", "v");
	add(fx, 2, 1, "k", "v");
	for (size_t k = 0; k < 3; k++)
		prep(fx, k);
	res = result(3, 4, first);
	assert_int_equal(idem__flush_mark_claimed(ctx, 3, res, &err), IDEM_OK);
	PQclear(res);
	for (size_t k = 0; k < 3; k++)
		idem__flush_split_claimed(&ctx[k]);
	assert_int_equal(b[0].msgs[0].state, IDEM_MSG_APPLIED);
	assert_int_equal(b[0].msgs[1].state, IDEM_MSG_APPLIED);
	assert_int_equal(b[1].msgs[0].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b[1].msgs[1].state, IDEM_MSG_APPLIED);
	assert_int_equal(b[2].msgs[0].state, IDEM_MSG_APPLIED);
	assert_int_equal(ctx[0].n_apply, 2);
	assert_int_equal(ctx[1].n_apply, 1);
	assert_int_equal(ctx[1].applied[0], 1);
	assert_int_equal(ctx[2].n_apply, 1);

	/* Another attempt starts from the decoded state: nothing of the first one is left. */
	for (size_t k = 0; k < 3; k++)
		prep(fx, k);
	assert_int_equal(b[1].msgs[0].state, IDEM_MSG_PENDING);
	res = result(3, 1, second);
	assert_int_equal(idem__flush_mark_claimed(ctx, 3, res, &err), IDEM_OK);
	PQclear(res);
	for (size_t k = 0; k < 3; k++)
		idem__flush_split_claimed(&ctx[k]);
	assert_int_equal(b[0].msgs[0].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b[1].msgs[0].state, IDEM_MSG_APPLIED);
	assert_int_equal(b[2].msgs[0].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(ctx[0].n_apply, 0);
	assert_int_equal(ctx[1].n_apply, 1);
	assert_int_equal(ctx[1].applied[0], 0);

	prep(fx, 0);
	res = result(3, 1, stranger);
	assert_int_equal(idem__flush_mark_claimed(ctx, 3, res, &err), IDEM_ERR_PG);
	PQclear(res);
	assert_non_null(strstr(err.msg, "partition 9 offset 7 of no message"));

	for (size_t k = 0; k < 2; k++)
		prep(fx, k);
	res = result(2, 2, parts);
	assert_int_equal(idem__flush_mark_claimed(ctx, 2, res, &err), IDEM_OK);
	PQclear(res);
	for (size_t k = 0; k < 2; k++)
		idem__flush_split_claimed(&ctx[k]);
	assert_int_equal(b[0].msgs[0].state, IDEM_MSG_APPLIED);
	assert_int_equal(b[0].msgs[1].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b[1].msgs[0].state, IDEM_MSG_DUPLICATE);
	assert_int_equal(b[1].msgs[1].state, IDEM_MSG_APPLIED);
}

/* The batch of a combined transaction with a topic and a partition: both must match. */
static void test_ctx_find(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;

	assert_ptr_equal(idem__flush_ctx_find(ctx, N_BATCHES, "payments", 1), &ctx[1]);
	assert_ptr_equal(idem__flush_ctx_find(ctx, N_BATCHES, "orders", 0), &ctx[2]);
	assert_null(idem__flush_ctx_find(ctx, N_BATCHES, "orders", 2));
	assert_null(idem__flush_ctx_find(ctx, N_BATCHES, "payment", 0));
	/* Only the first n are searched. */
	assert_null(idem__flush_ctx_find(ctx, 3, "orders", 1));
}

/*
 * IDEM_SQL_PROGRESS_GET's rows (next_offset, replay_to, reapply_to), one per batch in order:
 * NULL (no row, nothing pending) is -1, and a batch beyond the rows gets -1 too, whatever an
 * earlier attempt had read.
 */
static void test_read_progress(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	static const char *const rows[] = { "120", "130", NULL, NULL, NULL, "77" };
	PGresult *res;

	for (size_t k = 0; k < 3; k++) {
		ctx[k].progress_next = 5;
		ctx[k].replay_to = 5;
		ctx[k].reapply_to = 5;
	}
	res = result(3, 2, rows);
	idem__flush_read_progress(ctx, 3, res);
	PQclear(res);
	assert_int_equal(ctx[0].progress_next, 120);
	assert_int_equal(ctx[0].replay_to, 130);
	assert_int_equal(ctx[0].reapply_to, -1);
	assert_int_equal(ctx[1].progress_next, -1);
	assert_int_equal(ctx[1].replay_to, -1);
	assert_int_equal(ctx[1].reapply_to, 77);
	assert_int_equal(ctx[2].progress_next, -1);
	assert_int_equal(ctx[2].replay_to, -1);
	assert_int_equal(ctx[2].reapply_to, -1);
}

/*
 * The floor (ARCHITECTURE.md "When the database goes back"): a recorded next_offset below the
 * batch's db_floor, or no row where there was a floor, is IDEM_ERR_BEHIND, naming both
 * positions; at the floor, above it, or without a floor it is fine. Every batch learns where the
 * database stands (db_next).
 */
static void test_floor(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	idem_error err = { 0 };

	fx->b[0].db_floor = 100;
	ctx[0].progress_next = 100;
	fx->b[1].db_floor = -1;
	ctx[1].progress_next = -1;
	fx->b[2].db_floor = 40;
	ctx[2].progress_next = 41;
	assert_int_equal(idem__flush_check_floor(ctx, 3, &err), IDEM_OK);
	assert_int_equal(err.code, IDEM_OK);
	assert_false(ctx[0].behind || ctx[1].behind || ctx[2].behind);
	assert_int_equal(fx->b[0].db_next, 100);
	assert_int_equal(fx->b[1].db_next, -1);
	assert_int_equal(fx->b[2].db_next, 41);

	ctx[1].progress_next = 99;
	fx->b[1].db_floor = 100;
	assert_int_equal(idem__flush_check_floor(ctx, 3, &err), IDEM_ERR_BEHIND);
	assert_int_equal(err.code, IDEM_ERR_BEHIND);
	assert_false(ctx[0].behind);
	assert_true(ctx[1].behind);
	assert_false(ctx[2].behind);
	assert_int_equal(fx->b[1].db_next, 99);
	assert_non_null(strstr(err.msg, "topic=payments partition=1 next_offset=99"));
	assert_non_null(strstr(err.msg, "where this process saw 100"));

	/* The database has no row at all where this process saw one. */
	ctx[1].behind = false;
	ctx[1].progress_next = -1;
	assert_int_equal(idem__flush_check_floor(ctx, 2, &err), IDEM_ERR_BEHIND);
	assert_true(ctx[1].behind);
	assert_int_equal(fx->b[1].db_next, -1);
}

/*
 * The claims of the duplicates (IDEM_SQL_CLAIMS_GET: business_key, topic, partition, offset,
 * payload_hash) and their classification against the partition's recorded progress (12): this
 * message's own claim a redelivery, another's below the progress a replay, anything else
 * upstream (another topic at the same partition and offset included, and a claim gone); an
 * in-batch duplicate by its winner's claim, made in this very transaction when the winner was
 * applied; a payload that differs from its claim's is counted.
 */
static void test_dup_classification(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	static const char *const claimed[] = { "8" };
	static const char zero_hash[] = "00000000000000000000000000000000";
	PGresult *res;
	idem_error err = { 0 };

	fx->b[0].partition = 3;
	add(fx, 0, 8, "x", "vx");  /* 0: applied now */
	add(fx, 0, 9, "x", "vy");  /* 1: in-batch duplicate of it, other payload: replay */
	add(fx, 0, 10, "a", "va"); /* 2: its own claim: redelivery */
	add(fx, 0, 11, "b", "vb"); /* 3: claimed at offset 4: replay (below 12) */
	add(fx, 0, 12, "c", "vc"); /* 4: claimed on partition 0: upstream */
	add(fx, 0, 13, "d", "vd"); /* 5: claimed on another topic, other payload */
	add(fx, 0, 14, "e", "ve"); /* 6: claim gone (purged): no row */
	add(fx, 0, 15, "b", "vz"); /* 7: in-batch duplicate of b, other payload */
	prep(fx, 0);
	res = result(1, 1, claimed);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, &err), IDEM_OK);
	PQclear(res);
	idem__flush_split_claimed(ctx);
	assert_int_equal(b->msgs[7].state, IDEM_MSG_DUP_IN_BATCH);
	assert_int_equal(b->msgs[7].winner, 3);

	/* Round trip 2 asks for the duplicates' claims, sorted by key. */
	assert_int_equal(idem_bind_dup_keys(&fx->pg->bind, b, ctx->dups, &ctx->n_dups), IDEM_OK);
	assert_int_equal(ctx->n_dups, 5);
	assert_string_equal(fx->pg->bind.dkeys.data, "{\"a\",\"b\",\"c\",\"d\",\"e\"}");
	/* The answer, in no particular order. */
	const char *rows[] = {
		"d",           "other", "3",           "13", zero_hash,  "c",           "payments",
		"0",           "12",    hash_of(b, 4), "a",  "payments", "3",           "10",
		hash_of(b, 2), "b",     "payments",    "3",  "4",        hash_of(b, 3),
	};
	res = result(5, 4, rows);
	assert_int_equal(idem__flush_read_claims(ctx, res), IDEM_OK);
	PQclear(res);
	assert_true(b->msgs[2].claim.found && b->msgs[2].claim.same_topic);
	assert_int_equal(b->msgs[2].claim.offset, 10);
	assert_int_equal(b->msgs[3].claim.offset, 4);
	assert_int_equal(b->msgs[4].claim.partition, 0);
	assert_false(b->msgs[5].claim.same_topic);
	assert_string_equal(idem_batch_ptr(b, b->msgs[5].claim.topic), "other");
	assert_false(b->msgs[6].claim.found);
	assert_false(b->msgs[0].claim.found); /* applied: not a duplicate */

	ctx->progress_next = 12;
	assert_int_equal(idem_batch_classify(b, ctx->progress_next, ctx->replay_to), IDEM_OK);
	assert_int_equal(b->msgs[0].dup, IDEM_DUP_NONE);
	assert_int_equal(b->msgs[1].dup, IDEM_DUP_REPLAY);
	assert_int_equal(b->msgs[2].dup, IDEM_DUP_REDELIVERY);
	assert_int_equal(b->msgs[3].dup, IDEM_DUP_REPLAY);
	assert_int_equal(b->msgs[4].dup, IDEM_DUP_UPSTREAM);
	assert_int_equal(b->msgs[5].dup, IDEM_DUP_UPSTREAM);
	assert_int_equal(b->msgs[6].dup, IDEM_DUP_UPSTREAM);
	assert_int_equal(b->msgs[7].dup, IDEM_DUP_UPSTREAM);
	/* x@9's payload against x@8's, claimed in this very transaction. */
	assert_true(b->msgs[1].mismatch);
	for (size_t i = 2; i < 5; i++)
		assert_false(b->msgs[i].mismatch);
	assert_true(b->msgs[5].mismatch);
	assert_false(b->msgs[6].mismatch); /* unknown claim: nothing to compare */
	assert_true(b->msgs[7].mismatch);  /* vz against b's claim of vb */
	/* on_payload_mismatch: log: counted, not quarantined. */
	assert_int_equal(b->msgs[5].state, IDEM_MSG_DUPLICATE);

	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.consumed, 8);
	assert_int_equal(ctx->st.applied, 1);
	assert_int_equal(ctx->st.duplicates, 7);
	assert_int_equal(ctx->st.dup_redelivery, 1);
	assert_int_equal(ctx->st.dup_replay, 2);
	assert_int_equal(ctx->st.dup_upstream, 4);
	assert_int_equal(ctx->st.payload_mismatches, 3);
	assert_int_equal(ctx->st.quarantined, 0);
	assert_int_equal(ctx->st.next_offset, 16);
}

/*
 * A range an operator replays (replay_to recorded): a duplicate below its end is a replay, even
 * of its own claim; at or beyond it, as without a replay. The replay comes from
 * IDEM_SQL_PROGRESS_GET's row as the fast path reads it.
 */
static void test_dup_replay_to(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	static const char *const progress[] = { "5", "11", NULL };
	PGresult *res;

	add(fx, 0, 10, "a", "va"); /* own claim, below replay_to */
	add(fx, 0, 11, "b", "vb"); /* own claim, at replay_to */
	prep(fx, 0);
	res = result(3, 1, progress);
	idem__flush_read_progress(ctx, 1, res);
	PQclear(res);
	assert_int_equal(ctx->replay_to, 11);
	res = result(1, 0, NULL);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, NULL), IDEM_OK);
	PQclear(res);
	idem__flush_split_claimed(ctx);
	assert_int_equal(idem_bind_dup_keys(&fx->pg->bind, b, ctx->dups, &ctx->n_dups), IDEM_OK);
	const char *rows[] = {
		"a", "payments", "0", "10", hash_of(b, 0),
		"b", "payments", "0", "11", hash_of(b, 1),
	};
	res = result(5, 2, rows);
	assert_int_equal(idem__flush_read_claims(ctx, res), IDEM_OK);
	PQclear(res);
	assert_int_equal(idem_batch_classify(b, ctx->progress_next, ctx->replay_to), IDEM_OK);
	assert_int_equal(b->msgs[0].dup, IDEM_DUP_REPLAY);
	assert_int_equal(b->msgs[1].dup, IDEM_DUP_REDELIVERY);
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.dup_replay, 1);
	assert_int_equal(ctx->st.dup_redelivery, 1);
}

/*
 * Several batches of one consumer share one claims lookup: the one answer is read for each of
 * them, and a key claimed on payments/0 is a redelivery there but upstream on payments/1. A claim
 * without a payload hash differs from a message with a value.
 */
static void test_dup_lookup_shared_by_consumer(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	struct idem_batch *b = fx->b;
	static const char *const rows[] = { "k", "payments", "0", "5", NULL };
	PGresult *res;

	add(fx, 0, 5, "k", "v");
	add(fx, 1, 7, "k", "v");
	for (size_t k = 0; k < 2; k++) {
		prep(fx, k);
		res = result(1, 0, NULL);
		assert_int_equal(idem__flush_mark_claimed(&ctx[k], 1, res, NULL), IDEM_OK);
		PQclear(res);
		idem__flush_split_claimed(&ctx[k]);
	}
	assert_int_equal(idem_bind_dup_keys_open(&fx->pg->bind), IDEM_OK);
	for (size_t k = 0; k < 2; k++)
		assert_int_equal(
		        idem_bind_dup_keys_add(&fx->pg->bind, &b[k], ctx[k].dups, &ctx[k].n_dups),
		        IDEM_OK);
	assert_int_equal(idem_bind_dup_keys_close(&fx->pg->bind), IDEM_OK);
	assert_string_equal(fx->pg->bind.dkeys.data, "{\"k\",\"k\"}");
	res = result(5, 1, rows);
	for (size_t k = 0; k < 2; k++) {
		assert_int_equal(idem__flush_read_claims(&ctx[k], res), IDEM_OK);
		assert_int_equal(idem_batch_classify(&b[k], -1, -1), IDEM_OK);
	}
	PQclear(res);
	assert_int_equal(b[0].msgs[0].dup, IDEM_DUP_REDELIVERY);
	assert_int_equal(b[1].msgs[0].dup, IDEM_DUP_UPSTREAM);
	assert_true(b[0].msgs[0].claim.hash.null);
	assert_true(b[0].msgs[0].mismatch);
	assert_true(b[1].msgs[0].mismatch);
}

/*
 * On the slow path every message claims on its own, so several duplicates of one batch may carry
 * the same key: the claim found for it is recorded on each, and classified for each.
 */
static void test_dup_same_key_slow_path(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	PGresult *res;

	add(fx, 0, 3, "k", "v");
	add(fx, 0, 4, "j", "v");
	add(fx, 0, 5, "k", "v");
	idem__flush_reset(ctx);
	assert_int_equal(idem__flush_need_idx(ctx, b->n_msgs), IDEM_OK);
	for (size_t i = 0; i < 3; i++)
		b->msgs[i].state = IDEM_MSG_DUPLICATE;
	assert_int_equal(idem_bind_dup_keys(&fx->pg->bind, b, ctx->dups, &ctx->n_dups), IDEM_OK);
	assert_int_equal(ctx->n_dups, 3);
	const char *rows[] = { "k", "payments", "0", "5", hash_of(b, 2) };
	res = result(5, 1, rows);
	assert_int_equal(idem__flush_read_claims(ctx, res), IDEM_OK);
	PQclear(res);
	assert_true(b->msgs[0].claim.found);
	assert_true(b->msgs[2].claim.found);
	assert_false(b->msgs[1].claim.found);
	assert_int_equal(idem_batch_classify(b, 4, -1), IDEM_OK);
	assert_int_equal(b->msgs[0].dup, IDEM_DUP_REPLAY);
	assert_int_equal(b->msgs[1].dup, IDEM_DUP_UPSTREAM);
	assert_int_equal(b->msgs[2].dup, IDEM_DUP_REDELIVERY);
}

/*
 * on_payload_mismatch: quarantine: a duplicate whose payload differs from its claim's becomes
 * BAD, with a reason naming where the key was applied, and is counted as quarantined (and as a
 * mismatch), not as a duplicate.
 */
static void test_mismatch_quarantined(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	static const char zero_hash[] = "00000000000000000000000000000000";
	static const char *const rows[] = { "d", "other", "3", "13", zero_hash };
	PGresult *res;

	fx->routes[0].on_payload_mismatch = IDEM_CFG_MISMATCH_QUARANTINE;
	add(fx, 0, 20, "d", "vd");
	prep(fx, 0);
	res = result(1, 0, NULL);
	assert_int_equal(idem__flush_mark_claimed(ctx, 1, res, NULL), IDEM_OK);
	PQclear(res);
	idem__flush_split_claimed(ctx);
	assert_int_equal(idem_bind_dup_keys(&fx->pg->bind, b, ctx->dups, &ctx->n_dups), IDEM_OK);
	res = result(5, 1, rows);
	assert_int_equal(idem__flush_read_claims(ctx, res), IDEM_OK);
	PQclear(res);
	assert_int_equal(idem_batch_classify(b, -1, -1), IDEM_OK);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_BAD);
	assert_non_null(strstr(idem_batch_ptr(b, b->msgs[0].reason), "payload mismatch"));
	assert_non_null(strstr(idem_batch_ptr(b, b->msgs[0].reason),
	                       "from topic 'other' partition 3 offset 13"));
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.quarantined, 1);
	assert_int_equal(ctx->st.duplicates, 0);
	assert_int_equal(ctx->st.payload_mismatches, 1);
}

/*
 * The quarantine insert's answer (RETURNING xmax = 0): "t" is a new row, a new quarantine; "f"
 * is a position idem.quarantine had already, a redelivery, counted as a duplicate and not
 * quarantined again. Committed, the bad messages are QUARANTINED.
 */
static void test_quarantine_answers(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	static const char *const is_new[] = { "t" }, *const was_there[] = { "f" };
	struct idem_flush_stats st;
	PGresult *res;

	add(fx, 0, 1, NULL, "v");
	add(fx, 0, 2, NULL, "v");
	add(fx, 0, 3, "a", "v");
	prep(fx, 0);
	ctx->b->msgs[2].state = IDEM_MSG_APPLIED;
	res = result(1, 1, is_new);
	idem__flush_quarantine_answer(&b->msgs[0], res);
	PQclear(res);
	res = result(1, 1, was_there);
	idem__flush_quarantine_answer(&b->msgs[1], res);
	PQclear(res);
	assert_false(b->msgs[0].quarantined_before);
	assert_int_equal(b->msgs[0].dup, IDEM_DUP_NONE);
	assert_true(b->msgs[1].quarantined_before);
	assert_int_equal(b->msgs[1].dup, IDEM_DUP_REDELIVERY);
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.consumed, 3);
	assert_int_equal(ctx->st.applied, 1);
	assert_int_equal(ctx->st.quarantined, 1);
	assert_int_equal(ctx->st.duplicates, 1);
	assert_int_equal(ctx->st.dup_redelivery, 1);
	assert_int_equal(ctx->st.dup_upstream, 0);
	idem__flush_done(ctx, &st);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_QUARANTINED);
	assert_int_equal(b->msgs[1].state, IDEM_MSG_QUARANTINED);
	assert_int_equal(b->msgs[2].state, IDEM_MSG_APPLIED);
	assert_int_equal(st.quarantined, 1);
	assert_int_equal(st.dup_redelivery, 1);
	assert_int_equal(st.next_offset, 4);
}

/*
 * What IDEM_SQL_PROGRESS is given: per partition, sorted by consumer, topic and partition,
 * next_offset and the eight counters in the columns' order (consumed, applied, duplicates,
 * quarantined, redelivery, replay, upstream, mismatches); no halt; a gap's end only where the
 * batch stops before it.
 */
static void test_progress_rows(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	struct idem_bind_progress pr[2];
	const char *v[IDEM_BIND_PROGRESS_PARAMS];

	add(fx, 0, 10, "a", "v");
	add(fx, 0, 11, NULL, "v");
	add(fx, 0, 12, "b", "v");
	add(fx, 0, 13, "c", "v");
	add(fx, 0, 14, "d", "v");
	add(fx, 0, 15, "e", "v");
	add(fx, 1, 40, "z", "v");
	prep(fx, 0);
	prep(fx, 1);
	fx->b[0].msgs[0].state = IDEM_MSG_APPLIED;
	fx->b[0].msgs[2].state = IDEM_MSG_DUPLICATE;
	fx->b[0].msgs[2].dup = IDEM_DUP_REPLAY;
	fx->b[0].msgs[3].state = IDEM_MSG_DUPLICATE;
	fx->b[0].msgs[3].dup = IDEM_DUP_REDELIVERY;
	fx->b[0].msgs[3].mismatch = true;
	fx->b[0].msgs[4].state = IDEM_MSG_DUPLICATE;
	fx->b[0].msgs[4].dup = IDEM_DUP_REPLAY;
	/* A duplicate left unclassified (its claim purged meanwhile) counts as upstream. */
	fx->b[0].msgs[5].state = IDEM_MSG_DUPLICATE;
	fx->b[1].msgs[0].state = IDEM_MSG_APPLIED;
	fx->b[1].reapply_to = 45; /* the gap's end goes beyond payments/1's batch */
	/* The Kafka cluster each batch's offsets are in; NULL when unknown. */
	fx->b[0].kafka_cluster = "mockCluster1";
	fx->b[1].kafka_cluster = "";
	/* What a row the batch inserts records: the first start, the group, the log's epoch. */
	fx->b[0].log_first = 3;
	fx->b[0].group_id = "g-pay";
	fx->b[0].log_epoch = 2;
	fx->b[1].log_first = -1;
	fx->b[1].group_id = NULL;
	fx->b[1].log_epoch = 0;
	/* In reverse order: the statement gets them sorted. */
	for (size_t k = 0; k < 2; k++) {
		idem__flush_finish_stats(&ctx[1 - k]);
		pr[k] = idem__flush_progress_row(&ctx[1 - k]);
	}
	assert_ptr_equal(pr[1].b, &fx->b[0]);
	assert_int_equal(pr[1].next_offset, 16);
	assert_int_equal(pr[1].counts[0], 6);
	assert_int_equal(pr[1].counts[3], 1);
	assert_int_equal(pr[0].reapply_to, 45);
	assert_int_equal(pr[0].reapplied, 1);
	/* The statement takes as many parameters as the rows are given. */
	assert_int_equal(idem_sql(IDEM_SQL_PROGRESS)->n_params, IDEM_BIND_PROGRESS_PARAMS);
	assert_int_equal(idem_bind_progress(&fx->pg->bind, pr, 2, v), IDEM_OK);
	assert_string_equal(v[0], "{\"c1\",\"c1\"}");
	assert_string_equal(v[1], "{\"payments\",\"payments\"}");
	assert_string_equal(v[2], "{\"0\",\"1\"}");
	assert_string_equal(v[3], "{\"16\",\"41\"}");
	assert_string_equal(v[4], "{\"6\",\"1\"}");            /* consumed */
	assert_string_equal(v[5], "{\"1\",\"1\"}");            /* applied */
	assert_string_equal(v[6], "{\"4\",\"0\"}");            /* duplicates */
	assert_string_equal(v[7], "{\"1\",\"0\"}");            /* quarantined */
	assert_string_equal(v[8], "{\"1\",\"0\"}");            /* redelivery */
	assert_string_equal(v[9], "{\"2\",\"0\"}");            /* replay */
	assert_string_equal(v[10], "{\"1\",\"0\"}");           /* upstream */
	assert_string_equal(v[11], "{\"1\",\"0\"}");           /* payload mismatches */
	assert_string_equal(v[12], "{NULL,NULL}");             /* halted_offset */
	assert_string_equal(v[13], "{NULL,NULL}");             /* halt reason */
	assert_string_equal(v[14], "{NULL,\"45\"}");           /* reapply_to */
	assert_string_equal(v[15], "{\"0\",\"1\"}");           /* reapplied */
	assert_string_equal(v[16], "{\"mockCluster1\",NULL}"); /* kafka_cluster */
	assert_string_equal(v[17], "{\"3\",NULL}");            /* first_offset */
	assert_string_equal(v[18], "{\"g-pay\",NULL}");        /* group_id */
	assert_string_equal(v[19], "{\"2\",\"0\"}");           /* log_epoch */
	assert_non_null(strstr(idem_sql(IDEM_SQL_PROGRESS)->text, "group_id, log_epoch)"));
}

/*
 * Messages below the end of a gap being read again are counted as re-applied: the end is the
 * later of the daemon's (b->reapply_to) and the database's (IDEM_SQL_PROGRESS_GET), and is kept
 * only while the batch stops before it.
 */
static void test_reapplied(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);

	for (int64_t o = 10; o < 15; o++)
		add(fx, 0, o, o % 2 ? "odd" : "even", "v");
	prep(fx, 0);
	ctx->reapply_to = 12;
	fx->b[0].reapply_to = -1;
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.reapplied, 2);
	assert_int_equal(ctx->st.reapply_to, -1);
	fx->b[0].reapply_to = 13; /* the daemon knows a later end */
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.reapplied, 3);
	ctx->reapply_to = 20;
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.reapplied, 5);
	assert_int_equal(ctx->st.reapply_to, 20);
	assert_int_equal(idem__flush_progress_row(ctx).reapply_to, 20);
	/* At the end exactly: done, nothing left to record. */
	ctx->reapply_to = 15;
	fx->b[0].reapply_to = -1;
	idem__flush_finish_stats(ctx);
	assert_int_equal(ctx->st.reapplied, 5);
	assert_int_equal(ctx->st.reapply_to, -1);
}

/*
 * on_poison: halt: the batch stops at the message, which stays unprocessed with what follows;
 * the partition is done below it (not below the batch's end), and the progress row records
 * where and why.
 */
static void test_halt(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;
	struct idem_bind_progress pr;
	const char *v[IDEM_BIND_PROGRESS_PARAMS];

	/* Kafka offsets may have gaps (compaction, transaction markers). */
	add(fx, 0, 30, "a", "v");
	add(fx, 0, 31, "b", "v");
	add(fx, 0, 35, NULL, "v");
	add(fx, 0, 36, "c", "v");
	ctx->reapply_to = 40;
	idem__flush_reset(ctx);
	idem__flush_halt_at(ctx, 2);
	assert_true(ctx->halt.on);
	assert_int_equal(ctx->halt.offset, 35);
	assert_non_null(strstr(ctx->halt.reason, "no key"));
	assert_int_equal(b->n_msgs, 2);
	assert_int_equal(idem_batch_collapse(b), IDEM_OK);
	assert_int_equal(idem__flush_need_idx(ctx, b->n_msgs), IDEM_OK);
	b->msgs[0].state = IDEM_MSG_APPLIED;
	b->msgs[1].state = IDEM_MSG_APPLIED;
	ctx->reapply_to = 40;
	idem__flush_finish_stats(ctx);
	assert_true(ctx->st.halted);
	assert_int_equal(ctx->st.next_offset, 35);
	assert_string_equal(ctx->st.halt_reason, ctx->halt.reason);
	assert_int_equal(ctx->st.consumed, 2);
	assert_int_equal(ctx->st.reapplied, 2);
	assert_int_equal(ctx->st.reapply_to, 40);
	pr = idem__flush_progress_row(ctx);
	assert_true(pr.halted);
	assert_int_equal(idem_bind_progress(&fx->pg->bind, &pr, 1, v), IDEM_OK);
	assert_string_equal(v[3], "{\"35\"}");
	assert_string_equal(v[12], "{\"35\"}");
	assert_non_null(strstr(v[13], "no key"));
	/* A message without a reason halts for an unknown one. */
	ctx->halt.on = false;
	idem__flush_halt_at(ctx, 0);
	assert_int_equal(ctx->halt.offset, 30);
	assert_string_equal(ctx->halt.reason, "unknown");
	assert_int_equal(b->n_msgs, 0);
}

/*
 * A new attempt starts from the decoded state: what the last one marked (states, duplicate
 * kinds, claims, results, quarantine answers, halt, progress, floor) is undone; an undecodable
 * message stays BAD with its attempts and SQLSTATE, a decodable one forgets them.
 */
static void test_reset_between_attempts(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = ctx_of(fx, 0);
	struct idem_batch *b = ctx->b;

	add(fx, 0, 1, "a", "v");
	add(fx, 0, 2, NULL, "v");
	for (size_t i = 0; i < 2; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		m->state = i == 0 ? IDEM_MSG_DUPLICATE : IDEM_MSG_QUARANTINED;
		m->dup = IDEM_DUP_REPLAY;
		m->mismatch = true;
		m->quarantined_before = true;
		m->claim.found = true;
		m->attempts = 2;
		snprintf(m->sqlstate, sizeof(m->sqlstate), "%s", "22P02");
	}
	assert_int_equal(idem_batch_set_result(b, 0, "r", 1, false), IDEM_OK);
	ctx->halt.on = true;
	ctx->behind = true;
	ctx->progress_next = 9;
	ctx->replay_to = 9;
	ctx->reapply_to = 9;
	idem__flush_reset(ctx);
	assert_int_equal(b->msgs[0].state, IDEM_MSG_PENDING);
	assert_int_equal(b->msgs[1].state, IDEM_MSG_BAD);
	for (size_t i = 0; i < 2; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];

		assert_int_equal(m->dup, IDEM_DUP_NONE);
		assert_false(m->mismatch);
		assert_false(m->quarantined_before);
		assert_false(m->claim.found);
		assert_true(m->result.null);
	}
	assert_int_equal(b->msgs[0].attempts, 0);
	assert_string_equal(b->msgs[0].sqlstate, "");
	assert_int_equal(b->msgs[1].attempts, 2);
	assert_string_equal(b->msgs[1].sqlstate, "22P02");
	assert_false(ctx->halt.on);
	assert_false(ctx->behind);
	assert_int_equal(ctx->progress_next, -1);
	assert_int_equal(ctx->replay_to, -1);
	assert_int_equal(ctx->reapply_to, -1);
}

/*
 * Row mode: a handler's result is the first column of its first row (NULL stays NULL); a
 * handler that returns no row stores nothing.
 */
static void test_row_results(void **state)
{
	struct fixture *fx = *state;
	struct idem_batch *b = &fx->b[0];
	static const char *const one[] = { "R", "ignored" }, *const null[] = { NULL };
	PGresult *res;

	add(fx, 0, 1, "a", "v");
	add(fx, 0, 2, "b", "v");
	prep(fx, 0);
	res = result(2, 1, one);
	assert_int_equal(idem__flush_store_result(b, 0, res), IDEM_OK);
	PQclear(res);
	assert_false(b->msgs[0].result.null);
	assert_string_equal(idem_batch_ptr(b, b->msgs[0].result), "R");
	res = result(1, 0, NULL);
	assert_int_equal(idem__flush_store_result(b, 1, res), IDEM_OK);
	PQclear(res);
	assert_true(b->msgs[1].result.null);
	res = result(1, 1, null);
	assert_int_equal(idem__flush_store_result(b, 0, res), IDEM_OK);
	PQclear(res);
	assert_true(b->msgs[0].result.null);
}

/*
 * Set mode: the (business key, result) rows go to the APPLIED messages of the route's batches
 * of the transaction from the first one on; a key of a duplicate, of another route's batch, of
 * no message, or NULL, is ignored; a statement that does not return exactly two columns gives
 * none.
 */
static void test_set_results(void **state)
{
	struct fixture *fx = *state;
	struct flush_ctx *ctx = fx->pg->many;
	struct idem_batch *b = fx->b;
	static const char *const rows[] = {
		"s2", "R2", "s1", "R1", "d", "X", NULL, "N", "zz", "Z", "p", "P",
	};
	static const char *const three_cols[] = { "s1", "R1", "x" };
	PGresult *res;

	add(fx, 0, 5, "p", "v"); /* route 0 */
	add(fx, 2, 1, "s1", "v");
	add(fx, 2, 2, "d", "v");
	add(fx, 3, 3, "s2", "v");
	for (size_t k = 0; k < N_BATCHES; k++)
		prep(fx, k);
	b[0].msgs[0].state = IDEM_MSG_APPLIED;
	b[2].msgs[0].state = IDEM_MSG_APPLIED;
	b[2].msgs[1].state = IDEM_MSG_DUPLICATE;
	b[3].msgs[0].state = IDEM_MSG_APPLIED;
	/* Route 0's batch between the two of route 1. */
	ctx[0].b = &b[2];
	ctx[1].b = &b[0];
	ctx[2].b = &b[3];
	res = result(3, 1, three_cols);
	assert_int_equal(idem__flush_store_set_results(ctx, 3, 0, res), IDEM_OK);
	PQclear(res);
	assert_true(b[2].msgs[0].result.null);
	res = result(2, 6, rows);
	assert_int_equal(idem__flush_store_set_results(ctx, 3, 0, res), IDEM_OK);
	PQclear(res);
	assert_string_equal(idem_batch_ptr(&b[2], b[2].msgs[0].result), "R1");
	assert_true(b[2].msgs[1].result.null);
	assert_string_equal(idem_batch_ptr(&b[3], b[3].msgs[0].result), "R2");
	assert_true(b[0].msgs[0].result.null);
}

/*
 * IDEM_SQL_CONTEXT names the message for idem.emit() only with the outbox enabled: the consumer
 * and, in row mode, the message's business key; a set statement names none. Handlers are
 * prepared under their route's index.
 */
static void test_context_and_handler_name(void **state)
{
	struct fixture *fx = *state;
	const char **cv;
	char name[32];

	add(fx, 0, 1, "a", "v");
	add(fx, 0, 2, "b", "v");
	add(fx, 2, 1, "s", "v");
	assert_null(idem__flush_context_vals(fx->pg, &fx->b[0], 1));
	fx->pg->emit_context = true;
	cv = idem__flush_context_vals(fx->pg, &fx->b[0], 1);
	assert_non_null(cv);
	assert_string_equal(cv[0], "c1");
	assert_string_equal(cv[1], "b");
	cv = idem__flush_context_vals(fx->pg, &fx->b[2], 0);
	assert_string_equal(cv[0], "c2");
	assert_string_equal(cv[1], "");
	idem__flush_handler_name(fx->pg, &fx->b[0], name, sizeof(name));
	assert_string_equal(name, "idem_h0");
	idem__flush_handler_name(fx->pg, &fx->b[3], name, sizeof(name));
	assert_string_equal(name, "idem_h1");
	assert_false(idem__flush_set_mode(&fx->b[1]));
	assert_true(idem__flush_set_mode(&fx->b[2]));
}

/* Growing the session's batches keeps those there and starts the new ones empty. */
static void test_need_many_grows(void **state)
{
	struct fixture *fx = *state;
	idem_flush *pg = fx->pg;

	pg->many[1].progress_next = 42;
	assert_int_equal(idem__flush_need_idx(&pg->many[1], 8), IDEM_OK);
	assert_int_equal(idem__flush_need_many(pg, 2), IDEM_OK); /* enough already */
	assert_int_equal(pg->cap_many, N_BATCHES);
	assert_int_equal(idem__flush_need_many(pg, 9), IDEM_OK);
	assert_int_equal(pg->cap_many, 9);
	assert_ptr_equal(pg->many[1].b, &fx->b[1]);
	assert_int_equal(pg->many[1].progress_next, 42);
	assert_int_equal(pg->many[1].cap_idx, 8);
	for (size_t k = N_BATCHES; k < 9; k++) {
		assert_null(pg->many[k].b);
		assert_null(pg->many[k].applied);
		assert_int_equal(pg->many[k].cap_idx, 0);
	}
}

/* An empty batch commits nothing and needs no connection: zero counters, IDEM_OK. */
static void test_empty_batch(void **state)
{
	struct fixture *fx = *state;
	struct idem_flush_stats st;
	idem_error err = { 0 };

	memset(&st, 0xff, sizeof(st));
	assert_int_equal(idem_flush_batch(fx->pg, &fx->b[0], &st, &err), IDEM_OK);
	assert_int_equal(st.consumed, 0);
	assert_int_equal(st.next_offset, 0);
	assert_false(st.halted);
	assert_null(fx->pg->conn);
	assert_int_equal(err.code, IDEM_OK);
}

/*
 * A server that speaks just enough of the protocol for one connection: the start-up answered
 * (authenticated, ready), the client's first pipelined statements read, then what a backend sends
 * as it dies in an immediate shutdown (pg_ctl -m immediate): a WARNING notice, and the socket
 * closed.
 */
struct dying_server {
	char dir[64];
	int lfd;
	pthread_t thread;
};

static bool read_full(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static void *dying_server_main(void *arg)
{
	static const char ready[] = { 'R', 0, 0, 0, 8, 0, 0, 0, 0, 'Z', 0, 0, 0, 5, 'I' };
	static const char fields[] = "SWARNING\0VWARNING\0C57P01\0"
	                             "Mterminating connection due to immediate shutdown command\0";
	struct dying_server *ds = arg;
	char buf[8192], notice[sizeof(fields) + 5];
	uint32_t len;
	int fd = accept(ds->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	if (read_full(fd, &len, 4) && ntohl(len) - 4 <= sizeof(buf) &&
	    read_full(fd, buf, ntohl(len) - 4) && write(fd, ready, sizeof(ready)) > 0 &&
	    read(fd, buf, sizeof(buf)) > 0) {
		/* 'N', the length, the fields (each NUL-terminated) and the NUL that ends them. */
		notice[0] = 'N';
		len = htonl((uint32_t)(4 + sizeof(fields)));
		memcpy(notice + 1, &len, 4);
		memcpy(notice + 5, fields, sizeof(fields));
		(void)!write(fd, notice, sizeof(notice));
	}
	close(fd);
	return NULL;
}

static void dying_server_start(struct dying_server *ds)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(ds->dir, sizeof(ds->dir), "/tmp/idem-unit-flush.XXXXXX");
	assert_non_null(mkdtemp(ds->dir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/.s.PGSQL.5432", ds->dir);
	ds->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(ds->lfd >= 0);
	assert_int_equal(bind(ds->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(ds->lfd, 1), 0);
	assert_int_equal(pthread_create(&ds->thread, NULL, dying_server_main, ds), 0);
}

static void dying_server_stop(struct dying_server *ds)
{
	char path[128];

	close(ds->lfd);
	snprintf(path, sizeof(path), "%s/.s.PGSQL.5432", ds->dir);
	unlink(path);
	rmdir(ds->dir);
}

/*
 * The server dies (a notice, then gone) while the transaction's last round trip is being written.
 * The write fails, libpq reports that as the first statement's error with the connection still
 * CONNECTION_OK, and from then on answers NULL for ever: no sync will come. Aborting must not wait
 * for one (it spun for ever, holding the worker and its partitions: a CI run with Postgres
 * restarted), and the connection, left in pipeline mode, is dropped for a fresh one.
 */
static void no_notices(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static void test_abort_when_the_server_died_mid_pipeline(void **state)
{
	struct fixture *fx = *state;
	struct dying_server ds;
	char conninfo[160];
	PGresult *res;

	dying_server_start(&ds);
	snprintf(conninfo, sizeof(conninfo), "host=%s port=5432 user=idem dbname=idem", ds.dir);
	fx->pg->conn = PQconnectdb(conninfo);
	assert_int_equal(PQstatus(fx->pg->conn), CONNECTION_OK);
	PQsetNoticeProcessor(fx->pg->conn, no_notices, NULL);

	/* Round trip 2 sent and read (here: its statement only sent), ... */
	assert_true(PQenterPipelineMode(fx->pg->conn));
	assert_true(PQsendQueryParams(fx->pg->conn, "SELECT 1", 0, NULL, NULL, NULL, NULL, 0));
	assert_true(PQsendFlushRequest(fx->pg->conn));
	assert_int_equal(PQflush(fx->pg->conn), 0);
	/* ... the server gone, round trip 3 sent all the same, ... */
	assert_int_equal(pthread_join(ds.thread, NULL), 0);
	assert_true(PQsendQueryParams(fx->pg->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0));
	PQpipelineSync(fx->pg->conn);
	/* ... and its first answer is an error (close_batch() then aborts, its sync sent). */
	assert_int_not_equal(idem__flush_next_result(fx->pg->conn, &res), PGRES_PIPELINE_SYNC);
	PQclear(res);

	alarm(10); /* a spin ends the test, failed */
	idem__flush_pipeline_abort(fx->pg, true);
	alarm(0);
	idem__flush_drop_unclean(fx->pg);
	assert_null(fx->pg->conn);
	dying_server_stop(&ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_claim_single_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_nothing_new, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_unknown_offset_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_many_arrays, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_many_rows_name_their_batch, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_ctx_find, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_floor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dup_classification, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dup_replay_to, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dup_lookup_shared_by_consumer, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_dup_same_key_slow_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mismatch_quarantined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_quarantine_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_progress_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reapplied, setup, teardown),
		cmocka_unit_test_setup_teardown(test_halt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_between_attempts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_row_results, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_results, setup, teardown),
		cmocka_unit_test_setup_teardown(test_context_and_handler_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_need_many_grows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_when_the_server_died_mid_pipeline, setup,
		                                teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
