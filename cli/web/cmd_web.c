/* cmd_web.c - pgcoord web: the dashboard and its JSON API over queues, schedules, leases,
 * locks, the blocking forest and the doctor
 *
 * One process: libmicrohttpd's threads answer requests (web_http.c, web_api.c) on a few
 * database sessions (web_pool.c); this thread waits for SIGINT or SIGTERM and then stops the
 * server, letting the requests in flight finish (each is bounded by the statement timeout). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "web.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] web [OPTIONS]\n"
	      "\n"
	      "Serves a dashboard (one page, no external resources) and a JSON API over the\n"
	      "queues, jobs, schedules, leases, advisory locks, the blocking forest and the\n"
	      "doctor's findings, and Prometheus metrics on /metrics. Read-only unless\n"
	      "--allow-actions; every statement is bounded by a 2 s statement_timeout.\n"
	      "\n"
	      "Options:\n"
	      "      --listen=ADDR:PORT  address to listen on (default: 127.0.0.1:8080; port 0\n"
	      "                          picks a free one; [::1]:PORT for IPv6)\n"
	      "      --auth-file=FILE    tokens that API requests must carry (Authorization:\n"
	      "                          Bearer TOKEN): one TOKEN or NAME:TOKEN per line; the\n"
	      "                          file must not be readable by group or others\n"
	      "      --allow-actions     allow retry, cancel, pause, bulk actions, schedule\n"
	      "                          pause/resume/trigger and query cancel (needs\n"
	      "                          --auth-file)\n"
	      "      --allow-terminate   also allow ending sessions (pg_terminate_backend)\n"
	      "      --hide-payloads     show job and schedule payloads as their size only\n"
	      "      --refresh=D         how often the page polls (default: 2s)\n"
	      "      --schema=NAME       pgcoord schema (default: pgcoord)\n"
	      "  -h, --help              show this help and exit\n"
	      "\n"
	      "Exit status: 0 stopped by SIGINT or SIGTERM, 64 usage (also: --allow-actions\n"
	      "without --auth-file, an auth file others can read), 69 database unavailable,\n"
	      "78 cannot listen on the address.\n", f);
}

/* Reads --auth-file: refuses a file that group or others may read or write, as ssh does with
 * a private key; then one credential per line (blank lines and # comments aside). */
static int read_auth(const char *path, web_server *srv)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cli_errorf("web: cannot open --auth-file %s: %s", path, strerror(errno));
		return EXIT_USAGE;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		cli_errorf("web: --auth-file %s is not a regular file", path);
		return EXIT_USAGE;
	}
	if ((st.st_mode & 077) != 0) {
		close(fd);
		cli_errorf("web: permissions %04o for --auth-file %s are too open: it holds secrets and must not be "
		           "accessible by group or others (chmod 600 %s); refusing to start",
		           (unsigned)(st.st_mode & 07777), path, path);
		return EXIT_USAGE;
	}
	FILE *f = fdopen(fd, "r");
	if (f == NULL) {
		close(fd);
		cli_errorf("web: cannot read --auth-file %s: %s", path, strerror(errno));
		return EXIT_USAGE;
	}
	char line[1024];
	long lineno = 0;
	int rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		size_t n = strlen(p);
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			p[--n] = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		char *colon = strchr(p, ':');
		const char *name = "token", *secret = p;
		if (colon != NULL) {
			*colon = '\0';
			name = p;
			secret = colon + 1;
		}
		if (*name == '\0' || *secret == '\0') {
			cli_errorf("web: --auth-file %s line %ld: expected TOKEN or NAME:TOKEN", path, lineno);
			rc = EXIT_USAGE;
			break;
		}
		if (strlen(secret) < 16)
			cli_errorf("warning: --auth-file %s line %ld: a token of fewer than 16 characters is easy to guess",
			           path, lineno);
		web_cred *c = realloc(srv->creds, (srv->ncreds + 1) * sizeof *c);
		if (c == NULL) {
			rc = EXIT_SOFTWARE;
			break;
		}
		srv->creds = c;
		c[srv->ncreds].name = strdup(name);
		c[srv->ncreds].secret = strdup(secret);
		srv->ncreds++;
	}
	fclose(f);
	if (rc == 0 && srv->ncreds == 0) {
		cli_errorf("web: --auth-file %s holds no token", path);
		rc = EXIT_USAGE;
	}
	return rc;
}

static void free_creds(web_server *srv)
{
	for (size_t i = 0; i < srv->ncreds; i++) {
		/* The secrets do not outlive the server in freed memory. */
		explicit_bzero(srv->creds[i].secret, strlen(srv->creds[i].secret));
		free(srv->creds[i].name);
		free(srv->creds[i].secret);
	}
	free(srv->creds);
	srv->creds = NULL;
	srv->ncreds = 0;
}

