/*
 * idem_protobuf_int.h - what idem_protobuf.cc (schemas, the walker, decoding) and
 * idem_protobuf_text.cc (pointers and text) share. C++ only.
 */
#ifndef IDEM_PROTOBUF_INT_H
#define IDEM_PROTOBUF_INT_H

#include <array>
#include <atomic>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/type_resolver.h>
#include <memory>
#include <unordered_map>
#include <vector>

#include "idem_protobuf.h"

/* The type URL prefix of the proto3 JSON mapping (google.protobuf.Any's). */
#define IDEM_PB_TYPE_URL "type.googleapis.com"

/*
 * A schema: its own descriptor pool over the generated one (the well-known types), the factory
 * of its dynamic messages and the type resolver of its JSON (both safe to share: GetPrototype()
 * locks, the resolver keeps no state). Members are destroyed in reverse order: the pool last.
 */
struct idem_pb_schema {
	std::atomic<int> refs{ 1 };
	google::protobuf::DescriptorPool pool{ google::protobuf::DescriptorPool::generated_pool() };
	const google::protobuf::FileDescriptor *file = nullptr; /* the main file */
	std::unique_ptr<google::protobuf::DynamicMessageFactory> factory;
	std::unique_ptr<google::protobuf::util::TypeResolver> resolver;
};

/* How many elements of one repeated field the walker has seen in one message (serial). */
struct idem_pb_count {
	uint64_t serial;
	int64_t n;
};

struct idem_pb_dec {
	/* One message per message type of cache_schema, reused (Clear()) from value to value. */
	idem_pb_schema *cache_schema = nullptr;
	std::unordered_map<const google::protobuf::Descriptor *,
	                   std::unique_ptr<google::protobuf::Message>>
	        msgs;
	idem_pb_schema *schema = nullptr;         /* of the decoded message */
	google::protobuf::Message *cur = nullptr; /* the decoded message, one of msgs */
	bool loose = false;                       /* a proto2 string in it is not valid UTF-8 */
	bool json_ready = false;                  /* its unknown fields dropped, for JSON */
	/* The walker's counts of repeated fields, one table per depth, reused. */
	uint64_t serial = 0;
	std::array<std::vector<idem_pb_count>, IDEM_PB_MAX_DEPTH> counts;
};

/* Installs libprotobuf's log handler (nothing to stderr), once. */
void idem__pb_quiet(void);

/* @returns the offset of the first byte of @s[0..n) that is not valid UTF-8 (NUL is), or @n. */
size_t idem__pb_utf8_bad(const uint8_t *s, size_t n);

/*
 * @brief Walk message @d of dec->schema in @p[0..@len) (at offset @at of the value, schema id
 * @id for messages): bounds, wire types, depth and the UTF-8 of proto3 strings (of every string
 * with @strict). *@ret_loose (may be NULL) says whether a proto2 string is not valid UTF-8.
 * Errors: IDEM_ERR_KEY with where, in @err.
 */
idem_status idem__pb_walk(idem_pb_dec *dec, const google::protobuf::Descriptor *d, int32_t id,
                          size_t at, const uint8_t *p, size_t len, bool strict, bool *ret_loose,
                          idem_error *err);

#endif
