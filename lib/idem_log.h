/*
 * idem_log.h - one line per event, key=value friendly, journald aware.
 *
 * Who logs at which level:
 * - the daemon's engine, idem_daemon and the modules it is split into (today also
 *   idem_consumer, which passes librdkafka's own log lines on at their level, and the purge
 *   thread of idem_retention, which survives its failures with nobody to return them to), runs
 *   on its own threads and may log at any level: "retrying in 2s" is its to say;
 * - every other lib module logs at debug level only and reports failures through idem_error,
 *   so that the caller (daemon/, idemctl, the engine) decides what is worth more.
 */
#ifndef IDEM_LOG_H
#define IDEM_LOG_H

#include "idem_common.h"

enum idem_log_level {
	IDEM_LOG_ERROR = 0,
	IDEM_LOG_WARN,
	IDEM_LOG_INFO,
	IDEM_LOG_DEBUG,
};

/* @brief Set the threshold; messages above it are dropped. Default IDEM_LOG_INFO. */
void idem_log_set_level(enum idem_log_level level);
enum idem_log_level idem_log_get_level(void);

/*
 * @brief Use "<N>" syslog priority prefixes instead of timestamps (stderr is the journal).
 * idem_log_auto_journal() enables it when $JOURNAL_STREAM matches stderr.
 */
void idem_log_set_journal(bool on);
void idem_log_auto_journal(void);

/* @brief Parse "error" | "warn" | "info" | "debug". @returns false if unknown. */
bool idem_log_level_parse(const char *s, enum idem_log_level *ret_level);

/* @brief "error" | "warn" | "info" | "debug". */
const char *idem_log_level_name(enum idem_log_level level);

/*
 * @brief Write one line: the prefix, then the formatted message, without its trailing
 * whitespace, through idem_esc() (IDEM_ESC_KEEP_BACKSLASH): controls (CR and LF too), bidi and
 * invalid UTF-8 escaped, so that one event is one line. A message over 4 KiB is cut, marked
 * IDEM_ESC_TRUNC. A caller still escapes text from messages that it quotes, with
 * idem_esc_str(..., IDEM_ESC_QUOTE), so that a quote in it cannot close the field.
 */
void idem_log_write(enum idem_log_level level, const char *mod, const char *fmt, ...)
        IDEM_PRINTF(3, 4);

#define idem_log_error(mod, ...) idem_log_write(IDEM_LOG_ERROR, mod, __VA_ARGS__)
#define idem_log_warn(mod, ...)  idem_log_write(IDEM_LOG_WARN, mod, __VA_ARGS__)
#define idem_log_info(mod, ...)  idem_log_write(IDEM_LOG_INFO, mod, __VA_ARGS__)
#define idem_log_debug(mod, ...) idem_log_write(IDEM_LOG_DEBUG, mod, __VA_ARGS__)

#endif
