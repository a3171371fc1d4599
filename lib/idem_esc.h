/*
 * idem_esc.h - the one printable form of untrusted text, for log lines and terminals.
 *
 * Text that comes from messages (business keys, header names, handler errors quoting message
 * data) reaches log files, the journal and the operator's terminal. Written raw, it could move
 * the cursor or clear the screen (ESC sequences, C1 controls), start a line that looks like
 * another event (CR, LF), reorder what is shown (Unicode bidi controls: "Trojan Source") or,
 * holding a quote, close the field it is quoted in and fake the fields after it.
 * idem_esc() writes a form in which none of that is possible and every input has one reading:
 *
 *   printable ASCII           as is, except '\' as "\\" and, with IDEM_ESC_QUOTE, ' and " as
 *                             "\'" and "\""
 *   C0 controls, NUL, DEL     "\xNN" (two lower-case hex digits): "\x1b", "\x0a", "\x00"
 *   invalid UTF-8             "\xNN" for each byte that does not start a valid sequence (a lone
 *                             continuation byte, an overlong form, a surrogate, beyond U+10FFFF,
 *                             a sequence cut short); decoding resumes at the next byte
 *   code points               "\u{XXXX}" (four upper-case hex digits) for: the C1 controls
 *                             U+0080..U+009F; the bidi controls U+061C, U+200E, U+200F,
 *                             U+202A..U+202E, U+2066..U+2069; the invisible line breaks and
 *                             format characters U+200B, U+2028, U+2029, U+2060..U+206F, U+FEFF
 *   other valid UTF-8         as is: names in other scripts stay readable (so do ZWNJ and ZWJ,
 *                             U+200C/U+200D, which some scripts and emoji need)
 *
 * Output that does not fit is cut before a whole unit (a character, an escape, a UTF-8
 * sequence: never inside one) and ends in IDEM_ESC_TRUNC; it is always NUL-terminated and never
 * longer than outlen - 1 bytes.
 */
#ifndef IDEM_ESC_H
#define IDEM_ESC_H

#include <stddef.h>

/* ' and " as \' and \": for text written inside quotes, which a quote must not close. */
#define IDEM_ESC_QUOTE 0x1u
/*
 * '\' as is: for a whole log line, whose quoted parts were escaped at their call site already
 * (escaping their backslashes again would double them). Controls and bidi are still escaped;
 * the result is safe to show, but no longer has one reading.
 */
#define IDEM_ESC_KEEP_BACKSLASH 0x2u
/*
 * For serialized JSON text (json-c's output, whose strings have their quotes, backslashes and
 * C0 controls escaped already): the code points above as JSON's "\uXXXX", which decodes to the
 * same string, in lower-case hex as json-c writes its own ("\u202e"); TAB, LF and CR as is
 * (JSON's whitespace between tokens), other C0 controls and DEL as "\u00NN", a byte of invalid
 * UTF-8 as "\ufffd" (raw, it would make the JSON invalid); '\', ' and " as is. Not to be
 * combined with the other flags.
 */
#define IDEM_ESC_JSON 0x4u

/* What ends output that was cut. */
#define IDEM_ESC_TRUNC "..."

/*
 * @brief Write the printable form of @s[0..@len) (see above) into @out[0..@outlen).
 * @param s may be NULL when @len is 0; it may hold NUL bytes.
 * @param out may be NULL when @outlen is 0 (then nothing is written).
 * @returns as snprintf(), the length of the whole form, without its NUL: it was cut (and ends
 *          in IDEM_ESC_TRUNC) if that is @outlen or more; what was written is strlen(@out).
 *          The whole form of @len bytes is at most 4 * @len long (6 * @len with IDEM_ESC_JSON).
 */
size_t idem_esc(char *out, size_t outlen, const void *s, size_t len, unsigned flags);

/*
 * @brief idem_esc() of the NUL-terminated @s ("(null)" when NULL), for use as an argument:
 *        printf("key='%s'", idem_esc_str(buf, sizeof(buf), key, IDEM_ESC_QUOTE)).
 * @param outlen at least 1.
 * @returns @out.
 */
const char *idem_esc_str(char *out, size_t outlen, const char *s, unsigned flags);

#endif
