/*
 * idem_protobuf.cc - Protobuf values (idem_protobuf.h): schemas (libprotoc's parser, a
 * descriptor pool of each schema's own over libprotobuf's well-known types), the message
 * indexes, the walker (bounds, wire types, UTF-8 and depth of a message's bytes, with where they
 * fail) and the decoding into a dynamic message kept per message type. Pointers and text are in
 * idem_protobuf_text.cc; both share idem_protobuf_int.h.
 *
 * No exception leaves a function of the C API: each catches std::bad_alloc (IDEM_ERR_NOMEM)
 * and anything else (IDEM_ERR_INVALID).
 */
#include <cinttypes>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <google/protobuf/compiler/parser.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/type_resolver_util.h>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "idem_protobuf_int.h"

namespace gp = google::protobuf;

/*
 * libprotobuf logs to stderr (invalid UTF-8 it parses or serializes, say); idemd's logs are
 * structured and the library reports through idem_error, so its log goes nowhere. Fatal
 * messages still throw (caught at the C API) after the handler returns.
 */
static void quiet_log(gp::LogLevel level, const char *filename, int line, const std::string &msg)
{
	(void)level;
	(void)filename;
	(void)line;
	(void)msg;
}

void idem__pb_quiet(void)
{
	static std::once_flag once;

	std::call_once(once, [] { gp::SetLogHandler(quiet_log); });
}

/*
 * Schemas.
 */

namespace
{
/* The first error of the tokenizer and the parser, 1-based: "line 3:7: Expected \";\"." */
struct parse_errors : gp::io::ErrorCollector {
	std::string first;

	void AddError(int line, gp::io::ColumnNumber column, const std::string &msg) override
	{
		if (first.empty())
			first = "line " + std::to_string(line + 1) + ":" +
			        std::to_string(column + 1) + ": " + msg;
	}
};

/* The first error of building a file: "money.proto: shop.Money.units: \"X\" is not defined." */
struct build_errors : gp::DescriptorPool::ErrorCollector {
	std::string first;

	void AddError(const std::string &filename, const std::string &element,
	              const gp::Message *descriptor, ErrorLocation location,
	              const std::string &msg) override
	{
		(void)descriptor;
		(void)location;
		if (first.empty())
			first = filename + ": " + (element.empty() ? "" : element + ": ") + msg;
	}
};

/* One .proto file of a schema being built: the main file or one of its imports. */
struct unit {
	const char *name, *text;
	size_t len;
	int state; /* 0 not seen, 1 its imports being built, 2 built */
	gp::FileDescriptorProto proto;
};

struct builder {
	idem_pb_schema *s;
	std::map<std::string, unit> files; /* by import name */
	std::vector<unit *> chain;         /* the imports being followed, for a cycle's message */
	idem_error *err;
};
} // namespace

static idem_status parse_file(builder &b, unit &u, bool is_main)
{
	gp::io::ArrayInputStream in(u.text, (int)u.len);
	parse_errors errors;
	gp::io::Tokenizer tok(&in, &errors);
	gp::compiler::Parser parser;
	idem_error bound = {};

	/* Before the parser, which recurses once per nested block (idem_protobuf_scan.c). */
	if (idem_pb_scan(u.text, u.len, &bound) != IDEM_OK)
		errors.first = bound.msg;
	parser.RecordErrorsTo(&errors);
	if (!errors.first.empty() || !parser.Parse(&tok, &u.proto) || !errors.first.empty()) {
		if (errors.first.empty())
			errors.first = "it is not a .proto file";
		if (is_main)
			return idem_error_set(b.err, IDEM_ERR_INVALID, "%s", errors.first.c_str());
		return idem_error_set(b.err, IDEM_ERR_INVALID, "import \"%s\": %s", u.name,
		                      errors.first.c_str());
	}
	/* A schema's google.protobuf.Timestamp would be taken for libprotobuf's by its JSON. */
	if (u.proto.package() == "google.protobuf")
		return idem_error_set(
		        b.err, IDEM_ERR_INVALID, "%s%s%spackage google.protobuf is libprotobuf's",
		        is_main ? "" : "import \"", is_main ? "" : u.name, is_main ? "" : "\": ");
	u.proto.set_name(u.name);
	return IDEM_OK;
}

