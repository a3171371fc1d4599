/*
 * idem_avro_int.h - what the three files of idem_avro share: idem_avro.c (schemas: the
 * annotation tree, the Confluent header), idem_avro_decode.c (the walker, the decoder) and
 * idem_avro_text.c (the text of each value, pointers). See idem_avro.c for who does what.
 */
#ifndef IDEM_AVRO_INT_H
#define IDEM_AVRO_INT_H

#include <avro.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "idem_avro.h"

/* Generic value interfaces a decoder keeps, the least recently used replaced. */
#define DEC_SLOTS 8

/*
 * A fixed type larger than this is refused with the schema: avro-c's generic value holds a
 * fixed inline and zeroes it when the value is made, whatever the messages hold.
 */
#define FIXED_MAX_SIZE (16 * 1024 * 1024)

/*
 * Array and map items a datum may have beyond one per byte of the value: items of no bytes
 * (null, an empty record) cost avro-c memory all the same, so their number is bounded too.
 */
#define ITEMS_SLACK 1024

/*
 * Postgres' numeric(p, s) takes p up to 1000; a decimal beyond that is refused with the
 * schema rather than rendered in however many digits a schema asks for.
 */
#define DECIMAL_MAX_PRECISION 1000

enum logical {
	LOGICAL_NONE = 0,
	LOGICAL_DECIMAL,
	LOGICAL_DATE,
	LOGICAL_TS_MILLIS,
	LOGICAL_TS_MICROS,
	LOGICAL_UUID,
};

/*
 * One type of the annotation tree. Named types (record, enum, fixed) are one node however
 * often they are referred to, so a recursive record is a cycle; every node is owned by the
 * schema's node list, not by its parent.
 */
struct avro_node {
	avro_type_t type; /* avro-c's type codes; never AVRO_LINK */
	enum logical logical;
	int precision, scale;   /* decimal */
	int64_t size;           /* fixed */
	size_t n;               /* record fields, enum symbols, union branches; 1 for array/map */
	struct avro_node **sub; /* field types, branches; array items and map values in sub[0] */
	char **names;           /* field names or enum symbols */
	uint32_t *index;        /* records: field i + 1 at the hash of its name (0: a free slot) */
	size_t index_cap;       /* records: slots of index, a power of 2, at least twice n */
	char *fullname;         /* named types */
	char *space;            /* named types: the namespace their nested names inherit */
	avro_schema_t checked;  /* named types: avro-c's schema it was checked against */
};

struct idem_avro_schema {
	atomic_int refs;
	avro_schema_t avro;
	struct avro_node *root;
	struct avro_node **nodes;
	size_t n_nodes, cap_nodes;
};

/* A generic value interface of one schema, and the value decoded into, reused. */
struct dec_slot {
	idem_avro_schema *schema; /* a reference; NULL: an unused slot */
	avro_value_iface_t *iface;
	avro_value_t value;
	uint64_t used; /* the decoder's clock when last decoded into */
};

/* Map entries being sorted by key, as a stack: a map nested in a map sorts above it. */
struct map_entry {
	const char *key;
	size_t len;
	size_t idx;
};

struct map_sort {
	struct map_entry *e;
	size_t cap, top;
};

struct idem_avro_dec {
	struct dec_slot slots[DEC_SLOTS];
	uint64_t clock;
	avro_reader_t reader;
	struct dec_slot *cur;     /* the decoded datum; NULL: none */
	idem_avro_schema *schema; /* the datum's own reference (idem_avro_dec_reset() drops it) */
	struct map_sort *sort;    /* scratch of idem_avro_read(), which takes the decoder const */
};

/*
 * avro-c as built by Debian keeps its last error in one static buffer (no THREADSAFE), so a
 * message read back after a failing parse could be another thread's. Parsing a schema is rare
 * (once per schema id), so it is serialised; decoding never fails in avro-c after the walker,
 * and reads avoid the calls that write an error on a miss (map lookups by name).
 */
extern pthread_mutex_t idem__avro_error_lock;

/* The schema is read-only once built, but for its reference count. */
static inline idem_avro_schema *schema_mut(const idem_avro_schema *s)
{
	return (idem_avro_schema *)(uintptr_t)s;
}

/*
 * The hash of @s[0..len) continuing from @h (IDEM__AVRO_HASH_INIT to start), of the name it
 * spells if @token is an RFC 6901 pointer token (~0 is '~', ~1 is '/'; valid, as
 * idem_avro_read() checks first). Record fields and named types are found by it.
 */
#define IDEM__AVRO_HASH_INIT UINT64_C(0xcbf29ce484222325)
uint64_t idem__avro_hash(uint64_t h, const char *s, size_t len, bool token);

#endif
