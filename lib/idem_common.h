/*
 * idem_common.h - status codes, error detail and attributes shared by libidem.
 */
#ifndef IDEM_COMMON_H
#define IDEM_COMMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDEM_PRINTF(a, b)  __attribute__((format(printf, a, b)))
#define IDEM_NORETURN      __attribute__((noreturn))
#define IDEM_NODISCARD     __attribute__((warn_unused_result))
#define IDEM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifdef IDEM_UNIT_TEST
#define IDEM_TESTABLE
#else
#define IDEM_TESTABLE static
#endif

/* Room for a Kafka cluster id (22 characters on Apache Kafka) and its NUL; "" when unknown. */
#define IDEM_CLUSTER_ID_LEN 64

/*
 * Exit codes of idemd and idemctl, in one place (EXIT STATUS of idemd(8), idemctl(8)).
 * IDEM_EXIT_CONFIG is sysexits.h EX_CONFIG: systemd must not restart on it
 * (RestartPreventExitStatus=78 in the units).
 */
enum idem_exit {
	IDEM_EXIT_OK = 0,
	IDEM_EXIT_FAILURE = 1,     /* runtime failure */
	IDEM_EXIT_USAGE = 2,       /* bad command line */
	IDEM_EXIT_LOSS = 3,        /* idemctl verify: Kafka is ahead of the database (loss alarm) */
	IDEM_EXIT_NOT_APPLIED = 3, /* idemctl lookup: the key has no claim */
	IDEM_EXIT_BEHIND = 4,      /* idemctl verify: the database is behind what idemd committed
	                              (it went back); idemd re-applies the gap by itself */
	IDEM_EXIT_MOVED = 5,       /* idemctl verify: positions of another log or consumer (another
	                              cluster, a topic created again, a renamed consumer, offsets
	                              past the log's end); idemd decides them anew by itself */
	IDEM_EXIT_CONFIG = 78,     /* configuration, schema or login: restarting will not help */

	/* idemctl try: what would happen to the messages (the worst of them) */
	IDEM_EXIT_TRY_DUPLICATE = 10,  /* a key is claimed already (a duplicate) */
	IDEM_EXIT_TRY_QUARANTINE = 11, /* a message would be quarantined */
	IDEM_EXIT_TRY_HANDLER = 12,    /* the handler failed */
};

typedef enum idem_status {
	IDEM_OK = 0,
	IDEM_ERR_NOMEM,       /* out of memory */
	IDEM_ERR_INVALID,     /* invalid argument or state (programmer or operator error) */
	IDEM_ERR_IO,          /* file or socket I/O */
	IDEM_ERR_CONFIG,      /* configuration is invalid */
	IDEM_ERR_KEY,         /* business key or field could not be extracted from a message */
	IDEM_ERR_PG,          /* Postgres error; see idem_error.sqlstate */
	IDEM_ERR_KAFKA,       /* librdkafka error */
	IDEM_ERR_NOT_FOUND,   /* a looked-up thing does not exist */
	IDEM_ERR_BEHIND,      /* the database lacks a position this process saw it hold: it went
	                         back in time (ARCHITECTURE.md "When the database goes back") */
	IDEM_ERR_UNAVAILABLE, /* something a message needs cannot be had now (a schema, from a
	                         registry that does not answer): try again later, nothing is wrong
	                         with the message */
} idem_status;

/*
 * Error detail. Functions that take an "idem_error *err" (may be NULL) write it only when
 * they fail. sqlstate is set for IDEM_ERR_PG when the server sent one, else it is "".
 */
typedef struct idem_error {
	idem_status code;
	char sqlstate[6];
	char msg[1024];
} idem_error;

/*
 * @brief Fill @err (if not NULL) with @code and a formatted message.
 * @returns @code, so callers can "return idem_error_set(err, ...)".
 */
