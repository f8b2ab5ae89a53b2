/*
 * memcached.c - main(): settings, listeners, signals and shutdown.
 *
 * The main thread parses options (settings.c), initialises the storage
 * engine, starts the workers (thread.c) and then runs the listener loop:
 * it accepts TCP and unix-socket connections and hands each to a worker,
 * advances the server clock, and turns SIGTERM, SIGINT and SIGUSR1 (and
 * the `shutdown` command, which raises SIGINT) into a graceful stop: stop
 * accepting, stop the workers and background threads, save the restart
 * state and close the tiers clean (tac_close), remove the pid file, exit 0.
 * SIGHUP is ignored, as in memcached, but for reloading the -Y file.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "net/auth.h"
#include "net/sasl_auth.h"
#include "net/conn.h"
#include "engine/items.h"
#include "net/metrics.h"
#include "base/prefix_stats.h"
#include "proto/proto_bin.h"
#include "proto/proto_text.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "tac/tac.h"
#include "net/thread.h"
#include "net/tls.h"
#include "base/watch.h"

#define MAX_LISTENERS 16

struct listener {
    int fd;
    enum conn_transport transport;
    bool tls;               /* -Z, unless given as -l notls:<addr> */
    struct event *ev;
};

static struct event_base *main_base;
static struct listener listeners[MAX_LISTENERS];
static int nlisteners;

/* ---- Accepting ---------------------------------------------------------- */

/*
 * Out of file descriptors.  accept() failing with EMFILE/ENFILE leaves the
 * connection in the kernel's backlog, so the listen socket stays readable:
 * retrying at once would spin.  Accepting pauses instead (every listen
 * event removed) until a connection closes, which any worker signals with
 * resume_ev (event_active is thread-safe with evthread_use_pthreads), or
 * at the latest after ACCEPT_RETRY_MS, for descriptors freed some other
 * way (the limit raised, a hand-off that failed).
 *
 * A close signals only while fd_short is set.  The first EMFILE sets it
 * and accepts once more before pausing, so a close that lands between the
 * failed accept and the pause is seen by that retry, and any later close
 * signals.
 *
 * A shortage lasts, for the log and the stats, from the first EMFILE until
 * an accept finds the backlog empty: Linux takes the descriptor before it
 * looks at the backlog, so EAGAIN means descriptors are left.  It is logged
 * once when it starts and once when it ends, however often accepting
 * resumes for a single connection in between.  listen_disabled_num counts
 * shortages and time_in_listen_disabled_us their length, as in memcached;
 * accepting_conns is 0 while the listen events are removed.
 */
#define ACCEPT_RETRY_MS 100

static struct event *resume_ev;     /* main base; activated on a close */
static struct event *retry_ev;      /* main base; the ACCEPT_RETRY_MS timer */
static int fd_short;                /* atomic; read by workers on close */
static bool accept_paused;          /* main thread: listen events removed */
static struct timespec short_since; /* main thread */

static void listener_accept(evutil_socket_t fd, short which, void *arg);

static void listeners_enable(bool on)
{
    for (int i = 0; i < nlisteners; i++) {
        if (listeners[i].ev == NULL)
            continue;
        if ((on ? event_add(listeners[i].ev, NULL) : event_del(listeners[i].ev)) != 0)
            fprintf(stderr, "cannot %s listener event\n", on ? "add" : "remove");
    }
}

static void accept_shortage_begin(void)
{
    struct rlimit rl = { 0, 0 };
    getrlimit(RLIMIT_NOFILE, &rl);
    /* Sequentially consistent: ordered before the retried accept, as a
     * worker's close is before its load of the flag. */
    __atomic_store_n(&fd_short, 1, __ATOMIC_SEQ_CST);
    clock_gettime(CLOCK_MONOTONIC, &short_since);
    GSTATS_INCR(listen_disabled_num);
    fprintf(stderr, "Too many open files (limit %lu, %llu connections): "
            "accepting waits for a connection to close\n",
            (unsigned long)rl.rlim_cur,
            (unsigned long long)STATS_GET(&gstats, curr_connections));
}

