"""An independent implementation of rlpipe's weight-push protocol
(lib/sync/push.h, man/rl-sync.1), written from its description with Python's
socket, struct, hmac and hashlib, Debian's msgpack and xxhash, and numpy:
nothing of rlpipe's own code. Both ends:

- `Receiver`: listens on a unix or tcp address, greets (optionally requiring
  a token), says hello with the tensors it wants, takes a push, verifies it
  and answers with a result, on a thread of its own, one connection at a
  time; every connection is recorded in `exchanges`. Its knobs (`refuse`,
  `delay`, `hello_version`, ...) make it misbehave on purpose.
- `push()`: a sender that can misbehave (a wrong checksum or token, data cut
  off, an older version, a length too large, a tensor missing or extra...),
  for tests of rlpipe's receivers.

The protocol, in short (all integers little-endian; a message is a u32
length L, 1 <= L <= 16 MiB, then a msgpack map of L bytes):

  1. receiver: "RLPW", u32 1, u32 flags (bit 0: token required), u32 0, 32-byte nonce
  2. sender (token required only): HMAC-SHA256(token, b"rlpipe push 1" + nonce)
  3. receiver: {ok: true, receiver, dtype, version, tensors: [[name, dtype, shape]...],
               stored: "bf16,f32,int8/32,..." (how it keeps each tensor; optional),
               lora: 1 (it takes adapter pushes; optional)}
  4. sender:   {version, bytes, checksum: "xxh3-64", tensors: [[name, dtype, shape]...],
               and with stored: update_from, update_n, update_moved, update_changed,
               update_norm, update_along (the update's figures, from the second push on)}
               or, an adapter push to a receiver with lora: 1, {version, bytes, checksum,
               lora: {r, alpha, rslora, targets: "q_proj,v_proj"}, tensors: the adapter's
               lora_A (r, in) and lora_B (out, r) of every layer and target, PEFT's names}
  5. receiver: {ok: true} or {ok: false, error}
  6. sender:   the tensors' elements in the push's order, then u64 XXH3-64 (seed 0) of them
  7. receiver: {ok: true, version, bytes, recv_us, wait_us, stall_us} or {ok: false, error}
"""
import hashlib
import hmac
import os
import socket
import struct
import threading
import time

import msgpack
import numpy as np
import xxhash

MAGIC = b"RLPW"
PROTOCOL = 1
AUTH_REQUIRED = 1
NONCE = 32
MAC = 32
GREETING = 16 + NONCE
MSG_MAX = 16 << 20
MAC_LABEL = b"rlpipe push 1"
DTYPE_SIZE = {"f32": 4, "bf16": 2, "f16": 2}


# ---- addresses, framing, authentication --------------------------------------------------

def parse_addr(addr):
    """"unix:PATH", a bare PATH, "tcp:HOST:PORT" or "tcp:PORT" -> (family, sockaddr)."""
    if addr.startswith("tcp:"):
        rest = addr[4:]
        if rest.startswith("["):
            host, port = rest[1:].split("]:", 1)
            return socket.AF_INET6, (host, int(port))
        host, _, port = rest.rpartition(":")
        return socket.AF_INET, (host or "127.0.0.1", int(port))
    return socket.AF_UNIX, addr[5:] if addr.startswith("unix:") else addr


def mac(token, nonce):
    return hmac.new(token, MAC_LABEL + nonce, hashlib.sha256).digest()


class Closed(Exception):
    """The peer closed the connection (after `got` bytes of what was being read)."""

    def __init__(self, got=0):
        super().__init__(f"connection closed after {got} bytes")
        self.got = got


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed(len(buf))
        buf += chunk
    return bytes(buf)


def send_msg(sock, obj, length=None):
    """One message; `length` overrides the announced length (to lie about it)."""
    body = msgpack.packb(obj, use_bin_type=True)
    sock.sendall(struct.pack("<I", len(body) if length is None else length) + body)


def recv_msg(sock):
    (n,) = struct.unpack("<I", recv_exact(sock, 4))
    if not 1 <= n <= MSG_MAX:
        raise ValueError(f"a message of {n} bytes announced")
    obj = msgpack.unpackb(recv_exact(sock, n), raw=False)
    if not isinstance(obj, dict):
        raise ValueError(f"a message that is not a map: {obj!r}")
    return obj