idem_status idem_error_set(idem_error *err, idem_status code, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

/*
 * @brief idem_error_nomem(@err): the one spelling of it.
 * @returns IDEM_ERR_NOMEM.
 */
idem_status idem_error_nomem(idem_error *err);

/*
 * @brief Read a secret (a password, a client secret) from the environment variable @env or the
 * first line of @file; at most one of them is set (neither: IDEM_OK and *ret_set false). @key
 * is the setting that named it, the start of every message ("kafka.properties.sasl.password_env:
 * environment variable 'X' is not set"); the secret is never part of a message.
 *
 * A variable is moved out of the environment on its first read (its text overwritten, then
 * unsetenv()), so that child processes and /proc/PID/environ never see it; this process keeps
 * its own copy, which later reads return. The first read of each variable must therefore
 * happen before other threads start (idem_cfg_secrets_check() at start-up).
 *
 * A relative @file names a file of $CREDENTIALS_DIRECTORY when that is set (systemd's
 * LoadCredential=, idemd.yaml(5) SECRETS), else of the working directory. Any other file must be
 * closed to group and others (mode & 077 == 0).
 *
 * @param buf receives the secret, NUL-terminated, on success only; on failure it is wiped.
 * @returns IDEM_OK; IDEM_ERR_CONFIG when the variable is not set or empty, the file cannot be
 * opened, is open to group or others, is empty or its first line is blank, or the secret does
 * not fit in @len bytes with its NUL (never cut short).
 */
IDEM_NODISCARD idem_status idem_secret_get(const char *key, const char *env, const char *file,
                                           char *buf, size_t len, bool *ret_set, idem_error *err);

/*
 * @brief idem_secret_get() for the password settings of @section: @env is
 * SECTION.password_env's value, @file SECTION.password_file's ("postgres" ->
 * "postgres.password_file: ..."). Wipe @buf with idem_secret_wipe() once used.
 */
IDEM_NODISCARD idem_status idem_secret_read(const char *section, const char *env, const char *file,
                                            char *buf, size_t len, bool *ret_set, idem_error *err);

/*
 * @brief Overwrite @n bytes of a secret at @p with zeroes (explicit_bzero(): the compiler may
 * not drop the stores, even right before free()). @p may be NULL when @n is 0.
 */
void idem_secret_wipe(void *p, size_t n);

/*
 * @brief Days since 1970-01-01 (any int64 whose sum with 719468 does not overflow) to a
 * proleptic Gregorian date (Hinnant's algorithm): the one calendar of every date idemd writes.
 */
void idem_civil_from_days(int64_t days, int64_t *ret_year, int *ret_month, int *ret_day);

/* @brief Human name of a status code ("out of memory", ...). */
const char *idem_status_str(idem_status s);

/*
 * A growable byte buffer. Zero-initialise it ({ 0 }) or call idem_buf_init(); release with
 * idem_buf_done(). data is always NUL-terminated after a successful append (not counted in len),
 * so text content can be used as a C string; binary content may contain NULs.
 */
struct idem_buf {
	char *data;
	size_t len;
	size_t cap;
};

void idem_buf_init(struct idem_buf *b);
void idem_buf_done(struct idem_buf *b);
void idem_buf_reset(struct idem_buf *b); /* len = 0, keeps the memory */
IDEM_NODISCARD idem_status idem_buf_reserve(struct idem_buf *b, size_t extra);
IDEM_NODISCARD idem_status idem_buf_append(struct idem_buf *b, const void *p, size_t n);
IDEM_NODISCARD idem_status idem_buf_append_str(struct idem_buf *b, const char *s);
/* @brief @p[0..@n) as Postgres bytea hex text: \x0a1b (the text of bytes in every format). */
IDEM_NODISCARD idem_status idem_buf_append_bytea(struct idem_buf *b, const uint8_t *p, size_t n);
/*
 * @brief The shortest text that reads back to the same float (@is_float) or double: "-0" for
 * -0.0; NaN, Infinity and -Infinity as words, quoted when @json (the text of reals in every
 * format).
 */
IDEM_NODISCARD idem_status idem_buf_append_real(struct idem_buf *b, double d, bool is_float,
                                                bool json);
IDEM_NODISCARD idem_status idem_buf_printf(struct idem_buf *b, const char *fmt, ...)
        IDEM_PRINTF(2, 3);

/*
 * Postgres text-format array literals ('{"a","b\\"c",NULL}'), for binding a whole list as one
 * parameter: idem_pgarray_open() resets @a to "{", idem_pgarray_add() appends an element
 * (quoted, '"' and '\\' escaped; NULL when @null), idem_pgarray_close() appends "}".
 */
IDEM_NODISCARD idem_status idem_pgarray_open(struct idem_buf *a);
IDEM_NODISCARD idem_status idem_pgarray_add(struct idem_buf *a, const char *s, size_t n, bool null);
IDEM_NODISCARD idem_status idem_pgarray_close(struct idem_buf *a);

/*
 * Postgres binary-format arrays (what array_recv() reads), for the statements idemd sends
 * most: nothing for the server to parse or unquote, and numbers and bytes as they are.
 * idem_pgbin_open() resets @a to an empty one-dimensional array of element type @elem_oid
 * (IDEM_OID_*: the parameter's SQL cast must name the same type), the _add functions append an
 * element, idem_pgbin_close() writes the count; the parameter is a->data, a->len long, in
 * format 1. idem_pgbin_add_hex() appends the bytes that hex digits @s[0..n) spell (for a bytea
 * array; IDEM_ERR_INVALID if they do not).
 */
#define IDEM_OID_BYTEA 17
#define IDEM_OID_INT8  20
#define IDEM_OID_INT4  23
#define IDEM_OID_TEXT  25
IDEM_NODISCARD idem_status idem_pgbin_open(struct idem_buf *a, uint32_t elem_oid);
IDEM_NODISCARD idem_status idem_pgbin_add(struct idem_buf *a, const void *p, size_t n, bool null);
IDEM_NODISCARD idem_status idem_pgbin_add_hex(struct idem_buf *a, const char *s, size_t n,
                                              bool null);
IDEM_NODISCARD idem_status idem_pgbin_add_int4(struct idem_buf *a, int32_t v);
IDEM_NODISCARD idem_status idem_pgbin_add_int8(struct idem_buf *a, int64_t v);
void idem_pgbin_close(struct idem_buf *a);
/*
 * @brief Element @k of the binary array @a[0..len) (as idem_pgbin_close() leaves it): its bytes
 * in *ret_p, *ret_n, and whether it is NULL; false if the array is malformed or has no element
 * @k. *ret_count (if not NULL): how many elements it has.
 */
bool idem_pgbin_get(const char *a, size_t len, size_t k, const char **ret_p, size_t *ret_n,
                    bool *ret_null, size_t *ret_count);

/*
 * @brief Parse a duration: a non-negative integer with an optional unit s, m, h or d
 * ("30d", "90m", "3600"; no unit means seconds).
 * @returns false if @s is not one (out of range included).
 */
bool idem_duration_parse(const char *s, int64_t *ret_seconds);

/*
 * @brief Parse a whole decimal integer within [@min, @max]: an optional '-', then digits, and
 * nothing else (no space, no sign '+', no empty string). The one number parser of idemctl's
 * options and arguments.
 * @returns false if @s is not one (out of range included); *ret_v is then unchanged.
 */
bool idem_int_parse(const char *s, int64_t min, int64_t max, int64_t *ret_v);

/*
 * @brief The one retry policy: exponential backoff with jitter. Attempt 1 waits about
 * @initial_ms, each further attempt doubles the cap up to @max_ms, and the delay is drawn from
 * [cap/2, cap] with @seed (rand_r) so that instances retrying together spread out.
 */
int idem_backoff_ms(int initial_ms, int max_ms, int attempt, unsigned int *seed);

/* @brief Monotonic time in microseconds and in milliseconds (CLOCK_MONOTONIC): the one clock
 * for intervals, timeouts and deadlines; the wall clock is only for timestamps. */
int64_t idem_mono_us(void);
int64_t idem_mono_ms(void);

/*
 * @brief Initialise @cv so that its timed waits run on CLOCK_MONOTONIC (a step of the wall
 * clock neither stretches nor cuts them); their deadlines come from idem_cond_deadline().
 * @returns 0 or an errno value, as pthread_cond_init().
 */
int idem_cond_init(pthread_cond_t *cv);

/*
 * @brief pthread_create() with the stack of IDEM_THREAD_STACK_BYTES (idem_limits.h): every thread
 * libidem starts has that stack, whatever RLIMIT_STACK the process was started with.
 * @returns 0 or an errno value, as pthread_create().
 */
int idem_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* @brief The deadline @ms from now for pthread_cond_timedwait() on a condition variable
 * initialised by idem_cond_init(). */
struct timespec idem_cond_deadline(int64_t ms);
/* @brief Wall-clock time in milliseconds since the epoch (CLOCK_REALTIME). */
int64_t idem_wall_ms(void);

/* @brief The value of hex digit @c (either case), or -1 if it is not one. */
int idem_hex_digit(char c);

/* @brief true if @p[0..n) is valid UTF-8 without NUL bytes. */
bool idem_utf8_valid(const void *p, size_t n);
/*
 * @brief The length (1-4) of the valid UTF-8 sequence at @s[0..@n) (@n > 0), 0 if there is none
 * (overlong, a surrogate, past U+10FFFF, cut short): the one UTF-8 decoder of decoders.
 */
size_t idem_utf8_seq(const uint8_t *s, size_t n);

/*
 * A JSON pointer being written into @b (@cap bytes) for a message saying where in a value
 * something failed; @cut once it got too long (the caller then ends it with "...").
 */
struct idem_pathbuf {
	char *b;
	size_t cap, len;
	bool cut;
};
/*
 * @brief Appends @s[0..@n) as a pointer token: '~' and '/' escaped, bytes that are not printable
 * UTF-8 as '?' (messages end up in logs and in Postgres text columns). Keeps 4 bytes of @b free.
 */
void idem_pathbuf_put(struct idem_pathbuf *pb, const char *s, size_t n);

/*
 * @brief NULL if @ptr is an RFC 6901 JSON pointer ("" is the whole document, else "/"-separated
 * tokens where '~' is "~0" or "~1"), else what is wrong with it: the one check of field pointers.
 */
const char *idem_json_pointer_problem(const char *ptr);

/*
 * @brief Sets @err to a decoder's failure at byte @at of the value of schema id @id, in the one
 * form Avro and Protobuf share: "schema id 7: at byte 19 (/a/b): what"; @path may be "".
 */
idem_status idem_decode_fail(idem_error *err, int32_t id, size_t at, const char *path,
                             const char *what);

#endif