int cmd_web(int argc, char **argv)
{
	enum { O_LISTEN = 256, O_ACTIONS, O_AUTH, O_TERMINATE, O_HIDE, O_REFRESH, O_SCHEMA };
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "allow-actions", no_argument, NULL, O_ACTIONS },
		{ "auth-file", required_argument, NULL, O_AUTH },
		{ "allow-terminate", no_argument, NULL, O_TERMINATE },
		{ "hide-payloads", no_argument, NULL, O_HIDE },
		{ "refresh", required_argument, NULL, O_REFRESH },
		{ "schema", required_argument, NULL, O_SCHEMA },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static web_server srv;
	memset(&srv, 0, sizeof srv);
	srv.refresh_ms = 2000;
	const char *listen_text = "127.0.0.1:8080", *auth_file = NULL;
	int ch, rc = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_LISTEN: listen_text = optarg; break;
		case O_ACTIONS: srv.allow_actions = true; break;
		case O_AUTH: auth_file = optarg; break;
		case O_TERMINATE: srv.allow_terminate = true; break;
		case O_HIDE: srv.hide_payloads = true; break;
		case O_REFRESH:
			if (!cli_duration_opt("web", "--refresh", optarg, 250, 3600000, &srv.refresh_ms, &rc))
				return rc;
			break;
		case O_SCHEMA: srv.schema = optarg; break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("web", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("web", "unexpected argument \"%s\"", argv[optind]);
	if (!web_parse_listen(listen_text, &srv.addr, &srv.addrlen, &srv.loopback))
		return cli_usage_error("web", "--listen: \"%s\" is not ADDR:PORT (an IPv4 address, localhost, or "
		                       "[IPv6], and a port 0-65535)", listen_text);
	if (srv.schema != NULL && srv.schema[0] == '\0')
		return cli_usage_error("web", "--schema must not be empty");
	if (srv.allow_terminate && !srv.allow_actions)
		return cli_usage_error("web", "--allow-terminate needs --allow-actions");
	if (srv.allow_actions && auth_file == NULL)
		return cli_usage_error("web", "--allow-actions needs --auth-file: actions are never open to "
		                       "whoever reaches the port");
	if (auth_file != NULL && (rc = read_auth(auth_file, &srv)) != 0)
		return rc;
	srv.dsn = g_cli.dsn;

	/* The schema must be there before anything listens. */
	pthread_mutex_init(&srv.mu, NULL);
	pthread_cond_init(&srv.cv, NULL);
	pthread_mutex_init(&srv.doctor_mu, NULL);
	pgc_error err;
	web_slot *s = web_pool_get(&srv, &err);
	if (s == NULL) {
		rc = cli_report(&err);
		free_creds(&srv);
		return rc;
	}
	if (web_slot_queue(&srv, s, &err) == PGC_ENOSCHEMA) {
		web_pool_put(&srv, s, NULL);
		web_pool_close(&srv);
		free_creds(&srv);
		return cli_report(&err);
	}
	web_pool_put(&srv, s, NULL);

	/* Signals wait for this thread: block them before the server's threads start, so that
	 * none of those gets them. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	unsigned port = 0;
	char why[WEB_START_REASON_MAX];
	struct MHD_Daemon *d = web_http_start(&srv, &port, why);
	if (d == NULL) {
		cli_errorf("web: cannot listen on %s: %s", listen_text, why);
		web_pool_close(&srv);
		free_creds(&srv);
		return EXIT_CONFIG;
	}
	char host[128];
	snprintf(host, sizeof host, "%.*s", (int)(strrchr(listen_text, ':') - listen_text), listen_text);
	if (!srv.loopback && srv.creds == NULL)
		cli_errorf("warning: listening on %s without --auth-file: whoever reaches it reads the dashboard",
		           listen_text);
	if (!srv.loopback && srv.allow_actions)
		cli_errorf("warning: listening on %s with actions allowed and without TLS: tokens and actions cross "
		           "the network in clear; put a TLS proxy in front or listen on a loopback address",
		           listen_text);
	if (!g_cli.quiet)
		fprintf(stderr, "pgcoord: web: listening on http://%s:%u/ (%s%s%s)\n", host, port,
		        srv.allow_actions ? "actions allowed" : "read-only",
		        srv.allow_terminate ? ", terminate allowed" : "", srv.hide_payloads ? ", payloads hidden" : "");
	int sig = 0;
	sigwait(&set, &sig);
	if (!g_cli.quiet)
		fprintf(stderr, "pgcoord: web: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	web_http_stop(d);
	web_pool_close(&srv);
	free_creds(&srv);
	return 0;
}
