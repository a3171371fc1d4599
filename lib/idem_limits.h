/*
 * idem_limits.h - the bounds on what a schema registry may serve, in one place (ARCHITECTURE.md,
 * "Schema bounds"). Anyone who can register a schema chooses its text; the libraries that read
 * it (libprotoc's parser, avro-c and jansson, json-c's object tree) recurse once per level of
 * nesting and allocate per definition, on a fetcher thread's stack (IDEM_THREAD_STACK_BYTES).
 * So each schema is checked against these bounds before a library sees it, and one over a bound
 * is invalid: the messages written with it are quarantined with a reason naming the bound, its
 * value and the schema id ("schema id 7: line 66:11: nested deeper than the bound of 64 levels"),
 * never retried and never a crash.
 *
 * Header only: every module may include it (the lowest line of the layer list).
 */
#ifndef IDEM_LIMITS_H
#define IDEM_LIMITS_H

/*
 * The stack of every thread libidem starts (idem_thread_start(): the workers, the registry's
 * fetchers, retention, the outbox relay), set rather than inherited: glibc sizes a thread's
 * stack from RLIMIT_STACK (8 MiB under systemd's default, 2 MiB when it is unlimited), and a
 * fetcher parses schemas with recursive parsers. Only the pages touched are memory; schemas at
 * the depth bounds below parse on an eighth of it under ASan (unit.protobuf, unit.avro).
 */
#define IDEM_THREAD_STACK_BYTES ((size_t)8 * 1024 * 1024)

/*
 * Levels of nesting a schema may have: in a .proto, blocks inside blocks (messages, enums,
 * groups, oneofs, services, extends, option values in braces, and the text format's < >, [ ]
 * and parentheses, counted alike); in Avro, types inside types (a record's field, an array's
 * items, a map's values, a union's branch). Schemas written by people nest fewer than 20
 * levels; 64 is the bound of the values' own nesting (IDEM_PB_MAX_DEPTH, IDEM_AVRO_MAX_DEPTH)
 * and of JSON Schema's (IDEM_JSONSCHEMA_MAX_DEPTH), and schemas at it parse on an eighth of
 * IDEM_THREAD_STACK_BYTES under ASan. libprotoc 3.21 recursed its way out of a fetcher
 * thread's stack at 20,000 nested messages (SIGSEGV). libprotobuf itself refuses messages
 * nested more than 31 deep when it builds a file, but its parser runs first.
 */
#define IDEM_SCHEMA_MAX_DEPTH 64

/*
 * JSON nesting of an Avro schema's text, read by json-c before avro-c (jansson) sees it. A
 * record takes 3 levels per level of types ({"type": "record", "fields": [{"type": ...}]}) and a
 * field's default value as many as its type, so IDEM_SCHEMA_MAX_DEPTH types need about 4 x 64
 * levels; twice that leaves room for documentation and custom attributes. json-c's reader does
 * not recurse; jansson's reader and both libraries' freeing do.
 */
#define IDEM_SCHEMA_MAX_JSON_DEPTH 512

/*
 * Named types (records, enums, fixed) one Avro schema may define. Schemas people write define
 * tens to hundreds; idemd builds its reading in linear time (names by hash: unit.avro's
 * test_many_named_types builds exactly this many), and avro-c keeps every name in memory of
 * its own.
 */
#define IDEM_SCHEMA_MAX_NAMED_TYPES 100000

/*
 * Definitions (message, enum, group, oneof, service, extend) in one .proto file. Schemas people
 * write define tens, large generated API files a few thousand; each costs libprotobuf a
 * descriptor, a descriptor proto and time to build and check (unit.protobuf builds exactly this
 * many, 10,000 messages with a oneof each, in about a second under ASan).
 */
#define IDEM_SCHEMA_MAX_DEFINITIONS 20000

/*
 * Import statements in one .proto file: every file a schema's references name
 * (IDEM_SCHEMA_MAX_REFERENCES) plus the files libprotobuf carries (a dozen .proto files), with
 * room to spare.
 */
#define IDEM_SCHEMA_MAX_IMPORTS 128

/*
 * The files a Protobuf schema may import through the registry's references, directly or not,
 * and the depth of references of references: each is fetched on the fetcher thread, one request
 * at a time, and built depth first.
 */
#define IDEM_SCHEMA_MAX_REFERENCES 64

#endif
