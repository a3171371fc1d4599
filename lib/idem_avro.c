/*
 * idem_avro.c - Avro values in the Confluent wire format (idem_avro.h; ARCHITECTURE.md "Avro").
 *
 * Who does what. avro-c parses and validates a schema and decodes a datum into a generic value.
 * idemd's three files add what avro-c lacks, and nothing else: an annotation tree built from the
 * same schema text with json-c (logical types, field names and enum symbols in order, named types
 * resolved), checked against avro-c's own reading of the schema so that both walk the same
 * shape; a bounds and depth check of the bytes (the walker) before avro-c sees them, because
 * avro-c trusts lengths and counts (it allocates whatever a length says, negates a block count
 * of INT64_MIN, does not check an enum index) and recurses once per level; pointers into the
 * decoded value; and the text form of each value. This file holds the schemas and the header;
 * idem_avro_decode.c the walker and the decoder; idem_avro_text.c the text and the pointers.
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

#include "idem_avro_int.h"
#include "idem_limits.h"

/* Held around avro-c calls that write its one error buffer (idem_avro_int.h). */
pthread_mutex_t idem__avro_error_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Schemas: the annotation tree.
 */

static const struct {
	const char *name;
	avro_type_t type;
} primitives[] = {
	{ "null", AVRO_NULL },   { "boolean", AVRO_BOOLEAN }, { "int", AVRO_INT32 },
	{ "long", AVRO_INT64 },  { "float", AVRO_FLOAT },     { "double", AVRO_DOUBLE },
	{ "bytes", AVRO_BYTES }, { "string", AVRO_STRING },
};

/*
 * Names are found by hash, not by a search of every node or field before them: a schema of
 * 100,000 named types or a record of 300,000 fields took minutes to build that way, and the
 * registry serves whatever schema a producer registered.
 */
struct builder {
	idem_avro_schema *s;
	idem_error *err;
	struct avro_node *prim[IDEM_ARRAY_SIZE(primitives)]; /* see build_primitive() */
	struct avro_node **named; /* the named types defined so far at the hash of their full
	                             name (NULL: a free slot); named_cap a power of 2 */
	size_t named_cap, n_named;
	int depth; /* of the type being built: IDEM_SCHEMA_MAX_DEPTH bounds build()'s recursion */
};

