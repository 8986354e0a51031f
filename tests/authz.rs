//! Who may do what, on a TLS cluster created with authorization on (`serve --auth-admin`, as
//! `cluster --tls` runs it): each permission allowed by its grant and denied without it,
//! through the Rust client, the CLI and raw gRPC; admin calls refused to an ordinary
//! certificate; a policy change in force on every node from one log index; a lease its holder's
//! identity alone may release.

mod harness;

use std::time::{Duration, Instant};

use harness::{granted, wait_for, written, Harness};
use leasehold::proto::v1 as pb;
use leasehold::proto::v1::change_policy_request::Change;
use leasehold::proto::v1::lease_store_client::LeaseStoreClient;
use leasehold::tls::certs::CLIENT_NAME;
use leasehold::tls::Tls;
use leasehold_client::{
    Acquired, ClientError, Code, EventKind, LeaseClient, Listing, Released, WatchFrom, WatchSelect,
};

/// The permissions a role can grant, and each one's identity in these tests.
const PERMISSIONS: [&str; 6] = [
    "read-leases",
    "hold",
    "check",
    "read-keys",
    "write",
    "delete",
];

fn grant(permission: &str, prefix: &str) -> pb::Grant {
    pb::Grant {
        permission: permission.into(),
        prefix: prefix.into(),
    }
}

/// As the admin: role `name` with `grants`, bound to identity `name`; where it was bound.
async fn role_for(admin: &LeaseClient, name: &str, grants: Vec<pb::Grant>) -> u64 {
    let bound = leasehold::cli::give_role(admin, name, name, grants).await;
    bound.unwrap().log_index
}

fn assert_denied<T: std::fmt::Debug>(result: Result<T, ClientError>, naming: &[&str]) {
    let error = result.expect_err("denied");
    assert_eq!(error.code(), Code::PermissionDenied, "{error}");
    for part in naming {
        assert!(
            error.to_string().contains(part),
            "{error} should name {part}"
        );
    }
}

/// One call that needs `permission`, on `name` (a lease or a key), made by `c` as identity `me`:
/// Ok when the store answered, the error when it refused.
async fn exercise(
    c: &LeaseClient,
    me: &str,
    permission: &str,
    name: &str,
) -> Result<(), ClientError> {
    match permission {
        "read-leases" => c.get_lease(name).await.map(drop),
        "hold" => c.acquire(name, &format!("{me}/w"), 5_000).await.map(drop),
        "check" => c.check_token(name, 1).await.map(drop),
        "read-keys" => c.get(name).await.map(drop),
        "write" => c.put(name, b"v", None).await.map(drop),
        "delete" => c.delete(name, None).await.map(drop),
        other => panic!("no permission {other}"),
    }
}

/// Each permission lets its identity do its call under its prefix, and nothing else: not the
/// same call elsewhere, and not the other permissions' calls there.
#[tokio::test(flavor = "multi_thread")]
async fn each_permission_allows_its_calls_on_its_prefix_and_nothing_else() {
    let h = Harness::start_authorized(3, false).await;
    for permission in PERMISSIONS {
        role_for(&h.client, permission, vec![grant(permission, "p/")]).await;
    }
    for permission in PERMISSIONS {
        let c = h.client_as(permission);
        exercise(&c, permission, permission, "p/x")
            .await
            .unwrap_or_else(|e| panic!("{permission} on p/x: {e}"));
        let denied = exercise(&c, permission, permission, "q/x").await;
        assert_denied(denied, &[permission, "\"q/x\""]);
        for other in PERMISSIONS.iter().filter(|p| **p != permission) {
            let denied = exercise(&c, permission, other, "p/x").await;
            assert_denied(denied, &[permission, "\"p/x\""]);
        }
    }
}

/// The same through the CLI: exit 0 with the permission, exit 1 and one line on stderr naming
/// the identity and the name without it.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_is_allowed_and_denied_as_the_client_is() {
    let h = Harness::start_authorized(3, false).await;
    role_for(
        &h.client,
        "team-a",
        vec![grant("hold", "a/"), grant("write", "a/")],
    )
    .await;
    let cli = |args: &[&str]| h.cli_as("team-a", args);
    for allowed in [
        &["acquire", "a/l", "--holder", "team-a/w", "--ttl", "5"][..],
        &["put", "a/k", "v"],
    ] {
        let out = cli(allowed);
        assert_eq!(out.status.code(), Some(0), "{allowed:?}: {out:?}");
    }
    for (denied, naming) in [
        (
            &["acquire", "b/l", "--holder", "team-a/w", "--ttl", "5"][..],
            "\"b/l\"",
        ),
        (
            &["acquire", "a/m", "--holder", "w", "--ttl", "5"],
            "not as \"w\"",
        ),
        (&["put", "b/k", "v"], "\"b/k\""),
        (&["get", "a/k"], "read key \"a/k\""),
        (&["lease", "a/l"], "read lease \"a/l\""),
        (
            &["check", "a/l", "--token", "1"],
            "check a token of lease \"a/l\"",
        ),
        (&["delete", "a/k"], "delete key \"a/k\""),
        (&["member", "remove", "3"], "remove a member"),
        (&["snapshot", "save", "/dev/null"], "save a snapshot"),
        (&["auth", "show"], "read the policy"),
    ] {
        let out = cli(denied);
        let stderr = harness::one_line_error(&out, &format!("{denied:?}"));
        assert!(
            stderr.contains("permission denied: team-a may not"),
            "{stderr}"
        );
        assert!(stderr.contains(naming), "{denied:?}: {stderr}");
    }
}