/* The backlog is empty and descriptors are left: the shortage is over. */
static void accept_shortage_end(void)
{
    if (!__atomic_load_n(&fd_short, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&fd_short, 0, __ATOMIC_RELAXED);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t us = (int64_t)(now.tv_sec - short_since.tv_sec) * 1000000 +
                 (now.tv_nsec - short_since.tv_nsec) / 1000;
    GSTATS_ADD(time_in_listen_disabled_us, us > 0 ? us : 0);
    fprintf(stderr, "Accepting connections again after %lld ms\n",
            (long long)(us / 1000));
}

static void accept_pause(void)
{
    struct timeval retry = { ACCEPT_RETRY_MS / 1000, (ACCEPT_RETRY_MS % 1000) * 1000 };
    accept_paused = true;
    listeners_enable(false);
    __atomic_store_n(&gstats.accepting_conns, 0, __ATOMIC_RELAXED);
    if (evtimer_add(retry_ev, &retry) != 0)
        fprintf(stderr, "cannot add the accept retry timer\n");
}

/* Accepts again after a pause (a connection closed, or the retry timer). */
static void accept_resume(evutil_socket_t fd, short which, void *arg)
{
    (void)fd;
    (void)which;
    (void)arg;
    if (!accept_paused)
        return;
    accept_paused = false;
    evtimer_del(retry_ev);
    listeners_enable(true);
    __atomic_store_n(&gstats.accepting_conns, 1, __ATOMIC_RELAXED);
    /* Accept what waits now; this ends the shortage (EAGAIN) or pauses
     * again (EMFILE). */
    for (int i = 0; i < nlisteners && !accept_paused; i++)
        if (listeners[i].ev != NULL)
            listener_accept(listeners[i].fd, EV_READ, &listeners[i]);
}

/* Runs on the closing worker after every connection close. */
static void on_conn_closed(void)
{
    if (__atomic_load_n(&fd_short, __ATOMIC_SEQ_CST))
        event_active(resume_ev, EV_READ, 0);
}

static void listener_accept(evutil_socket_t fd, short which, void *arg)
{
    struct listener *l = arg;
    (void)which;
    for (int i = 0; i < 64; i++) {
        int sfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (sfd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                if (!__atomic_load_n(&fd_short, __ATOMIC_RELAXED)) {
                    accept_shortage_begin();
                    continue;
                }
                accept_pause();
            } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                accept_shortage_end();
            } else if (errno != EINTR && errno != ECONNABORTED) {
                perror("accept()");
            }
            return;
        }
        /* Connections on their way to a worker count too, so that a burst
         * cannot pass -c before the workers register it.  The queue is
         * read first: a worker counts a connection in curr_connections
         * before it leaves the queue, so each one is seen at least once. */
        uint64_t open = workers_conns_queued();
        open += STATS_GET(&gstats, curr_connections);
        if (open >= (uint64_t)settings.maxconns) {
            static const char msg[] = "ERROR Too many open connections\r\n";
            GSTATS_INCR(rejected_connections);     /* before the client knows */
            ssize_t unused = write(sfd, msg, sizeof(msg) - 1);
            (void)unused;
            close(sfd);
            continue;
        }
        if (l->transport == TRANSPORT_TCP) {
            int one = 1;
            setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        worker_dispatch_conn(sfd, l->transport, l->tls);
    }
}

/* "tcp:127.0.0.1:11211", "udp:[::1]:11211" or "unix:/path". */
static void listener_describe(int fd, enum conn_transport transport)
{
    char name[80];
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (transport == TRANSPORT_UNIX) {
        snprintf(name, sizeof(name), "unix:%s", settings.socketpath);
    } else {
        if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
            ss.ss_family = AF_UNSPEC;
        conn_format_addr(&ss, transport == TRANSPORT_UDP ? "udp" : "tcp",
                         name, sizeof(name));
    }
    conn_stats_add_listener(fd, name);
}

/* Records a bound socket; listeners_start() serves it once the workers run. */
static bool listener_add(int fd, enum conn_transport transport, bool tls)
{
    listener_describe(fd, transport);
    if (nlisteners == MAX_LISTENERS) {
        fprintf(stderr, "too many listening sockets\n");
        return false;
    }
    listeners[nlisteners].fd = fd;
    listeners[nlisteners].transport = transport;
    listeners[nlisteners].tls = tls;
    nlisteners++;
    return true;
}