/*
 * Builds @u after the files it imports, depth first: an import libprotobuf carries
 * (google/protobuf/...) comes from the generated pool, any other from the schema's files.
 */
static idem_status build_file(builder &b, unit &u, bool is_main)
{
	build_errors errors;
	idem_status r;

	if (u.state == 2)
		return IDEM_OK;
	if (u.state == 1) {
		std::string cycle;

		for (const unit *c : b.chain)
			cycle += std::string("\"") + c->name + "\" -> ";
		return idem_error_set(b.err, IDEM_ERR_INVALID, "import cycle: %s\"%s\"",
		                      cycle.c_str(), u.name);
	}
	if ((r = parse_file(b, u, is_main)) != IDEM_OK)
		return r;
	u.state = 1;
	b.chain.push_back(&u);
	for (int i = 0; i < u.proto.dependency_size(); i++) {
		const std::string &dep = u.proto.dependency(i);
		auto it = b.files.find(dep);

		if (gp::DescriptorPool::generated_pool()->FindFileByName(dep) != nullptr)
			continue;
		if (it == b.files.end())
			return idem_error_set(b.err, IDEM_ERR_INVALID,
			                      "import \"%s\" was not found (imported by \"%s\")",
			                      dep.c_str(), u.name);
		if ((r = build_file(b, it->second, false)) != IDEM_OK)
			return r;
	}
	b.chain.pop_back();
	const gp::FileDescriptor *fd = b.s->pool.BuildFileCollectingErrors(u.proto, &errors);
	if (fd == nullptr)
		return idem_error_set(b.err, IDEM_ERR_INVALID, "%s",
		                      errors.first.empty() ? "the file does not build"
		                                           : errors.first.c_str());
	u.state = 2;
	if (is_main)
		b.s->file = fd;
	return IDEM_OK;
}

static idem_status schema_new(const char *name, const char *text, size_t len,
                              const struct idem_pb_file *deps, size_t n_deps,
                              idem_pb_schema **ret_schema, idem_error *err)
{
	std::unique_ptr<idem_pb_schema> s(new idem_pb_schema());
	builder b{ s.get(), {}, {}, err };
	unit top{ name, text, len, 0, {} };
	idem_status r;

	if (len > INT_MAX)
		return idem_error_set(err, IDEM_ERR_INVALID, "the schema is larger than 2 GiB");
	for (size_t i = 0; i < n_deps; i++) {
		if (deps[i].len > INT_MAX)
			return idem_error_set(err, IDEM_ERR_INVALID,
			                      "import \"%s\" is larger than 2 GiB", deps[i].name);
		b.files.emplace(deps[i].name,
		                unit{ deps[i].name, deps[i].text, deps[i].len, 0, {} });
	}
	if ((r = build_file(b, top, true)) != IDEM_OK)
		return r;
	if (s->file->message_type_count() == 0)
		return idem_error_set(err, IDEM_ERR_INVALID, "file defines no message");
	s->factory.reset(new gp::DynamicMessageFactory(&s->pool));
	s->resolver.reset(gp::util::NewTypeResolverForDescriptorPool(IDEM_PB_TYPE_URL, &s->pool));
	*ret_schema = s.release();
	return IDEM_OK;
}

idem_status idem_pb_schema_new(const char *name, const char *text, size_t len,
                               const struct idem_pb_file *deps, size_t n_deps,
                               idem_pb_schema **ret_schema, idem_error *err)
{
	try {
		idem__pb_quiet();
		return schema_new(name, text, len, deps, n_deps, ret_schema, err);
	} catch (const std::bad_alloc &) {
		return idem_error_nomem(err);
	} catch (const std::exception &e) {
		return idem_error_set(err, IDEM_ERR_INVALID, "libprotobuf failed: %s", e.what());
	} catch (...) {
		return idem_error_set(err, IDEM_ERR_INVALID, "libprotobuf failed");
	}
}

