/* The wire's limit: libzmq's local_thr/remote_thr (perf/ in libzmq) in one tiny program.
 *
 *   thr local  ENDPOINT SIZE COUNT   bind PULL, receive COUNT messages, print msgs/s
 *   thr remote ENDPOINT SIZE COUNT   connect PUSH, send COUNT messages of SIZE bytes (with
 *                                    THR_WAIT_GO set: print "ready" once connected and send
 *                                    when a line arrives on stdin)
 *   thr sink   ENDPOINT COUNT        the egress scenarios' consumer, see below
 *
 * As local_thr: the clock starts at the first message and stops at the last. "local"
 * binds ENDPOINT (tcp://127.0.0.1:* picks a port) and prints the endpoint it bound first.
 * High-water marks as the Python bench's sockets (100,000). Built by bench/wire.py, against the
 * system's libzmq (zmq.h) or else the one pyzmq bundles (zmq_abi.h, -DTHR_ZMQ_ABI). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef THR_ZMQ_ABI
#include "zmq_abi.h"  /* pyzmq's bundled libzmq: see bench/wire.py */
#else
#include <zmq.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* "sink": bench/consumer.py's raw mode without Python, so that an egress scenario measures
 * its senders and not a Python receive loop (about 1 us a message, as slow as a bare pyzmq
 * PUSH loop). Binds a PULL (as a CURVE server when THR_CURVE_SECRET holds a Z85 secret key;
 * no ZAP handler, so any client key), prints the endpoint, receives COUNT messages of any
 * size, prints "FIRST LAST" (wall clock, the first message and the last) and "done", then
 * stays bound until its stdin closes, as a consumer that keeps running would. */
static int sink(const char *endpoint_in, long count) {
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_PULL);
    int hwm = 100000, one = 1;
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    const char *secret = getenv("THR_CURVE_SECRET");
    if (secret && *secret) {
        if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret, strlen(secret)) != 0) {
            perror("CURVE options");
            return 1;
        }
    }
    char endpoint[256], buf[256];
    size_t len = sizeof endpoint;
    if (zmq_bind(s, endpoint_in) != 0) { perror("zmq_bind"); return 1; }
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, endpoint, &len);
    printf("%s\n", endpoint);
    fflush(stdout);
    double first = 0;
    for (long i = 0; i < count; i++) {
        if (zmq_recv(s, buf, sizeof buf, 0) < 0) { perror("zmq_recv"); return 1; }  /* longer ones truncated */
        if (i == 0) first = wall();
    }
    printf("%.6f %.6f\ndone\n", first, wall());
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "sink") == 0)
        return sink(argv[2], atol(argv[3]));
    if (argc != 5) {
        fprintf(stderr, "usage: thr local|remote ENDPOINT SIZE COUNT | thr sink ENDPOINT COUNT\n");
        return 2;
    }
    int local = strcmp(argv[1], "local") == 0, hwm = 100000;
    size_t size = (size_t)atol(argv[3]);
    long count = atol(argv[4]);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, local ? ZMQ_PULL : ZMQ_PUSH);
    zmq_setsockopt(s, local ? ZMQ_RCVHWM : ZMQ_SNDHWM, &hwm, sizeof hwm);
    char *buf = calloc(size ? size : 1, 1);
    if (local) {
        char endpoint[256];
        size_t len = sizeof endpoint;
        if (zmq_bind(s, argv[2]) != 0) { perror("zmq_bind"); return 1; }
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, endpoint, &len);
        printf("%s\n", endpoint);
        fflush(stdout);
        double start = 0;
        for (long i = 0; i < count; i++) {
            if (zmq_recv(s, buf, size, 0) < 0) { perror("zmq_recv"); return 1; }
            if (i == 0) start = now();
        }
        double elapsed = now() - start;
        printf("%.1f\n", elapsed > 0 ? count / elapsed : 0.0);
    } else {
        if (zmq_connect(s, argv[2]) != 0) { perror("zmq_connect"); return 1; }
        memset(buf, 'x', size);
        if (getenv("THR_WAIT_GO")) {  /* bench/wire.py's CProducer: connected, then sends on "go" */
            char go[8];
            printf("ready\n");
            fflush(stdout);
            if (read(0, go, sizeof go) <= 0) return 1;
        }
        for (long i = 0; i < count; i++)
            if (zmq_send(s, buf, size, 0) < 0) { perror("zmq_send"); return 1; }
    }
    zmq_close(s);  /* linger: everything sent before the context ends */
    zmq_ctx_term(ctx);
    free(buf);
    return 0;
}
