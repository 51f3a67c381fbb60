/* The few libzmq declarations bench/c/thr.c uses, for building it against the libzmq that
 * pyzmq's wheel bundles when the system has no zmq.h (no libzmq3-dev). libzmq's C ABI and
 * these constants are stable across 4.x (zmq.h: ZMQ_PULL 7, ZMQ_PUSH 8, ZMQ_SNDHWM 23,
 * ZMQ_RCVHWM 24, ZMQ_LAST_ENDPOINT 32, ZMQ_LINGER 17, ZMQ_CURVE_SERVER 47,
 * ZMQ_CURVE_SECRETKEY 49). With zmq.h present the build uses zmq.h instead. */
#include <stddef.h>
#define ZMQ_PULL 7
#define ZMQ_PUSH 8
#define ZMQ_SNDHWM 23
#define ZMQ_RCVHWM 24
#define ZMQ_LAST_ENDPOINT 32
#define ZMQ_LINGER 17
#define ZMQ_CURVE_SERVER 47
#define ZMQ_CURVE_SECRETKEY 49
void *zmq_ctx_new(void);
int zmq_ctx_term(void *context);
void *zmq_socket(void *context, int type);
int zmq_close(void *socket);
int zmq_setsockopt(void *socket, int option, const void *value, size_t length);
int zmq_getsockopt(void *socket, int option, void *value, size_t *length);
int zmq_bind(void *socket, const char *endpoint);
int zmq_connect(void *socket, const char *endpoint);
int zmq_send(void *socket, const void *buffer, size_t length, int flags);
int zmq_recv(void *socket, void *buffer, size_t length, int flags);