/// A gRPC client of any language reads the refusal from the status alone: PERMISSION_DENIED,
/// with the identity, the action and the name in its message.
#[tokio::test(flavor = "multi_thread")]
async fn raw_grpc_calls_are_denied_with_permission_denied_naming_identity_action_and_resource() {
    let h = Harness::start_authorized(3, false).await;
    role_for(&h.client, "team-a", vec![grant("read-keys", "a/")]).await;
    let tls = Tls::load(&h.identity_files("team-a"))
        .unwrap()
        .client_config(None);
    // A follower too: its reads go to the leader with the identity it read.
    let mut membership_denied = 0;
    for id in 1..=3 {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("https://{}", h.endpoints[id - 1]))
                .unwrap()
                .tls_config(tls.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
        let mut raw = LeaseStoreClient::new(channel.clone());
        let got = raw.get(pb::GetRequest { key: "a/k".into() }).await;
        assert!(got.is_ok(), "node {id}: {got:?}");
        let status = raw
            .get(pb::GetRequest { key: "b/k".into() })
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::PermissionDenied,
            "node {id}: {status:?}"
        );
        assert_eq!(status.message(), "team-a may not read key \"b/k\"");
        let status = raw
            .put(pb::PutRequest {
                key: "a/k".into(),
                value: b"v".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::PermissionDenied,
            "node {id}: {status:?}"
        );
        assert_eq!(status.message(), "team-a may not write key \"a/k\"");
        let mut cluster = pb::cluster_client::ClusterClient::new(channel);
        let status = cluster
            .remove_member(pb::RemoveMemberRequest { id: 3 })
            .await
            .unwrap_err();
        // Only the leader changes the membership; the others say who leads.
        match status.code() {
            tonic::Code::PermissionDenied => membership_denied += 1,
            tonic::Code::Unavailable => {}
            _ => panic!("node {id}: {status:?}"),
        }
    }
    // One leader, unless leadership moved during the loop.
    assert!(membership_denied >= 1);
    assert_eq!(h.client.members().await.unwrap().members.len(), 3);
}

/// The ordinary client certificate `cluster --tls` hands out cannot change the membership:
/// `member remove` is refused and the cluster keeps its voters.
#[tokio::test(flavor = "multi_thread")]
async fn member_remove_with_the_plain_client_certificate_is_refused() {
    let h = Harness::start_authorized(3, false).await;
    let leader = h.leader().await;
    let plain = h.client_as(CLIENT_NAME);
    let victim = leader % 3 + 1;
    assert_denied(
        plain.remove_member(victim).await,
        &[CLIENT_NAME, "remove a member"],
    );
    assert_denied(
        plain.add_member(9, "127.0.0.1:1", "127.0.0.1:2").await,
        &["add a member"],
    );
    assert_denied(plain.save_snapshot().await, &["save a snapshot"]);
    let members = h.client.members().await.unwrap();
    assert_eq!(members.members.len(), 3);
    assert!(members.members.iter().any(|m| m.id == victim));
    // The admin may.
    let members = h.client.remove_member(victim).await.unwrap();
    assert_eq!(members.members.len(), 2);
}

