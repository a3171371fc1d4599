/*
 * idem_protobuf_text.cc - the one text form of each Protobuf value (the table in
 * idem_protobuf.h), JSON for messages, repeated fields and maps, and RFC 6901 pointers into a
 * decoded message; see idem_protobuf.cc.
 *
 * Whole messages are JSON by libprotobuf's proto3 JSON mapping, from a deterministic
 * serialization (map entries by key: a map's text must not depend on the order a hash table
 * holds its entries in). A repeated field or a map alone is written here, element by element,
 * as the mapping writes it.
 */
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <google/protobuf/duration.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <new>
#include <string>
#include <vector>

#include "idem_protobuf_int.h"

namespace gp = google::protobuf;
using FD = gp::FieldDescriptor;

static const char NOT_FOUND[] = "not found in value";

namespace
{
struct reader {
	const idem_pb_dec *dec;
	struct idem_buf *out;
	idem_error *err;
};

/* A place in the decoded message: message m itself (f nullptr), its field f, or element idx. */
struct pb_node {
	const gp::Message *m;
	const FD *f;
	int idx; /* an element of repeated f; -1: all of f */
};

/* The well-known types with a text or a pointer form of their own. */
enum wkt { WKT_NONE, WKT_TIMESTAMP, WKT_DURATION, WKT_WRAPPER, WKT_STRUCT, WKT_LIST, WKT_VALUE };
} // namespace

static wkt wkt_of(const gp::Descriptor *d)
{
	static const char *const wrappers[] = { "DoubleValue", "FloatValue",  "Int64Value",
		                                "UInt64Value", "Int32Value",  "UInt32Value",
		                                "BoolValue",   "StringValue", "BytesValue" };
	const std::string &n = d->full_name();

	/* libprotobuf's own, not a schema's message of the same name. */
	if (n.compare(0, 16, "google.protobuf.") != 0 ||
	    d->file()->pool() != gp::DescriptorPool::generated_pool())
		return WKT_NONE;
	const char *s = n.c_str() + 16;

	if (strcmp(s, "Timestamp") == 0)
		return WKT_TIMESTAMP;
	if (strcmp(s, "Duration") == 0)
		return WKT_DURATION;
	if (strcmp(s, "Struct") == 0)
		return WKT_STRUCT;
	if (strcmp(s, "ListValue") == 0)
		return WKT_LIST;
	if (strcmp(s, "Value") == 0)
		return WKT_VALUE;
	for (const char *w : wrappers) {
		if (strcmp(s, w) == 0)
			return WKT_WRAPPER;
	}
	return WKT_NONE;
}

static idem_status put(const reader &rd, idem_status r)
{
	return r == IDEM_ERR_NOMEM ? idem_error_nomem(rd.err) : r;
}

static idem_status put_str(const reader &rd, const char *s)
{
	return put(rd, idem_buf_append_str(rd.out, s));
}

/* @s[0..n) as a JSON string; IDEM_ERR_KEY (said in rd.err) if it is not valid UTF-8. */
static idem_status put_json_string(const reader &rd, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = (const uint8_t *)s;
	size_t run;
	char esc[6] = { '\\', 'u', '0', '0' }, two[2] = { '\\' };

	if (idem__pb_utf8_bad(p, n) != n)
		return idem_error_set(rd.err, IDEM_ERR_KEY, "a string in it is not valid UTF-8");
	if (idem_buf_append(rd.out, "\"", 1) != IDEM_OK)
		return idem_error_nomem(rd.err);
	for (size_t i = 0; i < n; i += run) {
		for (run = 0;
		     i + run < n && p[i + run] >= 0x20 && p[i + run] != '"' && p[i + run] != '\\';
		     run++)
			;
		if (run > 0) {
			if (idem_buf_append(rd.out, p + i, run) != IDEM_OK)
				return idem_error_nomem(rd.err);
			continue;
		}
		esc[4] = hex[p[i] >> 4];
		esc[5] = hex[p[i] & 15];
		two[1] = (char)p[i];
		if ((p[i] < 0x20 ? idem_buf_append(rd.out, esc, 6)
		                 : idem_buf_append(rd.out, two, 2)) != IDEM_OK)
			return idem_error_nomem(rd.err);
		run = 1;
	}
	return put(rd, idem_buf_append(rd.out, "\"", 1));
}