static void node_free(struct avro_node *n)
{
	if (n->names != NULL) {
		for (size_t i = 0; i < n->n; i++)
			free(n->names[i]);
	}
	free(n->names);
	free(n->index);
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

/* Allocates the @n children (and, with @names, names; for a record, its index) of @node. */
static idem_status node_children(struct builder *b, struct avro_node *node, size_t n, bool names)
{
	node->sub = calloc(n ? n : 1, sizeof(*node->sub));
	if (names)
		node->names = calloc(n ? n : 1, sizeof(*node->names));
	if (node->sub == NULL || (names && node->names == NULL))
		return idem_error_nomem(b->err);
	if (node->type == AVRO_RECORD) {
		/* The schema text is under 2 GiB (idem_avro_schema_new()), so are its fields. */
		if (n > UINT32_MAX / 4)
			return idem_error_nomem(b->err);
		for (node->index_cap = 8; node->index_cap < 2 * n; node->index_cap *= 2)
			;
		node->index = calloc(node->index_cap, sizeof(*node->index));
		if (node->index == NULL)
			return idem_error_nomem(b->err);
	}
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

uint64_t idem__avro_hash(uint64_t h, const char *s, size_t len, bool token)
{
	uint8_t c;

	/* FNV-1a. */
	for (size_t i = 0; i < len; i++) {
		c = (uint8_t)s[i];
		if (token && c == '~' && i + 1 < len)
			c = s[++i] == '0' ? '~' : '/';
		h = (h ^ c) * UINT64_C(0x100000001b3);
	}
	return h;
}

/* The hash of the full name of a named type @name inside namespace @space (NULL: none). */
static uint64_t named_hash(const char *name, const char *space)
{
	uint64_t h = IDEM__AVRO_HASH_INIT;

	if (space != NULL) {
		h = idem__avro_hash(h, space, strlen(space), false);
		h = idem__avro_hash(h, ".", 1, false);
	}
	return idem__avro_hash(h, name, strlen(name), false);
}

/* The named type called @name where names are relative to namespace @space (NULL: none). As
 * avro-c: a name without a dot is in @space, and only there. */
static struct avro_node *named_find(const struct builder *b, const char *name, const char *space)
{
	size_t sl, k;
	const char *f;

	if (b->named_cap == 0)
		return NULL;
	if (space != NULL && strchr(name, '.') != NULL)
		space = NULL;
	sl = space != NULL ? strlen(space) : 0;
	for (k = named_hash(name, space) & (b->named_cap - 1); b->named[k] != NULL;
	     k = (k + 1) & (b->named_cap - 1)) {
		f = b->named[k]->fullname;
		if (space == NULL ? strcmp(f, name) == 0
		                  : strncmp(f, space, sl) == 0 && f[sl] == '.' &&
		                            strcmp(f + sl + 1, name) == 0)
			return b->named[k];
	}
	return NULL;
}

/* Adds named type @n to the table, which it keeps at most half full. */
static idem_status named_add(struct builder *b, struct avro_node *n)
{
	struct avro_node **t;
	size_t cap, k;

	if (2 * (b->n_named + 1) > b->named_cap) {
		cap = b->named_cap ? 2 * b->named_cap : 64;
		if ((t = calloc(cap, sizeof(*t))) == NULL)
			return idem_error_nomem(b->err);
		for (size_t i = 0; i < b->named_cap; i++) {
			if (b->named[i] == NULL)
				continue;
			k = named_hash(b->named[i]->fullname, NULL) & (cap - 1);
			while (t[k] != NULL)
				k = (k + 1) & (cap - 1);
			t[k] = b->named[i];
		}
		free(b->named);
		b->named = t;
		b->named_cap = cap;
	}
	k = named_hash(n->fullname, NULL) & (b->named_cap - 1);
	while (b->named[k] != NULL)
		k = (k + 1) & (b->named_cap - 1);
	b->named[k] = n;
	b->n_named++;
	return IDEM_OK;
}

/*
 * Whether @name (after its last dot) is an Avro name as avro-c checks it: [A-Za-z_][A-Za-z0-9_]*.
 * avro-c answers ENOMEM for one that is not, which would read as an outage (a wait for ever).
 */
static bool avro_name_ok(const char *name)
{
	const char *dot = strrchr(name, '.');

	if (dot != NULL)
		name = dot + 1;
	if (*name == '\0')
		return false;
	for (size_t i = 0; name[i] != '\0'; i++) {
		char c = name[i];

		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (i > 0 && c >= '0' && c <= '9')))
			return false;
	}
	return true;
}

/* The full name and namespace of named type @j (kind @what) defined inside namespace @space. */
static idem_status named_define(struct builder *b, json_object *j, const char *what,
                                const char *space, struct avro_node *n)
{
	const char *name, *ns = NULL, *dot;
	size_t len;

	if (!json_string_member(j, "name", &name))
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: a %s has no name", what);
	if (!avro_name_ok(name))
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: the name of a %s is not an Avro name", what);
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
	if (named_find(b, n->fullname, NULL) != NULL)
		return idem_error_set(b->err, IDEM_ERR_INVALID, "schema: type %s is defined twice",
		                      n->fullname);
	if (b->n_named == IDEM_SCHEMA_MAX_NAMED_TYPES)
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: named type %s is past the bound of %d named types",
		                      n->fullname, IDEM_SCHEMA_MAX_NAMED_TYPES);
	return named_add(b, n);
}

/*
 * Adds field @i of record @n (its name in n->names[i]) to the record's index, which
 * node_children() sized; false if a field before it has that name.
 */