/* UDP sockets go to the workers, TCP ones to the main loop's accept. */
static bool listeners_start(void)
{
    for (int i = 0; i < nlisteners; i++) {
        struct listener *l = &listeners[i];
        if (l->transport == TRANSPORT_UDP) {
            workers_add_udp(l->fd);
            continue;
        }
        l->ev = event_new(main_base, l->fd, EV_READ | EV_PERSIST, listener_accept, l);
        if (!l->ev || event_add(l->ev, NULL) != 0) {
            fprintf(stderr, "cannot add listener event\n");
            return false;
        }
    }
    return true;
}

/* ---- Sockets ------------------------------------------------------------ */

static int socket_bind(const struct addrinfo *ai, int type)
{
    int fd = socket(ai->ai_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (type == SOCK_STREAM)
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        (type == SOCK_STREAM && listen(fd, settings.backlog) != 0)) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* Binds every address of one -l entry ("host", "host:port", "[v6]:port";
 * with -Z, "notls:" before one makes it plain text). */
static bool server_listen_one(const char *spec, int port, int type)
{
    char host[256];
    char portbuf[16];
    const char *p = spec;
    bool tls = settings.tls && type == SOCK_STREAM;
    if (strncmp(p, "notls:", 6) == 0) {
        p += 6;
        tls = false;
    }
    snprintf(portbuf, sizeof(portbuf), "%d", port);

    if (*p == '[') {
        const char *end = strchr(p, ']');
        if (!end || (size_t)(end - p - 1) >= sizeof(host))
            return false;
        memcpy(host, p + 1, end - p - 1);
        host[end - p - 1] = '\0';
        if (end[1] == ':' && type == SOCK_STREAM)
            snprintf(portbuf, sizeof(portbuf), "%s", end + 2);
    } else {
        snprintf(host, sizeof(host), "%s", p);
        char *colon = strchr(host, ':');
        if (colon && !strchr(colon + 1, ':')) {
            *colon = '\0';
            if (type == SOCK_STREAM)
                snprintf(portbuf, sizeof(portbuf), "%s", colon + 1);
        }
    }

    struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_socktype = type,
                              .ai_family = AF_UNSPEC };
    struct addrinfo *res;
    int rc = getaddrinfo(strcmp(host, "*") == 0 ? NULL : host, portbuf, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "getaddrinfo(%s): %s\n", host, gai_strerror(rc));
        return false;
    }
    int bound = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket_bind(ai, type);
        if (fd < 0) {
            if (errno == EADDRINUSE) {
                fprintf(stderr, "failed to listen on %s port %s: %s\n",
                        host, portbuf, strerror(errno));
                freeaddrinfo(res);
                return false;
            }
            continue;
        }
        if (!listener_add(fd, type == SOCK_STREAM ? TRANSPORT_TCP : TRANSPORT_UDP, tls)) {
            close(fd);
            freeaddrinfo(res);
            return false;
        }
        bound++;
    }
    freeaddrinfo(res);
    if (!bound)
        fprintf(stderr, "failed to listen on %s port %s: %s\n", host, portbuf,
                strerror(errno));
    return bound > 0;
}

static bool server_listen_inet(int port, int type)
{
    const char *inter = settings.inter ? settings.inter : "127.0.0.1";
    char *copy = strdup(inter);
    char *save = NULL;
    bool ok = true;
    for (char *tok = strtok_r(copy, ", ", &save); tok && ok;
         tok = strtok_r(NULL, ", ", &save))
        ok = server_listen_one(tok, port < 0 ? 0 : port, type); /* -1: any */
    free(copy);
    return ok;
}

/*
 * memcached's MEMCACHED_PORT_FILENAME: when set, the bound TCP then UDP
 * ports, one "TCP INET: <port>" (INET6 for IPv6) line per socket, written
 * to NAME.lck and renamed to NAME once complete (memcached's test suite
 * reads it to learn ephemeral ports).
 */