/// A binding applies from its log index on, on every node: a write before it is denied and one
/// after it applied, and every node's log says so at the same indexes.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_change_is_in_force_on_every_node_from_one_log_index() {
    let h = Harness::start_authorized(3, false).await;
    let team = h.client_as("team-b");
    assert_denied(
        team.put("b/k", b"early", None).await,
        &["team-b", "\"b/k\""],
    );
    let bound = role_for(&h.client, "team-b", vec![grant("write", "b/")]).await;
    let written = team.put("b/k", b"late", None).await.unwrap();
    assert!(written.applied.log_index > bound);

    // Every node applied the same commands with the same answers: the denial before the
    // binding's index, the write after it.
    let mut logs = Vec::new();
    for id in 1..=3 {
        let log = wait_for(
            "the node to apply the write",
            Duration::from_secs(10),
            || async {
                let log = h.applied_log(id).await;
                let last = log.last()?.0;
                (last >= written.applied.log_index).then_some(log)
            },
        )
        .await;
        let replayed = leasehold_check::replay(&log).expect("the log replays");
        let mut by_team: Vec<(u64, bool)> = replayed
            .iter()
            .filter(|r| r.identity.as_deref() == Some("team-b"))
            .filter(|r| matches!(r.op, leasehold::lease::Op::Put { .. }))
            .map(|r| (r.index, r.outcome.accepted()))
            .collect();
        by_team.truncate(2);
        assert_eq!(by_team.len(), 2, "node {id}: {by_team:?}");
        assert!(
            by_team[0].0 < bound && !by_team[0].1,
            "node {id}: {by_team:?}"
        );
        assert!(
            by_team[1].0 > bound && by_team[1].1,
            "node {id}: {by_team:?}"
        );
        logs.push(by_team);
    }
    assert!(logs.windows(2).all(|w| w[0] == w[1]), "{logs:?}");
    // Each node's own view of the identity, from its applied state.
    for id in 1..=3 {
        let me = h
            .client_of_nodes_as(&[id], "team-b")
            .who_am_i()
            .await
            .unwrap();
        assert_eq!(me.roles, vec!["team-b".to_owned()], "node {id}");
    }
}

/// Knowing a holder's token is not enough: another identity, with the same role, cannot
/// release its lease, nor acquire it as that holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_holders_lease_is_not_releasable_by_another_identity_that_knows_its_token() {
    let h = Harness::start_authorized(3, false).await;
    let admin = &h.client;
    admin
        .change_policy(Change::PutRole(pb::AuthRole {
            name: "workers".into(),
            grants: vec![grant("hold", "jobs/"), grant("read-leases", "jobs/")],
        }))
        .await
        .unwrap();
    for identity in ["team-a", "team-b"] {
        let binding = pb::Binding {
            identity: identity.into(),
            role: "workers".into(),
        };
        admin.change_policy(Change::Bind(binding)).await.unwrap();
    }
    let a = h.client_as("team-a");
    let b = h.client_as("team-b");
    let token = match a
        .acquire("jobs/x", "team-a/w1", 30_000)
        .await
        .unwrap()
        .outcome
    {
        Acquired::Granted { token, .. } => token,
        other => panic!("{other:?}"),
    };
    // b reads the lease, holder and token included ...
    let seen = b.get_lease("jobs/x").await.unwrap().outcome;
    assert_eq!(
        (seen.holder.as_deref(), seen.token),
        (Some("team-a/w1"), token)
    );
    // ... and cannot use them.
    assert_denied(
        b.release("jobs/x", "team-a/w1", token).await,
        &["team-b", "\"jobs/x\"", "team-b/"],
    );
    assert_denied(b.acquire("jobs/x", "team-a/w1", 30_000).await, &["team-b"]);
    let released = b.release("jobs/x", "team-b", token).await.unwrap().outcome;
    assert!(matches!(released, Released::HeldBy(_)), "{released:?}");
    let still = a.get_lease("jobs/x").await.unwrap().outcome;
    assert_eq!(
        (still.holder.as_deref(), still.token),
        (Some("team-a/w1"), token)
    );
    let released = a
        .release("jobs/x", "team-a/w1", token)
        .await
        .unwrap()
        .outcome;
    assert_eq!(released, Released::Released { token });
}

/// Safety review 161302a, finding 7: a fence names a lease, so a fenced put or delete needs
/// `check` on that lease besides `write` (`delete`) on its key. Before, an identity with write
/// on `out/a/` learned another team's lease's grant count from the refusal, and moved its fence
/// by putting with the current token.
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_write_needs_check_on_the_fences_lease() {
    let h = Harness::start_authorized(3, false).await;
    let admin = &h.client;
    role_for(admin, "holder", vec![grant("hold", "jobs/b/")]).await;
    let acquired = h
        .client_as("holder")
        .acquire("jobs/b/secret", "holder/w", 60_000)
        .await;
    let token = match acquired.unwrap().outcome {
        Acquired::Granted { token, .. } => token,
        other => panic!("{other:?}"),
    };
    let mine = vec![
        grant("write", "out/a/"),
        grant("delete", "out/a/"),
        grant("read-keys", "out/a/"),
    ];
    role_for(admin, "writer", mine.clone()).await;
    let writer = h.client_as("writer");
    let naming = ["writer", "check", "\"jobs/b/secret\""];
    for guess in [u64::MAX, token] {
        let fence = Some(("jobs/b/secret", guess));
        assert_denied(writer.put("out/a/x", b"v", fence).await, &naming);
        assert_denied(writer.delete("out/a/x", fence).await, &naming);
    }
    // Nothing was written; unfenced writes under its prefix are its own.
    assert_eq!(writer.get("out/a/x").await.unwrap().outcome, None);
    assert!(harness::written(
        &writer.put("out/a/y", b"v", None).await.unwrap()
    ));
    // With check on the lease, the fenced put is the writer's to make.
    let with_check = [mine, vec![grant("check", "jobs/b/")]].concat();
    role_for(admin, "writer", with_check).await;
    let fenced = writer
        .put("out/a/x", b"v", Some(("jobs/b/secret", token)))
        .await;
    assert!(harness::written(&fenced.unwrap()));
}

