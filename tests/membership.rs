//! Membership changes against real nodes: growing 3 -> 5 -> 3 while clients write and hold
//! leases, and replacing a dead node with a new one.

mod harness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{wait_for, Harness};
use leasehold::lease::{Op, Outcome};
use leasehold_client::{LeaseClient, Written};

/// Runs `leasehold` with `args` against `endpoints`: its exit code, stdout and stderr.
fn leasehold(endpoints: &[String], args: &[&str]) -> (i32, String, String) {
    let out = harness::cli(endpoints, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `member add ID` for node `id` of the harness.
fn add(h: &Harness, via: &[String], id: u64) {
    let node = &h.cluster.nodes()[(id - 1) as usize];
    let (code, out, err) = leasehold(
        via,
        &[
            "member",
            "add",
            &id.to_string(),
            "--peer",
            &node.peer_addr,
            "--client",
            &node.addr,
        ],
    );
    assert_eq!(code, 0, "member add {id}: {out}{err}");
}

/// The voters `member list -o json` shows.
fn voters(via: &[String]) -> Vec<u64> {
    let (code, out, err) = leasehold(via, &["member", "list", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let members: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    for m in &members {
        for key in ["id", "role", "peer", "client"] {
            assert!(m.get(key).is_some(), "{key} in {m}");
        }
    }
    members
        .iter()
        .filter(|m| m["role"] == "voter")
        .map(|m| m["id"].as_u64().unwrap())
        .collect()
}

/// What one client saw: its last acknowledged sequence number, and the longest time it went
/// without a successful request.
#[derive(Default)]
struct Seen {
    /// The last sequence number acknowledged.
    acked: u64,
    /// How many writes were acknowledged.
    writes: u64,
    longest_gap: Duration,
}

/// A client that writes its own key with a growing sequence number and takes a shared lease
/// in turns with the others (acquire, fenced put, release) until `stop`.
async fn load(client: LeaseClient, id: usize, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let key = format!("load-{id}");
    let holder = format!("c{id}");
    let mut last_ok = Instant::now();
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let ok = match client.put(&key, seq.to_string().as_bytes(), None).await {
            Ok(_) => {
                let mut seen = seen.lock().unwrap();
                seen.acked = seq;
                seen.writes += 1;
                true
            }
            Err(_) => false,
        };
        let held = match client.acquire("shared", &holder, 300).await {
            Ok(answer) => {
                if let Some(token) = answer.outcome.token() {
                    // Written, or refused as stale once the lease moved on: an answer either
                    // way. Then given up, so that the lease changes hands.
                    let fenced =
                        client.put("shared-row", holder.as_bytes(), Some(("shared", token)));
                    fenced.await.is_ok() && client.release("shared", &holder, token).await.is_ok()
                } else {
                    true
                }
            }
            Err(_) => false,
        };
        if ok && held {
            let mut seen = seen.lock().unwrap();
            seen.longest_gap = seen.longest_gap.max(last_ok.elapsed());
            last_ok = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until every client has acknowledged `more` writes past what it had at the call: load
/// measured by progress, not by a fixed time, which a loaded machine fills with fewer writes.
async fn progress(seen: &[Arc<Mutex<Seen>>], more: u64) {
    let from: Vec<u64> = seen.iter().map(|s| s.lock().unwrap().writes).collect();
    wait_for(
        "every client to acknowledge more writes",
        Duration::from_secs(20),
        || async {
            let now = seen.iter().map(|s| s.lock().unwrap().writes);
            now.zip(&from)
                .all(|(now, from)| now >= from + more)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_to_five_to_three_under_load_loses_no_write_and_stalls_no_client_past_an_election() {
    let mut h = Harness::start_configured(5, |c| c.with_joining(&[4, 5])).await;
    let first_three: Vec<String> = h.endpoints[..3].to_vec();
    assert_eq!(voters(&first_three), [1, 2, 3]);

    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let mut seen = Vec::new();
    for id in 0..4 {
        let s = Arc::new(Mutex::new(Seen::default()));
        seen.push(s.clone());
        let client = LeaseClient::new(&first_three).unwrap();
        clients.push(tokio::spawn(load(client, id, stop.clone(), s)));
    }
    progress(&seen, 8).await;
    add(&h, &first_three, 4);
    add(&h, &first_three, 5);
    assert_eq!(voters(&first_three), [1, 2, 3, 4, 5]);
    // The new voters hold the log: each reports the cluster's applied state.
    wait_for(
        "nodes 4 and 5 to catch up",
        Duration::from_secs(10),
        || async {
            let (a, b) = (h.caught_up(4).await?, h.caught_up(5).await?);
            Some((a, b))
        },
    )
    .await;
    progress(&seen, 8).await;
    let (code, out, err) = leasehold(&first_three, &["member", "remove", "4"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = leasehold(&first_three, &["member", "remove", "5"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(voters(&first_three), [1, 2, 3]);
    h.kill(4);
    h.kill(5);
    progress(&seen, 8).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }

    // No acknowledged write lost: every client's key holds its last acknowledged number (or a
    // later one, whose answer was lost).
    for (id, seen) in seen.iter().enumerate() {
        let (acked, longest_gap) = {
            let seen = seen.lock().unwrap();
            (seen.acked, seen.longest_gap)
        };
        let value = h
            .client
            .get(&format!("load-{id}"))
            .await
            .unwrap()
            .outcome
            .unwrap();
        let stored: u64 = String::from_utf8(value).unwrap().parse().unwrap();
        assert!(
            stored >= acked,
            "client {id}: {stored} < acknowledged {}",
            acked
        );
        // Progress was checked as it went: 8 acknowledged writes per client before, during
        // and after the changes (`progress`).
        eprintln!(
            "client {id}: {} writes acknowledged, longest stall {} ms",
            acked,
            longest_gap.as_millis()
        );
        assert!(
            longest_gap < Duration::from_millis(2 * leasehold::limits::LONGEST_ELECTION_MS),
            "client {id} went {} ms without a successful request",
            longest_gap.as_millis()
        );
    }
    // No lease shorter than its TTL, no stale token accepted: the log, replayed through the
    // checkers' reference model.
    let applied = h.checked_log().await;
    let grants = applied
        .iter()
        .filter(|a| {
            matches!(
                (&a.op, &a.outcome),
                (Op::Acquire { .. }, Outcome::Granted { renewed: false, .. })
            )
        })
        .count();
    assert!(grants > 10, "the shared lease changed hands {grants} times");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_node_is_replaced_by_a_new_one_under_a_new_id() {
    let mut h = Harness::start_configured(4, |c| c.with_joining(&[4])).await;
    let via: Vec<String> = h.endpoints.clone();
    let leader = h.leader().await;
    let dead = if leader == 3 { 2 } else { 3 };
    h.kill(dead);
    // The old id cannot be added back while it is a member.
    let node = &h.cluster.nodes()[(dead - 1) as usize];
    let (code, _, err) = leasehold(
        &via,
        &[
            "member",
            "add",
            &dead.to_string(),
            "--peer",
            &node.peer_addr,
            "--client",
            &node.addr,
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("voter already"), "{err}");
    let (code, out, err) = leasehold(&via, &["member", "remove", &dead.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    add(&h, &via, 4);
    let mut expected: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != dead).collect();
    expected.push(4);
    assert_eq!(voters(&via), expected);
    // The cluster tolerates a failure again: with one more node down, the other two and the new
    // one's majority still write.
    let other = expected
        .iter()
        .copied()
        .find(|id| *id != leader && *id != 4)
        .unwrap();
    h.kill(other);
    let written = h
        .client_of(leader)
        .put("after", b"replaced", None)
        .await
        .unwrap();
    assert_eq!(written.outcome, Written::Written);
    // With one other node down, the write's quorum was the leader and node 4: node 4 has it in
    // its log (applying it follows at the next heartbeat).
    let status = h.client_of(4).node_status().await.unwrap();
    assert!(
        status.last_log_index >= written.applied.log_index,
        "node 4 holds the write in its log"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_disk_was_wiped_cannot_come_back_under_its_old_id_and_says_so() {
    let mut h = Harness::start(3, false).await;
    let leader = h.leader().await;
    h.client_of(leader).put("before", b"v", None).await.unwrap();
    let wiped = if leader == 3 { 2 } else { 3 };
    let other = 6 - leader - wiped;
    h.kill(wiped);
    let node = &h.cluster.nodes()[(wiped - 1) as usize];
    std::fs::remove_dir_all(&node.data_dir).unwrap();
    let log = node.log.clone();
    h.restart(wiped);
    // It says why it takes no part, and what to do.
    wait_for(
        "the wiped node to say it lost its vote",
        Duration::from_secs(10),
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("disk was wiped or replaced").then_some(())
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("member remove"), "{text}");
    // And it takes none of the leader's log.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = h.client_of(wiped).node_status().await.unwrap();
    assert_eq!(
        status.applied_index, 0,
        "the wiped node took the leader's log"
    );
    // Its acks and votes do not count: with the third node gone, the leader and the wiped
    // node are no majority, and a write is not acknowledged.
    h.kill(other);
    let refused = h
        .client_of(leader)
        .with_deadline(Duration::from_secs(3))
        .put("after", b"v", None)
        .await;
    assert!(
        refused.is_err(),
        "acknowledged with the wiped node's ack: {refused:?}"
    );
    // Brought back, the third node makes a majority again.
    h.restart(other);
    let written = wait_for(
        "a write with the majority back",
        Duration::from_secs(20),
        || async { h.client_of(other).put("again", b"v", None).await.ok() },
    )
    .await;
    assert_eq!(written.outcome, Written::Written);
}

/// A `member add` the leader refuses (id 0; a node that does not answer at the peer address
/// given) answers at once, saying what is wrong, and not that the change may have been made:
/// the refusal is the node's own, and nothing was changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_member_add_answers_at_once_and_is_not_indeterminate() {
    let h = Harness::start(3, false).await;
    let via = h.endpoints.clone();
    // Ports nothing listens on.
    let held = leasehold::cli::local::HeldPort::any(2).unwrap();
    let (peer, client) = (held[0].addr(), held[1].addr());
    for (id, says) in [(0, "id: node ids start at 1"), (7, "does not answer")] {
        let started = Instant::now();
        let (code, out, err) = leasehold(
            &via,
            &[
                "member",
                "add",
                &id.to_string(),
                "--peer",
                &peer,
                "--client",
                &client,
            ],
        );
        let took = started.elapsed();
        eprintln!("member add {id}, {} ms: {}", took.as_millis(), err.trim());
        assert_eq!(code, 1, "member add {id}: {out}{err}");
        assert!(err.contains(says), "member add {id}: {err}");
        assert!(
            !err.contains("indeterminate") && !err.contains("may have been applied"),
            "member add {id}: {err}"
        );
        assert!(
            took < Duration::from_secs(3),
            "member add {id} took {} ms: {err}",
            took.as_millis()
        );

        let refused = h.client.add_member(id, &peer, &client).await.unwrap_err();
        assert!(!refused.is_indeterminate(), "member add {id}: {refused}");
    }
    assert_eq!(voters(&via), [1, 2, 3], "nothing was changed");
}

/// Review of e8637e4, 6: `--join` took any data dir, so a node reused from another cluster (or
/// a mistyped path) would bring that cluster's log and store time in once added. A joining
/// node's data dir must be empty or its own from an earlier join.
#[tokio::test(flavor = "multi_thread")]
async fn a_joining_node_refuses_a_data_dir_that_holds_another_clusters_state() {
    let mut h = Harness::start(3, false).await;
    h.client.put("k", b"v", None).await.unwrap();
    h.kill(3);
    let node = &h.cluster.nodes()[2];
    let held = leasehold::cli::local::HeldPort::any(2).unwrap();
    /// Killed and reaped however the test ends.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut serve = Reaped(
        std::process::Command::new(harness::binary())
            .args(["serve", "--id", "7", "--join", "--data-dir"])
            .arg(&node.data_dir)
            .args(["--listen", &held[0].addr()])
            .args(["--peer-listen", &held[1].addr()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = wait_for("serve --join to exit", Duration::from_secs(10), || {
        let exited = serve.0.try_wait().unwrap();
        async move { exited }
    })
    .await;
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{status:?}: {err}");
    assert!(
        err.contains("--join: data dir") && err.contains("do not include this node's id 7"),
        "{err}"
    );
}

/// The other side of the check above: a node added with `--join` and restarted with the same
/// command line (as a supervisor or a StatefulSet does) finds itself in its own data dir's
/// membership, starts, and catches up.
#[tokio::test(flavor = "multi_thread")]
async fn a_joined_node_restarted_with_join_starts_on_its_own_data_dir() {
    let mut h = Harness::start_configured(4, |c| c.with_joining(&[4])).await;
    let via: Vec<String> = h.endpoints.clone();
    add(&h, &via, 4);
    h.kill(4);
    h.client.put("while-down", b"v", None).await.unwrap();
    h.restart(4);
    wait_for("node 4 to catch up", Duration::from_secs(20), || {
        h.caught_up(4)
    })
    .await;
}

/// Issue 41, item 10: `member remove` of the leader on a local cluster left the removed node
/// reporting itself leader 25 s later, and serving clients who waited 10 s. The two left elect
/// a leader within an election, the removed node stops leading and says at once that it was
/// removed, and writes go on through the others.
#[tokio::test(flavor = "multi_thread")]
async fn removing_the_leader_hands_leadership_to_the_others_and_the_removed_node_says_so() {
    let (h, metrics) = harness::with_metrics().await;
    let via = h.endpoints.clone();
    let leader = h.leader().await;
    let (code, out, err) = leasehold(&via, &["member", "remove", &leader.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let started = Instant::now();
    let new = wait_for(
        "one of the two left to lead",
        Duration::from_secs(10),
        || async {
            for id in &others {
                let s = h.client_of(*id).node_status().await.ok()?;
                if s.role == leasehold::proto::v1::Role::Leader as i32 {
                    return Some(*id);
                }
            }
            None
        },
    )
    .await;
    wait_for(
        "the removed node to stop leading",
        Duration::from_secs(10),
        || async {
            let s = h.client_of(leader).node_status().await.ok()?;
            (s.role != leasehold::proto::v1::Role::Leader as i32).then_some(())
        },
    )
    .await;
    // Its metrics say so too (they said it led 25 s on).
    wait_for(
        "the removed node's metrics to stop saying it leads",
        Duration::from_secs(10),
        || async {
            let (_, text) = harness::http_get(&metrics[(leader - 1) as usize], "/metrics").ok()?;
            (harness::sample(&text, "leasehold_raft_is_leader") == Some(0.0)).then_some(())
        },
    )
    .await;
    let handed_over = started.elapsed();
    eprintln!(
        "node {new} leads {} ms after the removal",
        handed_over.as_millis()
    );
    assert!(
        handed_over < Duration::from_millis(2 * leasehold::limits::LONGEST_ELECTION_MS),
        "leadership took {} ms to move",
        handed_over.as_millis()
    );
    let others_endpoints: Vec<String> = others
        .iter()
        .map(|id| h.endpoints[(*id - 1) as usize].clone())
        .collect();
    let written = LeaseClient::new(&others_endpoints)
        .unwrap()
        .put("after", b"v", None)
        .await
        .unwrap();
    assert_eq!(written.outcome, Written::Written);
    // Asked alone, the removed node refuses at once and names why.
    let asked = Instant::now();
    let refused = h
        .client_of(leader)
        .with_deadline(Duration::from_secs(10))
        .put("to-removed", b"v", None)
        .await
        .expect_err("the removed node took a write");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "the removed node took {} ms to refuse: {refused}",
        asked.elapsed().as_millis()
    );
    assert!(refused.to_string().contains("removed"), "{refused}");
}
