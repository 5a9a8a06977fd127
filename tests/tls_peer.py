#!/usr/bin/env python3
"""tls_peer.py - peers for the cache-sync client's transport tests
(tests/it_sync_tls.sh). Standard library only.

  tls_peer.py MODE PORTFILE [--cert C --key K] [--target HOST:PORT]

Listens on 127.0.0.1 (an ephemeral port, written to PORTFILE), over TLS when
--cert is given, and serves connections until killed:
  answer  reads one request and answers 403 {"error":"seen"}; prints the
          request line to stdout (proof the request came through)
  drip    answers 200 with Content-Length 1000 and then one byte every 0.2 s
          (a peer that keeps a per-recv timeout alive forever)
  huge    answers 200 with a body of 300 MiB, as fast as it can
  proxy   pumps bytes both ways to --target (TLS in front of a plain server)
"""
import socket
import ssl
import sys
import threading
import time


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def pump(src, dst):
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(mode, conn, target):
    try:
        if mode == "proxy":
            host, port = target.rsplit(":", 1)
            up = socket.create_connection((host, int(port)))
            threading.Thread(target=pump, args=(up, conn), daemon=True).start()
            pump(conn, up)
            return
        head = read_request(conn)
        if mode == "answer":
            print(head.split(b"\r\n")[0].decode(), flush=True)
            body = b'{"error":"seen"}'
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        elif mode == "drip":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(1000):
                conn.sendall(b"x")
                time.sleep(0.2)
        elif mode == "huge":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (300 << 20))
            block = b"y" * (1 << 20)
            for _ in range(300):
                conn.sendall(block)
    except (OSError, ssl.SSLError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    args = sys.argv[1:]
    mode, portfile = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    ctx = None
    if "--cert" in opts:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(opts["--cert"], opts["--key"])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    while True:
        conn, _ = ls.accept()
        if ctx:
            try:
                conn = ctx.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()       # the client refused our certificate
                continue
        threading.Thread(target=serve, args=(mode, conn, opts.get("--target")), daemon=True).start()


if __name__ == "__main__":
    main()