/// Safety review 161302a, finding 2: while authorization is on, a caller with neither a
/// certificate nor a bearer token opens no session (each one is replicated state kept an hour,
/// so anonymous `Register`s grew every node's state without bound). Before, the anonymous
/// client's session was opened and only its put was denied.
#[tokio::test(flavor = "multi_thread")]
async fn a_caller_without_an_identity_opens_no_session_while_authorization_is_on() {
    let h = Harness::start_authorized_for_tokens(3).await;
    // The leader's count: it applied every acknowledged write.
    let sessions = || async {
        let all = h.client.status().await.unwrap();
        let leader = all.iter().find(|n| n.role == pb::Role::Leader as i32);
        leader.expect("a leader").sessions
    };
    let before = sessions().await;
    let ca = std::fs::read(h.identity_files(leasehold::tls::certs::ADMIN_NAME).ca).unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca));
    let anonymous = LeaseClient::new(&h.endpoints)
        .unwrap()
        .with_tls(tls)
        .unwrap();
    let refused = anonymous.put("k", b"v", None).await;
    assert_denied(refused, &["no identity", "session"]);
    // Another identity's session, opened after it, is the only one more.
    let _ = h.client_as("team-a").put("x", b"v", None).await;
    assert_eq!(
        sessions().await,
        before + 1,
        "only team-a's session was opened"
    );
}

/// A watch needs read-leases on every lease it follows, and ends with PERMISSION_DENIED once
/// the grant is taken away.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_follows_only_what_its_identity_may_read_and_ends_when_revoked() {
    let h = Harness::start_authorized(3, false).await;
    let bound = role_for(
        &h.client,
        "team-a",
        vec![grant("read-leases", "a/"), grant("hold", "a/")],
    )
    .await;
    // Every node in force, so that the revocation below is the only change a watch sees (a
    // follower behind a grant is a_watch_on_a_follower_behind_a_grant_starts_once_the_grant_...).
    wait_for(
        "every node to apply the binding",
        Duration::from_secs(10),
        || async {
            let nodes = h.client.status().await.ok()?;
            nodes.iter().all(|n| n.applied_index >= bound).then_some(())
        },
    )
    .await;
    let a = h.client_as("team-a");
    let mut everything = a.watch(WatchSelect::Prefix(String::new()), WatchFrom::Now);
    assert_denied(everything.next().await, &["team-a", "read lease"]);
    let mut own = a.watch(WatchSelect::Prefix("a/".into()), WatchFrom::Now);
    own.started().await.unwrap();
    a.acquire("a/l", "team-a", 5_000).await.unwrap();
    let event = own.next().await.unwrap();
    assert_eq!(
        (event.kind, event.lease.as_str()),
        (EventKind::Granted, "a/l")
    );
    h.client
        .change_policy(Change::Unbind(pb::Binding {
            identity: "team-a".into(),
            role: "team-a".into(),
        }))
        .await
        .unwrap();
    // Events of leases it may no longer read never reach it; the stream ends instead.
    let ended = tokio::time::timeout(Duration::from_secs(10), own.next())
        .await
        .expect("the watch to end")
        .expect_err("a refusal, not an event");
    assert_eq!(ended.code(), Code::PermissionDenied, "{ended}");
}

/// A grant is in force from its log index, on every node once it applies it: a watch sent to a
/// follower that has not applied the grant yet must not be refused for good. The follower's
/// denial is its own (the leader, whose policy may be newer, has the last word), so the client
/// asks again and the watch starts. Before, the follower's policy refused it with
/// PERMISSION_DENIED, which a client takes as final.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_on_a_follower_behind_a_grant_starts_once_the_grant_is_in_force() {
    let h = Harness::start_authorized(3, false).await;
    let leader = h.leader().await;
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    h.cluster.signal(behind, libc::SIGSTOP);
    role_for(&h.client, "team-a", vec![grant("read-leases", "a/")]).await;
    // Sent while the follower is stopped: it reads the watch as it wakes, beside the leader's
    // entries, which it may not have applied yet.
    let a = h.client_of_nodes_as(&[behind], "team-a");
    let port: u16 = h.endpoints[(behind - 1) as usize]
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap();
    let known = connections_to(port);
    let mut watch = a.watch(WatchSelect::Prefix("a/".into()), WatchFrom::Now);
    // Woken once the watch's connection waits at it, its first bytes unread.
    let woken = async {
        let waits = || {
            let waiting = connections_to(port)
                .into_iter()
                .any(|(from, unread)| !known.iter().any(|(k, _)| *k == from) && unread > 0);
            std::future::ready(waiting.then_some(()))
        };
        let what = "the watch's connection to wait at the stopped follower";
        wait_for(what, Duration::from_secs(10), waits).await;
        h.cluster.signal(behind, libc::SIGCONT);
    };
    let (started, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(15), watch.started()),
        woken
    );
    started
        .expect("the watch to start within 15 s")
        .expect("the watch to start, not to be refused");
}

