//! etcd's v3 API on a real three-node cluster, spoken by etcd's own command-line client
//! (`etcdctl`, Debian's `etcd-client`, which `.ci/run` installs): its put, get, txn, leases,
//! watch, lock and election work unchanged, through any node.

mod harness;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::{etcdctl, wait_for, Harness};
use leasehold::proto::v1 as pb;

/// The tests start clusters and etcdctl processes: one at a time on the machine's two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn run(endpoints: &[&str], args: &[&str]) -> Output {
    etcdctl(endpoints).args(args).output().expect("run etcdctl")
}

fn ok(endpoints: &[&str], args: &[&str]) -> String {
    let out = run(endpoints, args);
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A long-running etcdctl, killed and reaped when dropped.
struct Running(Child);

impl Running {
    fn start(endpoints: &[&str], args: &[&str]) -> (Running, std::sync::mpsc::Receiver<String>) {
        let mut child = etcdctl(endpoints)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcdctl");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        (Running(child), lines)
    }
}

impl Running {
    /// Interrupts it, as a user's Ctrl-C does: etcdctl then resigns or unlocks on its way out.
    fn interrupt(&self) {
        // SAFETY: signals a child this test started and has not yet reaped.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line within `within`.
fn line(lines: &std::sync::mpsc::Receiver<String>, within: Duration) -> Option<String> {
    lines.recv_timeout(within).ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_puts_reads_and_transacts_through_every_node() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start(3, false).await;
    let nodes: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    let leader = h.leader().await as usize;
    let follower = nodes[leader % 3];

    assert_eq!(ok(&[follower], &["put", "app/a", "1"]).trim(), "OK");
    ok(&[nodes[0]], &["put", "app/b", "2"]);
    ok(&[nodes[2]], &["put", "other", "3"]);
    // Every node answers a linearizable read with every write acknowledged before it.
    for node in &nodes {
        assert_eq!(
            ok(&[node], &["get", "app/a", "--print-value-only"]).trim(),
            "1"
        );
        let listed = ok(&[node], &["get", "app/", "--prefix", "--keys-only"]);
        let keys: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(keys, ["app/a", "app/b"], "on {node}");
    }
    let serial = ok(
        &[follower],
        &["get", "other", "--consistency=s", "--print-value-only"],
    );
    assert_eq!(serial.trim(), "3");

    // A compare-and-swap, as etcd's docs write it: succeeds once, then fails.
    let cas = |value: &str| {
        let mut child = etcdctl(&[follower])
            .args(["txn"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let script = format!("value(\"app/a\") = \"1\"\n\nput app/a {value}\n\nget app/a\n\n");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    assert!(
        cas("swapped").starts_with("SUCCESS"),
        "the first swap holds"
    );
    let second = cas("again");
    assert!(second.starts_with("FAILURE"), "{second}");
    assert!(
        second.contains("swapped"),
        "the failure branch read the key: {second}"
    );

    let deleted = ok(&[nodes[1]], &["del", "app/", "--prefix"]);
    assert_eq!(deleted.trim(), "2");
    assert_eq!(ok(&nodes, &["get", "app/", "--prefix"]).trim(), "");

    let status = ok(&nodes, &["endpoint", "status", "-w", "json"]);
    assert_eq!(status.matches("\"Endpoint\"").count(), 3, "{status}");
    let members = ok(&[nodes[0]], &["member", "list"]);
    assert_eq!(members.lines().count(), 3, "{members}");
    for node in &nodes {
        assert!(members.contains(&format!("http://{node}")), "{members}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_lease_deletes_its_keys_when_it_runs_out_and_a_watch_sees_them_go() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start(3, false).await;
    let nodes: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    let sent = Instant::now();
    let granted = ok(&[nodes[0]], &["lease", "grant", "2"]);
    // "lease 694d5d5ac1a1e40d granted with TTL(2s)"
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned();
    let put = ok(
        &[nodes[1]],
        &[
            "put",
            "session/worker",
            "alive",
            &format!("--lease={id}"),
            "-w",
            "json",
        ],
    );
    let put: serde_json::Value = serde_json::from_str(&put).expect("put's answer in JSON");
    let revision = put["header"]["revision"].as_u64().expect("put's revision");
    let ttl = ok(&[nodes[2]], &["lease", "timetolive", &id, "--keys"]);
    assert!(ttl.contains("granted with TTL(2s)"), "{ttl}");
    assert!(ttl.contains("session/worker"), "{ttl}");

    // From the revision after the put, so that the watch sees what follows it however late
    // etcdctl starts it (the key may be gone by then).
    let from = format!("--rev={}", revision + 1);
    let (_watch, events) = Running::start(&[nodes[2]], &["watch", "session/", "--prefix", &from]);
    let mut seen = Vec::new();
    while let Some(line) = line(&events, Duration::from_secs(10)) {
        seen.push(line.clone());
        if line == "DELETE" {
            break;
        }
    }
    assert_eq!(seen.first().map(String::as_str), Some("DELETE"), "{seen:?}");
    let gone_after = sent.elapsed();
    assert!(
        gone_after < Duration::from_secs(4),
        "a 2 s lease's key deleted {gone_after:?} after its grant was sent"
    );
    assert_eq!(ok(&nodes, &["get", "session/worker"]).trim(), "");
    let after = ok(&[nodes[0]], &["lease", "timetolive", &id]);
    assert!(after.contains("already expired"), "{after}");
}

/// A lease's time to live counts down while the cluster has nothing to log: etcd's leader
/// answers it by its own clock, and so does ours. Before, it was counted from the store time of
/// the last logged command, so an idle cluster's leases showed their whole TTL left for ever
/// (found in a walkthrough: 60 s left of a 60 s lease 25 s after its grant).
#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_leases_time_to_live_counts_down_while_nothing_is_logged() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start(3, false).await;
    let nodes: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    let granted = ok(&nodes, &["lease", "grant", "30"]);
    let answered = Instant::now();
    let id = granted.split_whitespace().nth(1).expect("a lease id");
    // Deliberately idle: nothing is logged in these two seconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = answered.elapsed();
    let ttl = ok(&nodes, &["lease", "timetolive", id, "-w", "json"]);
    let ttl: serde_json::Value = serde_json::from_str(&ttl).expect("timetolive in JSON");
    let left = ttl["ttl"].as_i64().expect("a ttl");
    // 30 s and the grant's margin (150 ms), rounded up to seconds as etcd rounds it, less the
    // whole seconds passed before it was asked: at most 29 once two have (31 before, the whole
    // TTL and margin).
    let most = 31 - asked.as_secs() as i64;
    assert!((1..=most).contains(&left), "{left} s left, at most {most}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_5_s_etcd_lease_lives_5_to_5_5_s_across_a_leader_kill() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut h = Harness::start(3, false).await;
    let leader = h.leader().await;
    let followers: Vec<String> = (1..=3u64)
        .filter(|id| *id != leader)
        .map(|id| h.endpoints[id as usize - 1].clone())
        .collect();
    let followers: Vec<&str> = followers.iter().map(String::as_str).collect();
    let (_watch, events) = Running::start(&followers[1..], &["watch", "life/", "--prefix"]);
    // The watch is in place once it reports a put. etcdctl starts it at a revision of its own
    // choosing, after it has dialed: a put sent at once may come before it, so put until one is
    // reported.
    let placed = Instant::now();
    loop {
        ok(&followers, &["put", "life/ready", "1"]);
        match events.recv_timeout(Duration::from_millis(500)) {
            Ok(first) if first == "PUT" => break,
            Ok(other) => panic!("the watch's first line is {other:?}, not an event"),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the watch exited"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        assert!(
            placed.elapsed() < Duration::from_secs(10),
            "the watch reported no put in 10 s"
        );
    }
    let sent = Instant::now();
    let granted = ok(&followers, &["lease", "grant", "5"]);
    let answered = Instant::now();
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned();
    ok(
        &followers,
        &["put", "life/holder", "h", &format!("--lease={id}")],
    );
    h.kill(leader);
    let mut seen = Vec::new();
    while let Some(line) = line(&events, Duration::from_secs(15)) {
        if line == "DELETE" {
            break;
        }
        seen.push(line);
    }
    // The lease was granted between the grant's send and its answer (etcdctl's start and dial
    // come before that): its life is known between these two.
    let (most, least) = (sent.elapsed(), answered.elapsed());
    eprintln!("a 5 s etcd lease, its leader killed, lived {least:?} to {most:?}");
    assert!(
        most >= Duration::from_secs(5) && least <= Duration::from_millis(5_500),
        "lived {least:?} to {most:?} ({seen:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etcdctl_lock_is_held_by_one_holder_at_a_time_and_passes_on_when_it_goes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut h = Harness::start(3, false).await;
    let endpoints = h.endpoints.clone();
    let nodes: Vec<&str> = endpoints.iter().map(String::as_str).collect();
    let (first, first_lines) = Running::start(&nodes, &["lock", "jobs", "--ttl=3"]);
    let held = line(&first_lines, Duration::from_secs(10)).expect("the first takes the lock");
    assert!(held.starts_with("jobs/"), "{held}");

    let (_second, second_lines) = Running::start(&nodes, &["lock", "jobs", "--ttl=3"]);
    // The second waits behind the first: its key is in line, and it holds nothing.
    wait_for("the second waiter's key", Duration::from_secs(10), || {
        let keys = ok(&nodes, &["get", "jobs/", "--prefix", "--keys-only"]);
        std::future::ready((keys.lines().filter(|l| !l.is_empty()).count() == 2).then_some(()))
    })
    .await;
    assert_eq!(
        line(&second_lines, Duration::from_millis(500)),
        None,
        "both hold the lock"
    );

    // The leader dies, and so does the first holder (kill -9, without unlocking): the lock
    // passes on when the holder's lease runs out, under the new leader.
    let leader = h.leader().await;
    h.kill(leader);
    let died = Instant::now();
    drop(first);
    let next = line(&second_lines, Duration::from_secs(10)).expect("the second takes the lock");
    assert!(
        next.starts_with("jobs/") && next != held,
        "{next} after {held}"
    );
    // etcd's client renews a session a third of its TTL after the last renewal's answer,
    // looking every 500 ms: up to 1.5 s before the kill, so the lease has at least 1.5 s left.
    let waited = died.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(6),
        "the lock passed on {waited:?} after its holder died, with a 3 s session"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_elect_makes_one_leader_and_observers_see_the_next() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut h = Harness::start(3, false).await;
    let endpoints = h.endpoints.clone();
    let nodes: Vec<&str> = endpoints.iter().map(String::as_str).collect();
    let (_observer, observed) = Running::start(&nodes, &["elect", "-l", "primary"]);
    let (first, first_lines) = Running::start(&nodes, &["elect", "primary", "alpha"]);
    assert!(line(&first_lines, Duration::from_secs(10)).is_some_and(|l| l.starts_with("primary/")));
    let (_second, second_lines) = Running::start(&nodes, &["elect", "primary", "beta"]);
    let mut leaders = Vec::new();
    while !leaders.contains(&"alpha".to_owned()) {
        leaders.push(line(&observed, Duration::from_secs(10)).expect("the observer sees alpha"));
    }
    // The cluster's leader dies: alpha still leads the election, and beta still waits.
    let leader = h.leader().await;
    h.kill(leader);
    h.new_leader(leader).await;
    assert_eq!(
        line(&second_lines, Duration::from_millis(500)),
        None,
        "two leaders"
    );
    // Interrupted, the leader resigns: the next campaigner leads without waiting out the
    // session's 60 s.
    first.interrupt();
    let next = line(&second_lines, Duration::from_secs(10)).expect("beta leads next");
    assert!(next.starts_with("primary/"), "{next}");
    while !leaders.contains(&"beta".to_owned()) {
        leaders.push(line(&observed, Duration::from_secs(10)).expect("the observer sees beta"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_writes_go_on_while_a_member_is_down_even_after_the_others_restart() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut h = Harness::start(3, false).await;
    let endpoints = h.endpoints.clone();
    let nodes: Vec<&str> = endpoints.iter().map(String::as_str).collect();
    ok(&nodes, &["put", "before", "1"]);
    // One member dies, and the two others restart: neither hears the dead one announce the
    // formats it reads, but the log already holds etcd's writes.
    h.kill(3);
    for id in [1, 2] {
        h.kill(id);
        h.restart(id);
    }
    h.leader().await;
    let up = &nodes[..2];
    assert_eq!(ok(up, &["put", "after", "2"]).trim(), "OK");
    let granted = ok(up, &["lease", "grant", "10"]);
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned();
    let kept = ok(up, &["lease", "keep-alive", "--once", &id]);
    assert!(kept.contains("keepalived"), "{kept}");
}

/// `etcdctl txn` with `script` on stdin (compares, a blank line, the success branch, a blank
/// line, the failure branch, a blank line): its output.
fn txn(endpoints: &[&str], script: &str) -> String {
    let mut child = etcdctl(endpoints)
        .arg("txn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl txn");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The lock key's create revision, as `etcdctl get -w json` prints it.
fn create_revision(endpoints: &[&str], key: &str) -> Option<i64> {
    let json = ok(endpoints, &["get", key, "-w", "json"]);
    let found: serde_json::Value = serde_json::from_str(&json).unwrap();
    found["kvs"][0]["create_revision"].as_i64()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_that_lost_its_etcd_lock_has_its_fenced_write_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start(3, false).await;
    let nodes: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    // Takes the lock key under a lease of `ttl` seconds if it is free: its create revision.
    let take = |ttl: &str| {
        let granted = ok(&nodes, &["lease", "grant", ttl]);
        let lease = granted
            .split_whitespace()
            .nth(1)
            .expect("a lease id")
            .to_owned();
        let script =
            format!("create(\"locks/job\") = \"0\"\n\nput locks/job holder --lease={lease}\n\n\n");
        assert!(
            txn(&nodes, &script).starts_with("SUCCESS"),
            "the lock is free"
        );
        create_revision(&nodes, "locks/job").expect("the lock key")
    };
    let fenced_put = |revision: i64, value: &str| {
        let script = format!("create(\"locks/job\") = \"{revision}\"\n\nput report {value}\n\n\n");
        txn(&nodes, &script)
    };
    // Long enough for the three etcdctl calls that follow to run before it ends.
    let a = take("3");
    assert!(
        fenced_put(a, "a1").starts_with("SUCCESS"),
        "A holds the lock"
    );
    // A freezes; its lease runs out, and B takes the lock.
    wait_for(
        "A's lock key to go with its lease",
        Duration::from_secs(10),
        || std::future::ready(create_revision(&nodes, "locks/job").is_none().then_some(())),
    )
    .await;
    let b = take("10");
    assert!(b > a, "a new lock key, a later revision");
    assert!(fenced_put(b, "b1").starts_with("SUCCESS"));
    // A wakes and writes, fenced with the revision it held the lock at: refused.
    let late = fenced_put(a, "a2");
    assert!(late.starts_with("FAILURE"), "{late}");
    assert_eq!(
        ok(&nodes, &["get", "report", "--print-value-only"]).trim(),
        "b1"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn etcds_refusals_come_in_etcds_words() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start(3, false).await;
    let nodes: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    let refused = |args: &[&str]| {
        let out = run(&nodes, args);
        assert!(!out.status.success(), "etcdctl {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let missing = refused(&["put", "k", "v", "--lease=1234"]);
    assert!(missing.contains("requested lease not found"), "{missing}");
    ok(&nodes, &["put", "k", "v1"]);
    ok(&nodes, &["put", "k", "v2"]);
    let old = refused(&["get", "k", "--rev=2"]);
    assert!(
        old.contains("required revision has been compacted"),
        "{old}"
    );
    let future = refused(&["get", "k", "--rev=99"]);
    assert!(
        future.contains("required revision is a future revision"),
        "{future}"
    );
    let auth = refused(&["user", "list"]);
    assert!(auth.contains("client certificate"), "{auth}");
    let big = "x".repeat(70 * 1024);
    let too_big = refused(&["put", "k", &big]);
    assert!(too_big.contains("request is too large"), "{too_big}");
}

/// A fresh virtual environment with etcd's Python clients, as their users install them: etcd3's
/// last release (0.12, which needs protobuf 3 and tenacity 6) and etcd3gw 2.7.
fn python_clients(venv: &std::path::Path) -> std::path::PathBuf {
    let packages = [
        "etcd3==0.12.0",
        "protobuf<4",
        "tenacity<7",
        "etcd3gw==2.7.0",
    ];
    harness::python_venv(venv, &packages)
}

/// `tests/etcd_clients/lock.py KIND MODE ENDPOINT`, its output read line by line.
fn python_lock(python: &std::path::Path, args: [&str; 3]) -> Running {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/etcd_clients/lock.py");
    let child = Command::new(python)
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run python");
    Running(child)
}

impl Running {
    fn lines(&mut self) -> std::sync::mpsc::Receiver<String> {
        let stdout = self.0.stdout.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        lines
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pythons_etcd3_and_etcd3gw_locks_pass_on_across_a_leader_kill_and_a_holders_kill_9() {
    let _one = ONE_AT_A_TIME.lock().await;
    let venv = tempfile::tempdir().unwrap();
    let python = python_clients(venv.path());
    let mut http = Vec::new();
    let mut h = Harness::start_configured(3, |cluster| {
        let (cluster, addrs) = harness::with_http(cluster);
        http = addrs;
        cluster
    })
    .await;
    for kind in ["etcd3", "etcd3gw"] {
        let leader = h.leader().await;
        let endpoint = |id: u64| match kind {
            "etcd3" => h.endpoints[id as usize - 1].clone(),
            _ => http[id as usize - 1].clone(),
        };
        // The holder talks to the leader, the contender to a follower that stays up.
        let survivor = leader % 3 + 1;
        let mut holder = python_lock(&python, [kind, "hold", &endpoint(leader)]);
        let held = holder.lines();
        assert_eq!(
            line(&held, Duration::from_secs(20)).as_deref(),
            Some("held"),
            "{kind}"
        );
        let mut contender = python_lock(&python, [kind, "take", &endpoint(survivor)]);
        let took = contender.lines();
        assert_eq!(
            line(&took, Duration::from_secs(20)).as_deref(),
            Some("asking"),
            "{kind}"
        );
        assert_eq!(
            line(&took, Duration::from_secs(1)),
            None,
            "{kind}: both hold the lock"
        );
        h.kill(leader);
        drop(holder);
        let taken = line(&took, Duration::from_secs(25)).expect("the contender takes the lock");
        assert!(taken.starts_with("took"), "{kind}: {taken}");
        assert_eq!(
            line(&took, Duration::from_secs(10)).as_deref(),
            Some("released"),
            "{kind}"
        );
        h.rejoin_after_failover(leader).await;
    }
}

/// etcdctl over TLS, showing identity `name`'s certificate from the harness's CA.
fn etcdctl_as(h: &Harness, name: &str, args: &[&str]) -> Output {
    let files = h.identity_files(name);
    let endpoints: Vec<&str> = h.endpoints.iter().map(String::as_str).collect();
    etcdctl(&endpoints)
        .arg(format!("--cacert={}", files.ca.display()))
        .arg(format!("--cert={}", files.cert.display()))
        .arg(format!("--key={}", files.key.display()))
        .args(args)
        .output()
        .expect("run etcdctl")
}

#[tokio::test(flavor = "multi_thread")]
async fn over_tls_an_etcd_client_is_its_certificate_and_the_policys_prefixes_hold_its_keys() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = Harness::start_authorized(3, false).await;
    let grants = ["read-keys", "write", "delete"].map(|permission| pb::Grant {
        permission: permission.into(),
        prefix: "team-a/".into(),
    });
    leasehold::cli::give_role(&h.client, "team-a", "team-a", grants.to_vec())
        .await
        .expect("the admin gives team-a its role");
    let done = |out: &Output| {
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (put, why) = done(&etcdctl_as(&h, "team-a", &["put", "team-a/job", "1"]));
    assert!(put, "team-a writes under its prefix: {why}");
    let listed = etcdctl_as(&h, "team-a", &["get", "team-a/", "--prefix", "--keys-only"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "team-a/job");
    let (outside, why) = done(&etcdctl_as(&h, "team-a", &["put", "team-b/job", "1"]));
    assert!(!outside, "team-a may not write team-b's keys");
    assert!(
        why.contains("PermissionDenied") || why.contains("may not"),
        "{why}"
    );
    let (everything, why) = done(&etcdctl_as(&h, "team-a", &["get", "", "--from-key"]));
    assert!(!everything, "nor read every key: {why}");
    // Another identity, with no role, reads nothing of team-a's.
    let (other, _) = done(&etcdctl_as(&h, "team-b", &["get", "team-a/job"]));
    assert!(!other, "team-b reads none of team-a's keys");
    // A lease is its granter's: team-b cannot keep team-a's alive.
    let granted = etcdctl_as(&h, "team-a", &["lease", "grant", "30"]);
    let granted = String::from_utf8_lossy(&granted.stdout).into_owned();
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned();
    let (theirs, why) = done(&etcdctl_as(
        &h,
        "team-b",
        &["lease", "keep-alive", "--once", &id],
    ));
    assert!(!theirs, "team-b kept team-a's lease alive: {why}");
    let (mine, why) = done(&etcdctl_as(
        &h,
        "team-a",
        &["lease", "keep-alive", "--once", &id],
    ));
    assert!(mine, "{why}");
}