/* @p[0..n) in base64 with padding, quoted: the JSON of bytes. */
static idem_status put_base64(const reader &rd, const uint8_t *p, size_t n)
{
	static const char b64[] =
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	std::string s("\"");

	s.reserve(n / 3 * 4 + 6);
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		s += b64[v >> 18];
		s += b64[(v >> 12) & 63];
		s += i + 1 < n ? b64[(v >> 6) & 63] : '=';
		s += i + 2 < n ? b64[v & 63] : '=';
	}
	s += '"';
	return put(rd, idem_buf_append(rd.out, s.data(), s.size()));
}

/*
 * The text of scalar field @f of @m (element @idx when repeated). With @json, its JSON by the
 * proto3 mapping: 64-bit integers and enum names as strings, bytes in base64.
 */
static idem_status scalar_text(const reader &rd, const gp::Message &m, const FD *f, int idx,
                               bool json)
{
	const gp::Reflection *r = m.GetReflection();
	bool rep = idx >= 0;
	char num[32];

	switch (f->cpp_type()) {
	case FD::CPPTYPE_INT32:
		snprintf(num, sizeof(num), "%" PRId32,
		         rep ? r->GetRepeatedInt32(m, f, idx) : r->GetInt32(m, f));
		return put_str(rd, num);
	case FD::CPPTYPE_UINT32:
		snprintf(num, sizeof(num), "%" PRIu32,
		         rep ? r->GetRepeatedUInt32(m, f, idx) : r->GetUInt32(m, f));
		return put_str(rd, num);
	case FD::CPPTYPE_INT64:
		snprintf(num, sizeof(num), json ? "\"%" PRId64 "\"" : "%" PRId64,
		         rep ? r->GetRepeatedInt64(m, f, idx) : r->GetInt64(m, f));
		return put_str(rd, num);
	case FD::CPPTYPE_UINT64:
		snprintf(num, sizeof(num), json ? "\"%" PRIu64 "\"" : "%" PRIu64,
		         rep ? r->GetRepeatedUInt64(m, f, idx) : r->GetUInt64(m, f));
		return put_str(rd, num);
	case FD::CPPTYPE_DOUBLE:
		return put(rd, idem_buf_append_real(rd.out,
		                                    rep ? r->GetRepeatedDouble(m, f, idx)
		                                        : r->GetDouble(m, f),
		                                    false, json));
	case FD::CPPTYPE_FLOAT:
		return put(rd, idem_buf_append_real(rd.out,
		                                    rep ? r->GetRepeatedFloat(m, f, idx)
		                                        : r->GetFloat(m, f),
		                                    true, json));
	case FD::CPPTYPE_BOOL:
		return put_str(rd, (rep ? r->GetRepeatedBool(m, f, idx) : r->GetBool(m, f))
		                           ? "true"
		                           : "false");
	case FD::CPPTYPE_ENUM: {
		int v = rep ? r->GetRepeatedEnumValue(m, f, idx) : r->GetEnumValue(m, f);
		const gp::EnumValueDescriptor *e = f->enum_type()->FindValueByNumber(v);

		if (e == nullptr) {
			snprintf(num, sizeof(num), "%d", v);
			return put_str(rd, num);
		}
		if (json)
			return put_json_string(rd, e->name().data(), e->name().size());
		return put_str(rd, e->name().c_str());
	}
	case FD::CPPTYPE_STRING: {
		std::string scratch;
		const std::string &s = rep ? r->GetRepeatedStringReference(m, f, idx, &scratch)
		                           : r->GetStringReference(m, f, &scratch);

		if (f->type() == FD::TYPE_BYTES)
			return json ? put_base64(rd, (const uint8_t *)s.data(), s.size())
			            : put(rd, idem_buf_append_bytea(
			                              rd.out, (const uint8_t *)s.data(), s.size()));
		if (json)
			return put_json_string(rd, s.data(), s.size());
		return put(rd, idem_buf_append(rd.out, s.data(), s.size()));
	}
	default:
		return idem_error_set(rd.err, IDEM_ERR_INVALID, "field '%s' is not a scalar",
		                      f->full_name().c_str());
	}
}

