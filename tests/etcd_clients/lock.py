"""An etcd lock holder or contender, through Python's etcd3 (gRPC) or etcd3gw (the JSON
gateway), for tests/etcd.rs: `lock.py etcd3|etcd3gw hold|take HOST:PORT`.

hold: takes the lock `py-lock` with a 3 s session, prints `held`, and keeps it (the test kills
it with SIGKILL). take: takes the same lock within 20 s, prints `took`, checks what its lease
says, and releases it.
"""

import sys
import time

kind, mode, endpoint = sys.argv[1:4]
host, port = endpoint.rsplit(":", 1)


def lock_and_lease():
    if kind == "etcd3":
        import etcd3

        client = etcd3.client(host=host, port=int(port), timeout=10)
        return client.lock("py-lock", ttl=3), client.lease(5), client
    from etcd3gw.client import Etcd3Client
    from etcd3gw.lock import Lock

    client = Etcd3Client(host=host, port=int(port), api_path="/v3/", timeout=10)
    return Lock("py-lock", ttl=3, client=client), client.lease(ttl=5), client


lock, lease, client = lock_and_lease()
if mode == "hold":
    assert lock.acquire(), "the holder takes the free lock"
    print("held", flush=True)
    while True:
        # The holder keeps its session alive until it is killed.
        lock.refresh()
        time.sleep(0.5)

# Connected and about to ask: the test's wait for a lock it must not get counts from here.
print("asking", flush=True)
started = time.time()
took = lock.acquire(timeout=20) if kind == "etcd3" else None
if kind == "etcd3gw":
    from etcd3gw.exceptions import ConnectionFailedError

    # etcd3gw's acquire does not wait: it tries until the holder's key is gone. A try whose
    # answer was lost with a killed leader fails with 503, as it does against etcd (whose
    # proposal lost with its leader times out with an error): a program tries again, as one must
    # against etcd, and asks whether the lost try took the lock for it.
    took = False
    while not took and time.time() - started < 20:
        try:
            took = lock.acquire() or lock.is_acquired()
        except ConnectionFailedError:
            pass
        if not took:
            time.sleep(0.2)
assert took, "the contender takes the lock once the holder's session ran out"
print("took after %.1f s" % (time.time() - started), flush=True)
client.put("py/leased", "v", lease=lease)
keys = lease.keys if kind == "etcd3" else lease.keys()
assert keys == [b"py/leased"], keys
assert 0 < (lease.remaining_ttl if kind == "etcd3" else lease.ttl()) <= 5
assert lock.release(), "the contender releases its lock"
print("released", flush=True)