/// The connections accepted on local `port` (a node's, queued for its accept or not) as
/// `(remote port, bytes received and not yet read)`, from `/proc/net/tcp`.
fn connections_to(port: u16) -> Vec<(u16, u64)> {
    let port_of = |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
    let read = |table| std::fs::read_to_string(table).unwrap_or_default();
    let tables = [read("/proc/net/tcp"), read("/proc/net/tcp6")];
    let mut connections = Vec::new();
    for line in tables.iter().flat_map(|table| table.lines().skip(1)) {
        // sl local_address rem_address st tx_queue:rx_queue ...; state 01 is ESTABLISHED.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, local, remote, state, queues, ..] = fields[..] else {
            continue;
        };
        let unread = queues
            .split_once(':')
            .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok());
        if let (Some(local), Some(remote), Some(unread)) = (port_of(local), port_of(remote), unread)
        {
            if local == port && state == "01" {
                connections.push((remote, unread));
            }
        }
    }
    connections
}

/// A listing shows an identity the leases and rows it may read, and reads nothing else: its
/// pages run over its grants' prefixes only, so no continuation token names what it may not see.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_shows_only_what_its_identity_may_read() {
    let h = Harness::start_authorized(3, false).await;
    let grants = vec![
        grant("read-leases", "a/"),
        grant("read-leases", "c/"),
        grant("read-leases", "a/x/"),
        grant("read-keys", "a/k"),
    ];
    role_for(&h.client, "team-a", grants).await;
    role_for(
        &h.client,
        "writer",
        vec![grant("hold", ""), grant("write", "")],
    )
    .await;
    let writer = h.client_as("writer");
    for name in ["a/1", "b/1", "a/2", "ab/1", "c/1", "a/x/1"] {
        writer.acquire(name, "writer/w", 60_000).await.unwrap();
        writer.put(name, b"v", None).await.unwrap();
    }
    writer.put("a/k1", b"v", None).await.unwrap();
    let a = h.client_as("team-a");
    let mut listing = Listing {
        limit: 2,
        ..Listing::under("")
    };
    let mut pages = Vec::new();
    loop {
        let page = a.list_leases(&listing).await.unwrap().outcome;
        let names: Vec<String> = page.entries.into_iter().map(|(n, _)| n).collect();
        pages.push((names, page.next.clone()));
        match page.next {
            Some(next) => listing.page_token = next,
            None => break,
        }
    }
    let page = |names: &[&str], next: Option<&str>| {
        let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        (names, next.map(str::to_owned))
    };
    let expected = [
        page(&["a/1", "a/2"], Some("a/2")),
        page(&["a/x/1", "c/1"], None),
    ];
    assert_eq!(pages, expected);
    let keys = a.list_keys(&Listing::under("a/")).await.unwrap().outcome;
    let names: Vec<&str> = keys.entries.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a/k1"]);
    // Under a prefix inside its grant, all of it; under one outside, nothing.
    let inside = a.list_leases(&Listing::under("a/x")).await.unwrap().outcome;
    assert_eq!(inside.entries.len(), 1);
    let outside = a.list_leases(&Listing::under("b/")).await.unwrap().outcome;
    assert_eq!((outside.entries.len(), outside.next), (0, None));
    // The admin, who may read everything, sees everything.
    let all = h
        .client
        .list_leases(&Listing::under(""))
        .await
        .unwrap()
        .outcome;
    assert_eq!(all.entries.len(), 6);
}

/// Every identity sees the members, their roles and client addresses (what a client needs to
/// find the cluster); only an admin sees the peer plane's addresses and the nodes' pids.
#[tokio::test(flavor = "multi_thread")]
async fn status_and_members_show_the_peer_plane_to_admins_only() {
    let h = Harness::start_authorized(3, false).await;
    let plain = h.client_as(CLIENT_NAME);
    let seen = plain.status().await.unwrap();
    assert_eq!(seen.len(), 3);
    for node in &seen {
        assert!(!node.address.is_empty(), "{node:?}");
        assert_eq!((node.peer_address.as_str(), node.pid), ("", 0), "{node:?}");
        assert!(
            node.authorization && node.client_certificates && node.tls,
            "{node:?}"
        );
    }
    let members = plain.members().await.unwrap().members;
    assert_eq!(members.len(), 3);
    assert!(
        members.iter().all(|m| m.peer_address.is_empty()),
        "{members:?}"
    );
    let by_admin = h.client.status().await.unwrap();
    assert!(by_admin
        .iter()
        .all(|n| !n.peer_address.is_empty() && n.pid != 0));
    let members = h.client.members().await.unwrap().members;
    assert!(
        members.iter().all(|m| !m.peer_address.is_empty()),
        "{members:?}"
    );
}

