/*
 * idem-mock-kafka - the embedded Kafka of the test rig: librdkafka's mock cluster in its own
 * process on 127.0.0.1, with a UNIX socket for fault injection.
 *
 *   idem-mock-kafka [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file PATH]
 *                   [--control PATH] [--exit-with-parent]
 *   idem-mock-kafka ctl SOCKETPATH COMMAND [ARGS...]
 *
 * Server mode prints the bootstrap list ("127.0.0.1:p1,...") as one line on stdout once the
 * topics exist and the control socket listens, then writes it to --bootstrap-file (tmp + rename,
 * so a reader never sees a partial list). SIGTERM/SIGINT or the "stop" command: destroy the
 * cluster, unlink the socket and the file, exit 0.
 *
 * Control protocol: one command per line, one reply line per command, "ok" or "error: ...".
 * Send "help" for the list. Mock calls work only in the process that owns the cluster, which is
 * why faults are injected through this socket rather than by the tests themselves.
 */
#include <errno.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MOCK_MAX_CLIENTS  16
#define MOCK_LINE_MAX     4096
#define MOCK_POLL_MS      100
#define MOCK_CTL_TIMEOUT  10000 /* ms the ctl client waits for a reply */
#define MOCK_MAX_ERRS     1000000
#define MOCK_DEFAULT_BRKS 3

static volatile sig_atomic_t stop_requested;

struct mock_client {
	int fd;
	size_t len;
	char buf[MOCK_LINE_MAX];
};

struct mock_server {
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mc;
	int listen_fd;
	const char *control_path;
	const char *bootstrap_path;
	struct mock_client clients[MOCK_MAX_CLIENTS];
	bool stop; /* set by the "stop" command */
};

/* Kafka protocol request types, by the names the Kafka documentation uses. */
static const struct {
	const char *name;
	int16_t key;
} api_keys[] = {
	{ "Produce", 0 },
	{ "Fetch", 1 },
	{ "ListOffsets", 2 },
	{ "Metadata", 3 },
	{ "LeaderAndIsr", 4 },
	{ "StopReplica", 5 },
	{ "UpdateMetadata", 6 },
	{ "ControlledShutdown", 7 },
	{ "OffsetCommit", 8 },
	{ "OffsetFetch", 9 },
	{ "FindCoordinator", 10 },
	{ "JoinGroup", 11 },
	{ "Heartbeat", 12 },
	{ "LeaveGroup", 13 },
	{ "SyncGroup", 14 },
	{ "DescribeGroups", 15 },
	{ "ListGroups", 16 },
	{ "SaslHandshake", 17 },
	{ "ApiVersions", 18 },
	{ "CreateTopics", 19 },
	{ "DeleteTopics", 20 },
	{ "DeleteRecords", 21 },
	{ "InitProducerId", 22 },
	{ "OffsetForLeaderEpoch", 23 },
	{ "AddPartitionsToTxn", 24 },
	{ "AddOffsetsToTxn", 25 },
	{ "EndTxn", 26 },
	{ "WriteTxnMarkers", 27 },
	{ "TxnOffsetCommit", 28 },
	{ "DescribeConfigs", 32 },
	{ "AlterConfigs", 33 },
	{ "SaslAuthenticate", 36 },
	{ "CreatePartitions", 37 },
	{ "DeleteGroups", 42 },
	{ "OffsetDelete", 47 },
};

static const char control_help[] =
        "commands: ping | topic_create T P | broker_down ID | broker_up ID | broker_rtt ID MS | "
        "push_errors APIKEY COUNT ERR | broker_push_errors ID APIKEY COUNT ERR [RTT_MS] | "
        "clear_errors APIKEY | partition_leader T P BROKER | "
        "coordinator_set group|transaction KEY BROKER | set_apiversion APIKEY MIN MAX | stop | help";

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: idem-mock-kafka [--brokers N] [--topic NAME:PARTITIONS]... "
	        "[--bootstrap-file PATH] [--control PATH]\n"
	        "       idem-mock-kafka ctl SOCKETPATH COMMAND [ARGS...]\n"
	        "\n"
	        "Runs librdkafka's mock cluster on 127.0.0.1 and prints its bootstrap list.\n"
	        "  --brokers N              number of brokers, ids 1..N (default 3)\n"
	        "  --topic NAME:PARTITIONS  create a topic (replication factor 1); repeatable\n"
	        "  --bootstrap-file PATH    also write the bootstrap list to PATH (atomically)\n"
	        "  --control PATH           UNIX socket accepting one command per line\n"
	        "\n"
	        "ctl sends one command and prints the reply; exit 0 on \"ok\", 1 otherwise.\n"
	        "%s\n"
	        "APIKEY is a number or a name (Fetch, OffsetCommit, Produce, JoinGroup, ...);\n"
	        "ERR is a number or an error name (TRANSPORT, NOT_COORDINATOR, ...).\n",
	        control_help);
}