idem_pb_schema *idem_pb_schema_ref(idem_pb_schema *s)
{
	if (s != nullptr)
		s->refs.fetch_add(1, std::memory_order_relaxed);
	return s;
}

void idem_pb_schema_unref(idem_pb_schema *s)
{
	if (s != nullptr && s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
		delete s;
}

/*
 * The walker: bounds, wire types, UTF-8 and depth of the bytes, before libprotobuf reads them.
 */

/* idem_protobuf_int.h */
size_t idem__pb_utf8_bad(const uint8_t *s, size_t n)
{
	size_t i = 0, run;

	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if ((run = idem_utf8_seq(s + i, n - i)) == 0)
			return i;
		i += run;
	}
	return n;
}

/* The wire type a field of @type is written with when not packed. */
static int wire_type_of(gp::FieldDescriptor::Type type)
{
	switch (type) {
	case gp::FieldDescriptor::TYPE_DOUBLE:
	case gp::FieldDescriptor::TYPE_FIXED64:
	case gp::FieldDescriptor::TYPE_SFIXED64:
		return 1;
	case gp::FieldDescriptor::TYPE_STRING:
	case gp::FieldDescriptor::TYPE_BYTES:
	case gp::FieldDescriptor::TYPE_MESSAGE:
		return 2;
	case gp::FieldDescriptor::TYPE_GROUP:
		return 3;
	case gp::FieldDescriptor::TYPE_FLOAT:
	case gp::FieldDescriptor::TYPE_FIXED32:
	case gp::FieldDescriptor::TYPE_SFIXED32:
		return 5;
	default:
		return 0;
	}
}

/*
 * The varint of at most @max (<= 10) bytes at @p[*pos], within @end; *pos moves past it.
 * @returns 0, 1 when it runs past @end, 2 when it is longer than @max bytes.
 */
static int get_varint(const uint8_t *p, size_t *pos, size_t end, int max, uint64_t *ret)
{
	uint64_t v = 0;

	for (int i = 0; i < max; i++) {
		if (*pos >= end)
			return 1;
		uint8_t c = p[(*pos)++];

		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*ret = v;
			return 0;
		}
	}
	return 2;
}

static void path_seg(idem_pathbuf *pb, const char *s, size_t n)
{
	if (pb->cut || pb->len + 2 > pb->cap - 4) {
		pb->cut = true;
		return;
	}
	pb->b[pb->len++] = '/';
	idem_pathbuf_put(pb, s, n);
}

static void path_index(idem_pathbuf *pb, int64_t i)
{
	char num[24];

	snprintf(num, sizeof(num), "%" PRId64, i);
	path_seg(pb, num, strlen(num));
}

/* One message being walked, and how its parent holds it (for messages). */
struct pb_frame {
	const gp::Descriptor *d;
	size_t end;                   /* where its bytes end in the body */
	uint64_t serial;              /* of its repeated-field counts (struct idem_pb_count) */
	const gp::FieldDescriptor *f; /* the parent's field holding it; nullptr: the root */
	int64_t index;                /* its element index when f is repeated, else -1 */
	bool entry;                   /* a map entry: f is the map */
	const char *key;              /* a map entry's key, read ahead; nullptr: unknown */
	size_t key_len;
	char num[24]; /* an integer or bool key's text */
};

struct pb_walk {
	const gp::DescriptorPool *pool; /* the schema's, for extensions */
	const uint8_t *p;
	size_t len, pos;
	int32_t id;
	size_t at;
	bool strict; /* checks the UTF-8 of proto2 strings too (for JSON) */
	bool loose;  /* out: a proto2 string is not valid UTF-8 */
	idem_pb_dec *dec;
	idem_error *err;
	int depth;
	const gp::FieldDescriptor *f; /* the field being read, for messages; nullptr: none */
	int64_t index;                /* its element index, or -1 */
	pb_frame frames[IDEM_PB_MAX_DEPTH];
};