static void port_file_write(void)
{
    const char *name = getenv("MEMCACHED_PORT_FILENAME");
    if (name == NULL || settings.socketpath != NULL)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.lck", name);
    FILE *f = fopen(tmp, "a");
    if (f == NULL) {
        fprintf(stderr, "Failed to open \"%s\": %s\n", tmp, strerror(errno));
        return;
    }
    for (int i = 0; i < nlisteners; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        if (getsockname(listeners[i].fd, (struct sockaddr *)&ss, &len) != 0)
            continue;
        const char *proto = listeners[i].transport == TRANSPORT_UDP ? "UDP" : "TCP";
        if (ss.ss_family == AF_INET)
            fprintf(f, "%s INET: %u\n", proto,
                    ntohs(((struct sockaddr_in *)&ss)->sin_port));
        else if (ss.ss_family == AF_INET6)
            fprintf(f, "%s INET6: %u\n", proto,
                    ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    }
    fclose(f);
    rename(tmp, name);
}

static bool server_listen_unix(const char *path, int mask)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(addr.sun_path)) {
        fprintf(stderr, "unix socket path too long: %s\n", path);
        return false;
    }
    strcpy(addr.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("socket(AF_UNIX)");
        return false;
    }
    mode_t old = umask(~mask & 0777);
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (rc != 0 || listen(fd, settings.backlog) != 0) {
        fprintf(stderr, "cannot listen on unix socket %s: %s\n", path, strerror(errno));
        close(fd);
        return false;
    }
    return listener_add(fd, TRANSPORT_UNIX, false);
}

/* ---- Process setup ------------------------------------------------------ */

/* Addresses one -l list may bind: a name can resolve to IPv4 and IPv6. */
static rlim_t listen_addresses(void)
{
    rlim_t n = 0;
    bool in_token = false;
    for (const char *p = settings.inter ? settings.inter : ""; *p; p++) {
        bool delim = *p == ',' || *p == ' ';
        if (!delim && !in_token)
            n++;
        in_token = !delim;
    }
    n *= 2;
    return n < MAX_LISTENERS ? n : MAX_LISTENERS;
}

/*
 * Descriptors the server holds besides its client connections, an upper
 * bound (measured with -t 1..64, -U, NVM and SSD tiers):
 *   32             stdio, the main event base (epoll, signal pipe, notify
 *                  eventfd), the SSD file and its write ring, the pid
 *                  file, libraries' own
 *   listeners      up to 2 per -l address and transport, at most
 *                  MAX_LISTENERS; each UDP socket is also dup'd per worker
 *   5 per worker   its event base (epoll, signal pipe, notify eventfd) and
 *                  its hand-off eventfd
 *   with an SSD tier, 2 per ring (eventfd and io_uring): per worker a read
 *                  ring and a synchronous-read ring; one synchronous-read
 *                  ring per evictor, fetcher, defrag, LRU and maintainer
 *                  thread
 * Like memcached, the server refuses to start when the limit cannot cover
 * -c plus this.
 */
static rlim_t fd_headroom(void)
{
    rlim_t threads = (rlim_t)settings.num_threads;
    rlim_t addrs = settings.socketpath ? 1 : listen_addresses();
    rlim_t tcp = settings.socketpath || settings.port ? addrs : 0;
    rlim_t udp = !settings.socketpath && settings.udpport ? addrs : 0;
    rlim_t n = 32 + tcp + udp + udp * threads + 5 * threads;
    if (settings.ssd_path != NULL)
        n += 2 * (2 * threads + (rlim_t)settings.evict_threads +
                  (rlim_t)settings.fetch_threads + 4);
    return n;
}

static uint64_t stat_reserved_fds(void)
{
    return (uint64_t)fd_headroom();
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "failed to getrlimit number of files: %s\n", strerror(errno));
        exit(EX_OSERR);
    }
    rlim_t want = (rlim_t)settings.maxconns + fd_headroom();
    if (rl.rlim_cur >= want)
        return;
    struct rlimit up = rl;
    up.rlim_cur = want;
    if (up.rlim_max < want)
        up.rlim_max = want;
    if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
        fprintf(stderr, "failed to set rlimit for open files: the limit is %lu "
                "(hard %lu) and -c %d needs %lu; raise it (ulimit -n, or "
                "LimitNOFILE= in a systemd unit) or lower -c\n",
                (unsigned long)rl.rlim_cur, (unsigned long)rl.rlim_max,
                settings.maxconns, (unsigned long)want);
        exit(EX_OSERR);
    }
}