/* Parse a whole decimal integer in [min, max]. */
static bool parse_long(const char *s, long min, long max, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return false;
	*ret = v;
	return true;
}

static bool parse_api_key(const char *s, int16_t *ret)
{
	long v;

	for (size_t i = 0; i < sizeof(api_keys) / sizeof(api_keys[0]); i++) {
		if (strcasecmp(s, api_keys[i].name) == 0) {
			*ret = api_keys[i].key;
			return true;
		}
	}
	if (!parse_long(s, 0, INT16_MAX, &v))
		return false;
	*ret = (int16_t)v;
	return true;
}

/*
 * Error names as librdkafka spells them without "RD_KAFKA_RESP_ERR_": broker errors such as
 * "NOT_COORDINATOR", and internal ones with a leading underscore, "_TRANSPORT", which may be
 * given without it.
 */
static bool parse_error(const char *s, rd_kafka_resp_err_t *ret)
{
	static const char prefix[] = "RD_KAFKA_RESP_ERR_";
	const struct rd_kafka_err_desc *descs;
	size_t cnt;
	long v;

	if (parse_long(s, INT_MIN, INT_MAX, &v)) {
		*ret = (rd_kafka_resp_err_t)v;
		return true;
	}
	if (strncasecmp(s, prefix, sizeof(prefix) - 1) == 0)
		s += sizeof(prefix) - 1;
	rd_kafka_get_err_descs(&descs, &cnt);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < cnt; i++) {
			const char *name = descs[i].name;

			if (name == NULL)
				continue;
			if (pass == 1 && name[0] == '_')
				name++;
			if (strcasecmp(s, name) == 0) {
				*ret = descs[i].code;
				return true;
			}
		}
	}
	return false;
}

static bool parse_broker(const char *s, int32_t *ret)
{
	long v;

	if (!parse_long(s, -1, INT32_MAX, &v))
		return false;
	*ret = (int32_t)v;
	return true;
}

/* Write the reply for a finished mock call. */
static void reply_err(char *reply, size_t size, rd_kafka_resp_err_t err)
{
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		snprintf(reply, size, "ok");
	else
		snprintf(reply, size, "error: %s (%s)", rd_kafka_err2str(err),
		         rd_kafka_err2name(err));
}

static bool nargs_ok(int argc, int min, int max, char *reply, size_t size)
{
	if (argc >= min && argc <= max)
		return true;
	snprintf(reply, size, "error: wrong number of arguments, try 'help'");
	return false;
}

