// net.h — the stream sockets weights travel over (doc/design.md §5): addresses
// unix:PATH (the default transport; a bare path is one) and tcp:HOST:PORT,
// listening, connecting, and whole-buffer transfers that give up after a
// timeout without progress or as soon as the caller asks them to stop.
#ifndef RLPIPE_NET_H
#define RLPIPE_NET_H

#include <stddef.h>

#include "util.h"

typedef struct {
    int tcp;                  // 0: a unix socket
    char path[108];           // unix: the socket file (sockaddr_un's limit)
    char host[256];           // tcp: a name or numeric address; "127.0.0.1" when not given
    char port[16];            // tcp: decimal, 0..65535 (0 when listening: any free port)
} net_addr;

// Parses "unix:PATH", "PATH" (no "tcp:" prefix: a unix socket), "tcp:HOST:PORT",
// "tcp:PORT" (loopback) and "tcp:[V6ADDR]:PORT". 0, or -1 with err saying what
// is wrong (empty path, path too long, bad port, ...).
int net_parse(const char *s, net_addr *a, rl_err *err);
// The address as text, in the form net_parse reads ("unix:PATH", "tcp:HOST:PORT").
void net_format(const net_addr *a, char *buf, size_t size);

// A listening socket (close-on-exec, backlog 16).
// unix: a socket file nobody accepts on any more (a crashed receiver's) is
// replaced; a live one, or a file that is not a socket, is an error. The file
// is created with mode 0600 (only its owner may push).
// tcp: binds HOST (127.0.0.1 unless told otherwise) with SO_REUSEADDR; port 0
// binds a free port, and a->port is set to the port bound.
// Returns the descriptor, or -1 with err naming the address.
int net_listen(net_addr *a, rl_err *err);
// Connects (blocking, close-on-exec). -1 with err naming the address and the
// reason; *unreachable (when not NULL) is set to 1 when nobody listens there
// (ENOENT, ECONNREFUSED): a receiver not started yet, or gone.
int net_connect(const net_addr *a, int *unreachable, rl_err *err);
// Removes a unix socket's file (nothing for tcp).
void net_unlink(const net_addr *a);
// Removes a unix socket's file (nothing for tcp) when the process ends: at
// exit, or killed by SIGINT, SIGTERM or SIGPIPE (its reader gone) while these
// have their default action (the handler installed for it removes the file,
// then the signal kills the process as before). Up to NET_AT_EXIT sockets per
// process.
#define NET_AT_EXIT 16
void net_unlink_at_exit(const net_addr *a);
// The socket's file has been removed (net_unlink): a later file at that path is not ours.
void net_forget_at_exit(const net_addr *a);

// The large socket buffers bulk transfers want (SO_SNDBUF/SO_RCVBUF; best effort).
void net_bulk(int fd);

// Whole-buffer transfers. Each waits at most `timeout` seconds for progress
// (<= 0: no limit) and gives up at once when stop_fd (>= 0) is readable.
// Errors say what happened: "connection closed by the peer after X of Y
// bytes", "no progress for T s", "stopped", or strerror. SIGPIPE is not raised
// (MSG_NOSIGNAL). errno tells them apart: EPIPE or ECONNRESET (closed),
// ETIMEDOUT, ECANCELED (stopped), or the failing call's.
int net_send_all(int fd, const void *p, size_t n, int stop_fd, double timeout, rl_err *err);
// 0 when all n bytes arrived; 1 when the peer closed before the first byte
// (a clean end); -1 with err.
int net_recv_all(int fd, void *p, size_t n, int stop_fd, double timeout, rl_err *err);

// 1 when fd is a pipe or socket whose reading end has closed (a write would
// fail with EPIPE); 0 otherwise, and for files. Does not block.
int net_hung_up(int fd);

#endif
