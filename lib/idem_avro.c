/*
 * idem_avro.c - Avro values in the Confluent wire format (idem_avro.h; ARCHITECTURE.md "Avro").
 *
 * Who does what. avro-c parses and validates a schema and decodes a datum into a generic value.
 * This file adds what avro-c lacks, and nothing else: an annotation tree built from the same
 * schema text with json-c (logical types, field names and enum symbols in order, named types
 * resolved), checked against avro-c's own reading of the schema so that both walk the same
 * shape; a bounds and depth check of the bytes (the walker) before avro-c sees them, because
 * avro-c trusts lengths and counts (it allocates whatever a length says, negates a block count
 * of INT64_MIN, does not check an enum index) and recurses once per level; pointers into the
 * decoded value; and the text form of each value.
 */
#include "idem_avro.h"

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

/*
 * JSON nesting of a schema text json-c reads (a record nests four levels: 32 is json-c's
 * default, enough for only 8 nested records). Bounds the recursion over the schema.
 */
#define SCHEMA_JSON_DEPTH 512

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
static pthread_mutex_t avro_error_lock = PTHREAD_MUTEX_INITIALIZER;

/* The schema is read-only once built, but for its reference count. */
static idem_avro_schema *schema_mut(const idem_avro_schema *s)
{
	return (idem_avro_schema *)(uintptr_t)s;
}

/*
 * Schemas: the annotation tree.
 */

struct builder {
	idem_avro_schema *s;
	idem_error *err;
};

static const struct {
	const char *name;
	avro_type_t type;
} primitives[] = {
	{ "null", AVRO_NULL },   { "boolean", AVRO_BOOLEAN }, { "int", AVRO_INT32 },
	{ "long", AVRO_INT64 },  { "float", AVRO_FLOAT },     { "double", AVRO_DOUBLE },
	{ "bytes", AVRO_BYTES }, { "string", AVRO_STRING },
};

static void node_free(struct avro_node *n)
{
	if (n->names != NULL) {
		for (size_t i = 0; i < n->n; i++)
			free(n->names[i]);
	}
	free(n->names);
	free(n->sub);
	free(n->fullname);
	free(n->space);
	free(n);
}

static void schema_free(idem_avro_schema *s)
{
	for (size_t i = 0; i < s->n_nodes; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	if (s->avro != NULL)
		avro_schema_decref(s->avro);
	free(s);
}

static struct avro_node *node_new(struct builder *b, avro_type_t type)
{
	idem_avro_schema *s = b->s;
	struct avro_node *n;

	if (s->n_nodes == s->cap_nodes) {
		size_t cap = s->cap_nodes ? 2 * s->cap_nodes : 16;
		struct avro_node **p = realloc(s->nodes, cap * sizeof(*p));

		if (p == NULL)
			return NULL;
		s->nodes = p;
		s->cap_nodes = cap;
	}
	n = calloc(1, sizeof(*n));
	if (n == NULL)
		return NULL;
	n->type = type;
	s->nodes[s->n_nodes++] = n;
	return n;
}

/* Allocates the @n children (and, with @names, names) of @node. */
static idem_status node_children(struct builder *b, struct avro_node *node, size_t n, bool names)
{
	node->sub = calloc(n ? n : 1, sizeof(*node->sub));
	if (names)
		node->names = calloc(n ? n : 1, sizeof(*node->names));
	if (node->sub == NULL || (names && node->names == NULL))
		return idem_error_nomem(b->err);
	node->n = n;
	return IDEM_OK;
}

static bool json_string_member(json_object *j, const char *key, const char **ret)
{
	json_object *v;

	if (!json_object_object_get_ex(j, key, &v) || !json_object_is_type(v, json_type_string))
		return false;
	*ret = json_object_get_string(v);
	return true;
}

/* The named type called @name where names are relative to namespace @space (NULL: none). As
 * avro-c: a name without a dot is in @space, and only there. */
static struct avro_node *named_find(const idem_avro_schema *s, const char *name, const char *space)
{
	size_t sl = space != NULL ? strlen(space) : 0;
	bool relative = space != NULL && strchr(name, '.') == NULL;

	for (size_t i = 0; i < s->n_nodes; i++) {
		const char *f = s->nodes[i]->fullname;

		if (f == NULL)
			continue;
		if (!relative ? strcmp(f, name) == 0
		              : strncmp(f, space, sl) == 0 && f[sl] == '.' &&
		                        strcmp(f + sl + 1, name) == 0)
			return s->nodes[i];
	}
	return NULL;
}

/* The full name and namespace of named type @j (kind @what) defined inside namespace @space. */
static idem_status named_define(struct builder *b, json_object *j, const char *what,
                                const char *space, struct avro_node *n)
{
	const char *name, *ns = NULL, *dot;
	size_t len;

	if (!json_string_member(j, "name", &name))
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: a %s has no name", what);
	dot = strrchr(name, '.');
	if (dot != NULL) {
		n->space = strndup(name, (size_t)(dot - name));
		n->fullname = strdup(name);
	} else {
		if (!json_string_member(j, "namespace", &ns))
			ns = space;
		else if (*ns == '\0')
			ns = NULL;
		if (ns != NULL) {
			len = strlen(ns) + 1 + strlen(name) + 1;
			n->space = strdup(ns);
			n->fullname = malloc(len);
			if (n->fullname != NULL)
				snprintf(n->fullname, len, "%s.%s", ns, name);
		} else {
			n->fullname = strdup(name);
		}
	}
	if (n->fullname == NULL || (n->space == NULL && (dot != NULL || ns != NULL)))
		return idem_error_nomem(b->err);
	/* n is in the node list already: look for another with its name. */
	for (size_t i = 0; i < b->s->n_nodes; i++) {
		const struct avro_node *o = b->s->nodes[i];

		if (o != n && o->fullname != NULL && strcmp(o->fullname, n->fullname) == 0)
			return idem_error_set(b->err, IDEM_ERR_INVALID,
			                      "schema: type %s is defined twice", n->fullname);
	}
	return IDEM_OK;
}

/* floor(log10(2^(8 size - 1) - 1)): the most digits every value of that many can take. */
static int64_t fixed_max_digits(int64_t size)
{
	return (int64_t)floor((double)(8 * size - 1) * 0.30102999566398119521);
}

/*
 * The logical type of @n from its definition @j. As the specification says, an annotation
 * that is not valid (an unknown name, one on the wrong type, a decimal without a precision, a
 * scale beyond the precision, a precision more than a fixed can hold) is ignored and the value
 * read as its underlying type; Java's reader does the same, so both agree on what a schema
 * means. Only a precision beyond DECIMAL_MAX_PRECISION refuses the schema.
 */
static idem_status logical_parse(struct builder *b, struct avro_node *n, json_object *j)
{
	json_object *p, *sc;
	const char *lt;
	int64_t precision, scale = 0;

	if (!json_string_member(j, "logicalType", &lt))
		return IDEM_OK;
	if (strcmp(lt, "date") == 0 && n->type == AVRO_INT32)
		n->logical = LOGICAL_DATE;
	else if (strcmp(lt, "timestamp-millis") == 0 && n->type == AVRO_INT64)
		n->logical = LOGICAL_TS_MILLIS;
	else if (strcmp(lt, "timestamp-micros") == 0 && n->type == AVRO_INT64)
		n->logical = LOGICAL_TS_MICROS;
	else if (strcmp(lt, "uuid") == 0 && n->type == AVRO_STRING)
		n->logical = LOGICAL_UUID;
	if (strcmp(lt, "decimal") != 0 || (n->type != AVRO_BYTES && n->type != AVRO_FIXED))
		return IDEM_OK;
	if (!json_object_object_get_ex(j, "precision", &p) ||
	    !json_object_is_type(p, json_type_int))
		return IDEM_OK;
	precision = json_object_get_int64(p);
	if (json_object_object_get_ex(j, "scale", &sc)) {
		if (!json_object_is_type(sc, json_type_int))
			return IDEM_OK;
		scale = json_object_get_int64(sc);
	}
	if (precision < 1 || scale < 0 || scale > precision)
		return IDEM_OK;
	if (n->type == AVRO_FIXED && precision > fixed_max_digits(n->size))
		return IDEM_OK;
	if (precision > DECIMAL_MAX_PRECISION)
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: decimal precision %" PRId64
		                      " is beyond the limit of %d digits",
		                      precision, DECIMAL_MAX_PRECISION);
	n->logical = LOGICAL_DECIMAL;
	n->precision = (int)precision;
	n->scale = (int)scale;
	return IDEM_OK;
}