# ---- element conversions (numpy, independent of rlpipe's dtype.c) --------------------------

def f32_to_bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even, NaN kept quiet (as torch does)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(a, dtype):
    """The wire bytes of a float32 array as f32, bf16 or f16 (little-endian)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "f32":
        return a.astype("<f4").tobytes()
    if dtype == "bf16":
        return f32_to_bf16_bits(a).astype("<u2").tobytes()
    if dtype == "f16":
        return a.astype("<f2").tobytes()
    raise ValueError(f"dtype {dtype!r}")


def decode(raw, dtype, shape):
    """Wire bytes -> numpy: float32 for f32, float16 for f16, uint16 bits for bf16."""
    t = {"f32": "<f4", "f16": "<f2", "bf16": "<u2"}[dtype]
    return np.frombuffer(raw, dtype=t).reshape(shape).copy()


def nbytes(dtype, shape):
    return DTYPE_SIZE[dtype] * int(np.prod(shape, dtype=np.int64))


# ---- the receiving end ----------------------------------------------------------------------

class Exchange:
    """One connection as the Receiver saw it. kind: "closed" (closed before
    sending a push message: a probe, or the version was held already), "auth"
    (wrong token), "refused" (error says why), "broken" (the data broke off,
    timed out or failed its checksum), "pushed"."""

    def __init__(self):
        self.kind = None
        self.error = None
        self.push = None         # the push message
        self.version = None
        self.tensors = {}        # name -> numpy array (decode()'s types)
        self.raw = {}            # name -> wire bytes
        self.dtypes = {}         # name -> wire dtype
        self.bytes = 0
        self.started = self.ended = None

    def __repr__(self):
        return f"Exchange({self.kind}, version={self.version}, error={self.error!r})"


class Receiver:
    """A receiver at `addr` ("unix:PATH", "tcp:HOST:0" for a free port, ...).

    tensors: {name: shape} (asked for as `dtype`) or {name: (shape, dtype)}.
    version: the version held; a verified push installs its version.
    token: bytes; when given, every sender must prove it.
    Knobs that may be changed at any time: refuse (an error message: every
    push is refused at step 5), delay (seconds before the result), hello_version
    (announced instead of `version`), fail_result (an error message sent as the
    result after the checksum verified), timeout (seconds a read may wait),
    stored (a string sent as the hello's stored; None: no stored).
    adapter: {name: shape} of the adapter tensors it takes (its hello then says
    lora: 1, and a push with "lora" must send exactly these); None: no adapters.
    """

    def __init__(self, addr, tensors, version=0, token=None, dtype="f32", name="pushproto 1", timeout=10.0,
                 adapter=None):
        self.tensors = {}
        for k, v in tensors.items():
            shape, dt = (v if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str) else (v, dtype))
            self.tensors[k] = (tuple(int(d) for d in shape), dt)
        self.version, self.token, self.dtype, self.name, self.timeout = version, token, dtype, name, timeout
        self.adapter = None if adapter is None else {k: (tuple(int(d) for d in v), None) for k, v in adapter.items()}
        self.refuse = self.fail_result = self.hello_version = self.stored = None
        self.delay = 0.0
        self.exchanges = []
        self.active = None       # the Exchange in progress
        self.changed = threading.Condition()
        family, sockaddr = parse_addr(addr)
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            if os.path.exists(sockaddr):
                os.unlink(sockaddr)
            self.path = sockaddr
            self.sock.bind(sockaddr)
            os.chmod(sockaddr, 0o600)
            self.address = "unix:" + sockaddr
        else:
            self.path = None
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(sockaddr)
            host, port = self.sock.getsockname()[:2]
            self.address = f"tcp:[{host}]:{port}" if family == socket.AF_INET6 else f"tcp:{host}:{port}"
        self.sock.listen(16)
        self.closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self):
        """Stops listening (the socket file is removed): the receiver is gone."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.path and os.path.exists(self.path):
            os.unlink(self.path)
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def pushes(self):
        return [e for e in self.exchanges if e.kind == "pushed"]

    def wait(self, pred, timeout=20.0):
        """Waits until pred(self) is true (checked on every exchange and every
        50 ms); returns it (false after timeout)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not pred(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return pred(self)
                self.changed.wait(min(left, 0.05))
            return True

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            ex = Exchange()
            ex.started = time.monotonic()
            self.active = ex
            with conn:
                conn.settimeout(self.timeout)
                try:
                    self._exchange(conn, ex)
                except (Closed, BrokenPipeError, ConnectionResetError) as e:
                    if ex.kind in (None, "hello"):
                        ex.kind = "closed"
                    else:
                        ex.kind, ex.error = "broken", f"{type(e).__name__}: {e}"
                except (OSError, ValueError) as e:
                    ex.kind, ex.error = "broken", f"{type(e).__name__}: {e}"
            self._record(ex)
            self.active = None

    def _record(self, ex):
        """Adds ex to the exchanges once: before the last message to the sender
        (so that a sender holding its answer finds it there), or at the close."""
        with self.changed:
            if ex.ended is None:
                ex.ended = time.monotonic()
                self.exchanges.append(ex)
            self.changed.notify_all()

    def _refuse(self, conn, ex, kind, error):
        ex.kind, ex.error = kind, error
        self._record(ex)
        send_msg(conn, {"ok": False, "error": error})

    def _exchange(self, conn, ex):
        nonce = os.urandom(NONCE)
        conn.sendall(MAGIC + struct.pack("<III", PROTOCOL, AUTH_REQUIRED if self.token else 0, 0) + nonce)
        if self.token is not None:
            got = recv_exact(conn, MAC)
            if not hmac.compare_digest(got, mac(self.token, nonce)):
                return self._refuse(conn, ex, "auth", "authentication failed: wrong token")
        version = self.version if self.hello_version is None else self.hello_version
        hello = {"ok": True, "receiver": self.name, "dtype": self.dtype, "version": version,
                 "tensors": [[k, dt, list(shape)] for k, (shape, dt) in self.tensors.items()]}
        if self.stored is not None:
            hello["stored"] = self.stored
        if self.adapter is not None:
            hello["lora"] = 1
        send_msg(conn, hello)
        ex.kind = "hello"
        push = recv_msg(conn)           # Closed here: a probe, or it held the version already
        ex.push = push
        ex.kind = "push"
        error = self._check(push, version)
        if error is None and self.refuse:
            error = self.refuse
        if error is not None:
            return self._refuse(conn, ex, "refused", error)
        send_msg(conn, {"ok": True})
        ex.kind = "data"
        t0 = time.monotonic()
        h = xxhash.xxh3_64()
        for name, dt, shape in push["tensors"]:
            raw = recv_exact(conn, nbytes(dt, shape))
            h.update(raw)
            ex.raw[name], ex.dtypes[name] = raw, dt
            ex.tensors[name] = decode(raw, dt, shape)
            ex.bytes += len(raw)
        (checksum,) = struct.unpack("<Q", recv_exact(conn, 8))
        recv_us = (time.monotonic() - t0) * 1e6
        if checksum != h.intdigest():
            return self._refuse(conn, ex, "broken", f"checksum mismatch: sent {checksum:016x}, "
                                                    f"computed {h.intdigest():016x}")
        if self.fail_result:
            return self._refuse(conn, ex, "refused", self.fail_result)
        if self.delay:
            time.sleep(self.delay)
        ex.version = push["version"]
        self.version = push["version"]
        ex.kind = "pushed"
        self._record(ex)
        send_msg(conn, {"ok": True, "version": push["version"], "bytes": push["bytes"], "recv_us": recv_us,
                        "wait_us": 0.0, "stall_us": 1.0})

    def _check(self, push, held):
        """What is wrong with a push message at step 5, or None."""
        for key in ("version", "bytes", "checksum", "tensors"):
            if key not in push:
                return f"no {key!r} in the push message"
        if push["checksum"] != "xxh3-64":
            return f"checksum {push['checksum']!r}: only xxh3-64 is known"
        if push["version"] <= held:
            return f"version {push['version']} is not newer than the {held} held"
        wanted = self.tensors
        if "lora" in push:
            lora = push["lora"]
            if self.adapter is None:
                return "no adapter pushes here"
            if not (isinstance(lora, dict) and isinstance(lora.get("r"), int) and lora["r"] >= 1
                    and isinstance(lora.get("alpha"), float) and lora["alpha"] > 0
                    and isinstance(lora.get("rslora"), bool) and isinstance(lora.get("targets"), str)):
                return f"lora {lora!r} is not {{r, alpha, rslora, targets}}"
            wanted = self.adapter
        seen, total = set(), 0
        for name, dt, shape in push["tensors"]:
            if name not in wanted:
                return f"unknown tensor {name}"
            if name in seen:
                return f"tensor {name} twice"
            if tuple(shape) != wanted[name][0]:
                return f"tensor {name} has shape {list(shape)}, the model {list(wanted[name][0])}"
            if dt not in DTYPE_SIZE:
                return f"tensor {name}: dtype {dt!r}"
            seen.add(name)
            total += nbytes(dt, shape)
        missing = [k for k in wanted if k not in seen]
        if missing:
            return f"tensor {missing[0]} missing"
        if push["bytes"] != total:
            return f"bytes {push['bytes']}, the tensors need {total}"
        return None


# ---- the sending end -------------------------------------------------------------------------

class PushResult:
    """What a push() saw: the greeting flags, the hello, the answer to the push
    message, the result, and the error that ended it (None: a result {ok: true}
    arrived, or nothing had to be sent: skipped)."""

    def __init__(self):
        self.flags = None
        self.hello = self.answer = self.result = None
        self.error = None
        self.skipped = False
        self.sent = 0            # data bytes sent
        self.stream = 0          # bytes sent in all (answer to the greeting, push message, data, checksum)

    @property
    def ok(self):
        return self.error is None

    def __repr__(self):
        return f"PushResult(ok={self.ok}, skipped={self.skipped}, error={self.error!r}, result={self.result})"


class Cut(Exception):
    """The sender stopped where it was told to (cut_at)."""


class Wire:
    """The sender's side of a connection, counting the bytes it sends from
    the first: closes after `cut_at` of them (raising Cut), or sends byte
    `flip_at` inverted."""

    def __init__(self, sock, cut_at=None, flip_at=None):
        self.sock, self.cut_at, self.flip_at, self.sent = sock, cut_at, flip_at, 0

    def sendall(self, b):
        if self.flip_at is not None and self.sent <= self.flip_at < self.sent + len(b):
            i = self.flip_at - self.sent
            b = b[:i] + bytes([b[i] ^ 0xFF]) + b[i + 1:]
        if self.cut_at is not None and self.sent + len(b) >= self.cut_at:
            self.sock.sendall(b[:self.cut_at - self.sent])
            self.sent = self.cut_at
            raise Cut(f"cut off after {self.cut_at} bytes")
        self.sock.sendall(b)
        self.sent += len(b)


def connect(addr, timeout=10.0):
    family, sockaddr = parse_addr(addr)
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sockaddr)
    return s


def build(hello, tensors, version, *, dtypes=None, announce_version=None, announce_bytes=None, omit=(), extra=None,
          shapes=None, checksum_name="xxh3-64", lora=None):
    """The push message (a dict) and the data (bytes) push() sends for this
    hello (see push() for the arguments)."""
    wanted = {name: dt for name, dt, _ in hello["tensors"]} if lora is None else {name: "f32" for name in tensors}
    order = [n for n in wanted if n not in omit]
    arrays = {n: np.ascontiguousarray(tensors[n], dtype=np.float32) for n in order}
    wire = {n: (dtypes or {}).get(n, wanted[n]) for n in order}
    for n, a in (extra or {}).items():
        order.append(n)
        arrays[n] = np.ascontiguousarray(a, dtype=np.float32)
        wire[n] = (dtypes or {}).get(n, "f32")
    data = b"".join(encode(arrays[n], wire[n]) for n in order)
    listed = [[n, wire[n], list((shapes or {}).get(n, arrays[n].shape))] for n in order]
    msg = {"version": version if announce_version is None else announce_version,
           "bytes": len(data) if announce_bytes is None else announce_bytes,
           "checksum": checksum_name, "tensors": listed}
    if lora is not None:
        msg["lora"] = lora
    return msg, data


def stream_parts(hello, tensors, version, auth, **kw):
    """Where each part of what push() sends lies in its byte stream, as
    {part: (start, end)}: "mac" (when auth), "length" (of the push message),
    "message", "data", "checksum"."""
    msg, data = build(hello, tensors, version, **kw)
    parts, at = {}, 0
    for name, n in (("mac", MAC if auth else 0), ("length", 4), ("message", len(msgpack.packb(msg, use_bin_type=True))),
                    ("data", len(data)), ("checksum", 8)):
        if n:
            parts[name] = (at, at + n)
        at += n
    return parts


def push(addr, tensors, version, token=None, *, dtypes=None, corrupt=None, truncate_at=None, mac_override=None,
         announce_version=None, announce_bytes=None, msg_length=None, omit=(), extra=None, shapes=None,
         checksum_name="xxh3-64", force=False, close_after=None, pause=None, cut_at=None, flip_at=None,
         timeout=10.0, lora=None):
    """Pushes tensors ({name: float32 array}) as `version` to the receiver at addr.
    With lora ({r, alpha, rslora, targets}): an adapter push, tensors the
    adapter's (sent as f32 unless dtypes says otherwise), whatever the hello says.

    The wire dtype of each tensor is the one the hello asks for, unless
    dtypes ({name: dtype}) says otherwise. Misbehaviour, for receiver tests:
      token=None to a receiver that wants one: an all-zero MAC is sent;
      mac_override: these 32 bytes are sent as the MAC;
      announce_version / announce_bytes: numbers put in the push message
        instead of the true ones; msg_length: the push message's length
        prefix instead of its size (e.g. 1 << 30: oversized);
      omit: tensor names left out of the push; extra: {name: array} added;
      shapes: {name: shape} announced instead of the true ones;
      checksum_name: the "checksum" field;
      corrupt: "checksum" (a wrong checksum is sent) or "data" (one byte of
        data flipped after the checksum was computed);
      truncate_at: close after this many data bytes;
      cut_at / flip_at: close after this many bytes of everything sent / send
        the byte at this offset of it inverted (offsets as stream_parts gives);
      close_after: "greeting" | "hello" | "answer": close at that point;
      pause: (bytes, seconds): sleep after that many data bytes;
      force: push even when the hello's version is not older.
    Returns a PushResult; never raises for what the receiver does."""
    r = PushResult()
    s = connect(addr, timeout)
    w = Wire(s, cut_at, flip_at)
    try:
        g = recv_exact(s, GREETING)
        if g[:4] != MAGIC:
            r.error = f"bad magic {g[:4]!r}"
            return r
        proto, flags, _ = struct.unpack("<III", g[4:16])
        r.flags = flags
        if close_after == "greeting":
            return r
        if flags & AUTH_REQUIRED:
            w.sendall(mac_override if mac_override is not None else
                      mac(token, g[16:]) if token is not None else bytes(MAC))
        r.hello = recv_msg(s)
        if not r.hello.get("ok"):
            r.error = r.hello.get("error", "refused")
            return r
        if close_after == "hello":
            return r
        if r.hello["version"] >= version and not force:
            r.skipped = True
            return r
        msg, data = build(r.hello, tensors, version, dtypes=dtypes, announce_version=announce_version,
                          announce_bytes=announce_bytes, omit=omit, extra=extra, shapes=shapes,
                          checksum_name=checksum_name, lora=lora)
        send_msg(w, msg, length=msg_length)
        r.answer = recv_msg(s)
        if not r.answer.get("ok"):
            r.error = r.answer.get("error", "refused")
            return r
        if close_after == "answer":
            return r
        checksum = xxhash.xxh3_64_intdigest(data)
        if corrupt == "checksum":
            checksum ^= 1
        if corrupt == "data" and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        body = data + struct.pack("<Q", checksum)
        if truncate_at is not None:
            w.sendall(body[:truncate_at])
            r.sent = min(truncate_at, len(data))
            r.error = f"cut off after {truncate_at} bytes"
            return r
        if pause is not None:
            at, seconds = pause
            w.sendall(body[:at])
            time.sleep(seconds)
            w.sendall(body[at:])
        else:
            w.sendall(body)
        r.sent = len(data)
        r.result = recv_msg(s)
        if not r.result.get("ok"):
            r.error = r.result.get("error", "refused")
        return r
    except Cut as e:
        r.error = str(e)
        return r
    except Closed as e:
        r.error = f"the receiver closed the connection: {e}"
        return r
    except OSError as e:
        r.error = f"{type(e).__name__}: {e}"
        return r
    finally:
        r.stream = w.sent
        s.close()