static void drop_privileges(void)
{
    if (getuid() != 0 && geteuid() != 0)
        return;
    if (!settings.username || !*settings.username) {
        fprintf(stderr, "can't run as root without the -u switch\n");
        exit(EX_USAGE);
    }
    struct passwd *pw = getpwnam(settings.username);
    if (!pw) {
        fprintf(stderr, "can't find the user %s to switch to\n", settings.username);
        exit(EX_NOUSER);
    }
    if (pw->pw_uid == 0)
        return;
    if (setgroups(0, NULL) != 0 && errno != EPERM) {
        perror("setgroups");
        exit(EX_OSERR);
    }
    if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        fprintf(stderr, "failed to assume identity of user %s\n", settings.username);
        exit(EX_OSERR);
    }
}

static void daemonize(void)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(EXIT_FAILURE);
    }
    if (pid > 0)
        _exit(EXIT_SUCCESS);
    if (setsid() < 0) {
        perror("setsid");
        exit(EXIT_FAILURE);
    }
    if (chdir("/") != 0)
        perror("chdir");
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        if (!settings.verbose)
            dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
}

static void pidfile_write(void)
{
    if (!settings.pid_file)
        return;
    FILE *f = fopen(settings.pid_file, "w");
    if (!f) {
        fprintf(stderr, "could not open the pid file %s: %s\n",
                settings.pid_file, strerror(errno));
        return;
    }
    fprintf(f, "%ld\n", (long)getpid());
    if (fclose(f) != 0)
        fprintf(stderr, "could not write the pid file %s\n", settings.pid_file);
}

/* ---- Events on the main base ------------------------------------------- */

/* The server clock counts whole seconds (mc_now()).  Its timer fires just
 * after each second of the wall clock begins, so the count moves within a
 * millisecond or so of the second, at one wake-up a second. */
static struct event *clock_ev;

static bool clock_arm(void)
{
    struct timeval now;
    gettimeofday(&now, NULL);
    struct timeval left = { 0, 1000000 - now.tv_usec + 500 };
    if (left.tv_usec >= 1000000) {
        left.tv_sec = 1;
        left.tv_usec -= 1000000;
    }
    return evtimer_add(clock_ev, &left) == 0;
}

static void clock_tick(evutil_socket_t fd, short which, void *arg)
{
    (void)fd;
    (void)which;
    (void)arg;
    clock_update();
    if (!clock_arm())
        fprintf(stderr, "cannot arm the clock timer: the server clock stops\n");
}

static void on_signal(evutil_socket_t sig, short which, void *arg)
{
    (void)which;
    (void)arg;
    if (settings.verbose)
        fprintf(stderr, "Signal handled: %s.\n", strsignal((int)sig));
    event_base_loopbreak(main_base);
}

/* SIGHUP: the password files (-Y, $MEMCACHED_SASL_PWDB) are read again;
 * without them it is ignored. */
static void on_hup(evutil_socket_t sig, short which, void *arg)
{
    (void)sig;
    (void)which;
    (void)arg;
    auth_reload();
}

static bool add_main_events(void)
{
    clock_ev = evtimer_new(main_base, clock_tick, NULL);
    struct event *term = evsignal_new(main_base, SIGTERM, on_signal, NULL);
    struct event *intr = evsignal_new(main_base, SIGINT, on_signal, NULL);
    struct event *usr1 = evsignal_new(main_base, SIGUSR1, on_signal, NULL);
    struct event *hup = evsignal_new(main_base, SIGHUP, on_hup, NULL);
    resume_ev = event_new(main_base, -1, 0, accept_resume, NULL);
    retry_ev = evtimer_new(main_base, accept_resume, NULL);
    conn_set_close_hook(on_conn_closed);
    conn_set_protocol(PROTO_TEXT, &proto_text_ops);
    conn_set_protocol(PROTO_BINARY, &proto_bin_ops);
    return clock_ev && clock_arm() && term && intr && usr1 && hup && resume_ev &&
           retry_ev && event_add(term, NULL) == 0 &&
           event_add(intr, NULL) == 0 && event_add(usr1, NULL) == 0 &&
           event_add(hup, NULL) == 0;
}

