//! The holder's side, against real nodes: watch streams, the `Holder` keeper, a client shared
//! by many tasks, and `leasehold hold` running a command under a lease.

mod harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{granted, wait_for, Harness};
use leasehold_client::{
    Code, EventKind, HoldError, Holder, LeaseEvent, Lost, Renewal, Renewed, WatchFrom, WatchSelect,
    Written,
};

/// `(kind, lease, holder, token, log_index)`: what every node must report alike.
fn summary(e: &LeaseEvent) -> (EventKind, String, String, u64, u64) {
    (
        e.kind,
        e.lease.clone(),
        e.holder.clone(),
        e.token,
        e.log_index,
    )
}

/// The next event within `within`, or a panic naming what was awaited.
async fn next_event(watch: &mut leasehold_client::Watch, within: Duration) -> LeaseEvent {
    tokio::time::timeout(within, watch.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
}

#[tokio::test(flavor = "multi_thread")]
async fn every_node_reports_the_same_events_at_the_same_indexes_expiries_included() {
    let h = Harness::start(3, false).await;
    let mut watches: Vec<_> = (1..=3)
        .map(|id| {
            h.client_of(id)
                .watch(WatchSelect::Prefix("job/".into()), WatchFrom::Index(1))
        })
        .collect();
    let a = granted(&h.client.acquire("job/a", "x", 5_000).await.unwrap()).unwrap();
    h.client.acquire("job/a", "x", 5_000).await.unwrap();
    h.client.release("job/a", "x", a).await.unwrap();
    // Not watched: another prefix.
    h.client.acquire("other", "x", 5_000).await.unwrap();
    // Expires by itself: the leader logs a tick once it is due.
    h.client.acquire("job/b", "y", 300).await.unwrap();

    let mut seen = Vec::new();
    for watch in &mut watches {
        let mut events = Vec::new();
        while events.len() < 5 {
            events.push(summary(&next_event(watch, Duration::from_secs(10)).await));
        }
        seen.push(events);
    }
    let kinds: Vec<EventKind> = seen[0].iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Granted,
            EventKind::Renewed,
            EventKind::Released,
            EventKind::Granted,
            EventKind::Expired
        ],
        "{:?}",
        seen[0]
    );
    assert!(seen[0].iter().all(|e| e.1.starts_with("job/")));
    assert_eq!(
        seen[0][4].2, "y",
        "the expiry names the holder that lost it"
    );
    assert!(
        seen[0][4].4 > seen[0][3].4,
        "the expiry comes later in the log"
    );
    assert_eq!(seen[0], seen[1], "nodes 1 and 2 agree");
    assert_eq!(seen[0], seen[2], "nodes 1 and 3 agree");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_moves_to_another_node_when_its_node_dies_and_misses_nothing() {
    let mut h = Harness::start(3, false).await;
    // Streams from node 1 first: the client's first endpoint.
    let mut watch = h
        .client
        .watch(WatchSelect::Lease("l".into()), WatchFrom::Now);
    watch.started().await.unwrap();
    let writer = h.client_of(2);
    let mut expected = Vec::new();
    for round in 0..6 {
        if round == 3 {
            h.kill(1);
        }
        let holder = format!("h{round}");
        let token = granted(&writer.acquire("l", &holder, 60_000).await.unwrap()).unwrap();
        writer.release("l", &holder, token).await.unwrap();
        expected.push((EventKind::Granted, holder.clone(), token));
        expected.push((EventKind::Released, holder, token));
    }
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let e = next_event(&mut watch, Duration::from_secs(15)).await;
        got.push((e.kind, e.holder, e.token));
    }
    assert_eq!(got, expected, "every event once, in order, across the move");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_from_before_a_restarted_nodes_snapshot_is_out_of_range_and_bad_input_is_refused() {
    let mut h = Harness::start_with(3, false, &["--snapshot-every", "10"]).await;
    for i in 0..40 {
        h.client.put(&format!("k{i}"), b"v", None).await.unwrap();
    }
    h.kill(3);
    h.rejoin_after_failover(3).await;
    let mut watch = h
        .client_of(3)
        .watch(WatchSelect::Lease("l".into()), WatchFrom::Index(1));
    let e = watch.next().await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert!(e.to_string().contains("from_index"), "{e}");

    let long = "p".repeat(200);
    let mut watch = h.client.watch(WatchSelect::Prefix(long), WatchFrom::Now);
    let e = watch.next().await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("prefix"), "{e}");
    let mut watch = h
        .client
        .watch(WatchSelect::Lease(String::new()), WatchFrom::Now);
    let e = watch.next().await.unwrap_err();
    assert!(e.to_string().contains("lease"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_keeps_its_lease_past_the_ttl_writes_fenced_and_releases_on_close() {
    let h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of(1));
    // Short, so that it renews a few times in the test; long enough that a renewal held up a
    // few hundred ms on a loaded machine still lands before the holder's safe deadline.
    let ttl = Duration::from_millis(1_500);
    let holder = Holder::options("l", "worker", ttl)
        .acquire(client.clone())
        .await
        .unwrap();
    assert!(
        holder.holder().starts_with("worker~"),
        "{}",
        holder.holder()
    );
    let first_safe = holder.safe_until();
    tokio::time::sleep(ttl * 3).await;
    assert!(holder.is_safe(), "renewed every third of the TTL");
    assert!(
        holder.safe_until() > first_safe + ttl,
        "the deadline moved on"
    );
    let put = holder.fenced_put("row", b"v").await.unwrap();
    assert_eq!(put.outcome, Written::Written);
    let token = holder.token();
    let lease = h.client.get_lease("l").await.unwrap().outcome;
    assert_eq!(
        (lease.holder.as_deref(), lease.token),
        (Some(holder.holder()), token)
    );
    holder.release().await.unwrap();
    let lease = h.client.get_lease("l").await.unwrap().outcome;
    assert_eq!(lease.holder, None, "released on close");
}

/// The renewals in `log`: how many commands, and how many leases they named.
fn renewals_in(log: &[(u64, Vec<leasehold::lease::Command>)]) -> (usize, usize) {
    let renewals = log
        .iter()
        .flat_map(|(_, commands)| commands)
        .filter_map(|c| match &c.op {
            leasehold::lease::Op::Renew { leases } => Some(leases.len()),
            _ => None,
        });
    renewals.fold((0, 0), |(commands, leases), n| (commands + 1, leases + n))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_holders_of_one_client_renew_together_in_a_few_commands_each_keeping_its_grant() {
    const HOLDERS: usize = 100;
    let h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of(1));
    let ttl = Duration::from_millis(1_500);
    let mut holders = Vec::new();
    for i in 0..HOLDERS {
        let holder = Holder::options(format!("shard/{i}"), "worker", ttl);
        holders.push(holder.acquire(client.clone()).await.unwrap());
    }
    let before = renewals_in(&h.applied_log(h.leader().await).await);
    // Five renewals of each holding (in about two TTLs, each renewing every third of one),
    // counted as they land rather than in a fixed window that a loaded machine could miss.
    let (commands, leases) = wait_for("five renewals a holding", ttl * 10, || async {
        let (commands, leases) = renewals_in(&h.applied_log(h.leader().await).await);
        let renewed = (commands - before.0, leases - before.1);
        (renewed.1 >= HOLDERS * 5).then_some(renewed)
    })
    .await;
    assert!(holders.iter().all(Holder::is_safe), "every holding renewed");
    // Alone, each holder would have sent 500 commands for these.
    assert!(
        commands <= 20,
        "{leases} leases renewed in {commands} commands"
    );
    for holder in holders.iter().step_by(17) {
        let lease = h.client.get_lease(holder.lease()).await.unwrap().outcome;
        assert_eq!(
            (lease.holder.as_deref(), lease.token),
            (Some(holder.holder()), holder.token()),
            "renewed under its own grant"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_refuses_leases_not_held_as_named_and_bad_input_whole() {
    let h = Harness::start(3, false).await;
    let token = granted(&h.client.acquire("a", "x", 5_000).await.unwrap()).unwrap();
    granted(&h.client.acquire("b", "y", 5_000).await.unwrap()).unwrap();
    let renewal = |lease: &str, token| Renewal {
        lease: lease.into(),
        holder: "x".into(),
        token,
        ttl_ms: 20_000,
    };
    let answer = h
        .client
        .renew(&[renewal("a", token), renewal("b", 1), renewal("c", 1)])
        .await
        .unwrap();
    let Renewed::Until { expires_at_ms } = answer.outcome[0] else {
        panic!("{:?}", answer.outcome);
    };
    // Held the grant margin longer than asked, as every grant under the default clock.
    let held_ms = 20_000 + leasehold_core::Limits::GRANT_MARGIN_MS;
    assert_eq!(expires_at_ms, answer.applied.store_time_ms + held_ms);
    assert!(matches!(&answer.outcome[1], Renewed::HeldBy(held) if held.holder == "y"));
    assert_eq!(
        answer.outcome[2],
        Renewed::NotHeld,
        "never granted by a renewal"
    );
    assert_eq!(h.client.get_lease("c").await.unwrap().outcome.holder, None);
    let twice = h
        .client
        .renew(&[renewal("a", token), renewal("a", token)])
        .await;
    let error = twice.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(error.to_string().contains("named twice"), "{error}");
    let many: Vec<Renewal> = (0..=512).map(|i| renewal(&format!("l{i}"), 1)).collect();
    let error = h.client.renew(&many).await.unwrap_err();
    assert!(error.to_string().contains("between 1 and 512"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_holders_of_one_name_never_share_a_token_unless_they_insist() {
    let h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of(1));
    let ttl = Duration::from_secs(5);
    let first = Holder::options("l", "w", ttl)
        .acquire(client.clone())
        .await
        .unwrap();
    match Holder::options("l", "w", ttl).acquire(client.clone()).await {
        Err(HoldError::Held(held)) => assert_eq!(held.holder, first.holder()),
        other => panic!("a second holder named w got {:?}", other.map(|h| h.token())),
    }
    // Insisting on the exact name is the caller's claim that it is the same holder.
    let exact = Holder::options("m", "w", ttl)
        .exact_name()
        .acquire(client.clone())
        .await
        .unwrap();
    assert_eq!(exact.holder(), "w");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_standby_is_granted_as_soon_as_the_holder_releases_not_at_the_expiry() {
    let h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of(1));
    // A TTL far longer than the test may wait: only the watch can wake the standby in time.
    let ttl = Duration::from_secs(60);
    let first = Holder::options("l", "a", ttl)
        .acquire(client.clone())
        .await
        .unwrap();
    let standby = tokio::spawn({
        let client = Arc::new(h.client_of(2));
        async move {
            let holder = Holder::options("l", "b", ttl)
                .wait()
                .acquire(client)
                .await
                .unwrap();
            (holder.token(), Instant::now())
        }
    });
    // The standby watches from the index after its refusal, so once it is refused the release
    // cannot slip past it.
    until_acquire_logged(&h, "l", "b").await;
    assert!(!standby.is_finished(), "the standby waits while a holds");
    let old = first.token();
    let released = Instant::now();
    first.release().await.unwrap();
    let (token, granted_at) = tokio::time::timeout(Duration::from_secs(5), standby)
        .await
        .expect("the standby is granted within 5 s of the release")
        .unwrap();
    assert!(token > old);
    eprintln!(
        "release to standby grant: {} ms",
        granted_at.duration_since(released).as_millis()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_cut_off_from_the_majority_is_lost_by_its_deadline_and_refuses_writes_itself() {
    let mut h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of(1).with_deadline(Duration::from_secs(30)));
    let ttl = Duration::from_millis(1_500);
    let holder = Holder::options("l", "w", ttl)
        .acquire(client.clone())
        .await
        .unwrap();
    tokio::time::sleep(ttl).await;
    h.kill(2);
    h.kill(3);
    let killed = Instant::now();
    let lost = tokio::time::timeout(ttl * 2, holder.lost())
        .await
        .expect("the loss is reported by the deadline");
    assert_eq!(lost, Lost::Unrenewed);
    assert!(
        killed.elapsed() <= ttl,
        "reported {} ms after the kill, the TTL is {} ms",
        killed.elapsed().as_millis(),
        ttl.as_millis()
    );
    match holder.fenced_put("row", b"late").await {
        Err(HoldError::NotSafe(Lost::Unrenewed)) => {}
        other => panic!("a fenced put past the deadline was sent: {other:?}"),
    }
}

/// Runs `leasehold hold` with `args` against the harness's nodes.
fn hold(h: &Harness, args: &[&str]) -> std::process::Command {
    let mut command = harness::command(&h.endpoints);
    command.arg("hold").args(args);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn hold_runs_its_command_with_the_lease_exits_with_its_code_and_releases() {
    let h = Harness::start(3, false).await;
    let out = hold(
        &h,
        &[
            "job",
            "--holder",
            "w",
            "--ttl",
            "5",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_LEASE $LEASEHOLD_TOKEN $LEASEHOLD_HOLDER; exit 7",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "job", "{line}");
    assert_eq!(fields[1], "1", "{line}");
    assert!(fields[2].starts_with("w~"), "{line}");
    let lease = h.client.get_lease("job").await.unwrap().outcome;
    assert_eq!(
        (lease.holder, lease.token),
        (None, 1),
        "released when it ended"
    );

    // Held by another: exit 3 at once, the command never runs.
    let token = granted(&h.client.acquire("job", "other", 30_000).await.unwrap()).unwrap();
    let out = hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "5", "--", "sh", "-c", "echo ran",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(out.stdout.is_empty(), "the command ran: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("held by other") && stderr.contains("--wait"),
        "{stderr}"
    );
    h.client.release("job", "other", token).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hold_wait_starts_the_command_once_the_holder_is_gone() {
    let h = Harness::start(3, false).await;
    let token = granted(&h.client.acquire("job", "first", 60_000).await.unwrap()).unwrap();
    let mut standby = hold(
        &h,
        &[
            "job",
            "--holder",
            "second",
            "--ttl",
            "5",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_TOKEN",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    until_acquire_logged(&h, "job", "second").await;
    assert!(
        standby.try_wait().unwrap().is_none(),
        "it waits while first holds"
    );
    let released = Instant::now();
    assert!(matches!(
        h.client
            .release("job", "first", token)
            .await
            .unwrap()
            .outcome,
        leasehold_client::Released::Released { .. }
    ));
    let out = tokio::task::spawn_blocking(move || standby.wait_with_output().unwrap())
        .await
        .unwrap();
    let took = released.elapsed();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: woken by the expiry, not the release"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_dies_with_its_hold_so_it_never_outlives_the_lease() {
    let h = Harness::start(3, false).await;
    let pid_file = h.dir().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let mut child = hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "5", "--", "sh", "-c", &script,
        ],
    )
    .spawn()
    .unwrap();
    let pid: i32 = wait_for("the command to start", Duration::from_secs(10), || async {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel kills the command with its parent: `hold` can no longer stop it in time.
    harness::wait_until_dead(pid);
}

/// The unix time in ms on a `leasehold hold -v` line's `KEY <ms>`.
fn unix_ms_after(line: &str, key: &str) -> Option<u128> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_under_hold_is_dead_before_the_ttl_since_the_last_renewal_sent_when_the_majority_dies(
) {
    let mut h = Harness::start(3, false).await;
    let beats = h.dir().join("beats");
    let ttl_ms: u128 = 3_000;
    // Renewals go on for a while; then the majority dies.
    let mut running = beating_under_hold(&h, &beats, "3").await;
    h.kill(2);
    h.kill(3);
    let status = running.exit(Duration::from_secs(15)).await;
    let stderr = running.stderr();
    assert_eq!(status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("SIGTERM") && stderr.contains("lost"),
        "{stderr}"
    );
    let last_sent = running
        .last_sent()
        .unwrap_or_else(|| panic!("no renewal reported: {stderr}"));
    // The command's own record of being alive: nothing after the TTL from the last send.
    let beat = last_beat(&beats).unwrap();
    assert!(
        beat < last_sent + ttl_ms,
        "the command was alive {} ms after the last renewal was sent (TTL {ttl_ms} ms)",
        beat - last_sent
    );
    // Its whole process group is gone: no beat comes any more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(last_beat(&beats), Some(beat), "the command still runs");
    eprintln!(
        "last beat {} ms after the last renewal's send (TTL {ttl_ms} ms)",
        beat - last_sent
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_prints_one_json_line_per_event() {
    let h = Harness::start(3, false).await;
    let mut watch = harness::command(&h.endpoints)
        .args(["watch", "--prefix", "w/", "--from-index", "1", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let token = granted(&h.client.acquire("w/a", "x", 5_000).await.unwrap()).unwrap();
    h.client.release("w/a", "x", token).await.unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .take(2)
            .map(Result::unwrap)
            .collect::<Vec<_>>()
    });
    let lines = tokio::time::timeout(Duration::from_secs(10), lines)
        .await
        .expect("two lines in time")
        .unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["kind"], "granted", "{lines:?}");
    assert_eq!(events[1]["kind"], "released", "{lines:?}");
    for (event, key) in events.iter().zip(["kind", "lease", "holder", "token"]) {
        assert!(event.get(key).is_some(), "{event}");
    }
    for key in ["expires_at_ms", "log_index", "store_time_ms"] {
        assert!(events[0][key].as_u64().is_some(), "{key} in {}", events[0]);
    }
    assert_eq!(events[0]["lease"], "w/a");
    assert_eq!(events[0]["token"], token);
    assert!(events[1]["log_index"].as_u64() > events[0]["log_index"].as_u64());
}

/// A `leasehold hold` under test, with its stderr collected line by line as it comes (a stopped
/// `hold` writes nothing more, but what it wrote before is kept). Dropped, it is resumed,
/// killed and reaped, whatever the test did to it.
struct Running {
    child: std::process::Child,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    /// Set once the reader has taken the last line (the pipe closed).
    read_all: Arc<std::sync::atomic::AtomicBool>,
}

impl Running {
    fn start(mut command: std::process::Command) -> Running {
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let read_all = Arc::new(std::sync::atomic::AtomicBool::new(false));
        std::thread::spawn({
            let (lines, read_all) = (lines.clone(), read_all.clone());
            move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap().push(line);
                }
                read_all.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        Running {
            child,
            lines,
            read_all,
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child, not reaped yet (it is reaped only in `wait`/drop).
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The latest renewal's (or the grant's) send, in unix ms, from the `-v` lines.
    fn last_sent(&self) -> Option<u128> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter_map(|line| unix_ms_after(line, "sent at unix ms"))
            .max()
    }

    fn renewals(&self) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains("renewed")).count()
    }

    /// Its exit status, waited for up to `within`.
    async fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        self.exit_at(within).await.0
    }

    /// Its exit status, waited for up to `within`, and when it was seen to exit (unix ms).
    async fn exit_at(&mut self, within: Duration) -> (std::process::ExitStatus, u128) {
        let exited = wait_for("hold to exit", within, || {
            let status = self.child.try_wait().unwrap();
            async move { status.map(|status| (status, unix_now_ms())) }
        })
        .await;
        // The reader takes the last lines until the pipe closes: at the child's exit, unless a
        // process of its command still holds the pipe (then, at most a second later, what it
        // has).
        let read_all = Instant::now() + Duration::from_secs(1);
        while !self.read_all.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < read_all
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        exited
    }

    /// Waits until the process is stopped (by SIGSTOP), as `/proc` tells it.
    async fn until_stopped(&self) {
        let pid = self.child.id() as i32;
        wait_for("hold to be stopped", Duration::from_secs(5), || {
            let stopped = harness::process_state(pid) == Some('T');
            std::future::ready(stopped.then_some(()))
        })
        .await
    }

    /// Waits until the reader has taken every line the stopped process wrote: a mark written
    /// into its stderr pipe behind them is read only after they are.
    async fn until_read_up_to_now(&self) {
        use std::io::Write;
        const MARK: &str = "-- read up to here --";
        let stderr = format!("/proc/{}/fd/2", self.child.id());
        let mut pipe = std::fs::OpenOptions::new()
            .write(true)
            .open(stderr)
            .unwrap();
        writeln!(pipe, "{MARK}").unwrap();
        wait_for(
            "hold's stderr read up to the mark",
            Duration::from_secs(5),
            || std::future::ready(self.stderr().contains(MARK).then_some(())),
        )
        .await
    }
}

/// Waits until process `pid` has a socket open: `hold`'s first, which it opens for its acquire
/// after taking the acquire's send time.
async fn until_it_dials(pid: u32) {
    let fds = format!("/proc/{pid}/fd");
    wait_for("hold to dial a node", Duration::from_secs(10), || {
        let dialed = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| target.to_string_lossy().starts_with("socket:"));
        std::future::ready(dialed.then_some(()))
    })
    .await
}

/// Waits until an acquire of `lease` by holder `name` (as a `Holder` or `hold` names it:
/// `name~tag.n`) is in the leader's applied log: granted or refused, it was answered.
async fn until_acquire_logged(h: &Harness, lease: &str, name: &str) {
    let prefix = format!("{name}~");
    let logged = || async {
        let log = h.applied_log(h.leader().await).await;
        let acquired = log.iter().flat_map(|(_, commands)| commands).any(|c| {
            matches!(&c.op, leasehold::lease::Op::Acquire { lease: l, holder, .. }
                if l == lease && holder.starts_with(&prefix))
        });
        acquired.then_some(())
    };
    wait_for(
        &format!("{name}'s acquire of {lease} in the log"),
        Duration::from_secs(10),
        logged,
    )
    .await
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process the test made outside its own children (a daemon of a command under `hold`),
/// named by the pid file it wrote: killed on drop if it still runs. Killed only if its command
/// line still names `dir`, so a recycled pid is never hit.
struct Stray {
    pid_file: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Stray {
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether it still runs, as our process (its command line names our dir).
    fn runs(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        harness::alive(pid)
            && String::from_utf8_lossy(&cmdline).contains(&*self.dir.to_string_lossy())
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        if let (true, Some(pid)) = (self.runs(), self.pid()) {
            // SAFETY: kill(2); the pid was checked just now to be our own daemon.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// The latest heartbeat, in unix ms, of a file of `date +%s%3N` lines.
fn last_beat(beats: &std::path::Path) -> Option<u128> {
    std::fs::read_to_string(beats)
        .ok()?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
}

/// `hold` of a lease with a TTL of `ttl` seconds over a command that writes the time to `beats`
/// every 20 ms, once two renewals were answered and the command beats.
async fn beating_under_hold(h: &Harness, beats: &std::path::Path, ttl: &str) -> Running {
    let running = Running::start(hold(
        h,
        &[
            "job",
            "--holder",
            "w",
            "--ttl",
            ttl,
            "-v",
            "--",
            "sh",
            "-c",
            &heartbeat_loop(beats),
        ],
    ));
    wait_for("two renewals", Duration::from_secs(10), || {
        let renewed = running.renewals() >= 2 && last_beat(beats).is_some();
        async move { renewed.then_some(()) }
    })
    .await;
    running
}

/// Now, in unix ms, as `date +%s%3N` tells it.
fn unix_now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// A shell loop that appends a heartbeat (unix ms) to `beats` every 20 ms.
fn heartbeat_loop(beats: &std::path::Path) -> String {
    format!(
        "while :; do date +%s%3N >> {}; sleep 0.02; done",
        beats.display()
    )
}

/// Waits until the wall clock reads `unix_ms`.
async fn until_unix_ms(unix_ms: u128) {
    let now = unix_now_ms();
    if unix_ms > now {
        tokio::time::sleep(Duration::from_millis((unix_ms - now) as u64)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_hold_leaves_nothing_of_its_command_running_past_the_safe_deadline() {
    let h = Harness::start(3, false).await;
    let beats = h.dir().join("beats");
    let ttl_ms: u128 = 2_000;
    let mut running = beating_under_hold(&h, &beats, "2").await;
    // As `kill -STOP %1`, a supervisor or a debugger would: `hold` itself sends nothing more.
    running.signal(libc::SIGSTOP);
    running.until_stopped().await;
    let stopped_at = unix_now_ms();
    // A renewal sent just before the stop may still be reported: the latest send is read once
    // every line written before the stop has been.
    running.until_read_up_to_now().await;
    let last_sent = running
        .last_sent()
        .unwrap_or_else(|| panic!("no renewal reported: {}", running.stderr()));
    assert!(last_sent <= stopped_at, "{}", running.stderr());
    // Past the store's expiry of the last renewal, and some.
    until_unix_ms(last_sent + ttl_ms + 300).await;
    let beat = last_beat(&beats).unwrap();
    assert!(
        beat < last_sent + ttl_ms,
        "the command of a stopped hold was alive {} ms after the last renewal was sent (TTL \
         {ttl_ms} ms)",
        beat - last_sent
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(last_beat(&beats), Some(beat), "the command still runs");
    // Resumed, `hold` finds its deadline passed: the lease was lost.
    running.signal(libc::SIGCONT);
    let status = running.exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(4), "{}", running.stderr());
    eprintln!(
        "last beat {} ms after the last renewal's send (TTL {ttl_ms} ms)",
        beat - last_sent
    );
}

/// `hold -v --ttl 2` of a command that starts a daemon (double fork, `setsid`) writing
/// heartbeats to `beats` and its pid to `pid_file`, then runs `rest`.
fn daemonizing(beats: &std::path::Path, pid_file: &std::path::Path, rest: &str) -> String {
    format!(
        "(setsid sh -c 'echo $$ > {}; {}' &); {rest}",
        pid_file.display(),
        heartbeat_loop(beats)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_daemonizes_is_dead_by_the_deadline_when_the_majority_dies() {
    let mut h = Harness::start(3, false).await;
    let beats = h.dir().join("beats");
    let stray = Stray {
        pid_file: h.dir().join("daemon.pid"),
        dir: h.dir().to_owned(),
    };
    let ttl_ms: u128 = 2_000;
    let script = daemonizing(&beats, &stray.pid_file, "exec sleep 600");
    let mut running = Running::start(hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "2", "-v", "--", "sh", "-c", &script,
        ],
    ));
    wait_for("a renewal and a beat", Duration::from_secs(10), || {
        let ready = running.renewals() >= 1 && last_beat(&beats).is_some() && stray.runs();
        async move { ready.then_some(()) }
    })
    .await;
    h.kill(2);
    h.kill(3);
    let status = running.exit(Duration::from_secs(10)).await;
    let stderr = running.stderr();
    assert_eq!(status.code(), Some(4), "{stderr}");
    let last_sent = running
        .last_sent()
        .unwrap_or_else(|| panic!("no renewal reported: {stderr}"));
    until_unix_ms(last_sent + ttl_ms + 300).await;
    let beat = last_beat(&beats).unwrap();
    assert!(
        beat < last_sent + ttl_ms,
        "the command's daemon was alive {} ms after the last renewal was sent (TTL {ttl_ms} \
         ms): {stderr}",
        beat - last_sent
    );
    assert!(!stray.runs(), "the daemon still runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_left_behind_by_its_command_is_dead_before_hold_releases_the_lease() {
    let h = Harness::start(3, false).await;
    let beats = h.dir().join("beats");
    let stray = Stray {
        pid_file: h.dir().join("daemon.pid"),
        dir: h.dir().to_owned(),
    };
    // The command ends as soon as its daemon beats: `hold` then releases the lease.
    let rest = format!("while [ ! -s {} ]; do sleep 0.01; done", beats.display());
    let script = daemonizing(&beats, &stray.pid_file, &rest);
    let mut running = Running::start(hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "5", "--", "sh", "-c", &script,
        ],
    ));
    let (status, exited) = running.exit_at(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", running.stderr());
    let lease = h.client.get_lease("job").await.unwrap().outcome;
    assert_eq!(lease.holder, None, "released when the command ended");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let beat = last_beat(&beats).unwrap();
    assert!(
        beat < exited,
        "the daemon the command left was alive {} ms after hold released the lease",
        beat - exited
    );
    assert!(!stray.runs(), "the daemon still runs");
}

/// Safety review 161302a, finding 6: a guard killed by a signal (kill -9, the OOM killer)
/// leaves nothing of its command running, and the lease to expire: `hold` is a child
/// subreaper too, so the daemon the command left becomes its own, and it kills that daemon
/// rather than release the lease. Before, the daemon ran on, adopted by init, and `hold`
/// released the lease at once, so a rival could be granted it while the daemon still ran.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_killed_by_a_signal_leaves_the_lease_to_expire_after_killing_what_it_left() {
    let h = Harness::start(3, false).await;
    let beats = h.dir().join("beats");
    let stray = Stray {
        pid_file: h.dir().join("daemon.pid"),
        dir: h.dir().to_owned(),
    };
    let script = daemonizing(&beats, &stray.pid_file, "exec sleep 600");
    let mut running = Running::start(hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "5", "--", "sh", "-c", &script,
        ],
    ));
    wait_for("the daemon to beat", Duration::from_secs(10), || {
        let ready = last_beat(&beats).is_some() && stray.runs();
        async move { ready.then_some(()) }
    })
    .await;
    // The guard is `hold`'s one child.
    let children = format!("/proc/{0}/task/{0}/children", running.child.id());
    let guard: i32 = std::fs::read_to_string(children)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of the guard, a process of this test's `hold`.
    unsafe {
        libc::kill(guard, libc::SIGKILL);
    }
    let status = running.exit(Duration::from_secs(10)).await;
    let stderr = running.stderr();
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(!stray.runs(), "the daemon outlived its guard: {stderr}");
    let lease = h.client.get_lease("job").await.unwrap().outcome;
    assert!(
        lease.holder.is_some(),
        "released while what the command started may have run: {stderr}"
    );
    assert!(stderr.contains("expires by itself"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hold_does_not_start_its_command_when_the_grant_came_after_the_safe_deadline() {
    let h = Harness::start(3, false).await;
    let leader = h.leader().await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let marker = h.dir().join("ran");
    // Without a follower the leader cannot commit the grant: it is answered once they resume,
    // later than the TTL less the margin (900 ms) after it was sent.
    for id in &followers {
        h.cluster.signal(*id, libc::SIGSTOP);
    }
    let script = format!("echo ran > {}", marker.display());
    let mut running = Running::start(hold(
        &h,
        &[
            "job", "--holder", "w", "--ttl", "1", "-v", "--", "sh", "-c", &script,
        ],
    ));
    // From its first connection `hold` has taken its acquire's send time; the followers resume
    // well past that send's safe deadline.
    until_it_dials(running.child.id()).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for id in &followers {
        h.cluster.signal(*id, libc::SIGCONT);
    }
    let status = running.exit(Duration::from_secs(30)).await;
    let stderr = running.stderr();
    assert_eq!(status.code(), Some(4), "{stderr}");
    assert!(
        !stderr.contains("running"),
        "the command was started past its deadline: {stderr}"
    );
    assert!(!marker.exists(), "the command ran: {stderr}");
}

/// A client shared by a thousand tasks writing at once: every write is applied, none refused
/// as a request the store forgot (its session keeps the answers of its latest 128 requests, and
/// a write overtaken by more of its client's writes than that would be refused unapplied).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_shared_by_a_thousand_tasks_writing_at_once_has_every_write_applied() {
    let h = Harness::start(3, false).await;
    let client = Arc::new(h.client_of_nodes(&[1, 2, 3]));
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..1_000 {
        let client = client.clone();
        writes.spawn(async move { client.put(&format!("shared/{i}"), b"v", None).await });
    }
    while let Some(written) = writes.join_next().await {
        let written = written
            .unwrap()
            .unwrap_or_else(|e| panic!("a write failed: {e}"));
        assert_eq!(written.outcome, Written::Written);
    }
}