/* The walker's path as a JSON pointer in @buf[0..cap) (cap >= 16). */
static void walk_path(const pb_walk *w, char *buf, size_t cap)
{
	idem_pathbuf pb = { buf, cap, 0, false };

	for (int i = 1; i <= w->depth; i++) {
		const gp::FieldDescriptor *f = i < w->depth ? w->frames[i].f : w->f;
		int64_t index = i < w->depth ? w->frames[i].index : w->index;

		/* The key and value of a map entry are not fields of the pointer. */
		if (f == nullptr || w->frames[i - 1].entry)
			continue;
		path_seg(&pb, f->name().data(), f->name().size());
		if (i < w->depth && w->frames[i].entry) {
			const pb_frame *e = &w->frames[i];

			if (e->key != nullptr) {
				path_seg(&pb, e->key, e->key_len < 64 ? e->key_len : 64);
				if (e->key_len > 64)
					idem_pathbuf_put(&pb, "...", 3);
			} else {
				char what[40];

				snprintf(what, sizeof(what), "(entry %" PRId64 ")", index);
				path_seg(&pb, what, strlen(what));
			}
		} else if (index >= 0) {
			path_index(&pb, index);
		}
	}
	if (pb.cut) {
		memcpy(pb.b + pb.len, "...", 3);
		pb.len += 3;
	}
	pb.b[pb.len] = '\0';
}

static idem_status walk_fail(const pb_walk *w, size_t at, const char *fmt, ...) IDEM_PRINTF(3, 4);

/* Fails the walk at offset @at of the body: "schema id 7: at byte 19 (/a/b): what". */
static idem_status walk_fail(const pb_walk *w, size_t at, const char *fmt, ...)
{
	char what[256], path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	walk_path(w, path, sizeof(path));
	return idem_decode_fail(w->err, w->id, w->at + at, path, what);
}

/* "runs past the end of the value (24 bytes)" or "... of its message (at byte 20)". */
static idem_status walk_short(const pb_walk *w, size_t at, size_t end, const char *what)
{
	if (end == w->len)
		return walk_fail(w, at, "%s runs past the end of the value (%zu bytes)", what,
		                 w->at + w->len);
	return walk_fail(w, at, "%s runs past the end of its message (at byte %zu)", what,
	                 w->at + end);
}

static idem_status walk_varint(pb_walk *w, size_t end, const char *what, uint64_t *ret)
{
	size_t start = w->pos;
	int rc = get_varint(w->p, &w->pos, end, 10, ret);

	if (rc == 1)
		return walk_short(w, start, end, what);
	if (rc == 2)
		return walk_fail(w, start, "%s is longer than 10 bytes", what);
	return IDEM_OK;
}

/* The next element index of repeated field @f in the top frame (-1 if not repeated). */
static int64_t walk_count(pb_walk *w, const gp::FieldDescriptor *f, int64_t n)
{
	pb_frame *fr = &w->frames[w->depth - 1];
	std::vector<idem_pb_count> &counts = w->dec->counts[w->depth - 1];
	idem_pb_count *c;
	int64_t i;

	if (!f->is_repeated() || f->is_extension())
		return -1;
	c = &counts[(size_t)f->index()];
	if (c->serial != fr->serial) {
		c->serial = fr->serial;
		c->n = 0;
	}
	i = c->n;
	c->n += n;
	return i;
}

