/*
 * idem_avro_decode.c - the walker (bounds and depth of a datum's bytes, with where they fail)
 * and the decoder (avro-c, into a generic value kept per schema); see idem_avro.c.
 */
#include <assert.h>
#include <avro.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_avro_int.h"

/*
 * The walker: bounds and depth of the bytes, before avro-c reads them.
 */

enum seg_kind { SEG_FIELD, SEG_INDEX, SEG_KEY };

/* One step of the path to where the walker is, for messages. */
struct seg {
	enum seg_kind kind;
	const char *s; /* field name (NUL-terminated) or map key (s[0..n), in the value) */
	size_t n;
	int64_t i; /* array index */
};

struct walk {
	const uint8_t *p;
	size_t len, pos;
	size_t items_left; /* array and map items the value can still hold (ITEMS_SLACK) */
	int depth;
	int nseg;
	int32_t id;
	size_t at;
	idem_error *err;
	struct seg segs[IDEM_AVRO_MAX_DEPTH + 1];
};

/* A JSON pointer being written for a message, cut with "..." where it gets too long. */
/* The path of the walker as a JSON pointer in @buf[0..cap) (cap >= 8). */
static void walk_path(const struct walk *w, char *buf, size_t cap)
{
	struct idem_pathbuf pb = { .b = buf, .cap = cap };
	char num[24];

	for (int i = 0; i < w->nseg && !pb.cut; i++) {
		const struct seg *g = &w->segs[i];

		if (pb.len + 2 > cap - 4) {
			pb.cut = true;
			break;
		}
		pb.b[pb.len++] = '/';
		if (g->kind == SEG_FIELD) {
			idem_pathbuf_put(&pb, g->s, strlen(g->s));
		} else if (g->kind == SEG_KEY) {
			idem_pathbuf_put(&pb, g->s, g->n < 64 ? g->n : 64);
			if (g->n > 64)
				idem_pathbuf_put(&pb, "...", 3);
		} else {
			snprintf(num, sizeof(num), "%" PRId64, g->i);
			idem_pathbuf_put(&pb, num, strlen(num));
		}
	}
	if (pb.cut) {
		memcpy(pb.b + pb.len, "...", 3);
		pb.len += 3;
	}
	pb.b[pb.len] = '\0';
}

static idem_status walk_fail(const struct walk *w, size_t at, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

/* Fails the decode at offset @at of the body: "schema id 7: at byte 19 (/a/b): what". */
static idem_status walk_fail(const struct walk *w, size_t at, const char *fmt, ...)
{
	char what[256], path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	walk_path(w, path, sizeof(path));
	return idem_decode_fail(w->err, w->id, w->at + at, path, what);
}

static idem_status walk_short(const struct walk *w, size_t at, const char *what)
{
	return walk_fail(w, at, "%s runs past the end of the value (%zu bytes)", what,
	                 w->at + w->len);
}

/* A zig-zag varint of at most 64 bits (what avro-c reads without overflow). */
static idem_status walk_long(struct walk *w, const char *what, int64_t *ret)
{
	size_t start = w->pos;
	uint64_t v = 0;
	uint8_t c;

	for (int i = 0;; i++) {
		if (w->pos >= w->len)
			return walk_short(w, start, what);
		c = w->p[w->pos++];
		if (i == 9 && c > 1)
			return walk_fail(w, start, "%s is a varint of more than 64 bits", what);
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80))
			break;
	}
	*ret = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
	return IDEM_OK;
}

/* A length (of bytes, a string, a map key) and the bytes it covers. */
static idem_status walk_len(struct walk *w, const char *what, size_t *ret_start, size_t *ret_n)
{
	size_t start = w->pos;
	int64_t n = 0;
	idem_status r;

	if ((r = walk_long(w, what, &n)) != IDEM_OK)
		return r;
	if (n < 0)
		return walk_fail(w, start, "%s %" PRId64 " is negative", what, n);
	if ((uint64_t)n > w->len - w->pos)
		return walk_fail(w, start,
		                 "%s %" PRId64 " runs past the end of the value (%zu bytes)", what,
		                 n, w->at + w->len);
	*ret_start = w->pos;
	*ret_n = (size_t)n;
	w->pos += (size_t)n;
	return IDEM_OK;
}

static idem_status walk_value(struct walk *w, const struct avro_node *n);

static idem_status walk_enter(struct walk *w, size_t start)
{
	if (++w->depth > IDEM_AVRO_MAX_DEPTH)
		return walk_fail(w, start, "nested deeper than %d levels", IDEM_AVRO_MAX_DEPTH);
	return IDEM_OK;
}

