# A stranger flooding a ddplua store: opens N TCP connections to PORT that
# never authenticate (each sends one byte, or nothing with --silent),
# touches READY once they are open, then holds them until killed. With
# --reconnect it reopens, every 0.2 s, those the store closed (a persistent
# attacker). Used by tests/mp/hostile_spec.lua.
#   python3 flood.py PORT N READY [--silent] [--reconnect]
import resource
import select
import socket
import sys
import time

port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
silent, reconnect = "--silent" in sys.argv, "--reconnect" in sys.argv
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        if not silent:
            s.send(b"\x01")
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


socks = [connect() for _ in range(n)]
opened = sum(1 for s in socks if s)
with open(ready, "w") as f:
    f.write("%d\n" % opened)
reopened = 0
while True:
    time.sleep(0.2)
    if not reconnect:
        continue
    poller = select.poll()
    for s in socks:
        if s:
            poller.register(s, select.POLLIN)
    readable = {fd for fd, _ in poller.poll(0)}
    for i, s in enumerate(socks):
        if s is None or s.fileno() in readable:
            if s is not None:
                try:
                    if s.recv(64):
                        continue
                except OSError:
                    pass
                s.close()
            socks[i] = connect()
            reopened += 1
