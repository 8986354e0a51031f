//! The one harness for multi-process tests: real `leasehold serve` processes on free loopback
//! ports, in a temp dir, killed and reaped when the harness is dropped (also on panic).

#![allow(dead_code)] // Each test binary uses its own part of the harness.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::cli::local::{free_ports, LocalCluster};
use leasehold::client::LeaseClient;
use leasehold::proto::v1 as pb;
use tempfile::TempDir;

pub struct Harness {
    pub cluster: LocalCluster,
    pub client: LeaseClient,
    pub endpoints: Vec<String>,
    // Dropped after `cluster`, so the nodes are dead before their data dirs go.
    _dir: TempDir,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_leasehold")
}

impl Harness {
    /// Starts `nodes` nodes and waits until one of them leads.
    pub async fn start(nodes: usize, manual_clock: bool) -> Harness {
        Harness::start_with(nodes, manual_clock, &[]).await
    }

    /// Like `start`, with more `serve` flags for every node.
    pub async fn start_with(nodes: usize, manual_clock: bool, serve_args: &[&str]) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let endpoints: Vec<String> = free_ports(nodes)
            .expect("free ports")
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let mut cluster =
            LocalCluster::new(binary().as_ref(), dir.path(), &endpoints, manual_clock)
                .with_serve_args(serve_args);
        cluster.start_all().expect("start nodes");
        let client = LeaseClient::new(&endpoints).unwrap();
        let harness = Harness {
            cluster,
            client,
            endpoints,
            _dir: dir,
        };
        harness.leader().await;
        harness
    }

    /// A client that talks to node `id` only.
    pub fn client_of(&self, id: u64) -> LeaseClient {
        LeaseClient::new(&[self.endpoints[(id - 1) as usize].clone()]).unwrap()
    }

    pub async fn status(&self) -> Vec<pb::NodeStatus> {
        self.client
            .status()
            .await
            .map(|s| s.nodes)
            .unwrap_or_default()
    }

    /// The leader's id, once every live node agrees on one.
    pub async fn leader(&self) -> u64 {
        wait_for("a leader", Duration::from_secs(20), || async {
            let nodes = self.status().await;
            let leaders: Vec<u64> = nodes
                .iter()
                .filter(|n| n.role == pb::Role::Leader as i32)
                .map(|n| n.id)
                .collect();
            (leaders.len() == 1).then(|| leaders[0])
        })
        .await
    }

    /// A leader other than `old`.
    pub async fn new_leader(&self, old: u64) -> u64 {
        wait_for("a new leader", Duration::from_secs(20), || async {
            let leader = self.leader().await;
            (leader != old).then_some(leader)
        })
        .await
    }

    /// Node `id`'s status, if it has applied as far as the leader and holds the same state
    /// there (the same state digest, not only the same index).
    pub async fn caught_up(&self, id: u64) -> Option<pb::NodeStatus> {
        let nodes = self.status().await;
        let leader = nodes.iter().find(|n| n.role == pb::Role::Leader as i32)?;
        let node = nodes.iter().find(|n| n.id == id)?;
        (node.applied_index == leader.applied_index && node.state_digest == leader.state_digest)
            .then(|| node.clone())
    }

    /// Makes node `id` the leader by killing (and restarting) whichever other node leads,
    /// until `id` wins an election; each round gives it about an even chance.
    pub async fn make_leader(&mut self, id: u64) {
        for _ in 0..10 {
            let leader = self.leader().await;
            if leader == id {
                return;
            }
            self.kill(leader);
            self.rejoin_after_failover(leader).await;
        }
        panic!("node {id} did not win an election in 10 rounds");
    }

    /// Once another node than the dead `id` leads, restarts `id` and waits until it holds the
    /// leader's state.
    pub async fn rejoin_after_failover(&mut self, id: u64) {
        self.new_leader(id).await;
        self.restart(id);
        wait_for(
            "the restarted node to catch up",
            Duration::from_secs(20),
            || self.caught_up(id),
        )
        .await;
    }

    pub fn kill(&mut self, id: u64) {
        self.cluster.kill(id);
    }

    pub fn restart(&mut self, id: u64) {
        self.cluster.start(id).expect("restart node");
    }
}

/// Polls `check` until it yields a value; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn granted(response: &pb::AcquireResponse) -> Option<u64> {
    match &response.outcome {
        Some(pb::acquire_response::Outcome::Granted(g)) => Some(g.token),
        _ => None,
    }
}

pub fn written(response: &pb::PutResponse) -> bool {
    matches!(
        response.outcome,
        Some(pb::put_response::Outcome::Written(_))
    )
}

/// Waits up to 10 s for a process that is not our child to exit; panics if it does not.
pub fn wait_until_dead(pid: i32) {
    let started = Instant::now();
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "pid {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Seeded randomness (splitmix64), so a seed replays the same choices without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