/* Message @m as JSON (the proto3 JSON mapping, fields by their .proto names, defaults too). */
static idem_status message_json(const reader &rd, const gp::Message &m)
{
	idem_pb_dec *dec = const_cast<idem_pb_dec *>(rd.dec);
	gp::util::JsonPrintOptions opts;
	std::string bin, json;
	idem_error e;
	wkt w;

	/* Values a proto2 enum does not name are unknown fields: not in the JSON either. */
	if (!dec->json_ready) {
		dec->cur->DiscardUnknownFields();
		dec->json_ready = true;
	}
	{
		gp::io::StringOutputStream sos(&bin);
		gp::io::CodedOutputStream cos(&sos);

		cos.SetSerializationDeterministic(true);
		if (!m.SerializePartialToCodedStream(&cos))
			return idem_error_set(rd.err, IDEM_ERR_KEY,
			                      "libprotobuf cannot write it again for its JSON");
	}
	/* libprotobuf's JSON writes a proto2 string that is not UTF-8 as "": say so instead. */
	if (dec->loose && idem__pb_walk(dec, m.GetDescriptor(), 0, 0, (const uint8_t *)bin.data(),
	                                bin.size(), true, nullptr, &e) != IDEM_OK)
		return idem_error_set(rd.err, IDEM_ERR_KEY, "a string in it is not valid UTF-8");
	/*
	 * Struct, ListValue and Value have no defaults to print, and libprotobuf 3.21 printing
	 * defaults for a ListValue of its own writes "values":[] into each Struct in it.
	 */
	w = wkt_of(m.GetDescriptor());
	opts.always_print_primitive_fields = w != WKT_STRUCT && w != WKT_LIST && w != WKT_VALUE;
	opts.preserve_proto_field_names = true;
	gp::util::Status st = gp::util::BinaryToJsonString(
	        dec->schema->resolver.get(), IDEM_PB_TYPE_URL "/" + m.GetDescriptor()->full_name(),
	        bin, &json, opts);
	if (!st.ok())
		return idem_error_set(rd.err, IDEM_ERR_KEY,
		                      "libprotobuf cannot write it as JSON: %s",
		                      std::string(st.message()).c_str());
	/* A Value of no kind is nothing to libprotobuf: null in an array or a map. */
	if (json.empty())
		json = "null";
	return put(rd, idem_buf_append(rd.out, json.data(), json.size()));
}

/* Timestamp or Duration @m (@duration) as TimeUtil writes it: RFC 3339 UTC, or "1.5s". */
static idem_status time_text(const reader &rd, const gp::Message &m, bool duration)
{
	const gp::Reflection *r = m.GetReflection();
	const FD *fs = m.GetDescriptor()->FindFieldByNumber(1);
	const FD *fn = m.GetDescriptor()->FindFieldByNumber(2);
	int64_t s = r->GetInt64(m, fs);
	int32_t n = r->GetInt32(m, fn);
	std::string text;

	if (!duration) {
		/* TimeUtil's limits: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z. */
		if (s < -62135596800 || s > 253402300799 || n < 0 || n > 999999999)
			return idem_error_set(
			        rd.err, IDEM_ERR_KEY,
			        "Timestamp of %" PRId64 " seconds and %" PRId32
			        " nanos is out of range (years 1 to 9999, nanos 0 to 999999999)",
			        s, n);
		gp::Timestamp ts;
		ts.set_seconds(s);
		ts.set_nanos(n);
		text = gp::util::TimeUtil::ToString(ts);
	} else {
		if (s < -315576000000 || s > 315576000000 || n < -999999999 || n > 999999999 ||
		    (s > 0 && n < 0) || (s < 0 && n > 0))
			return idem_error_set(
			        rd.err, IDEM_ERR_KEY,
			        "Duration of %" PRId64 " seconds and %" PRId32
			        " nanos is out of range (10000 years, nanos of the seconds' sign)",
			        s, n);
		gp::Duration du;
		du.set_seconds(s);
		du.set_nanos(n);
		text = gp::util::TimeUtil::ToString(du);
	}
	return put(rd, idem_buf_append(rd.out, text.data(), text.size()));
}