static idem_status build(struct builder *b, json_object *j, const char *space,
                         struct avro_node **ret);

/* A type given by name: a primitive, or a named type defined before. */
static idem_status build_name(struct builder *b, const char *name, const char *space,
                              struct avro_node **ret)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(primitives); i++) {
		if (strcmp(name, primitives[i].name) == 0) {
			*ret = node_new(b, primitives[i].type);
			return *ret != NULL ? IDEM_OK : idem_error_nomem(b->err);
		}
	}
	*ret = named_find(b->s, name, space);
	if (*ret == NULL)
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: no type named %s", name);
	return IDEM_OK;
}

static idem_status build_record(struct builder *b, json_object *j, const char *space,
                                struct avro_node **ret)
{
	struct avro_node *n = node_new(b, AVRO_RECORD);
	json_object *fields, *f, *ft;
	const char *fname;
	size_t nf;
	idem_status r;

	if (n == NULL)
		return idem_error_nomem(b->err);
	if ((r = named_define(b, j, "record", space, n)) != IDEM_OK)
		return r;
	if (!json_object_object_get_ex(j, "fields", &fields) ||
	    !json_object_is_type(fields, json_type_array))
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: record %s has no fields",
		                      n->fullname);
	nf = json_object_array_length(fields);
	if ((r = node_children(b, n, nf, true)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < nf; i++) {
		f = json_object_array_get_idx(fields, i);
		if (!json_object_is_type(f, json_type_object) ||
		    !json_string_member(f, "name", &fname) ||
		    !json_object_object_get_ex(f, "type", &ft))
			return idem_error_set(
			        b->err, IDEM_ERR_INVALID,
			        "schema: field %zu of record %s needs a name and a type", i,
			        n->fullname);
		for (size_t k = 0; k < i; k++) {
			if (strcmp(n->names[k], fname) == 0)
				return idem_error_set(b->err, IDEM_ERR_INVALID,
				                      "schema: record %s has two fields named %s",
				                      n->fullname, fname);
		}
		if ((n->names[i] = strdup(fname)) == NULL)
			return idem_error_nomem(b->err);
		if ((r = build(b, ft, n->space, &n->sub[i])) != IDEM_OK)
			return r;
	}
	*ret = n;
	return IDEM_OK;
}

static idem_status build_enum(struct builder *b, json_object *j, const char *space,
                              struct avro_node **ret)
{
	struct avro_node *n = node_new(b, AVRO_ENUM);
	json_object *symbols, *sym;
	size_t ns;
	idem_status r;

	if (n == NULL)
		return idem_error_nomem(b->err);
	if ((r = named_define(b, j, "enum", space, n)) != IDEM_OK)
		return r;
	if (!json_object_object_get_ex(j, "symbols", &symbols) ||
	    !json_object_is_type(symbols, json_type_array) ||
	    (ns = json_object_array_length(symbols)) == 0)
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: enum %s has no symbols",
		                      n->fullname);
	if ((r = node_children(b, n, ns, true)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < ns; i++) {
		sym = json_object_array_get_idx(symbols, i);
		if (!json_object_is_type(sym, json_type_string))
			return idem_error_set(b->err, IDEM_ERR_INVALID,
			                      "schema: symbol %zu of enum %s is not a string", i,
			                      n->fullname);
		if ((n->names[i] = strdup(json_object_get_string(sym))) == NULL)
			return idem_error_nomem(b->err);
	}
	*ret = n;
	return IDEM_OK;
}

static idem_status build_fixed(struct builder *b, json_object *j, const char *space,
                               struct avro_node **ret)
{
	struct avro_node *n = node_new(b, AVRO_FIXED);
	json_object *size;
	idem_status r;