/* Reads ahead the key of the map entry @e (its first field, as every writer puts it). */
static void entry_key(const pb_walk *w, pb_frame *e)
{
	const gp::FieldDescriptor *k = e->d->map_key();
	size_t pos = w->pos;
	uint64_t tag = 0, v = 0;

	if (k == nullptr || get_varint(w->p, &pos, e->end, 5, &tag) != 0 ||
	    tag != (uint64_t)(1 << 3 | wire_type_of(k->type())))
		return;
	if (k->type() == gp::FieldDescriptor::TYPE_STRING) {
		if (get_varint(w->p, &pos, e->end, 10, &v) == 0 && v <= e->end - pos) {
			e->key = (const char *)w->p + pos;
			e->key_len = (size_t)v;
		}
		return;
	}
	int wt = wire_type_of(k->type());
	size_t n = wt == 1 ? 8 : 4;

	if (wt == 0 && get_varint(w->p, &pos, e->end, 10, &v) != 0)
		return;
	if (wt != 0) {
		if (e->end - pos < n)
			return;
		for (size_t i = 0; i < n; i++)
			v |= (uint64_t)w->p[pos + i] << (8 * i);
	}
	switch (k->type()) {
	case gp::FieldDescriptor::TYPE_BOOL:
		snprintf(e->num, sizeof(e->num), "%s", v ? "true" : "false");
		break;
	case gp::FieldDescriptor::TYPE_SINT32:
	case gp::FieldDescriptor::TYPE_SINT64:
		v = (v >> 1) ^ (~(v & 1) + 1);
		if (k->type() == gp::FieldDescriptor::TYPE_SINT32)
			v = (uint64_t)(int64_t)(int32_t)(uint32_t)v;
		snprintf(e->num, sizeof(e->num), "%" PRId64, (int64_t)v);
		break;
	case gp::FieldDescriptor::TYPE_INT32:
	case gp::FieldDescriptor::TYPE_SFIXED32:
		snprintf(e->num, sizeof(e->num), "%" PRId32, (int32_t)(uint32_t)v);
		break;
	case gp::FieldDescriptor::TYPE_UINT32:
	case gp::FieldDescriptor::TYPE_FIXED32:
		snprintf(e->num, sizeof(e->num), "%" PRIu32, (uint32_t)v);
		break;
	case gp::FieldDescriptor::TYPE_UINT64:
	case gp::FieldDescriptor::TYPE_FIXED64:
		snprintf(e->num, sizeof(e->num), "%" PRIu64, v);
		break;
	default:
		snprintf(e->num, sizeof(e->num), "%" PRId64, (int64_t)v);
		break;
	}
	e->key = e->num;
	e->key_len = strlen(e->num);
}

/* Enters message @d, held by field @f (nullptr: the root), element @index, ending at @end. */
static void walk_push(pb_walk *w, const gp::Descriptor *d, const gp::FieldDescriptor *f,
                      int64_t index, size_t end)
{
	pb_frame *fr = &w->frames[w->depth];
	std::vector<idem_pb_count> &counts = w->dec->counts[w->depth];

	fr->d = d;
	fr->end = end;
	fr->serial = ++w->dec->serial;
	fr->f = f;
	fr->index = index;
	fr->entry = f != nullptr && f->is_map();
	fr->key = nullptr;
	if (counts.size() < (size_t)d->field_count())
		counts.resize((size_t)d->field_count());
	if (fr->entry)
		entry_key(w, fr);
	w->depth++;
}

/* The bytes of a string field @f (@n at w->pos): valid UTF-8 where libprotobuf checks it. */
static idem_status walk_string(pb_walk *w, const gp::FieldDescriptor *f, size_t n)
{
	size_t bad = idem__pb_utf8_bad(w->p + w->pos, n);

	if (bad == n)
		return IDEM_OK;
	/* libprotobuf 3.21 refuses invalid UTF-8 in proto3 strings only (StrictUtf8Check()). */
	if (w->strict || f->file()->syntax() == gp::FileDescriptor::SYNTAX_PROTO3)
		return walk_fail(w, w->pos + bad, "string is not valid UTF-8");
	w->loose = true;
	return IDEM_OK;
}