/* The field set in google.protobuf.Value @m (nullptr: none). */
static const FD *value_kind(const gp::Message &m)
{
	const gp::Descriptor *d = m.GetDescriptor();

	if (d->oneof_decl_count() != 1)
		return nullptr;
	return m.GetReflection()->GetOneofFieldDescriptor(m, d->oneof_decl(0));
}

/* Message @m as text: the well-known scalar types as their value, any other as JSON. */
static idem_status message_text(const reader &rd, const gp::Message &m, bool scalar,
                                const char **ret_absent)
{
	const FD *k;

	switch (wkt_of(m.GetDescriptor())) {
	case WKT_TIMESTAMP:
	case WKT_DURATION:
		return time_text(rd, m, wkt_of(m.GetDescriptor()) == WKT_DURATION);
	case WKT_WRAPPER:
		return scalar_text(rd, m, m.GetDescriptor()->FindFieldByNumber(1), -1, false);
	case WKT_VALUE:
		if ((k = value_kind(m)) == nullptr) {
			*ret_absent = "is not set";
			return IDEM_OK;
		}
		if (k->cpp_type() == FD::CPPTYPE_ENUM) { /* null_value */
			*ret_absent = "is null";
			return IDEM_OK;
		}
		if (k->cpp_type() != FD::CPPTYPE_MESSAGE)
			return scalar_text(rd, m, k, -1, false);
		if (scalar)
			return idem_error_set(rd.err, IDEM_ERR_KEY, "is a message, not a scalar");
		return message_json(rd, m.GetReflection()->GetMessage(m, k));
	default:
		if (scalar)
			return idem_error_set(rd.err, IDEM_ERR_KEY, "is a message, not a scalar");
		return message_json(rd, m);
	}
}

/* The text of map key @f of entry @e: as it is, decimal, or true/false. */
static std::string key_text(const gp::Message &e, const FD *f)
{
	const gp::Reflection *r = e.GetReflection();

	switch (f->cpp_type()) {
	case FD::CPPTYPE_STRING:
		return r->GetString(e, f);
	case FD::CPPTYPE_INT32:
		return std::to_string(r->GetInt32(e, f));
	case FD::CPPTYPE_INT64:
		return std::to_string(r->GetInt64(e, f));
	case FD::CPPTYPE_UINT32:
		return std::to_string(r->GetUInt32(e, f));
	case FD::CPPTYPE_UINT64:
		return std::to_string(r->GetUInt64(e, f));
	case FD::CPPTYPE_BOOL:
		return r->GetBool(e, f) ? "true" : "false";
	default:
		return std::string();
	}
}

/* Whether the key @f of entry @e is @t (string keys without a copy). */
static bool key_equal(const gp::Message &e, const FD *f, const std::string &t)
{
	std::string scratch;

	if (f->cpp_type() == FD::CPPTYPE_STRING)
		return e.GetReflection()->GetStringReference(e, f, &scratch) == t;
	return key_text(e, f) == t;
}

/* Whether key @a sorts before @b: strings bytewise, numbers by value, false before true. */
static bool key_less(const gp::Message &a, const gp::Message &b, const FD *f)
{
	const gp::Reflection *r = a.GetReflection();

	switch (f->cpp_type()) {
	case FD::CPPTYPE_INT32:
		return r->GetInt32(a, f) < r->GetInt32(b, f);
	case FD::CPPTYPE_INT64:
		return r->GetInt64(a, f) < r->GetInt64(b, f);
	case FD::CPPTYPE_UINT32:
		return r->GetUInt32(a, f) < r->GetUInt32(b, f);
	case FD::CPPTYPE_UINT64:
		return r->GetUInt64(a, f) < r->GetUInt64(b, f);
	case FD::CPPTYPE_BOOL:
		return !r->GetBool(a, f) && r->GetBool(b, f);
	default:
		return r->GetString(a, f) < r->GetString(b, f);
	}
}