/* The blocks of an array or a map (@map): count, [byte size if the count is negative], items. */
static idem_status walk_blocks(struct walk *w, const struct avro_node *n, bool map)
{
	const char *what = map ? "map" : "array";
	int64_t count = 0, bytes = 0, index = 0;
	size_t start, kpos, kstart = 0, klen = 0;
	idem_status r;

	if ((r = walk_enter(w, w->pos)) != IDEM_OK)
		return r;
	for (;;) {
		start = w->pos;
		r = walk_long(w, map ? "map block count" : "array block count", &count);
		if (r != IDEM_OK)
			return r;
		if (count == 0)
			break;
		if (count < 0) {
			size_t bstart = w->pos;

			if (count == INT64_MIN)
				return walk_fail(w, start,
				                 "%s block count %" PRId64 " is not valid", what,
				                 count);
			count = -count;
			r = walk_long(w, map ? "map block size" : "array block size", &bytes);
			if (r != IDEM_OK)
				return r;
			if (bytes < 0 || (uint64_t)bytes > w->len - w->pos)
				return walk_fail(w, bstart,
				                 "%s block size %" PRId64
				                 " does not fit in the value (%zu bytes)",
				                 what, bytes, w->at + w->len);
		}
		if ((uint64_t)count > w->items_left)
			return walk_fail(w, start,
			                 "%s block of %" PRId64
			                 " items is more than the value's %zu bytes can hold",
			                 what, count, w->at + w->len);
		w->items_left -= (size_t)count;
		for (int64_t i = 0; i < count; i++, index++) {
			struct seg *g = &w->segs[w->nseg];

			if (map) {
				kpos = w->pos;
				if ((r = walk_len(w, "map key length", &kstart, &klen)) != IDEM_OK)
					return r;
				g->kind = SEG_KEY;
				g->s = (const char *)w->p + kstart;
				g->n = klen;
				/* avro-c keeps keys as C strings: "a\0b" would become "a". */
				if (memchr(g->s, 0, klen) != NULL) {
					w->nseg++;
					return walk_fail(w, kpos, "map key contains a NUL byte");
				}
			} else {
				g->kind = SEG_INDEX;
				g->i = index;
			}
			w->nseg++;
			if ((r = walk_value(w, n->sub[0])) != IDEM_OK)
				return r;
			w->nseg--;
		}
	}
	w->depth--;
	return IDEM_OK;
}

static idem_status walk_value(struct walk *w, const struct avro_node *n)
{
	size_t start = w->pos, s = 0, len = 0;
	int64_t v = 0;
	idem_status r;

	switch (n->type) {
	case AVRO_NULL:
		return IDEM_OK;
	case AVRO_BOOLEAN:
		if (w->pos >= w->len)
			return walk_short(w, start, "boolean");
		if (w->p[w->pos] > 1)
			return walk_fail(w, start, "boolean byte %u is neither 0 nor 1",
			                 w->p[w->pos]);
		w->pos++;
		return IDEM_OK;
	case AVRO_INT32:
		if ((r = walk_long(w, "int", &v)) != IDEM_OK)
			return r;
		if (v < INT32_MIN || v > INT32_MAX)
			return walk_fail(w, start, "int %" PRId64 " is out of the 32-bit range", v);
		return IDEM_OK;
	case AVRO_INT64:
		return walk_long(w, "long", &v);
	case AVRO_FLOAT:
	case AVRO_DOUBLE:
		len = n->type == AVRO_FLOAT ? 4 : 8;
		if (w->len - w->pos < len)
			return walk_short(w, start, n->type == AVRO_FLOAT ? "float" : "double");
		w->pos += len;
		return IDEM_OK;
	case AVRO_BYTES:
		return walk_len(w, "bytes length", &s, &len);
	case AVRO_STRING:
		return walk_len(w, "string length", &s, &len);
	case AVRO_FIXED:
		if ((uint64_t)n->size > w->len - w->pos)
			return walk_fail(w, start,
			                 "fixed of %" PRId64
			                 " bytes runs past the end of the value (%zu bytes)",
			                 n->size, w->at + w->len);
		w->pos += (size_t)n->size;
		return IDEM_OK;
	case AVRO_ENUM:
		if ((r = walk_long(w, "enum index", &v)) != IDEM_OK)
			return r;
		if (v < 0 || (uint64_t)v >= n->n)
			return walk_fail(w, start,
			                 "enum index %" PRId64 " is out of range (%zu symbols)", v,
			                 n->n);
		return IDEM_OK;
	case AVRO_RECORD:
		if ((r = walk_enter(w, start)) != IDEM_OK)
			return r;
		for (size_t i = 0; i < n->n; i++) {
			w->segs[w->nseg].kind = SEG_FIELD;
			w->segs[w->nseg].s = n->names[i];
			w->nseg++;
			if ((r = walk_value(w, n->sub[i])) != IDEM_OK)
				return r;
			w->nseg--;
		}
		w->depth--;
		return IDEM_OK;
	case AVRO_ARRAY:
		return walk_blocks(w, n, false);
	case AVRO_MAP:
		return walk_blocks(w, n, true);
	case AVRO_UNION:
		if ((r = walk_enter(w, start)) != IDEM_OK)
			return r;
		if ((r = walk_long(w, "union index", &v)) != IDEM_OK)
			return r;
		if (v < 0 || (uint64_t)v >= n->n)
			return walk_fail(w, start,
			                 "union index %" PRId64 " is out of range (%zu branches)",
			                 v, n->n);
		if ((r = walk_value(w, n->sub[v])) != IDEM_OK)
			return r;
		w->depth--;
		return IDEM_OK;
	default:
		return walk_fail(w, start, "type %d is not known", (int)n->type);
	}
}