	if (n == NULL)
		return idem_error_nomem(b->err);
	if ((r = named_define(b, j, "fixed", space, n)) != IDEM_OK)
		return r;
	if (!json_object_object_get_ex(j, "size", &size) ||
	    !json_object_is_type(size, json_type_int))
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: fixed %s has no size",
		                      n->fullname);
	n->size = json_object_get_int64(size);
	/* avro-c cannot decode a fixed of 0 bytes (its allocation of 0 bytes fails). */
	if (n->size < 1 || n->size > FIXED_MAX_SIZE)
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: fixed %s has size %" PRId64
		                      ", not between 1 and %d bytes",
		                      n->fullname, n->size, FIXED_MAX_SIZE);
	if ((r = logical_parse(b, n, j)) != IDEM_OK)
		return r;
	*ret = n;
	return IDEM_OK;
}

/* An array (@items) or a map (!@items). */
static idem_status build_container(struct builder *b, json_object *j, const char *space, bool items,
                                   struct avro_node **ret)
{
	struct avro_node *n = node_new(b, items ? AVRO_ARRAY : AVRO_MAP);
	json_object *sub;
	idem_status r;

	if (n == NULL)
		return idem_error_nomem(b->err);
	if (!json_object_object_get_ex(j, items ? "items" : "values", &sub))
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: %s without \"%s\"",
		                      items ? "array" : "map", items ? "items" : "values");
	if ((r = node_children(b, n, 1, false)) != IDEM_OK)
		return r;
	if ((r = build(b, sub, space, &n->sub[0])) != IDEM_OK)
		return r;
	*ret = n;
	return IDEM_OK;
}

static idem_status build_union(struct builder *b, json_object *j, const char *space,
                               struct avro_node **ret)
{
	struct avro_node *n = node_new(b, AVRO_UNION);
	size_t nb = json_object_array_length(j);
	idem_status r;

	if (n == NULL)
		return idem_error_nomem(b->err);
	if (nb == 0)
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: a union has no branches");
	if ((r = node_children(b, n, nb, false)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < nb; i++) {
		r = build(b, json_object_array_get_idx(j, i), space, &n->sub[i]);
		if (r != IDEM_OK)
			return r;
	}
	*ret = n;
	return IDEM_OK;
}

/* The type @j, where names are relative to namespace @space; as avro-c reads it. */
static idem_status build(struct builder *b, json_object *j, const char *space,
                         struct avro_node **ret)
{
	const char *t;

	switch (json_object_get_type(j)) {
	case json_type_string:
		return build_name(b, json_object_get_string(j), space, ret);
	case json_type_array:
		return build_union(b, j, space, ret);
	case json_type_object:
		break;
	default:
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: a type must be a name, an object or an array");
	}
	if (!json_string_member(j, "type", &t))
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: a type's \"type\" must be a string");
	if (strcmp(t, "record") == 0)
		return build_record(b, j, space, ret);
	if (strcmp(t, "enum") == 0)
		return build_enum(b, j, space, ret);
	if (strcmp(t, "fixed") == 0)
		return build_fixed(b, j, space, ret);
	if (strcmp(t, "array") == 0)
		return build_container(b, j, space, true, ret);
	if (strcmp(t, "map") == 0)
		return build_container(b, j, space, false, ret);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(primitives); i++) {
		if (strcmp(t, primitives[i].name) == 0) {
			if ((*ret = node_new(b, primitives[i].type)) == NULL)
				return idem_error_nomem(b->err);
			return logical_parse(b, *ret, j);
		}
	}
	/* {"type": "a.Named"}: a reference; its annotations belong to its definition. */
	return build_name(b, t, space, ret);
}

/*
 * Whether avro-c's schema @s has the shape of @n: the same types, field names, symbols, fixed
 * sizes and branches. The walker checks bytes against our tree and avro-c decodes them with
 * its own, so they must not differ; any reading of the schema text where json-c and avro-c's
 * JSON parser (jansson) part ways is refused here rather than trusted.
 */
static bool same_shape(struct avro_node *n, avro_schema_t s)
{
	if (s != NULL && is_avro_link(s))
		s = avro_schema_link_target(s);
	if (s == NULL || avro_typeof(s) != n->type)
		return false;
	if (n->fullname != NULL) {
		if (n->checked != NULL)
			return n->checked == s;
		n->checked = s;
	}
	switch (n->type) {
	case AVRO_RECORD:
		if (avro_schema_record_size(s) != n->n)
			return false;
		for (size_t i = 0; i < n->n; i++) {
			const char *name = avro_schema_record_field_name(s, (int)i);

			if (name == NULL || strcmp(name, n->names[i]) != 0 ||
			    !same_shape(n->sub[i],
			                avro_schema_record_field_get_by_index(s, (int)i)))
				return false;
		}
		return true;
	case AVRO_ENUM:
		if (avro_schema_enum_number_of_symbols(s) < 0 ||
		    (size_t)avro_schema_enum_number_of_symbols(s) != n->n)
			return false;
		for (size_t i = 0; i < n->n; i++) {
			const char *sym = avro_schema_enum_get(s, (int)i);

			if (sym == NULL || strcmp(sym, n->names[i]) != 0)
				return false;
		}
		return true;
	case AVRO_FIXED:
		return avro_schema_fixed_size(s) == n->size;
	case AVRO_ARRAY:
		return same_shape(n->sub[0], avro_schema_array_items(s));
	case AVRO_MAP:
		return same_shape(n->sub[0], avro_schema_map_values(s));
	case AVRO_UNION:
		if (avro_schema_union_size(s) != n->n)
			return false;
		for (size_t i = 0; i < n->n; i++) {
			if (!same_shape(n->sub[i], avro_schema_union_branch(s, (int)i)))
				return false;
		}
		return true;
	default:
		return true;
	}
}

