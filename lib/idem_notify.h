/*
 * idem_notify.h - the systemd notification protocol (sd_notify), for Type=notify services.
 *
 * A datagram of "KEY=VALUE\n" lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or
 * an abstract name written with a leading '@'). Without $NOTIFY_SOCKET every call is a no-op.
 */
#ifndef IDEM_NOTIFY_H
#define IDEM_NOTIFY_H

#include "idem_common.h"

/*
 * @brief Send @fmt as one notification ("READY=1", "STATUS=...", "WATCHDOG=1", ...).
 * @returns true if sent, false if not running under a notify socket or sending failed.
 */
bool idem_notify(const char *fmt, ...) IDEM_PRINTF(1, 2);

/*
 * @brief The watchdog interval systemd expects pings within ($WATCHDOG_USEC, honouring
 * $WATCHDOG_PID), in microseconds; 0 when the watchdog is off.
 */
uint64_t idem_notify_watchdog_usec(void);

#endif
