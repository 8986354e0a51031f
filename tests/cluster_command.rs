//! `leasehold cluster` as a person runs it: it starts the nodes, reports a leader, reports a
//! `kill -9` with the command that brings the node back, sees it come back, and stops every
//! node on Ctrl-C, the hand-restarted one included.

mod harness;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use harness::{binary, wait_for};
use leasehold::cli::local::HeldPort;

/// A port for `cluster --port` with three consecutive loopback ports from it, and three more
/// from 100 and from 200 above it, where `cluster` puts the peer and HTTP ports by default: all
/// nine held until the test drops them (see `HeldPort`), so nothing else takes them before the
/// nodes bind them. Each call in this process starts its search elsewhere, so that the tests
/// running at once rarely try the same ports.
fn held_consecutive_ports() -> (u16, Vec<HeldPort>) {
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = (std::process::id() as u16).wrapping_add(call.wrapping_mul(7_919));
    // Outside the ephemeral range, which port-0 binds draw from.
    let range = leasehold::cli::local::unassigned_ports().unwrap_or(20_000..60_000);
    let width = range.end - range.start - 202;
    for attempt in 0..200u16 {
        let base = range.start + (seed.wrapping_add(attempt.wrapping_mul(97))) % width;
        let held: Vec<_> = [0, 1, 2, 100, 101, 102, 200, 201, 202]
            .into_iter()
            .map_while(|i| HeldPort::bind(base + i).ok())
            .collect();
        if held.len() == 9 {
            return (base, held);
        }
    }
    panic!("no three consecutive free ports with three more 100 and 200 above them");
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

struct Lines(mpsc::Receiver<String>);

impl Lines {
    /// The next line containing `needle`, skipping others; panics after `timeout`.
    fn until(&self, needle: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => skipped.push(line),
                Err(_) => panic!(
                    "no line containing {needle:?} within {timeout:?}; the lines before:\n{}",
                    skipped.join("\n")
                ),
            }
        }
    }
}