/* The elements of packed repeated field @f, @n bytes at w->pos. */
static idem_status walk_packed(pb_walk *w, const gp::FieldDescriptor *f, size_t n)
{
	size_t end = w->pos + n;
	int wt = wire_type_of(f->type());
	uint64_t v;

	if (wt != 0) {
		size_t size = wt == 1 ? 8 : 4;

		if (n % size != 0)
			return walk_fail(w, w->pos, "packed length %zu is not a multiple of %zu", n,
			                 size);
		(void)walk_count(w, f, (int64_t)(n / size));
		w->pos = end;
		return IDEM_OK;
	}
	while (w->pos < end) {
		size_t start = w->pos;
		int rc = get_varint(w->p, &w->pos, end, 10, &v);

		w->index = walk_count(w, f, 1);
		if (rc == 1)
			return walk_fail(
			        w, start,
			        "varint runs past the end of the packed field (at byte %zu)",
			        w->at + end);
		if (rc == 2)
			return walk_fail(w, start, "varint is longer than 10 bytes");
	}
	return IDEM_OK;
}

/* The value of field @f (nullptr: a field the schema does not know) of wire type @wt. */
static idem_status walk_value(pb_walk *w, const gp::FieldDescriptor *f, int wt, size_t tag_at)
{
	size_t end = w->frames[w->depth - 1].end, start;
	uint64_t v;
	idem_status r;

	switch (wt) {
	case 0:
		return walk_varint(w, end, "varint", &v);
	case 1:
	case 5:
		if (end - w->pos < (wt == 1 ? 8u : 4u))
			return walk_short(w, w->pos, end, wt == 1 ? "fixed64" : "fixed32");
		w->pos += wt == 1 ? 8 : 4;
		return IDEM_OK;
	default:
		break;
	}
	start = w->pos;
	if ((r = walk_varint(w, end, "length varint", &v)) != IDEM_OK)
		return r;
	if (v > end - w->pos) {
		char what[48];

		snprintf(what, sizeof(what), "length %" PRIu64, v);
		return walk_short(w, start, end, what);
	}
	if (f == nullptr || f->type() == gp::FieldDescriptor::TYPE_BYTES) {
		w->pos += (size_t)v;
		return IDEM_OK;
	}
	if (f->type() == gp::FieldDescriptor::TYPE_MESSAGE) {
		if (w->depth == IDEM_PB_MAX_DEPTH)
			return walk_fail(w, tag_at, "nested deeper than %d levels",
			                 IDEM_PB_MAX_DEPTH);
		walk_push(w, f->message_type(), f, w->index, w->pos + (size_t)v);
		return IDEM_OK;
	}
	if (f->type() == gp::FieldDescriptor::TYPE_STRING) {
		if ((r = walk_string(w, f, (size_t)v)) != IDEM_OK)
			return r;
		w->pos += (size_t)v;
		return IDEM_OK;
	}
	return walk_packed(w, f, (size_t)v);
}

/* Walks the message of type @d in w->p[w->pos..w->len). */
static idem_status walk_message(pb_walk *w, const gp::Descriptor *d)
{
	uint64_t tag;
	idem_status r;

	walk_push(w, d, nullptr, -1, w->len);
	for (;;) {
		pb_frame *fr = &w->frames[w->depth - 1];
		size_t tag_at = w->pos;

		w->f = nullptr;
		w->index = -1;
		if (w->pos == fr->end) {
			if (--w->depth == 0)
				return IDEM_OK;
			continue;
		}
		int rc = get_varint(w->p, &w->pos, fr->end, 5, &tag);

		if (rc == 1)
			return walk_short(w, tag_at, fr->end, "tag");
		if (rc == 2 || tag > UINT32_MAX)
			return walk_fail(w, tag_at, "tag is more than 32 bits");
		int num = (int)(tag >> 3), wt = (int)(tag & 7);

		if (num == 0)
			return walk_fail(w, tag_at, "field number 0");
		if (wt == 3)
			return walk_fail(w, tag_at,
			                 "group wire type (field %d), which idemd does not read",
			                 num);
		if (wt == 4)
			return walk_fail(w, tag_at, "end group (field %d) without its start", num);
		if (wt > 5)
			return walk_fail(w, tag_at, "wire type %d (field %d) is not valid", wt,
			                 num);
		const gp::FieldDescriptor *f = fr->d->FindFieldByNumber(num);

		if (f == nullptr && fr->d->IsExtensionNumber(num))
			f = w->pool->FindExtensionByNumber(fr->d, num);
		if (f != nullptr) {
			bool packed = wt == 2 && f->is_packable();

			w->f = f;
			if (wt != wire_type_of(f->type()) && !packed)
				return walk_fail(
				        w, tag_at, "wire type %d is not that of a%s %s field (%d)",
				        wt, strchr("aeio", f->type_name()[0]) != nullptr ? "n" : "",
				        f->type_name(), wire_type_of(f->type()));
			if (!packed)
				w->index = walk_count(w, f, 1);
		}
		if ((r = walk_value(w, f, wt, tag_at)) != IDEM_OK)
			return r;
	}
}