/* Execute one control command (already split into words) and write the one-line reply. */
static void control_exec(struct mock_server *srv, int argc, char **argv, char *reply, size_t size)
{
	const char *cmd = argv[0];
	rd_kafka_resp_err_t err;
	int32_t broker;
	int16_t api;
	long n;

	if (strcmp(cmd, "ping") == 0) {
		if (nargs_ok(argc, 1, 1, reply, size))
			snprintf(reply, size, "ok");
	} else if (strcmp(cmd, "help") == 0) {
		snprintf(reply, size, "ok %s", control_help);
	} else if (strcmp(cmd, "stop") == 0) {
		if (nargs_ok(argc, 1, 1, reply, size)) {
			srv->stop = true;
			snprintf(reply, size, "ok");
		}
	} else if (strcmp(cmd, "topic_create") == 0) {
		if (!nargs_ok(argc, 3, 3, reply, size))
			return;
		if (!parse_long(argv[2], 1, 100000, &n)) {
			snprintf(reply, size, "error: invalid partition count '%s'", argv[2]);
			return;
		}
		err = rd_kafka_mock_topic_create(srv->mc, argv[1], (int)n, 1);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "broker_down") == 0 || strcmp(cmd, "broker_up") == 0) {
		if (!nargs_ok(argc, 2, 2, reply, size))
			return;
		if (!parse_broker(argv[1], &broker)) {
			snprintf(reply, size, "error: invalid broker id '%s'", argv[1]);
			return;
		}
		if (strcmp(cmd, "broker_down") == 0)
			err = rd_kafka_mock_broker_set_down(srv->mc, broker);
		else
			err = rd_kafka_mock_broker_set_up(srv->mc, broker);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "broker_rtt") == 0) {
		if (!nargs_ok(argc, 3, 3, reply, size))
			return;
		if (!parse_broker(argv[1], &broker)) {
			snprintf(reply, size, "error: invalid broker id '%s'", argv[1]);
			return;
		}
		if (!parse_long(argv[2], 0, INT_MAX, &n)) {
			snprintf(reply, size, "error: invalid rtt '%s'", argv[2]);
			return;
		}
		err = rd_kafka_mock_broker_set_rtt(srv->mc, broker, (int)n);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "push_errors") == 0) {
		rd_kafka_resp_err_t code;
		rd_kafka_resp_err_t *errs;

		if (!nargs_ok(argc, 4, 4, reply, size))
			return;
		if (!parse_api_key(argv[1], &api)) {
			snprintf(reply, size, "error: unknown api key '%s'", argv[1]);
			return;
		}
		if (!parse_long(argv[2], 1, MOCK_MAX_ERRS, &n)) {
			snprintf(reply, size, "error: invalid count '%s'", argv[2]);
			return;
		}
		if (!parse_error(argv[3], &code)) {
			snprintf(reply, size, "error: unknown error '%s'", argv[3]);
			return;
		}
		errs = malloc((size_t)n * sizeof(*errs));
		if (errs == NULL) {
			snprintf(reply, size, "error: out of memory");
			return;
		}
		for (long i = 0; i < n; i++)
			errs[i] = code;
		rd_kafka_mock_push_request_errors_array(srv->mc, api, (size_t)n, errs);
		free(errs);
		snprintf(reply, size, "ok");
	} else if (strcmp(cmd, "broker_push_errors") == 0) {
		rd_kafka_resp_err_t code;
		long rtt = 0;

		if (!nargs_ok(argc, 5, 6, reply, size))
			return;
		if (!parse_broker(argv[1], &broker)) {
			snprintf(reply, size, "error: invalid broker id '%s'", argv[1]);
			return;
		}
		if (!parse_api_key(argv[2], &api)) {
			snprintf(reply, size, "error: unknown api key '%s'", argv[2]);
			return;
		}
		if (!parse_long(argv[3], 1, MOCK_MAX_ERRS, &n)) {
			snprintf(reply, size, "error: invalid count '%s'", argv[3]);
			return;
		}
		if (!parse_error(argv[4], &code)) {
			snprintf(reply, size, "error: unknown error '%s'", argv[4]);
			return;
		}
		if (argc == 6 && !parse_long(argv[5], 0, INT_MAX, &rtt)) {
			snprintf(reply, size, "error: invalid rtt '%s'", argv[5]);
			return;
		}
		/* The call takes (err, rtt) pairs as varargs; push identical entries one by one. */
		err = RD_KAFKA_RESP_ERR_NO_ERROR;
		for (long i = 0; i < n && !err; i++)
			err = rd_kafka_mock_broker_push_request_error_rtts(srv->mc, broker, api, 1,
			                                                   code, (int)rtt);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "clear_errors") == 0) {
		if (!nargs_ok(argc, 2, 2, reply, size))
			return;
		if (!parse_api_key(argv[1], &api)) {
			snprintf(reply, size, "error: unknown api key '%s'", argv[1]);
			return;
		}
		rd_kafka_mock_clear_request_errors(srv->mc, api);
		snprintf(reply, size, "ok");
	} else if (strcmp(cmd, "partition_leader") == 0) {
		if (!nargs_ok(argc, 4, 4, reply, size))
			return;
		if (!parse_long(argv[2], 0, INT32_MAX, &n)) {
			snprintf(reply, size, "error: invalid partition '%s'", argv[2]);
			return;
		}
		if (!parse_broker(argv[3], &broker)) {
			snprintf(reply, size, "error: invalid broker id '%s'", argv[3]);
			return;
		}
		err = rd_kafka_mock_partition_set_leader(srv->mc, argv[1], (int32_t)n, broker);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "coordinator_set") == 0) {
		if (!nargs_ok(argc, 4, 4, reply, size))
			return;
		if (strcmp(argv[1], "group") != 0 && strcmp(argv[1], "transaction") != 0) {
			snprintf(reply, size, "error: key type must be 'group' or 'transaction'");
			return;
		}
		if (!parse_broker(argv[3], &broker)) {
			snprintf(reply, size, "error: invalid broker id '%s'", argv[3]);
			return;
		}
		err = rd_kafka_mock_coordinator_set(srv->mc, argv[1], argv[2], broker);
		reply_err(reply, size, err);
	} else if (strcmp(cmd, "set_apiversion") == 0) {
		long lo, hi;

		if (!nargs_ok(argc, 4, 4, reply, size))
			return;
		if (!parse_api_key(argv[1], &api)) {
			snprintf(reply, size, "error: unknown api key '%s'", argv[1]);
			return;
		}
		if (!parse_long(argv[2], -1, INT16_MAX, &lo) ||
		    !parse_long(argv[3], -1, INT16_MAX, &hi)) {
			snprintf(reply, size, "error: invalid version range");
			return;
		}
		err = rd_kafka_mock_set_apiversion(srv->mc, api, (int16_t)lo, (int16_t)hi);
		reply_err(reply, size, err);
	} else {
		snprintf(reply, size, "error: unknown command '%s', try 'help'", cmd);
	}
}