static void settings_stat_line(void *sink, const char *name, const char *value)
{
    stat_printf(sink, name, "%s", value);
}

/* `stats settings` */
static void settings_section(struct stat_sink *sink)
{
    settings_each(settings_stat_line, sink);
}

int main(int argc, char **argv)
{
    crash_point_init();
    settings_init();
    settings_parse_args(argc, argv);
    if (!settings_finalize())
        exit(EX_USAGE);
    char err[512];
    if (settings.auth_file != NULL &&
        !auth_load_db(AUTH_DB_ASCII, settings.auth_file, err, sizeof(err))) {
        fprintf(stderr, "-Y: %s\n", err);
        exit(EX_CONFIG);
    }
    if (settings.sasl && !sasl_auth_init(err, sizeof(err))) {
        fprintf(stderr, "-S: %s\n", err);
        exit(EX_CONFIG);
    }
    if (settings.tls && !tls_init(err, sizeof(err))) {
        fprintf(stderr, "-Z: %s\n", err);
        exit(EX_CONFIG);
    }

    signal(SIGPIPE, SIG_IGN);
    /* memcached ignores SIGHUP (a closed terminal, a log rotation's kill
     * -HUP), and so does this server until its loop runs; there it reloads
     * the -Y file (on_hup). */
    signal(SIGHUP, SIG_IGN);
    /* A file size limit makes an SSD write fail with EFBIG (it is then
     * retried) instead of killing the server. */
    signal(SIGXFSZ, SIG_IGN);
    raise_fd_limit();
    drop_privileges();
    if (settings.daemonize)
        daemonize();
    if (settings.lock_memory && mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        fprintf(stderr, "warning: -k: mlockall failed: %s\n", strerror(errno));

    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, "libevent lacks pthread support\n");
        exit(EXIT_FAILURE);
    }
    main_base = event_base_new();
    if (!main_base || !add_main_events()) {
        fprintf(stderr, "cannot initialise libevent\n");
        exit(EXIT_FAILURE);
    }

    __atomic_store_n(&gstats.accepting_conns, 1, __ATOMIC_RELAXED);
    clock_update();
    /* The sections of settings.c and conn.c (conn.c has no init; the
     * options are registered beside it).  `stats settings` lists the
     * options before the tiers' lines, which tac_init() adds. */
    stats_register_section("settings", settings_section);
    stats_register_section("conns", conn_stats);
    stats_provide("response_obj_bytes", conn_resp_bytes);
    stats_provide("reserved_fds", stat_reserved_fds);
    watch_stats_register();
    sasl_auth_stats_register();
    stats_register_reset(prefix_stats_clear);   /* as memcached's stats reset */
    items_init();

    /* Sockets are bound before the tiers open: a port in use stops the start
     * before a tier file or restart state is touched. */
    bool ok;
    if (settings.socketpath) {
        ok = server_listen_unix(settings.socketpath, settings.access);
    } else {
        ok = settings.port == 0 || server_listen_inet(settings.port, SOCK_STREAM);
        if (ok && settings.udpport)
            ok = server_listen_inet(settings.udpport, SOCK_DGRAM);
    }
    if (!ok || !metrics_start(main_base)) {
        fprintf(stderr, "failed to start listening\n");
        exit(EX_OSERR);
    }
    port_file_write();
    if (!tac_init())
        exit(EX_CONFIG);
    workers_start(settings.num_threads, main_base);
    tac_start();
    if (!listeners_start())
        exit(EX_OSERR);
    pidfile_write();
    tac_recover();
    if (settings.verbose)
        fprintf(stderr, "tac-memcached %s ready: %d worker threads, %zu MB\n",
                PACKAGE_VERSION, settings.num_threads, settings.maxbytes >> 20);

    event_base_dispatch(main_base);

    for (int i = 0; i < nlisteners; i++) {
        if (listeners[i].ev)
            event_free(listeners[i].ev);
        if (listeners[i].transport != TRANSPORT_UDP)
            close(listeners[i].fd);
    }
    metrics_stop();
    workers_stop();
    tac_stop();
    tac_close();
    if (settings.socketpath)
        unlink(settings.socketpath);
    if (settings.pid_file)
        unlink(settings.pid_file);
    return EXIT_SUCCESS;
}