/// A session belongs to the identity that opened it: another identity that sends requests
/// under its id (ids are small and sequential) is denied, and the owner's requests go on.
#[tokio::test(flavor = "multi_thread")]
async fn another_identity_cannot_use_a_session_it_did_not_open() {
    let h = Harness::start_authorized(3, false).await;
    role_for(&h.client, "team-a", vec![grant("write", "")]).await;
    role_for(&h.client, "team-b", vec![grant("write", "")]).await;
    let raw = |name: &str| {
        let tls = Tls::load(&h.identity_files(name))
            .unwrap()
            .client_config(None);
        let endpoint = format!("https://{}", h.endpoints[0]);
        async move {
            let channel = tonic::transport::Endpoint::from_shared(endpoint)
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .unwrap();
            LeaseStoreClient::new(channel)
        }
    };
    let (mut a, mut b) = (raw("team-a").await, raw("team-b").await);
    let session = a
        .register(pb::RegisterRequest {})
        .await
        .unwrap()
        .into_inner()
        .client_id;
    let put = |sequence| pb::PutRequest {
        key: "k".into(),
        value: b"v".to_vec(),
        fence: None,
        request_id: Some(pb::RequestId {
            client_id: session,
            sequence,
        }),
    };
    let status = b.put(put(1)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().starts_with("team-b may not use session"),
        "{status:?}"
    );
    a.put(put(1)).await.unwrap();
}

/// A client that cannot show a certificate gets its identity from a bearer token: the admin
/// adds it (the store keeps its SHA-256 only), the client sends it over TLS, and once revoked
/// it is refused as unknown.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_gives_a_client_without_a_certificate_its_identity_until_revoked() {
    let h = Harness::start_authorized_for_tokens(3).await;
    role_for(
        &h.client,
        "svc",
        vec![grant("write", "s/"), grant("read-keys", "s/")],
    )
    .await;
    let admin = h.identity_files(leasehold::tls::certs::ADMIN_NAME);
    let as_admin = |args: &[&str]| h.cli_as(leasehold::tls::certs::ADMIN_NAME, args);
    let added = as_admin(&["auth", "token", "add", "svc"]);
    assert_eq!(added.status.code(), Some(0), "{added:?}");
    let token = String::from_utf8(added.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("lh_"), "{token}");
    let shown = as_admin(&["auth", "show"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("svc has bearer token"), "{shown}");
    assert!(
        !shown.contains(&token[3..]),
        "the policy shows the token itself: {shown}"
    );

    let ca_only = || {
        let pem = std::fs::read(&admin.ca).unwrap();
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(pem));
        LeaseClient::new(&h.endpoints)
            .unwrap()
            .with_tls(tls)
            .unwrap()
    };
    let svc = ca_only().with_bearer_token(&token).unwrap();
    assert_eq!(svc.who_am_i().await.unwrap().identity, "svc");
    svc.put("s/k", b"v", None).await.unwrap();
    assert_denied(svc.put("t/k", b"v", None).await, &["svc", "\"t/k\""]);
    // Reads on every node: a follower forwards the identity the token gave.
    for id in 1..=3 {
        let one = LeaseClient::new(&[h.endpoints[id - 1].clone()])
            .unwrap()
            .with_tls(tonic::transport::ClientTlsConfig::new().ca_certificate(
                tonic::transport::Certificate::from_pem(std::fs::read(&admin.ca).unwrap()),
            ))
            .unwrap()
            .with_bearer_token(&token)
            .unwrap();
        let got = one.get("s/k").await.unwrap().outcome;
        assert_eq!(got.as_deref(), Some(&b"v"[..]), "node {id}");
    }
    // Without a token, a client without a certificate is anonymous: denied everything.
    assert_denied(ca_only().put("s/k", b"v", None).await, &["anonymous"]);
    let wrong = ca_only().with_bearer_token("lh_not-a-token").unwrap();
    let refused = wrong.put("s/k", b"v", None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");

    let revoked = as_admin(&["auth", "token", "revoke", "svc"]);
    assert_eq!(revoked.status.code(), Some(0), "{revoked:?}");
    // Refused by the node that takes it once it applied the revocation, and where the write
    // applies if it had not yet: never written.
    let refused = svc.put("s/k", b"after", None).await.unwrap_err();
    match refused.code() {
        Code::Unauthenticated => assert!(refused.to_string().contains("not known"), "{refused}"),
        Code::PermissionDenied => assert!(refused.to_string().contains("revoked"), "{refused}"),
        _ => panic!("{refused}"),
    }
    let kept = h.client.get("s/k").await.unwrap().outcome;
    assert_eq!(kept.as_deref(), Some(&b"v"[..]));
}