static void control_line(struct mock_server *srv, struct mock_client *cl, char *line)
{
	char reply[MOCK_LINE_MAX + 128];
	char cmdline[MOCK_LINE_MAX];
	char *argv[16];
	char *save = NULL;
	int argc = 0;
	size_t len;

	snprintf(cmdline, sizeof(cmdline), "%s", line);
	for (char *w = strtok_r(line, " \t\r", &save); w != NULL;
	     w = strtok_r(NULL, " \t\r", &save)) {
		if (argc == (int)(sizeof(argv) / sizeof(argv[0]))) {
			argc = -1;
			break;
		}
		argv[argc++] = w;
	}
	if (argc == 0)
		return; /* blank lines get no reply */
	if (argc < 0)
		snprintf(reply, sizeof(reply), "error: too many arguments");
	else
		control_exec(srv, argc, argv, reply, sizeof(reply));
	fprintf(stderr, "idem-mock-kafka: control: %s -> %s\n", cmdline, reply);
	len = strlen(reply);
	reply[len++] = '\n';
	/* Replies are short; a client that does not read them loses them. */
	if (send(cl->fd, reply, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		fprintf(stderr, "idem-mock-kafka: control: reply failed: %s, ignoring\n",
		        strerror(errno));
}

static void client_close(struct mock_client *cl)
{
	close(cl->fd);
	cl->fd = -1;
	cl->len = 0;
}

/* Read what a client sent and run every complete line. */
static void client_read(struct mock_server *srv, struct mock_client *cl)
{
	ssize_t n;
	char *nl;

	n = read(cl->fd, cl->buf + cl->len, sizeof(cl->buf) - cl->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		client_close(cl);
		return;
	}
	cl->len += (size_t)n;
	while ((nl = memchr(cl->buf, '\n', cl->len)) != NULL) {
		size_t used = (size_t)(nl - cl->buf) + 1;

		*nl = '\0';
		control_line(srv, cl, cl->buf);
		memmove(cl->buf, cl->buf + used, cl->len - used);
		cl->len -= used;
	}
	if (cl->len == sizeof(cl->buf)) {
		static const char msg[] = "error: line too long\n";

		(void)send(cl->fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		client_close(cl);
	}
}

static void client_accept(struct mock_server *srv)
{
	int fd;

	fd = accept(srv->listen_fd, NULL, NULL);
	if (fd < 0)
		return;
	for (size_t i = 0; i < MOCK_MAX_CLIENTS; i++) {
		if (srv->clients[i].fd < 0) {
			srv->clients[i].fd = fd;
			srv->clients[i].len = 0;
			return;
		}
	}
	fprintf(stderr, "idem-mock-kafka: control: too many clients, closing one\n");
	close(fd);
}

static int control_listen(const char *path)
{
	struct sockaddr_un addr = { 0 };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "idem-mock-kafka: control socket path '%s' is too long\n", path);
		return -1;
	}
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	/* A socket left by a killed predecessor would make bind() fail. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0) {
		fprintf(stderr, "idem-mock-kafka: socket failed: %s\n", strerror(errno));
		return -1;
	}
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, 16) < 0) {
		fprintf(stderr, "idem-mock-kafka: listen on '%s' failed: %s\n", path,
		        strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int write_file_atomic(const char *path, const char *line)
{
	char tmp[PATH_MAX];
	FILE *f;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp)) {
		fprintf(stderr, "idem-mock-kafka: path '%s' is too long\n", path);
		return -1;
	}
	f = fopen(tmp, "w");
	if (f == NULL) {
		fprintf(stderr, "idem-mock-kafka: open '%s' failed: %s\n", tmp, strerror(errno));
		return -1;
	}
	fprintf(f, "%s\n", line);
	if (fclose(f) != 0) {
		fprintf(stderr, "idem-mock-kafka: write '%s' failed: %s\n", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path) != 0) {
		fprintf(stderr, "idem-mock-kafka: rename '%s' failed: %s\n", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

static int create_topic(rd_kafka_mock_cluster_t *mc, const char *spec)
{
	char name[512];
	const char *colon;
	rd_kafka_resp_err_t err;
	long parts;

	colon = strrchr(spec, ':');
	if (colon == NULL || colon == spec || (size_t)(colon - spec) >= sizeof(name) ||
	    !parse_long(colon + 1, 1, 100000, &parts)) {
		fprintf(stderr, "idem-mock-kafka: invalid topic '%s', expected NAME:PARTITIONS\n",
		        spec);
		return -1;
	}
	memcpy(name, spec, (size_t)(colon - spec));
	name[colon - spec] = '\0';
	err = rd_kafka_mock_topic_create(mc, name, (int)parts, 1);
	if (err) {
		fprintf(stderr, "idem-mock-kafka: create topic '%s' failed: %s\n", name,
		        rd_kafka_err2str(err));
		return -1;
	}
	return 0;
}

static rd_kafka_t *host_new(void)
{
	char errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;

	conf = rd_kafka_conf_new();
	/* The host is a producer without bootstrap servers; level 4 hides its notice about it. */
	if (rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
		fprintf(stderr, "idem-mock-kafka: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		fprintf(stderr, "idem-mock-kafka: create client failed: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
	}
	return rk;
}

static void serve(struct mock_server *srv)
{
	struct pollfd pfds[MOCK_MAX_CLIENTS + 1];
	struct mock_client *owners[MOCK_MAX_CLIENTS + 1];

	while (!stop_requested && !srv->stop) {
		nfds_t n = 0;
		int r;

		if (srv->listen_fd >= 0) {
			pfds[n].fd = srv->listen_fd;
			pfds[n].events = POLLIN;
			owners[n++] = NULL;
		}
		for (size_t i = 0; i < MOCK_MAX_CLIENTS; i++) {
			if (srv->clients[i].fd < 0)
				continue;
			pfds[n].fd = srv->clients[i].fd;
			pfds[n].events = POLLIN;
			owners[n++] = &srv->clients[i];
		}
		r = poll(pfds, n, MOCK_POLL_MS);
		if (r <= 0)
			continue;
		for (nfds_t i = 0; i < n && !srv->stop; i++) {
			if (pfds[i].revents == 0)
				continue;
			if (owners[i] == NULL)
				client_accept(srv);
			else
				client_read(srv, owners[i]);
		}
	}
}

static int server_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "brokers", required_argument, NULL, 'b' },
		{ "topic", required_argument, NULL, 't' },
		{ "bootstrap-file", required_argument, NULL, 'f' },
		{ "control", required_argument, NULL, 'c' },
		{ "exit-with-parent", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mock_server srv = { .listen_fd = -1 };
	struct sigaction sa = { 0 };
	pid_t ppid = getppid();
	const char *bootstraps;
	char **topics;
	int ntopics = 0;
	long brokers = MOCK_DEFAULT_BRKS;
	int rc = 1;
	int c;

	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);

	for (size_t i = 0; i < MOCK_MAX_CLIENTS; i++)
		srv.clients[i].fd = -1;
	topics = calloc((size_t)argc, sizeof(*topics));
	if (topics == NULL) {
		fprintf(stderr, "idem-mock-kafka: out of memory\n");
		return 1;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (!parse_long(optarg, 1, 1000, &brokers)) {
				fprintf(stderr, "idem-mock-kafka: invalid --brokers '%s'\n",
				        optarg);
				goto out_free_topics;
			}
			break;
		case 't':
			topics[ntopics++] = optarg;
			break;
		case 'f':
			srv.bootstrap_path = optarg;
			break;
		case 'c':
			srv.control_path = optarg;
			break;
		case 'p':
			/*
			 * A test killed with SIGKILL cannot clean up, and we run in our own
			 * session: stop when the parent goes (also if it already went).
			 */
			if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != ppid)
				stop_requested = 1;
			break;
		case 'h':
			usage(stdout);
			rc = 0;
			goto out_free_topics;
		default:
			usage(stderr);
			goto out_free_topics;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "idem-mock-kafka: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		goto out_free_topics;
	}

	srv.rk = host_new();
	if (srv.rk == NULL)
		goto out_free_topics;
	srv.mc = rd_kafka_mock_cluster_new(srv.rk, (int)brokers);
	if (srv.mc == NULL) {
		fprintf(stderr, "idem-mock-kafka: create mock cluster failed\n");
		goto out_destroy_rk;
	}
	for (int i = 0; i < ntopics; i++) {
		if (create_topic(srv.mc, topics[i]) != 0)
			goto out_destroy_mc;
	}
	if (srv.control_path != NULL) {
		srv.listen_fd = control_listen(srv.control_path);
		if (srv.listen_fd < 0)
			goto out_destroy_mc;
	}
	/* Announce only when topics exist and the socket listens: the file means "ready". */
	bootstraps = rd_kafka_mock_cluster_bootstraps(srv.mc);
	if (srv.bootstrap_path != NULL && write_file_atomic(srv.bootstrap_path, bootstraps) != 0)
		goto out_close_listen;
	printf("%s\n", bootstraps);
	fflush(stdout);

	serve(&srv);
	fprintf(stderr, "idem-mock-kafka: stopping\n");
	rc = 0;

	if (srv.bootstrap_path != NULL)
		unlink(srv.bootstrap_path);