/* Element @idx of field @f of @m (all of it if @idx < 0 and it is singular) as JSON. */
static idem_status element_json(const reader &rd, const gp::Message &m, const FD *f, int idx)
{
	const gp::Reflection *r = m.GetReflection();

	if (f->cpp_type() != FD::CPPTYPE_MESSAGE)
		return scalar_text(rd, m, f, idx, true);
	return message_json(rd, idx >= 0 ? r->GetRepeatedMessage(m, f, idx) : r->GetMessage(m, f));
}

/* Repeated field or map @f of @m as a JSON array or object (map entries by key). */
static idem_status field_json(const reader &rd, const gp::Message &m, const FD *f)
{
	const gp::Reflection *r = m.GetReflection();
	int n = r->FieldSize(m, f);
	idem_status st;

	if (!f->is_map()) {
		if ((st = put_str(rd, "[")) != IDEM_OK)
			return st;
		for (int i = 0; i < n; i++) {
			if ((i > 0 && (st = put_str(rd, ",")) != IDEM_OK) ||
			    (st = element_json(rd, m, f, i)) != IDEM_OK)
				return st;
		}
		return put_str(rd, "]");
	}
	const FD *kf = f->message_type()->map_key(), *vf = f->message_type()->map_value();
	std::vector<const gp::Message *> entries;

	entries.reserve((size_t)n);
	for (int i = 0; i < n; i++)
		entries.push_back(&r->GetRepeatedMessage(m, f, i));
	std::sort(entries.begin(), entries.end(), [kf](const gp::Message *a, const gp::Message *b) {
		return key_less(*a, *b, kf);
	});
	if ((st = put_str(rd, "{")) != IDEM_OK)
		return st;
	for (size_t i = 0; i < entries.size(); i++) {
		std::string key = key_text(*entries[i], kf);

		if ((i > 0 && (st = put_str(rd, ",")) != IDEM_OK) ||
		    (st = put_json_string(rd, key.data(), key.size())) != IDEM_OK ||
		    (st = put_str(rd, ":")) != IDEM_OK ||
		    (st = element_json(rd, *entries[i], vf, -1)) != IDEM_OK)
			return st;
	}
	return put_str(rd, "}");
}

/* A message field (or element) is the message itself from here on. */
static void into_message(pb_node &nd)
{
	if (nd.f == nullptr || nd.f->cpp_type() != FD::CPPTYPE_MESSAGE ||
	    (nd.f->is_repeated() && nd.idx < 0))
		return;
	const gp::Reflection *r = nd.m->GetReflection();

	nd.m = nd.idx >= 0 ? &r->GetRepeatedMessage(*nd.m, nd.f, nd.idx)
	                   : &r->GetMessage(*nd.m, nd.f);
	nd.f = nullptr;
	nd.idx = -1;
}

/* Array index token @t: "0" or digits without a leading zero, below @n; -1 if not one. */
static int token_index(const std::string &t, int n)
{
	int64_t v = 0;

	if (t.empty() || t.size() > 10 || (t[0] == '0' && t.size() > 1))
		return -1;
	for (char c : t) {
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
	}
	return v < n ? (int)v : -1;
}