/// A node without TLS refuses a bearer token rather than take it over plaintext.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_sent_without_tls_is_refused() {
    let h = Harness::start(1, false).await;
    // A node without TLS refuses a token that a program of its own sent in clear ...
    let mut raw = LeaseStoreClient::new(h.client_channel(1).await);
    let mut request = tonic::Request::new(pb::GetRequest { key: "k".into() });
    let bearer = "Bearer lh_anything".parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    let refused = raw.get(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("TLS only"), "{refused:?}");
    // ... and the Rust client will not send one without TLS at all (review finding 8).
    let client = LeaseClient::new(&h.endpoints)
        .unwrap()
        .with_bearer_token("lh_anything")
        .unwrap();
    let refused = client.put("k", b"v", None).await.unwrap_err();
    assert!(refused.to_string().contains("TLS only"), "{refused}");
    // The CLI will not send one without TLS at all.
    let out = harness::cli(&h.endpoints, &["--bearer-token", "lh_anything", "get", "k"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-ca"), "{stderr}");
}

/// `certs --client NAME` issues only what names an identity: never a file of the set's own (the
/// CA's, a node's), a member's name, or a name that is no DNS name.
#[test]
fn certs_for_a_client_refuse_names_of_the_sets_own_files_and_members() {
    let dir = tempfile::TempDir::new().unwrap();
    let set = leasehold::tls::certs::write_set(dir.path(), 3, &[]).unwrap();
    let ca = std::fs::read(&set.node(1).ca).unwrap();
    for name in [
        "ca",
        "ca-key",
        "node-1",
        "client",
        "leasehold-node-2",
        "../x",
        "team/a",
    ] {
        let out = std::process::Command::new(harness::binary())
            .args(["certs", "--dir"])
            .arg(dir.path())
            .args(["--client", name])
            .output()
            .unwrap();
        harness::one_line_error(&out, name);
    }
    assert_eq!(std::fs::read(&set.node(1).ca).unwrap(), ca);
    let issued = set.issue_client("team-a.prod").unwrap();
    assert!(issued.cert.ends_with("team-a.prod.pem"));
}

/// A write under `team`'s prefix, which opens `c`'s session if it has none.
async fn writes(c: &LeaseClient, team: &str) -> Result<(), ClientError> {
    c.put(&format!("{team}/k"), b"v", None).await.map(drop)
}

/// Asserts that `c`'s write under `team`'s prefix, which opens a session, is refused within
/// 2 s with RESOURCE_EXHAUSTED, its message naming each of `naming`.
async fn refused_at_once(c: &LeaseClient, team: &str, naming: &[&str]) {
    let started = Instant::now();
    let refused = writes(c, team).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused after {:?}",
        started.elapsed()
    );
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
    for part in naming {
        assert!(
            refused.to_string().contains(part),
            "{refused} should name {part}"
        );
    }
}

/// Sessions are replicated state kept for an hour: past `--max-sessions-per-identity` an
/// identity opens no more, and past `--max-sessions` nobody does, each refused at once
/// (RESOURCE_EXHAUSTED, SESSIONS_EXHAUSTED) naming the limit and the flag; a closed session
/// makes room again.
#[tokio::test(flavor = "multi_thread")]
async fn sessions_past_their_caps_are_refused_at_once_naming_the_limit() {
    let caps = ["--max-sessions-per-identity", "2", "--max-sessions", "4"];
    let h = Harness::start_authorized_with(3, false, |c| c.with_serve_args(&caps)).await;
    for team in ["team-a", "team-b"] {
        role_for(&h.client, team, vec![grant("write", &format!("{team}/"))]).await;
    }
    let (a1, a2, a3) = (
        h.client_as("team-a"),
        h.client_as("team-a"),
        h.client_as("team-a"),
    );
    writes(&a1, "team-a").await.unwrap();
    writes(&a2, "team-a").await.unwrap();
    let naming = ["team-a", "2 open sessions", "--max-sessions-per-identity"];
    refused_at_once(&a3, "team-a", &naming).await;
    // Another identity still may, until the cluster's cap.
    let open = h.status().await.iter().map(|n| n.sessions).max().unwrap();
    let room = 4 - open as usize;
    assert!(room >= 1, "{open} sessions open");
    let mut team_b = Vec::new();
    for _ in 0..room {
        let b = h.client_as("team-b");
        writes(&b, "team-b").await.unwrap();
        team_b.push(b);
    }
    let naming = ["the cluster", "4 open sessions", "--max-sessions"];
    refused_at_once(&h.client_as("team-b"), "team-b", &naming).await;
    // A session closed makes room for another of its identity.
    a1.close_session().await.unwrap();
    writes(&a3, "team-a").await.unwrap();
}