out_close_listen:
	for (size_t i = 0; i < MOCK_MAX_CLIENTS; i++) {
		if (srv.clients[i].fd >= 0)
			client_close(&srv.clients[i]);
	}
	if (srv.listen_fd >= 0) {
		close(srv.listen_fd);
		unlink(srv.control_path);
	}
out_destroy_mc:
	rd_kafka_mock_cluster_destroy(srv.mc);
out_destroy_rk:
	rd_kafka_destroy(srv.rk);
out_free_topics:
	free(topics);
	return rc;
}

/* Client mode: send one command line, print the reply line. */
static int ctl_main(int argc, char **argv)
{
	struct sockaddr_un addr = { 0 };
	char line[MOCK_LINE_MAX];
	char reply[MOCK_LINE_MAX];
	size_t len = 0, got = 0;
	struct pollfd pfd;
	int rc = 1;
	int fd;

	if (argc < 3 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 3 ? stderr : stdout);
		return argc < 3 ? 1 : 0;
	}
	if (strlen(argv[1]) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "idem-mock-kafka: control socket path '%s' is too long\n", argv[1]);
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		size_t wl = strlen(argv[i]);

		if (len + wl + 2 > sizeof(line)) {
			fprintf(stderr, "idem-mock-kafka: command too long\n");
			return 1;
		}
		if (i > 2)
			line[len++] = ' ';
		memcpy(line + len, argv[i], wl);
		len += wl;
	}
	line[len++] = '\n';

	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, argv[1], strlen(argv[1]) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0) {
		fprintf(stderr, "idem-mock-kafka: socket failed: %s\n", strerror(errno));
		return 1;
	}
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		fprintf(stderr, "idem-mock-kafka: connect to '%s' failed: %s\n", argv[1],
		        strerror(errno));
		goto out_close;
	}
	if (send(fd, line, len, MSG_NOSIGNAL) != (ssize_t)len) {
		fprintf(stderr, "idem-mock-kafka: send to '%s' failed: %s\n", argv[1],
		        strerror(errno));
		goto out_close;
	}
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (got < sizeof(reply) - 1 && memchr(reply, '\n', got) == NULL) {
		ssize_t n;
		int r = poll(&pfd, 1, MOCK_CTL_TIMEOUT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "idem-mock-kafka: no reply from '%s'\n", argv[1]);
			goto out_close;
		}
		n = read(fd, reply + got, sizeof(reply) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "idem-mock-kafka: '%s' closed the connection\n", argv[1]);
			goto out_close;
		}
		got += (size_t)n;
	}
	reply[got] = '\0';
	reply[strcspn(reply, "\n")] = '\0';
	printf("%s\n", reply);
	rc = (strcmp(reply, "ok") == 0 || strncmp(reply, "ok ", 3) == 0) ? 0 : 1;
out_close:
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
		return ctl_main(argc - 1, argv + 1);
	return server_main(argc, argv);
}