idem_status idem_avro_schema_new(const char *json, size_t len, idem_avro_schema **ret_schema,
                                 idem_error *err)
{
	struct builder b = { .err = err };
	json_tokener *tok;
	json_object *root;
	idem_avro_schema *s;
	idem_status r;
	int rc;

	if (len > INT_MAX)
		return idem_error_set(err, IDEM_ERR_INVALID, "schema of %zu bytes is too long",
		                      len);
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return idem_error_nomem(err);
	atomic_init(&s->refs, 1);
	b.s = s;
	pthread_mutex_lock(&avro_error_lock);
	rc = avro_schema_from_json_length(json, len, &s->avro);
	if (rc != 0) {
		if (rc == ENOMEM)
			r = idem_error_nomem(err);
		else
			r = idem_error_set(err, IDEM_ERR_INVALID, "schema is not valid Avro: %s",
			                   avro_strerror());
		s->avro = NULL;
		pthread_mutex_unlock(&avro_error_lock);
		goto out_free_schema;
	}
	pthread_mutex_unlock(&avro_error_lock);

	tok = json_tokener_new_ex(SCHEMA_JSON_DEPTH);
	if (tok == NULL) {
		r = idem_error_nomem(err);
		goto out_free_schema;
	}
	root = json_tokener_parse_ex(tok, json, (int)len);
	if (root == NULL || json_tokener_get_error(tok) != json_tokener_success) {
		r = idem_error_set(err, IDEM_ERR_INVALID, "schema JSON: %s",
		                   json_tokener_error_desc(json_tokener_get_error(tok)));
		json_object_put(root);
		json_tokener_free(tok);
		goto out_free_schema;
	}
	json_tokener_free(tok);
	r = build(&b, root, NULL, &s->root);
	json_object_put(root);
	if (r != IDEM_OK)
		goto out_free_schema;
	if (!same_shape(s->root, s->avro)) {
		r = idem_error_set(err, IDEM_ERR_INVALID,
		                   "schema: avro-c reads this schema differently from idemd");
		goto out_free_schema;
	}
	*ret_schema = s;
	return IDEM_OK;

out_free_schema:
	schema_free(s);
	return r;
}

idem_avro_schema *idem_avro_schema_ref(idem_avro_schema *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

void idem_avro_schema_unref(idem_avro_schema *s)
{
	if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
		schema_free(s);
}

/*
 * The Confluent header.
 */

idem_status idem_avro_frame(const void *p, size_t n, int32_t *ret_id, const void **ret_body,
                            size_t *ret_len, idem_error *err)
{
	const uint8_t *b = p;
	uint32_t id;

	if (n < IDEM_AVRO_HEADER_BYTES)
		return idem_error_set(
		        err, IDEM_ERR_KEY,
		        "value is %zu bytes, shorter than the %d-byte Confluent header", n,
		        IDEM_AVRO_HEADER_BYTES);
	if (b[0] != 0)
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "value starts with byte %u, not the Confluent magic byte 0",
		                      b[0]);
	id = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
	if (id > INT32_MAX)
		return idem_error_set(err, IDEM_ERR_KEY, "schema id %" PRIu32 " is beyond 2^31-1",
		                      id);
	*ret_id = (int32_t)id;
	*ret_body = b + IDEM_AVRO_HEADER_BYTES;
	*ret_len = n - IDEM_AVRO_HEADER_BYTES;
	return IDEM_OK;
}

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

/* Bytes of a valid UTF-8 sequence at @s[0..n) (no overlongs, surrogates, or beyond U+10FFFF),
 * or 0. */
