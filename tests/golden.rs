//! Data dirs of earlier builds (`tests/golden/<build>/`, written by `tests/golden/make.sh` with
//! that build's binary) under this one (issue 41, item 8): every log entry and snapshot they
//! hold decodes, replaying them reaches the state digest their build reported, and a node of
//! this build starts on them and serves what they held. Between them the dirs hold every kind
//! of log entry those builds write (checked below, so that a kind cannot go untested).

mod harness;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use harness::wait_for;
use leasehold::lease::Op;
use leasehold::raft::{open_storage, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, RaftLogReader};

/// The builds whose data dirs this one must read.
const BUILDS: &[&str] = &["161302a"];

/// Every kind of entry those builds write: each `Op`, a blank entry (a new leader's first) and
/// a membership.
const KINDS: &[&str] = &[
    "Acquire",
    "Release",
    "Renew",
    "Put",
    "Delete",
    "Advance",
    "Tick",
    "Register",
    "Forget",
    "As",
    "Auth",
    "Blank",
    "Membership",
];

fn golden(build: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(build)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// An operation's variant name, and its wrapped operation's for an `As`.
fn kinds_of(op: &Op, into: &mut BTreeSet<String>) {
    let debug = format!("{op:?}");
    let name: String = debug
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    into.insert(name);
    if let Op::As { op, .. } = op {
        kinds_of(op, into);
    }
}

fn expected(build: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(golden(build).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn data_dirs_of_earlier_builds_replay_to_the_state_their_build_reported() {
    for build in BUILDS {
        let expected = expected(build);
        let mut kinds = BTreeSet::new();
        for dir in ["default", "manual"] {
            let copy = tempfile::TempDir::new().unwrap();
            copy_dir(&golden(build).join(dir), copy.path());
            let metrics = leasehold::metrics::Metrics::new();
            let (mut log, mut state) = open_storage(copy.path(), metrics).unwrap();
            let (applied, _) = state.applied_state().await.unwrap();
            let from = applied.map_or(0, |id| id.index) + 1;
            let upto = expected[dir]["applied_index"].as_u64().unwrap();
            if dir == "manual" {
                assert!(from > 1, "{build}/{dir}: no snapshot to read");
            }
            // Every entry still on disk decodes; the kinds are counted over them all.
            let kept = log.get_log_state().await.unwrap().last_purged_log_id;
            let first = kept.map_or(0, |id| id.index + 1);
            let on_disk: Vec<openraft::Entry<TypeConfig>> = log
                .get_log_reader()
                .await
                .try_get_log_entries(first..=upto)
                .await
                .unwrap();
            assert_eq!(on_disk.len() as u64, upto + 1 - first, "{build}/{dir}");
            for entry in &on_disk {
                match &entry.payload {
                    EntryPayload::Normal(batch) => {
                        for command in &batch.0 {
                            kinds_of(&command.op, &mut kinds);
                        }
                    }
                    EntryPayload::Blank => drop(kinds.insert("Blank".into())),
                    EntryPayload::Membership(_) => drop(kinds.insert("Membership".into())),
                }
            }
            let after_snapshot = on_disk.into_iter().filter(|e| e.log_id.index >= from);
            state.apply(after_snapshot).await.unwrap();
            let digest = state.shared().read().table.digest();
            assert_eq!(
                digest,
                expected[dir]["state_digest"].as_u64().unwrap(),
                "{build}/{dir}: replayed to index {upto}, this build's state differs from the one \
                 {build} reported"
            );
        }
        let missing: Vec<_> = KINDS.iter().filter(|k| !kinds.contains(**k)).collect();
        assert!(
            missing.is_empty(),
            "{build}'s golden dirs hold no {missing:?}: write them again with \
             tests/golden/make.sh"
        );
    }
}

/// Kills and reaps a node however the test ends, holding its ports until then.
struct Node {
    child: std::process::Child,
    _ports: Vec<leasehold::cli::local::HeldPort>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts this build's node 1 on `dir` with `args`; its client address.
fn serve(dir: &Path, args: &[&str]) -> (Node, String) {
    let ports = leasehold::cli::local::HeldPort::any(2).unwrap();
    let (client, peer) = (ports[0].addr(), ports[1].addr());
    let child = Command::new(harness::binary())
        .args(["serve", "--id", "1", "--data-dir"])
        .arg(dir)
        .args(["--listen", &client, "--peer-listen", &peer])
        .args(["--peers", &format!("1={peer}")])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (
        Node {
            child,
            _ports: ports,
        },
        client,
    )
}

fn cli(client: &str, tls: &[String], args: &[&str]) -> Output {
    Command::new(harness::binary())
        .args(["--endpoints", client])
        .args(tls)
        .args(args)
        .output()
        .unwrap()
}

/// What the CLI prints for `args`, once the node answers it.
async fn answered(client: &str, tls: &[String], args: &[&str]) -> String {
    wait_for(
        "the node on the golden data dir to answer",
        Duration::from_secs(20),
        || async {
            let out = cli(client, tls, args);
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_of_this_build_starts_on_earlier_builds_data_dirs_and_serves_what_they_held() {
    for build in BUILDS {
        let copy = tempfile::TempDir::new().unwrap();
        copy_dir(&golden(build), copy.path());
        let manual = copy.path().join("manual");
        let (_node, client) = serve(&manual, &["--manual-clock"]);
        assert_eq!(
            answered(&client, &[], &["get", "m1"]).await,
            "v1",
            "{build}"
        );
        assert_eq!(
            answered(&client, &[], &["get", "m/row"]).await,
            "v",
            "{build}"
        );

        let tls = copy.path().join("tls");
        let file = |name: &str| tls.join(name).display().to_string();
        let node_tls = [
            "--tls-cert".to_owned(),
            file("node-1.pem"),
            "--tls-key".to_owned(),
            file("node-1-key.pem"),
            "--tls-ca".to_owned(),
            file("ca.pem"),
        ];
        let mut args: Vec<&str> = node_tls.iter().map(String::as_str).collect();
        args.extend(["--auth-admin", "admin"]);
        let (_node, client) = serve(&copy.path().join("default"), &args);
        let admin = [
            "--tls-ca".to_owned(),
            file("ca.pem"),
            "--tls-cert".to_owned(),
            file("admin.pem"),
            "--tls-key".to_owned(),
            file("admin-key.pem"),
        ];
        assert_eq!(
            answered(&client, &admin, &["get", "plain"]).await,
            "v2",
            "{build}"
        );
        assert_eq!(
            answered(&client, &admin, &["get", "team/row"]).await,
            "w",
            "{build}"
        );
        assert_eq!(
            answered(&client, &admin, &["get", "k45"]).await,
            "v45",
            "{build}"
        );
    }
}