/* Moves @nd to its child named by (unescaped) token @t. @returns why there is none, or NULL. */
static const char *step(pb_node &nd, const std::string &t)
{
	const gp::Reflection *r = nd.m->GetReflection();
	const gp::Descriptor *d = nd.m->GetDescriptor();
	const FD *f;
	int i;

	if (nd.f == nullptr) {
		switch (wkt_of(d)) {
		case WKT_VALUE: /* a Struct or a ListValue goes on; a scalar has no child */
			if ((f = value_kind(*nd.m)) == nullptr ||
			    f->cpp_type() != FD::CPPTYPE_MESSAGE)
				return NOT_FOUND;
			nd.m = &r->GetMessage(*nd.m, f);
			return step(nd, t);
		case WKT_STRUCT: /* by their JSON form: Struct's keys, ListValue's indexes */
		case WKT_LIST:
			nd.f = d->FindFieldByNumber(1);
			return nd.f == nullptr ? NOT_FOUND : step(nd, t);
		default:
			if ((f = d->FindFieldByName(t)) == nullptr)
				return NOT_FOUND;
			if (!f->is_repeated() && f->has_presence() && !r->HasField(*nd.m, f))
				return "is not set";
			nd.f = f;
			nd.idx = -1;
			into_message(nd);
			return nullptr;
		}
	}
	if (nd.f->is_map()) {
		const FD *kf = nd.f->message_type()->map_key();
		int n = r->FieldSize(*nd.m, nd.f);

		for (i = 0; i < n; i++) {
			const gp::Message &e = r->GetRepeatedMessage(*nd.m, nd.f, i);

			if (key_equal(e, kf, t)) {
				nd = pb_node{ &e, nd.f->message_type()->map_value(), -1 };
				into_message(nd);
				return nullptr;
			}
		}
		return NOT_FOUND;
	}
	if (!nd.f->is_repeated() || nd.idx >= 0 ||
	    (i = token_index(t, r->FieldSize(*nd.m, nd.f))) < 0)
		return NOT_FOUND;
	nd.idx = i;
	into_message(nd);
	return nullptr;
}

static idem_status read(const idem_pb_dec *dec, const char *ptr, bool scalar, struct idem_buf *out,
                        const char **ret_absent, idem_error *err)
{
	reader rd{ dec, out, err };
	pb_node nd{ dec->cur, nullptr, -1 };
	const char *p = ptr, *e, *why;
	std::string t;

	while (*p != '\0') {
		e = strchr(++p, '/');
		if (e == nullptr)
			e = p + strlen(p);
		t.clear();
		for (; p < e; p++) {
			t += p[0] != '~' ? p[0] : p[1] == '0' ? '~' : '/';
			p += p[0] == '~';
		}
		if ((why = step(nd, t)) != nullptr) {
			*ret_absent = why;
			return IDEM_OK;
		}
	}
	if (nd.f == nullptr)
		return message_text(rd, *nd.m, scalar, ret_absent);
	if (nd.f->is_repeated() && nd.idx < 0) {
		if (scalar)
			return idem_error_set(err, IDEM_ERR_KEY, "is %s, not a scalar",
			                      nd.f->is_map() ? "a map" : "a repeated field");
		return field_json(rd, *nd.m, nd.f);
	}
	return scalar_text(rd, *nd.m, nd.f, nd.idx, false);
}

idem_status idem_pb_read(const idem_pb_dec *dec, const char *ptr, bool scalar, struct idem_buf *out,
                         const char **ret_absent, idem_error *err)
{
	size_t mark = out->len;
	const char *absent = nullptr;
	idem_status r;

	if (dec == nullptr || dec->cur == nullptr) /* read only after a successful decode */
		return idem_error_set(err, IDEM_ERR_INVALID, "no Protobuf message is decoded");
	if (idem_json_pointer_problem(ptr) != NULL)
		return idem_error_set(err, IDEM_ERR_INVALID, "'%s' is not a JSON pointer", ptr);
	try {
		r = read(dec, ptr, scalar, out, &absent, err);
	} catch (const std::bad_alloc &) {
		r = idem_error_nomem(err);
	} catch (const std::exception &e) {
		r = idem_error_set(err, IDEM_ERR_INVALID, "libprotobuf failed: %s", e.what());
	} catch (...) {
		r = idem_error_set(err, IDEM_ERR_INVALID, "libprotobuf failed");
	}
	if (r != IDEM_OK || absent != nullptr) {
		if (out->data != nullptr) {
			out->len = mark;
			out->data[mark] = '\0';
		}
	}
	if (r == IDEM_OK)
		*ret_absent = absent;
	return r;
}