static bool field_add(struct avro_node *n, size_t i)
{
	const char *name = n->names[i];
	size_t k = idem__avro_hash(IDEM__AVRO_HASH_INIT, name, strlen(name), false) &
	           (n->index_cap - 1);

	for (; n->index[k] != 0; k = (k + 1) & (n->index_cap - 1)) {
		if (strcmp(n->names[n->index[k] - 1], name) == 0)
			return false;
	}
	n->index[k] = (uint32_t)i + 1;
	return true;
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

/*
 * Primitive @i (of the table) without annotations. Nothing writes a node once built, so its
 * uses share one: a record of 300,000 long fields has one long node, not 300,000.
 */
static idem_status build_primitive(struct builder *b, size_t i, struct avro_node **ret)
{
	if (b->prim[i] == NULL && (b->prim[i] = node_new(b, primitives[i].type)) == NULL)
		return idem_error_nomem(b->err);
	*ret = b->prim[i];
	return IDEM_OK;
}

/* A type given by name: a primitive, or a named type defined before. */
static idem_status build_name(struct builder *b, const char *name, const char *space,
                              struct avro_node **ret)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(primitives); i++) {
		if (strcmp(name, primitives[i].name) == 0)
			return build_primitive(b, i, ret);
	}
	*ret = named_find(b, name, space);
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
		if ((n->names[i] = strdup(fname)) == NULL)
			return idem_error_nomem(b->err);
		if (!field_add(n, i))
			return idem_error_set(b->err, IDEM_ERR_INVALID,
			                      "schema: record %s has two fields named %s",
			                      n->fullname, fname);
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
static idem_status build_type(struct builder *b, json_object *j, const char *space,
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
			if (!json_object_object_get_ex(j, "logicalType", NULL))
				return build_primitive(b, i, ret);
			if ((*ret = node_new(b, primitives[i].type)) == NULL)
				return idem_error_nomem(b->err);
			return logical_parse(b, *ret, j);
		}
	}
	/* {"type": "a.Named"}: a reference; its annotations belong to its definition. */
	return build_name(b, t, space, ret);
}

static idem_status build(struct builder *b, json_object *j, const char *space,
                         struct avro_node **ret)
{
	idem_status r;

	if (b->depth == IDEM_SCHEMA_MAX_DEPTH)
		return idem_error_set(b->err, IDEM_ERR_INVALID,
		                      "schema: types nested deeper than the bound of %d levels",
		                      IDEM_SCHEMA_MAX_DEPTH);
	b->depth++;
	r = build_type(b, j, space, ret);
	b->depth--;
	return r;
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

	/*
	 * idemd's reading first: it bounds the nesting (json-c's reader does not recurse) and the
	 * named types, and finds a type defined twice, before avro-c and jansson, which recurse
	 * once per level and leak what they built when a name is defined twice.
	 */
	tok = json_tokener_new_ex(IDEM_SCHEMA_MAX_JSON_DEPTH);
	if (tok == NULL) {
		r = idem_error_nomem(err);
		goto out_free_schema;
	}
	root = json_tokener_parse_ex(tok, json, (int)len);
	if (root == NULL || json_tokener_get_error(tok) != json_tokener_success) {
		if (json_tokener_get_error(tok) == json_tokener_error_depth)
			r = idem_error_set(err, IDEM_ERR_INVALID,
			                   "schema JSON nested deeper than the bound of %d levels",
			                   IDEM_SCHEMA_MAX_JSON_DEPTH);
		else
			r = idem_error_set(err, IDEM_ERR_INVALID, "schema is not valid Avro: %s",
			                   json_tokener_error_desc(json_tokener_get_error(tok)));
		json_object_put(root);
		json_tokener_free(tok);
		goto out_free_schema;
	}
	json_tokener_free(tok);
	r = build(&b, root, NULL, &s->root);
	json_object_put(root);
	free(b.named);
	if (r != IDEM_OK)
		goto out_free_schema;

	pthread_mutex_lock(&idem__avro_error_lock);
	rc = avro_schema_from_json_length(json, len, &s->avro);
	if (rc != 0) {
		if (rc == ENOMEM)
			r = idem_error_nomem(err);
		else
			r = idem_error_set(err, IDEM_ERR_INVALID, "schema is not valid Avro: %s",
			                   avro_strerror());
		s->avro = NULL;
		pthread_mutex_unlock(&idem__avro_error_lock);
		goto out_free_schema;
	}
	pthread_mutex_unlock(&idem__avro_error_lock);
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