#[test]
fn cluster_reports_a_death_with_the_restart_command_and_stops_every_node_on_ctrl_c() {
    let dir = tempfile::TempDir::new().unwrap();
    let (port, _held) = held_consecutive_ports();
    let (mut cluster, lines, pids) = start_cluster(dir.path(), port);
    let guard = scopeguard(&mut cluster);
    let leader_line = lines.until("is now the leader", Duration::from_secs(20));
    let leader: usize = leader_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();

    // SAFETY: SIGKILL to the leader's pid, which `cluster` printed and has not reaped yet.
    unsafe { libc::kill(pids[leader - 1], libc::SIGKILL) };
    lines.until(&format!("node {leader} died"), Duration::from_secs(10));
    let restart = lines.until(&format!("serve --id {leader}"), Duration::from_secs(2));
    lines.until("is now the leader", Duration::from_secs(20));

    // Bring it back exactly as told, outside the cluster command.
    Command::new("sh")
        .args(["-c", &format!("{} &", restart.trim())])
        .status()
        .unwrap();
    let back = lines.until(&format!("node {leader} is back"), Duration::from_secs(20));
    let restarted: i32 = back
        .split("pid ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert!(alive(restarted));

    // SAFETY: SIGINT to the cluster process this test spawned: Ctrl-C.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGINT) };
    lines.until("all nodes stopped", Duration::from_secs(15));
    assert!(guard.0.wait().unwrap().success());
    std::mem::forget(guard);
    harness::wait_until_dead(restarted);
    for (i, pid) in pids.iter().enumerate() {
        if i + 1 != leader {
            assert!(
                !alive(*pid),
                "node {} (pid {pid}) still runs after Ctrl-C",
                i + 1
            );
        }
    }
}

/// `leasehold cluster` in `dir` from `port` on: the process, its output line by line, and the
/// pids of nodes 1 to 3 as it printed them.
fn start_cluster(dir: &std::path::Path, port: u16) -> (std::process::Child, Lines, Vec<i32>) {
    let mut cluster = Command::new(binary())
        .args([
            "cluster",
            "--dir",
            dir.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        // The nodes' runtimes and logs as `cluster` sets them, whatever the test's own.
        .env_remove("TOKIO_WORKER_THREADS")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = cluster.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let lines = Lines(rx);
    lines.until("3-node cluster", Duration::from_secs(10));
    let mut pids = Vec::new();
    for id in 1..=3 {
        let line = lines.until(
            &format!("node {id}  127.0.0.1:{}", port + id - 1),
            Duration::from_secs(5),
        );
        let pid: i32 = line
            .split("pid ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        pids.push(pid);
    }
    (cluster, lines, pids)
}

/// A port of 0 (any port) would give nodes that cannot find each other and addresses printed
/// wrong: refused, naming the flag, before anything starts. Before, `cluster --port 0` started
/// nodes on ports 0-2, 100-102 and 200-202 (found in a walkthrough).
#[test]
fn cluster_refuses_port_0_naming_the_flag() {
    let dir = tempfile::TempDir::new().unwrap();
    for flag in ["--port", "--peer-port", "--http-port", "--metrics-port"] {
        let mut cluster = Command::new(binary())
            .args(["cluster", "--dir", dir.path().to_str().unwrap(), flag, "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A cluster that started runs until stopped: given 10 s to refuse, then killed.
        let asked = std::time::Instant::now();
        while cluster.try_wait().unwrap().is_none() && asked.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = cluster.kill();
        let out = cluster.wait_with_output().unwrap();
        let error = harness::one_line_error(&out, flag);
        assert!(error.contains(&format!("{flag} 0")), "{error}");
        let started = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(started, 0, "{flag} 0 started something in the dir");
    }
}

/// `kill` (SIGTERM), as a service manager or a script stops a process, stops every node as
/// Ctrl-C does. Before, only SIGINT was handled: the command died of the SIGTERM and left its
/// three nodes running, holding their ports and data dirs.
#[test]
fn cluster_stops_every_node_on_sigterm_as_on_ctrl_c() {
    let dir = tempfile::TempDir::new().unwrap();
    let (port, _held) = held_consecutive_ports();
    let (mut cluster, lines, pids) = start_cluster(dir.path(), port);
    let guard = scopeguard(&mut cluster);
    lines.until("is now the leader", Duration::from_secs(20));
    // SAFETY: SIGTERM to the cluster process this test spawned.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
    let status = guard.0.wait().unwrap();
    std::mem::forget(guard);
    let started = std::time::Instant::now();
    while pids.iter().any(|pid| alive(*pid)) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
    for pid in &left {
        // SAFETY: SIGKILL to a node the cluster this test spawned started, so none outlives it.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "nodes outlived `cluster`: pids {left:?}");
    assert!(status.success(), "cluster exited with {status}");
}

/// Three nodes on one machine share its cores: each node's runtime gets its share (at least
/// one worker), not a worker per core each, and says so when it starts.
#[tokio::test]
async fn cluster_gives_each_node_its_share_of_the_cores() {
    let cores = std::thread::available_parallelism().unwrap().get();
    if cores < 2 {
        // One worker is then both the share and tokio's default: nothing to tell apart.
        eprintln!("skipped: one core");
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let (port, _held) = held_consecutive_ports();
    let (mut cluster, lines, _pids) = start_cluster(dir.path(), port);
    let _guard = scopeguard(&mut cluster);
    lines.until("is now the leader", Duration::from_secs(20));
    let share = format!("runtime_threads={}", (cores / 3).max(1));
    for id in 1..=3 {
        let log = dir.path().join(format!("node-{id}.log"));
        let line = wait_for(
            &format!("node {id}'s start line in {}", log.display()),
            Duration::from_secs(20),
            || async {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let line = text.lines().find(|l| l.contains("node started"))?;
                Some(line.to_owned())
            },
        )
        .await;
        assert!(
            line.split_whitespace().any(|field| field == share),
            "{cores} cores, 3 nodes: {line}"
        );
    }
}

/// Kills the cluster process if the test fails before it stops it.
struct Guard<'a>(&'a mut std::process::Child);

fn scopeguard(child: &mut std::process::Child) -> Guard<'_> {
    Guard(child)
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: SIGINT lets `cluster` stop its nodes before it exits.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let asked = std::time::Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && asked.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh virtual environment with selenium, which drives Debian's Chromium through Debian's
/// chromedriver (`.ci/run` installs both: packages chromium and chromium-driver).
fn selenium(venv: &std::path::Path) -> std::path::PathBuf {
    for (tool, package) in [
        ("/usr/bin/chromium", "chromium"),
        ("/usr/bin/chromedriver", "chromium-driver"),
    ] {
        assert!(
            std::path::Path::new(tool).exists(),
            "{tool} is missing: install Debian's {package} (.ci/run does)"
        );
    }
    harness::python_venv(venv, &["selenium>=4.20,<5"])
}

/// The console in a real browser against a cluster that `cluster` supervises
/// (`tests/console/browser.py`): three members and one leader; a lease acquired through the CLI
/// shown within 1 s with its token and a falling time left; the leader killed with its row's
/// button, a new leader shown within 2 s and the old node as down; restarted with its button,
/// back as a follower. Screenshots in the target's temp dir (`console/`); the page's load time
/// and size, and the delays it showed things with, on stdout.
#[test]
fn the_console_shows_the_cluster_and_acts_on_its_nodes_in_a_browser() {
    let venv = tempfile::TempDir::new().unwrap();
    let python = selenium(venv.path());
    let dir = tempfile::TempDir::new().unwrap();
    let (port, _held) = held_consecutive_ports();
    let (mut cluster, lines, _) = start_cluster(dir.path(), port);
    let guard = scopeguard(&mut cluster);
    let console = lines.until("console: ", Duration::from_secs(10));
    assert!(
        console.contains(&format!(":{}/ui", port + 200)),
        "{console}"
    );
    let leader_line = lines.until("is now the leader", Duration::from_secs(20));
    let leader: u16 = leader_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // A follower's console, which lives on when the leader is killed.
    let follower = if leader == 1 { 2 } else { 1 };
    let url = format!("http://127.0.0.1:{}/ui", port + 200 + follower - 1);
    let endpoints: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", port + i)).collect();
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/browser.py");
    let run = Command::new(python)
        .arg(script)
        .args([&url, binary(), &endpoints.join(",")])
        .arg(&shots)
        // Selenium finds its driver where it is told, and fetches nothing.
        .env("SE_OFFLINE", "true")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(
        run.status.success(),
        "the browser's run failed:\n{out}\n{err}"
    );
    println!(
        "console, through {url}: {out}screenshots in {}",
        shots.display()
    );
    drop(guard);
}
