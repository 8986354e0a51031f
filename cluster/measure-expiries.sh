#!/usr/bin/env bash
# Measures many leases falling due in the same second on a local three-node cluster: how long
# the leader takes to count them all expired (its leasehold_expiries_total, polled every 20 ms),
# and acquire p99 across that moment against p99 just before, on the same table.
# The leases are set up by `bench --workload renew` (500 per client, each client renewing all of
# its own in one request) for one second at a TTL of a minute: each client's leases then share
# one expiry, and every client's falls within about a second of the others'.
# Usage: cluster/measure-expiries.sh [LEASES] (default 100000, a multiple of 500). Uses ports
# 7121-7123, 7221-7223 and 7321-7323 and a temp dir; LEASEHOLD_BIN names the binary.
leases=${1:-100000}
[ "$leases" -ge 500 ] && [ $((leases % 500)) -eq 0 ] || { echo "LEASES must be a multiple of 500" >&2; exit 2; }
ttl=60
base=7120
source "$(dirname "$0")/measure-lib.sh"

start_all
leader=$(leader_id)
"$bin" bench --workload renew --leases 500 --clients $((leases / 500)) --ttl "$ttl" --connect leader \
  --warmup 0 --duration 1 -o json >/dev/null 2>"$dir/setup.err" || { cat "$dir/setup.err" >&2; exit 1; }
renewed=$(date +%s.%N)
before=$(metric "$leader" leasehold_expiries_total)
echo "set up $leases leases due ${ttl} s after their last renewal, within about a second of each other"
echo "before (same table, nothing expiring): acquire $(acquire_bench 20 | summary)"
# Measured from 15 s before the leases fall due to 10 s after.
sleep "$(python3 -c "import time; print(max(0, $renewed + $ttl - 15 - time.time()))")"
python3 - "$(metrics_url "$leader")" "$before" "$leases" "$renewed" "$ttl" >"$dir/expired" <<'PY' &
import sys, time, urllib.request
url, before, leases, renewed, ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
def expired():
    text = urllib.request.urlopen(url).read().decode()
    line = [l for l in text.splitlines() if l.startswith("leasehold_expiries_total ")][0]
    return int(float(line.split()[1])) - before
first = None
while time.time() < renewed + ttl + 30:
    n, now = expired(), time.time()
    if first is None and n > 0:
        first = now
    if n >= leases:
        print("expired: all %d counted %.2f s after the first (their due times spread over the renew phase's second)" % (n, now - first))
        break
    time.sleep(0.02)
else:
    print("only %d of %d expired by 30 s after they fell due" % (n, leases))
PY
poller=$!
echo "during (the leases fall due 15 s in): acquire $(acquire_bench 25 | summary)"
wait "$poller"
cat "$dir/expired"