/* idem_protobuf_int.h */
idem_status idem__pb_walk(idem_pb_dec *dec, const gp::Descriptor *d, int32_t id, size_t at,
                          const uint8_t *p, size_t len, bool strict, bool *ret_loose,
                          idem_error *err)
{
	pb_walk w{};
	idem_status r;

	w.pool = &dec->schema->pool;
	w.p = p;
	w.len = len;
	w.id = id;
	w.at = at;
	w.strict = strict;
	w.dec = dec;
	w.err = err;
	if ((r = walk_message(&w, d)) != IDEM_OK)
		return r;
	if (ret_loose != nullptr)
		*ret_loose = w.loose;
	return IDEM_OK;
}

/*
 * Decoding.
 */

idem_pb_dec *idem_pb_dec_new(void)
{
	try {
		idem__pb_quiet();
		return new idem_pb_dec();
	} catch (...) {
		return nullptr;
	}
}

/* The messages of the cache go before the schema whose factory made them. */
static void dec_uncache(idem_pb_dec *dec)
{
	dec->msgs.clear();
	idem_pb_schema_unref(dec->cache_schema);
	dec->cache_schema = nullptr;
}

void idem_pb_dec_free(idem_pb_dec *dec)
{
	if (dec == nullptr)
		return;
	idem_pb_dec_reset(dec);
	dec_uncache(dec);
	delete dec;
}

void idem_pb_dec_reset(idem_pb_dec *dec)
{
	dec->cur = nullptr;
	idem_pb_schema_unref(dec->schema);
	dec->schema = nullptr;
}

static idem_pb_schema *schema_mut(const idem_pb_schema *s)
{
	return const_cast<idem_pb_schema *>(s);
}

/*
 * The message indexes at the start of @p[0..len): a zig-zag count, then as many zig-zag
 * indexes (a count of 0 alone is [0]). @ret_d is the message they name, *ret_pos where it starts.
 */
static idem_status read_indexes(const idem_pb_schema *s, int32_t id, size_t at, const uint8_t *p,
                                size_t len, const gp::Descriptor **ret_d, size_t *ret_pos,
                                idem_error *err)
{
	int64_t idx[IDEM_PB_MAX_DEPTH], count = 0;
	size_t pos = 0, start;
	uint64_t u = 0;
	int rc;

	for (int64_t i = -1; i < count; i++) {
		start = pos;
		if ((rc = get_varint(p, &pos, len, 10, &u)) != 0)
			return idem_error_set(
			        err, IDEM_ERR_KEY,
			        rc == 1 ? "schema id %" PRId32
			                  ": at byte %zu: message indexes run past the end of the value (%zu bytes)"
			                : "schema id %" PRId32
			                  ": at byte %zu: a message index is longer than 10 bytes",
			        id, at + start, at + len);
		int64_t v = (int64_t)((u >> 1) ^ (~(u & 1) + 1));

		if (v < 0)
			return idem_error_set(err, IDEM_ERR_KEY,
			                      "schema id %" PRId32
			                      ": at byte %zu: message %s %" PRId64 " is negative",
			                      id, at + start, i < 0 ? "index count" : "index", v);
		if (i < 0 && v > IDEM_PB_MAX_DEPTH)
			return idem_error_set(err, IDEM_ERR_KEY,
			                      "schema id %" PRId32 ": at byte %zu: %" PRId64
			                      " message indexes are more than %d",
			                      id, at + start, v, IDEM_PB_MAX_DEPTH);
		if (i < 0)
			count = v;
		else
			idx[i] = v;
	}
	if (count == 0) {
		idx[0] = 0;
		count = 1;
	}
	const gp::Descriptor *d = nullptr;
	for (int64_t i = 0; i < count; i++) {
		int n = i == 0 ? s->file->message_type_count() : d->nested_type_count();

		if (idx[i] >= n) {
			std::string list;

			for (int64_t k = 0; k <= i; k++)
				list += (k ? ", " : "") + std::to_string(idx[k]);
			if (i == 0)
				return idem_error_set(
				        err, IDEM_ERR_KEY,
				        "schema id %" PRId32
				        ": message indexes [%s] name no message: the file has %d",
				        id, list.c_str(), n);
			return idem_error_set(
			        err, IDEM_ERR_KEY,
			        "schema id %" PRId32
			        ": message indexes [%s] name no message: '%s' has %d nested messages",
			        id, list.c_str(), d->full_name().c_str(), n);
		}
		d = i == 0 ? s->file->message_type((int)idx[i]) : d->nested_type((int)idx[i]);
	}
	*ret_d = d;
	*ret_pos = pos;
	return IDEM_OK;
}