static size_t utf8_seq(const uint8_t *s, size_t n)
{
	size_t len;
	uint32_t cp, min;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* A JSON pointer being written for a message, cut with "..." where it gets too long. */
struct pathbuf {
	char *b;
	size_t cap, len;
	bool cut;
};

/*
 * Appends @s[0..n) as a pointer token (~ and / escaped). Messages end up in logs and in
 * Postgres text columns, so bytes that are not printable UTF-8 become '?'.
 */
static void path_put(struct pathbuf *pb, const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t i = 0, run;

	while (i < n && !pb->cut) {
		run = u[i] < 0x80 ? 1 : utf8_seq(u + i, n - i);
		if (pb->len + (run ? run : 1) + 1 > pb->cap - 4) {
			pb->cut = true;
			break;
		}
		if (u[i] == '~' || u[i] == '/') {
			pb->b[pb->len++] = '~';
			pb->b[pb->len++] = u[i] == '~' ? '0' : '1';
		} else if (run == 0 || u[i] < 0x20 || u[i] == 0x7f) {
			pb->b[pb->len++] = '?';
			run = 1;
		} else {
			memcpy(pb->b + pb->len, u + i, run);
			pb->len += run;
		}
		i += run;
	}
}

/* The path of the walker as a JSON pointer in @buf[0..cap) (cap >= 8). */
static void walk_path(const struct walk *w, char *buf, size_t cap)
{
	struct pathbuf pb = { .b = buf, .cap = cap };
	char num[24];

	for (int i = 0; i < w->nseg && !pb.cut; i++) {
		const struct seg *g = &w->segs[i];

		if (pb.len + 2 > cap - 4) {
			pb.cut = true;
			break;
		}
		pb.b[pb.len++] = '/';
		if (g->kind == SEG_FIELD) {
			path_put(&pb, g->s, strlen(g->s));
		} else if (g->kind == SEG_KEY) {
			path_put(&pb, g->s, g->n < 64 ? g->n : 64);
			if (g->n > 64)
				path_put(&pb, "...", 3);
		} else {
			snprintf(num, sizeof(num), "%" PRId64, g->i);
			path_put(&pb, num, strlen(num));
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
	if (path[0] == '\0')
		return idem_error_set(w->err, IDEM_ERR_KEY,
		                      "schema id %" PRId32 ": at byte %zu: %s", w->id, w->at + at,
		                      what);
	return idem_error_set(w->err, IDEM_ERR_KEY, "schema id %" PRId32 ": at byte %zu (%s): %s",
	                      w->id, w->at + at, path, what);
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

/*
 * Text forms.
 */

static idem_status append_u64(struct idem_buf *out, uint64_t u, bool neg)
{
	char buf[24];
	size_t i = sizeof(buf);

	do {
		buf[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (neg)
		buf[--i] = '-';
	return idem_buf_append(out, buf + i, sizeof(buf) - i);
}

static idem_status append_i64(struct idem_buf *out, int64_t v)
{
	return append_u64(out, v < 0 ? ~(uint64_t)v + 1 : (uint64_t)v, v < 0);
}

/*
 * The shortest text that reads back to the same float (@is_float) or double: %g with more
 * digits until strtof()/strtod() gives the value back. -0.0 is "-0"; NaN and the infinities
 * are words, quoted in JSON (@json). From 6 (float) or 15 (double) digits: a normal number
 * that a shorter text gives back prints as that text there, its trailing zeros dropped; a
 * subnormal one has fewer digits of its own (1e-45, 5e-324), so the search starts at 1.
 */
static idem_status append_real(struct idem_buf *out, double d, bool is_float, bool json)
{
	char buf[320]; /* what %g can write, as the compiler counts it */
	int prec = is_float ? 6 : 15;
	int last = is_float ? 9 : 17;
	const char *word = NULL;

	if (isnan(d))
		word = json ? "\"NaN\"" : "NaN";
	else if (isinf(d))
		word = d > 0 ? (json ? "\"Infinity\"" : "Infinity")
		             : (json ? "\"-Infinity\"" : "-Infinity");
	if (word != NULL)
		return idem_buf_append_str(out, word);
	if (is_float ? fpclassify((float)d) == FP_SUBNORMAL : fpclassify(d) == FP_SUBNORMAL)
		prec = 1;
	for (; prec < last; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (is_float ? strtof(buf, NULL) == (float)d : strtod(buf, NULL) == d)
			break;
	}
	if (prec == last)
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
	return idem_buf_append_str(out, buf);
}

/* Writes @v in decimal with at least @width digits (zero-padded) at @p; @returns the end. */
static char *put_uint(char *p, uint64_t v, int width)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n < width)
		tmp[n++] = '0';
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

/*
 * YYYY-MM-DD at @p (years before 0 as -YYYY, after 9999 with more digits: ISO 8601 expanded).
 * Written by hand rather than with snprintf(), which took most of the time of a timestamp read.
 */
static char *put_date(char *p, int64_t days)
{
	int64_t y;
	int m, d;

	idem_civil_from_days(days, &y, &m, &d);
	if (y < 0)
		*p++ = '-';
	p = put_uint(p, (uint64_t)(y < 0 ? -y : y), 4);
	*p++ = '-';
	p = put_uint(p, (uint64_t)m, 2);
	*p++ = '-';
	return put_uint(p, (uint64_t)d, 2);
}

/* @t in units of 1/@per_sec second (1000, 1000000) as YYYY-MM-DDTHH:MM:SS.fffZ. */
static idem_status append_timestamp(struct idem_buf *out, int64_t t, int64_t per_sec, int digits)
{
	int64_t secs = t / per_sec, frac = t % per_sec, days, sod;
	char buf[64], *p;

	if (frac < 0) {
		frac += per_sec;
		secs--;
	}
	days = secs / 86400;
	sod = secs % 86400;
	if (sod < 0) {
		sod += 86400;
		days--;
	}
	p = put_date(buf, days);
	*p++ = 'T';
	p = put_uint(p, (uint64_t)(sod / 3600), 2);
	*p++ = ':';
	p = put_uint(p, (uint64_t)(sod / 60 % 60), 2);
	*p++ = ':';
	p = put_uint(p, (uint64_t)(sod % 60), 2);
	*p++ = '.';
	p = put_uint(p, (uint64_t)frac, digits);
	*p++ = 'Z';
	return idem_buf_append(out, buf, (size_t)(p - buf));
}

static idem_status append_date(struct idem_buf *out, int32_t days)
{
	char buf[32];

	return idem_buf_append(out, buf, (size_t)(put_date(buf, days) - buf));
}

/* Postgres bytea hex: \x0a1b. */
static idem_status append_hex(struct idem_buf *out, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char *d;

	if (n > (SIZE_MAX - 2) / 2 || idem_buf_reserve(out, 2 + 2 * n) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	d = out->data + out->len;
	*d++ = '\\';
	*d++ = 'x';
	for (size_t i = 0; i < n; i++) {
		*d++ = hex[p[i] >> 4];
		*d++ = hex[p[i] & 15];
	}
	out->len += 2 + 2 * n;
	out->data[out->len] = '\0';
	return IDEM_OK;
}

/*
 * A decimal: @b[0..n) is the unscaled value, two's complement, big-endian, of any length; the
 * text has exactly @scale digits after the point ("0.05", "-0.05", "12"). A value with more
 * digits than @precision breaks its schema (Java's writer refuses to write one) and is
 * IDEM_ERR_KEY; that also bounds the work, which is quadratic in the length.
 */
IDEM_TESTABLE idem_status idem__avro_decimal_text(struct idem_buf *out, const uint8_t *b, size_t n,
                                                  int precision, int scale);
IDEM_TESTABLE idem_status idem__avro_decimal_text(struct idem_buf *out, const uint8_t *b, size_t n,
                                                  int precision, int scale)
{
	uint8_t mag_small[64], *mag = mag_small;
	uint32_t limb_small[24], *limbs = limb_small;
	char dig_small[24 * 9 + 1], *dig = dig_small;
	bool neg = n > 0 && (b[0] & 0x80);
	size_t skip = 0, m, nl = 0, cap, nd, i;
	unsigned carry = 1;
	idem_status r = IDEM_OK;

	if (n > sizeof(mag_small) && (mag = malloc(n)) == NULL)
		return IDEM_ERR_NOMEM;
	for (i = n; i-- > 0;) {
		if (neg) {
			carry += (uint8_t)~b[i];
			mag[i] = (uint8_t)carry;
			carry >>= 8;
		} else {
			mag[i] = b[i];
		}
	}
	while (skip < n && mag[skip] == 0)
		skip++;
	m = n - skip;
	/* At least 2^(8(m-1)): more than @precision digits once 8(m-1) log10(2) >= precision. */
	if (m > 0 && (double)(m - 1) * 8 * 0.30102999566398119521 >= precision) {
		r = IDEM_ERR_KEY;
		goto out_free_mag;
	}
	cap = m * 8 / 29 + 2; /* base-1e9 limbs: 8 log10(2) / 9 < 8 / 29 */
	if (cap > IDEM_ARRAY_SIZE(limb_small) && ((limbs = malloc(cap * sizeof(*limbs))) == NULL ||
	                                          (dig = malloc(cap * 9 + 1)) == NULL)) {
		r = IDEM_ERR_NOMEM;
		goto out_free_limbs;
	}
	for (i = skip; i < n; i++) {
		uint64_t c = mag[i];

		for (size_t k = 0; k < nl; k++) {
			uint64_t t = (uint64_t)limbs[k] * 256 + c;

			limbs[k] = (uint32_t)(t % 1000000000);
			c = t / 1000000000;
		}
		if (c != 0)
			limbs[nl++] = (uint32_t)c;
	}
	if (nl == 0) {
		nd = (size_t)snprintf(dig, 2, "0");
	} else {
		nd = (size_t)snprintf(dig, 10, "%" PRIu32, limbs[nl - 1]);
		for (size_t k = nl - 1; k-- > 0;)
			nd += (size_t)snprintf(dig + nd, 10, "%09" PRIu32, limbs[k]);
	}
	if (nd > (size_t)precision) {
		r = IDEM_ERR_KEY;
		goto out_free_limbs;
	}
	if (neg && nl > 0)
		r = idem_buf_append(out, "-", 1);
	if (r == IDEM_OK && scale == 0) {
		r = idem_buf_append(out, dig, nd);
	} else if (r == IDEM_OK && nd > (size_t)scale) {
		if (idem_buf_append(out, dig, nd - (size_t)scale) != IDEM_OK ||
		    idem_buf_append(out, ".", 1) != IDEM_OK ||
		    idem_buf_append(out, dig + nd - (size_t)scale, (size_t)scale) != IDEM_OK)
			r = IDEM_ERR_NOMEM;
	} else if (r == IDEM_OK) {
		if (idem_buf_reserve(out, 2 + (size_t)scale) != IDEM_OK) {
			r = IDEM_ERR_NOMEM;
		} else {
			memcpy(out->data + out->len, "0.", 2);
			memset(out->data + out->len + 2, '0', (size_t)scale - nd);
			out->len += 2 + (size_t)scale - nd;
			r = idem_buf_append(out, dig, nd);
		}
	}
out_free_limbs:
	if (limbs != limb_small)
		free(limbs);
	if (dig != dig_small)
		free(dig);
out_free_mag:
	if (mag != mag_small)
		free(mag);
	return r;
}

/* @s[0..n) as a JSON string. @returns IDEM_ERR_KEY if it is not valid UTF-8. */
static idem_status append_json_string(struct idem_buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0, run, k;
	char *d;

	if (n > (SIZE_MAX - 2) / 6 || idem_buf_reserve(out, 6 * n + 2) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	d = out->data + out->len;
	*d++ = '"';
	while (i < n) {
		if (p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') {
			*d++ = (char)p[i++];
		} else if (p[i] < 0x20) {
			memcpy(d, "\\u00", 4);
			d[4] = hex[p[i] >> 4];
			d[5] = hex[p[i] & 15];
			d += 6;
			i++;
		} else if (p[i] < 0x80) {
			*d++ = '\\';
			*d++ = (char)p[i++];
		} else {
			if ((run = utf8_seq(p + i, n - i)) == 0) {
				out->data[out->len] = '\0';
				return IDEM_ERR_KEY;
			}
			for (k = 0; k < run; k++)
				*d++ = (char)p[i++];
		}
	}
	*d++ = '"';
	out->len = (size_t)(d - out->data);
	out->data[out->len] = '\0';
	return IDEM_OK;
}

/*
 * Reading the decoded value.
 */

struct render {
	const idem_avro_dec *dec;
	const char *ptr; /* for messages */
	struct idem_buf *out;
	idem_error *err;
};

static idem_status render_broken(const struct render *rd)
{
	return idem_error_set(rd->err, IDEM_ERR_INVALID,
	                      "avro-c's value does not have its schema's shape");
}

static idem_status render_status(const struct render *rd, idem_status r)
{
	if (r == IDEM_ERR_NOMEM)
		return idem_error_nomem(rd->err);
	return r;
}

/* @s[0..n) as a JSON string, for render_json(). */
static idem_status render_string(const struct render *rd, const char *s, size_t n)
{
	idem_status r = append_json_string(rd->out, s, n);

	if (r == IDEM_ERR_KEY)
		return idem_error_set(rd->err, IDEM_ERR_KEY, "a string in it is not valid UTF-8");
	return render_status(rd, r);
}

/* Passes @v and @n through unions to the selected branch. */
static bool through_unions(avro_value_t *v, const struct avro_node **n)
{
	avro_value_t branch;
	int d;

	while ((*n)->type == AVRO_UNION) {
		if (avro_value_get_discriminant(v, &d) != 0 || d < 0 || (size_t)d >= (*n)->n ||
		    avro_value_get_current_branch(v, &branch) != 0)
			return false;
		*v = branch;
		*n = (*n)->sub[d];
	}
	return true;
}

/*
 * The text of scalar @v (type @n, not a union, record, array, map or null). With @json,
 * the JSON form: strings quoted and escaped, numbers bare.
 */
static idem_status render_scalar(const struct render *rd, avro_value_t *v,
                                 const struct avro_node *n, bool json)
{
	struct idem_buf *out = rd->out;
	const void *bytes;
	const char *str;
	size_t size;
	int32_t i32;
	int64_t i64;
	double dbl;
	float flt;
	int i;
	idem_status r;
	bool quote;

	switch (n->type) {
	case AVRO_BOOLEAN:
		if (avro_value_get_boolean(v, &i) != 0)
			return render_broken(rd);
		return render_status(rd, idem_buf_append_str(out, i ? "true" : "false"));
	case AVRO_INT32:
		if (avro_value_get_int(v, &i32) != 0)
			return render_broken(rd);
		if (n->logical != LOGICAL_DATE)
			return render_status(rd, append_i64(out, i32));
		quote = json;
		if ((quote && idem_buf_append(out, "\"", 1) != IDEM_OK) ||
		    append_date(out, i32) != IDEM_OK ||
		    (quote && idem_buf_append(out, "\"", 1) != IDEM_OK))
			return idem_error_nomem(rd->err);
		return IDEM_OK;
	case AVRO_INT64:
		if (avro_value_get_long(v, &i64) != 0)
			return render_broken(rd);
		if (n->logical != LOGICAL_TS_MILLIS && n->logical != LOGICAL_TS_MICROS)
			return render_status(rd, append_i64(out, i64));
		quote = json;
		if ((quote && idem_buf_append(out, "\"", 1) != IDEM_OK) ||
		    (n->logical == LOGICAL_TS_MILLIS
		             ? append_timestamp(out, i64, 1000, 3)
		             : append_timestamp(out, i64, 1000000, 6)) != IDEM_OK ||
		    (quote && idem_buf_append(out, "\"", 1) != IDEM_OK))
			return idem_error_nomem(rd->err);
		return IDEM_OK;
	case AVRO_FLOAT:
		if (avro_value_get_float(v, &flt) != 0)
			return render_broken(rd);
		return render_status(rd, append_real(out, flt, true, json));
	case AVRO_DOUBLE:
		if (avro_value_get_double(v, &dbl) != 0)
			return render_broken(rd);
		return render_status(rd, append_real(out, dbl, false, json));
	case AVRO_STRING:
		if (avro_value_get_string(v, &str, &size) != 0 || size == 0)
			return render_broken(rd);
		if (!json)
			return render_status(rd, idem_buf_append(out, str, size - 1));
		return render_string(rd, str, size - 1);
	case AVRO_ENUM:
		if (avro_value_get_enum(v, &i) != 0 || i < 0 || (size_t)i >= n->n)
			return render_broken(rd);
		if (!json)
			return render_status(rd, idem_buf_append_str(out, n->names[i]));
		return render_string(rd, n->names[i], strlen(n->names[i]));
	case AVRO_BYTES:
	case AVRO_FIXED:
		if ((n->type == AVRO_BYTES ? avro_value_get_bytes(v, &bytes, &size)
		                           : avro_value_get_fixed(v, &bytes, &size)) != 0)
			return render_broken(rd);
		if (json && idem_buf_append(out, "\"", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		if (n->logical == LOGICAL_DECIMAL) {
			r = idem__avro_decimal_text(out, bytes, size, n->precision, n->scale);
			if (r == IDEM_ERR_KEY)
				return idem_error_set(
				        rd->err, IDEM_ERR_KEY,
				        "a decimal has more digits than its precision %d",
				        n->precision);
		} else if (json) {
			/* "\x0a" in JSON: the backslash escaped. */
			r = idem_buf_append(out, "\\", 1);
			if (r == IDEM_OK)
				r = append_hex(out, bytes, size);
		} else {
			r = append_hex(out, bytes, size);
		}
		if (r == IDEM_OK && json)
			r = idem_buf_append(out, "\"", 1);
		return render_status(rd, r);
	default:
		return render_broken(rd);
	}
}

static idem_status render_json(const struct render *rd, avro_value_t *v, const struct avro_node *n);

/* Whether map entry @a sorts after @b: bytewise, a prefix first. */
static bool entry_after(const struct map_entry *a, const struct map_entry *b)
{
	int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);

	return c > 0 || (c == 0 && a->len > b->len);
}

/* Heapsort (qsort() may allocate; this runs on every map read, after warm-up without any). */
static void sort_entries(struct map_entry *e, size_t n)
{
	struct map_entry t;
	size_t start = n / 2, end = n, root, child;

	while (end > 1) {
		if (start > 0) {
			start--;
		} else {
			end--;
			t = e[0];
			e[0] = e[end];
			e[end] = t;
		}
		root = start;
		while ((child = 2 * root + 1) < end) {
			if (child + 1 < end && entry_after(&e[child + 1], &e[child]))
				child++;
			if (!entry_after(&e[child], &e[root]))
				break;
			t = e[root];
			e[root] = e[child];
			e[child] = t;
			root = child;
		}
	}
}

/* A map as a JSON object with its keys sorted bytewise. */
static idem_status render_map(const struct render *rd, avro_value_t *v, const struct avro_node *n)
{
	struct map_sort *ms = rd->dec->sort;
	size_t size, base = ms->top;
	avro_value_t child;
	const char *key;
	idem_status r = IDEM_OK;

	if (avro_value_get_size(v, &size) != 0)
		return render_broken(rd);
	if (size == 0)
		return render_status(rd, idem_buf_append(rd->out, "{}", 2));
	if (size > SIZE_MAX / sizeof(*ms->e) - base)
		return idem_error_nomem(rd->err);
	if (base + size > ms->cap) {
		size_t cap = ms->cap ? ms->cap : 16;
		struct map_entry *e;

		while (cap < base + size)
			cap *= 2;
		if ((e = realloc(ms->e, cap * sizeof(*e))) == NULL)
			return idem_error_nomem(rd->err);
		ms->e = e;
		ms->cap = cap;
	}
	for (size_t i = 0; i < size; i++) {
		if (avro_value_get_by_index(v, i, &child, &key) != 0 || key == NULL)
			return render_broken(rd);
		ms->e[base + i] = (struct map_entry){ key, strlen(key), i };
	}
	sort_entries(ms->e + base, size);
	ms->top = base + size;
	if (idem_buf_append(rd->out, "{", 1) != IDEM_OK) {
		r = idem_error_nomem(rd->err);
		goto out_pop;
	}
	for (size_t i = 0; i < size; i++) {
		/* ms->e may move while a nested map sorts: read the entry afresh. */
		struct map_entry e = ms->e[base + i];

		if ((i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)) {
			r = idem_error_nomem(rd->err);
			goto out_pop;
		}
		if ((r = render_string(rd, e.key, e.len)) != IDEM_OK)
			goto out_pop;
		if (idem_buf_append(rd->out, ":", 1) != IDEM_OK) {
			r = idem_error_nomem(rd->err);
			goto out_pop;
		}
		if (avro_value_get_by_index(v, e.idx, &child, NULL) != 0) {
			r = render_broken(rd);
			goto out_pop;
		}
		if ((r = render_json(rd, &child, n->sub[0])) != IDEM_OK)
			goto out_pop;
	}
	r = render_status(rd, idem_buf_append(rd->out, "}", 1));
out_pop:
	ms->top = base;
	return r;
}

/* @v (type @n) as JSON text: records in field order, map keys sorted, unions as their branch. */
static idem_status render_json(const struct render *rd, avro_value_t *v, const struct avro_node *n)
{
	avro_value_t val = *v, child;
	size_t size;
	idem_status r;

	if (!through_unions(&val, &n))
		return render_broken(rd);
	switch (n->type) {
	case AVRO_NULL:
		return render_status(rd, idem_buf_append(rd->out, "null", 4));
	case AVRO_RECORD:
		if (idem_buf_append(rd->out, "{", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		for (size_t i = 0; i < n->n; i++) {
			if (i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if ((r = render_string(rd, n->names[i], strlen(n->names[i]))) != IDEM_OK)
				return r;
			if (idem_buf_append(rd->out, ":", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if (avro_value_get_by_index(&val, i, &child, NULL) != 0)
				return render_broken(rd);
			if ((r = render_json(rd, &child, n->sub[i])) != IDEM_OK)
				return r;
		}
		return render_status(rd, idem_buf_append(rd->out, "}", 1));
	case AVRO_ARRAY:
		if (avro_value_get_size(&val, &size) != 0)
			return render_broken(rd);
		if (idem_buf_append(rd->out, "[", 1) != IDEM_OK)
			return idem_error_nomem(rd->err);
		for (size_t i = 0; i < size; i++) {
			if (i > 0 && idem_buf_append(rd->out, ",", 1) != IDEM_OK)
				return idem_error_nomem(rd->err);
			if (avro_value_get_by_index(&val, i, &child, NULL) != 0)
				return render_broken(rd);
			if ((r = render_json(rd, &child, n->sub[0])) != IDEM_OK)
				return r;
		}
		return render_status(rd, idem_buf_append(rd->out, "]", 1));
	case AVRO_MAP:
		return render_map(rd, &val, n);
	default:
		return render_scalar(rd, &val, n, true);
	}
}

/* Whether pointer token @s[0..n) (still escaped) names @name[0..len). */
static bool token_equal(const char *s, size_t n, const char *name, size_t len)
{
	size_t k = 0;
	char c;

	for (size_t i = 0; i < n; i++, k++) {
		c = s[i];
		if (c == '~') {
			c = s[i + 1] == '0' ? '~' : '/';
			i++;
		}
		if (k >= len || name[k] != c)
			return false;
	}
	return k == len;
}

/* Array index token @s[0..n): "0" or digits without a leading zero; false if not one. */
static bool token_index(const char *s, size_t n, size_t *ret)
{
	size_t v = 0;

	if (n == 0 || n > 18 || (s[0] == '0' && n > 1))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (size_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

static bool pointer_valid(const char *ptr)
{
	if (*ptr != '\0' && *ptr != '/')
		return false;
	for (const char *p = ptr; *p != '\0'; p++) {
		if (p[0] == '~' && p[1] != '0' && p[1] != '1')
			return false;
	}
	return true;
}

/* The child of @v (type @n, past unions) named by token @s[0..len); false if there is none. */
static bool step(avro_value_t *v, const struct avro_node **n, const char *s, size_t len)
{
	const struct avro_node *t = *n;
	avro_value_t child;
	const char *key;
	size_t idx, size;

	switch (t->type) {
	case AVRO_RECORD:
		for (size_t i = 0; i < t->n; i++) {
			if (token_equal(s, len, t->names[i], strlen(t->names[i]))) {
				if (avro_value_get_by_index(v, i, &child, NULL) != 0)
					return false;
				*v = child;
				*n = t->sub[i];
				return true;
			}
		}
		return false;
	case AVRO_ARRAY:
		if (!token_index(s, len, &idx) || avro_value_get_size(v, &size) != 0 ||
		    idx >= size || avro_value_get_by_index(v, idx, &child, NULL) != 0)
			return false;
		*v = child;
		*n = t->sub[0];
		return true;
	case AVRO_MAP:
		/* By index, not avro_value_get_by_name(): a miss there writes avro-c's global
		 * error buffer, which other threads write too. */
		if (avro_value_get_size(v, &size) != 0)
			return false;
		for (size_t i = 0; i < size; i++) {
			if (avro_value_get_by_index(v, i, &child, &key) != 0 || key == NULL)
				return false;
			if (token_equal(s, len, key, strlen(key))) {
				*v = child;
				*n = t->sub[0];
				return true;
			}
		}
		return false;
	default:
		return false;
	}
}

idem_status idem_avro_read(const idem_avro_dec *dec, const char *ptr, bool scalar,
                           struct idem_buf *out, const char **ret_absent, idem_error *err)
{
	struct render rd = { .dec = dec, .ptr = ptr, .out = out, .err = err };
	const struct avro_node *n;
	const char *p = ptr, *e;
	size_t mark = out->len;
	avro_value_t v;
	idem_status r;

	assert(dec != NULL && dec->cur != NULL); /* read only after a successful decode */
	if (!pointer_valid(ptr))
		return idem_error_set(err, IDEM_ERR_INVALID, "'%s' is not a JSON pointer", ptr);
	v = dec->cur->value;
	n = dec->schema->root;
	for (;;) {
		if (!through_unions(&v, &n))
			return render_broken(&rd);
		if (n->type == AVRO_NULL) {
			*ret_absent = "is null";
			return IDEM_OK;
		}
		if (*p == '\0')
			break;
		p++;
		e = strchr(p, '/');
		if (e == NULL)
			e = p + strlen(p);
		if (!step(&v, &n, p, (size_t)(e - p))) {
			*ret_absent = "not found in value";
			return IDEM_OK;
		}
		p = e;
	}
	if (scalar && (n->type == AVRO_RECORD || n->type == AVRO_ARRAY || n->type == AVRO_MAP))
		return idem_error_set(err, IDEM_ERR_KEY, "is %s, not a scalar",
		                      n->type == AVRO_RECORD  ? "a record"
		                      : n->type == AVRO_ARRAY ? "an array"
		                                              : "a map");
	if (n->type == AVRO_RECORD || n->type == AVRO_ARRAY || n->type == AVRO_MAP)
		r = render_json(&rd, &v, n);
	else
		r = render_scalar(&rd, &v, n, false);
	if (r != IDEM_OK && out->data != NULL) {
		out->len = mark;
		out->data[mark] = '\0';
	}
	return r;
}