/// Leases and rows are replicated state too: past `--max-leases-per-identity` an identity
/// brings no more lease names into the table (a lease is kept until forgotten, after
/// `--lease-retention` free) and past `--max-rows-per-identity` no more row keys, each refused
/// at once (RESOURCE_EXHAUSTED, LEASES_EXHAUSTED or ROWS_EXHAUSTED) by the leader, through a
/// follower too, naming the limit and the flag, and never as a write that may have been
/// applied. What adds nothing (a name the table keeps, acquired by any holder; a row
/// overwritten) is answered as ever, another identity is not held back, and a lease forgotten
/// or a row deleted makes room again.
#[tokio::test(flavor = "multi_thread")]
async fn leases_and_rows_past_an_identitys_caps_are_refused_at_once_naming_the_limit() {
    let caps = [
        "--max-leases-per-identity",
        "2",
        "--max-rows-per-identity",
        "2",
        "--lease-retention",
        "2",
    ];
    let h = Harness::start_authorized_with(3, false, |c| c.with_serve_args(&caps)).await;
    for team in ["team-a", "team-b"] {
        let prefix = format!("{team}/");
        let grants = ["hold", "write", "delete"].map(|p| grant(p, &prefix));
        role_for(&h.client, team, grants.to_vec()).await;
    }
    let leader = h.leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let a = h.client_as("team-a");
    let a_by_follower = h.client_of_nodes_as(&[follower], "team-a");
    let ttl = 60_000;
    let l1 = granted(&a.acquire("team-a/l1", "team-a", ttl).await.unwrap()).unwrap();
    granted(&a.acquire("team-a/l2", "team-a/worker", ttl).await.unwrap()).unwrap();
    let leases = [
        "team-a",
        "2 leases it created",
        "--max-leases-per-identity",
        "release",
    ];
    for c in [&a, &a_by_follower] {
        at_cap(c.acquire("team-a/l3", "team-a/other", ttl), &leases).await;
    }
    // Names the table keeps add nothing: renewed for their holder, answered as held to another,
    // granted again once released.
    granted(&a.acquire("team-a/l1", "team-a", ttl).await.unwrap()).unwrap();
    let held = a.acquire("team-a/l2", "team-a/other", ttl).await.unwrap();
    assert_eq!(granted(&held), None, "{held:?}");
    a.release("team-a/l1", "team-a", l1).await.unwrap();
    let l1 = granted(&a.acquire("team-a/l1", "team-a/other", ttl).await.unwrap()).unwrap();
    let b = h.client_as("team-b");
    granted(&b.acquire("team-b/l1", "team-b", ttl).await.unwrap()).unwrap();
    // Released, still kept (free) and counted; forgotten two seconds later: room for a new
    // name.
    a.release("team-a/l1", "team-a/other", l1).await.unwrap();
    at_cap(a.acquire("team-a/l3", "team-a/other", ttl), &leases).await;
    wait_for(
        "the released lease to be forgotten",
        Duration::from_secs(15),
        || async {
            let acquired = a.acquire("team-a/l3", "team-a/other", ttl).await;
            acquired.ok().and_then(|answer| granted(&answer))
        },
    )
    .await;

    for key in ["team-a/k1", "team-a/k2"] {
        assert!(written(&a.put(key, b"v", None).await.unwrap()));
    }
    let rows = [
        "team-a",
        "2 rows it created",
        "--max-rows-per-identity",
        "delete",
    ];
    for c in [&a, &a_by_follower] {
        at_cap(c.put("team-a/k3", b"v", None), &rows).await;
    }
    assert!(written(&a.put("team-a/k1", b"again", None).await.unwrap()));
    assert!(written(&b.put("team-b/k1", b"v", None).await.unwrap()));
    a.delete("team-a/k2", None).await.unwrap();
    assert!(written(&a.put("team-a/k3", b"v", None).await.unwrap()));
}

/// Asserts that `call` is refused at a cap within 2 s (not retried): RESOURCE_EXHAUSTED,
/// determinate, its message naming each of `naming`. (Its reason, which the clients read to
/// give it back at once, is the node's error.rs's to test.)
async fn at_cap<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = Result<T, ClientError>>,
    naming: &[&str],
) {
    let started = Instant::now();
    let refused = call.await.expect_err("refused at its cap");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused after {:?}",
        started.elapsed()
    );
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
    assert!(!refused.is_indeterminate(), "{refused}");
    for part in naming {
        assert!(
            refused.to_string().contains(part),
            "{refused} should name {part}"
        );
    }
}