static idem_status decode(idem_pb_dec *dec, const idem_pb_schema *schema, int32_t id, size_t at,
                          const uint8_t *body, size_t len, idem_error *err)
{
	const gp::Descriptor *d = nullptr;
	size_t pos = 0;
	bool loose = false;
	idem_status r;

	dec->cur = nullptr;
	if (dec->schema != schema) {
		idem_pb_schema_unref(dec->schema);
		dec->schema = idem_pb_schema_ref(schema_mut(schema));
	}
	if (len > INT_MAX)
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "schema id %" PRId32 ": the value is larger than 2 GiB", id);
	if ((r = read_indexes(schema, id, at, body, len, &d, &pos, err)) != IDEM_OK)
		return r;
	r = idem__pb_walk(dec, d, id, at + pos, body + pos, len - pos, false, &loose, err);
	if (r != IDEM_OK)
		return r;
	if (dec->cache_schema != schema) {
		dec_uncache(dec);
		dec->cache_schema = idem_pb_schema_ref(schema_mut(schema));
	}
	std::unique_ptr<gp::Message> &m = dec->msgs[d];
	if (m == nullptr) {
		const gp::Message *proto = schema->factory->GetPrototype(d);

		if (proto == nullptr)
			return idem_error_set(err, IDEM_ERR_INVALID,
			                      "schema id %" PRId32
			                      ": libprotobuf has no message '%s'",
			                      id, d->full_name().c_str());
		m.reset(proto->New());
	}
	m->Clear();
	if (!m->ParsePartialFromArray(body + pos, (int)(len - pos)))
		return idem_error_set(err, IDEM_ERR_KEY,
		                      "schema id %" PRId32
		                      ": at bytes %zu to %zu: libprotobuf cannot parse the message",
		                      id, at + pos, at + len - 1);
	dec->cur = m.get();
	dec->loose = loose;
	dec->json_ready = false;
	return IDEM_OK;
}

idem_status idem_pb_decode(idem_pb_dec *dec, const idem_pb_schema *schema, int32_t id, size_t at,
                           const void *body, size_t len, idem_error *err)
{
	try {
		return decode(dec, schema, id, at,
		              body != nullptr ? (const uint8_t *)body : (const uint8_t *)"", len,
		              err);
	} catch (const std::bad_alloc &) {
		dec->cur = nullptr;
		return idem_error_nomem(err);
	} catch (const std::exception &e) {
		dec->cur = nullptr;
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "schema id %" PRId32 ": libprotobuf failed: %s", id,
		                      e.what());
	} catch (...) {
		dec->cur = nullptr;
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "schema id %" PRId32 ": libprotobuf failed", id);
	}
}