/*
 * Decoding.
 */

idem_avro_dec *idem_avro_dec_new(void)
{
	idem_avro_dec *dec = calloc(1, sizeof(*dec));

	if (dec == NULL)
		return NULL;
	dec->sort = calloc(1, sizeof(*dec->sort));
	dec->reader = avro_reader_memory("", 0);
	if (dec->sort == NULL || dec->reader == NULL) {
		idem_avro_dec_free(dec);
		return NULL;
	}
	return dec;
}

static void slot_clear(struct dec_slot *slot)
{
	if (slot->schema == NULL)
		return;
	avro_value_decref(&slot->value);
	avro_value_iface_decref(slot->iface);
	idem_avro_schema_unref(slot->schema);
	memset(slot, 0, sizeof(*slot));
}

void idem_avro_dec_free(idem_avro_dec *dec)
{
	if (dec == NULL)
		return;
	idem_avro_dec_reset(dec);
	for (size_t i = 0; i < DEC_SLOTS; i++)
		slot_clear(&dec->slots[i]);
	if (dec->reader != NULL)
		avro_reader_free(dec->reader);
	if (dec->sort != NULL)
		free(dec->sort->e);
	free(dec->sort);
	free(dec);
}

void idem_avro_dec_reset(idem_avro_dec *dec)
{
	dec->cur = NULL;
	idem_avro_schema_unref(dec->schema);
	dec->schema = NULL;
}

/* The slot of @schema: found, or made in a free or the least recently used slot. */
static idem_status slot_get(idem_avro_dec *dec, const idem_avro_schema *schema,
                            struct dec_slot **ret, idem_error *err)
{
	struct dec_slot *slot = NULL, *lru = &dec->slots[0];

	for (size_t i = 0; i < DEC_SLOTS && slot == NULL; i++) {
		if (dec->slots[i].schema == schema)
			slot = &dec->slots[i];
		else if (dec->slots[i].used < lru->used)
			lru = &dec->slots[i];
	}
	if (slot == NULL) {
		slot = lru;
		slot_clear(slot);
		slot->iface = avro_generic_class_from_schema(schema->avro);
		if (slot->iface == NULL)
			return idem_error_nomem(err);
		if (avro_generic_value_new(slot->iface, &slot->value) != 0) {
			avro_value_iface_decref(slot->iface);
			slot->iface = NULL;
			return idem_error_nomem(err);
		}
		slot->schema = idem_avro_schema_ref(schema_mut(schema));
	}
	slot->used = ++dec->clock;
	*ret = slot;
	return IDEM_OK;
}

idem_status idem_avro_decode(idem_avro_dec *dec, const idem_avro_schema *schema, int32_t id,
                             size_t at, const void *body, size_t len, idem_error *err)
{
	struct dec_slot *slot = NULL;
	struct walk w;
	idem_status r;
	int rc;

	assert(dec != NULL && schema != NULL && (body != NULL || len == 0));
	dec->cur = NULL;
	if (dec->schema != schema) {
		idem_avro_schema_unref(dec->schema);
		dec->schema = idem_avro_schema_ref(schema_mut(schema));
	}
	w.p = body;
	w.len = len;
	w.pos = 0;
	w.items_left = len + ITEMS_SLACK;
	w.depth = 0;
	w.nseg = 0;
	w.id = id;
	w.at = at;
	w.err = err;
	if ((r = walk_value(&w, schema->root)) != IDEM_OK)
		return r;
	if (w.pos != len)
		return walk_fail(&w, w.pos, "%zu byte%s left after the datum", len - w.pos,
		                 len - w.pos == 1 ? "" : "s");

	if ((r = slot_get(dec, schema, &slot, err)) != IDEM_OK)
		return r;
	avro_reader_memory_set_source(dec->reader, body != NULL ? body : "", (int64_t)len);
	rc = avro_value_read(dec->reader, &slot->value);
	if (rc == ENOMEM)
		return idem_error_nomem(err);
	if (rc != 0) /* not expected after the walker */
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "schema id %" PRId32 ": avro-c cannot decode the value (%d)",
		                      id, rc);
	dec->cur = slot;
	return IDEM_OK;
}
