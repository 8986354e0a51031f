"""One scheduler among many processes: each waits for the lease, and only the holder runs jobs.

    pip install ./clients/python
    leasehold cluster &                      # a local three-node cluster
    python examples/python/singleton.py &    # start two or three of these, kill -9 the one
    python examples/python/singleton.py &    # that runs: another takes over within the TTL

Every job's result is written fenced with the holder's token, so a holder that froze past its
TTL (a long GC pause, a stopped VM) cannot overwrite what its successor wrote.
"""

import os
import sys
import time

import leasehold

ENDPOINTS = os.environ.get("LEASEHOLD_ENDPOINTS", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")


def run_job(held: leasehold.Holder, n: int) -> None:
    answer = held.fenced_put("jobs/beat/last-run", f"run {n} by {held.holder}".encode())
    if isinstance(answer, leasehold.StaleToken):
        sys.exit(f"a newer holder (token {answer.fence}) took over; stopping")
    print(f"run {n} under token {held.token}", flush=True)


def main() -> None:
    client = leasehold.Client(ENDPOINTS)
    while True:
        print("waiting for jobs/beat", flush=True)
        with leasehold.Holder(client, "jobs/beat", holder="beat", ttl=5, wait=True) as held:
            print(f"leading with token {held.token}", flush=True)
            n = 0
            while held.is_safe():
                n += 1
                run_job(held, n)
                # Sleep until the next run, waking at once if the holding is lost.
                if held.wait_lost(timeout=1.0) is not None:
                    break
            print(f"lost jobs/beat: {held.unsafe_reason()}", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
