"""A holder in a process of its own, for the tests that kill or stop one. Prints one JSON line
per step; on a line on stdin, tries its fenced write and reports what came of it."""

import json
import sys

import leasehold


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def main() -> None:
    endpoints, lease, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    client = leasehold.Client(endpoints)
    holder = leasehold.Holder(client, lease, holder="worker", ttl=ttl, wait=True).acquire()
    if "--release-on-sigterm" in sys.argv[4:]:
        leasehold.release_on_signals(holder)
    written = holder.fenced_put(f"{lease}/out", b"first")
    say(step="granted", token=holder.token, holder=holder.holder, written=type(written).__name__)
    for _ in sys.stdin:
        try:
            holder.fenced_put(f"{lease}/out", b"late")
            local = "sent"
        except leasehold.NotSafeError as e:
            local = f"refused: {e.why}"
        # The same write as a program without a Holder would send it, with the old token.
        answer = client.put(f"{lease}/out", b"late", lease=lease, token=holder.token)
        say(step="woke", local=local, store=type(answer).__name__, fence=getattr(answer, "fence", 0))


if __name__ == "__main__":
    main()
