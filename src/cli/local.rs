//! `serve` processes on this machine: what `cluster`, `demo` and the multi-process tests run.
//! Every child is killed and reaped when the `LocalCluster` is dropped.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// A port on 127.0.0.1 this process holds for a node, from before the node first listens on
/// it until the last copy is dropped, across the node's kills and restarts. Bound first without
/// `SO_REUSEADDR`, so that the bind fails if any socket is bound there; then marked
/// `SO_REUSEADDR`, so that the node's own bind (tokio sets the option too) shares it. Never
/// listening: while the node is down, a connection is refused, as by a dead node. Meanwhile no
/// port-0 bind, no bind without the option and no outgoing connection's local port takes it
/// (the kernel skips bound ports for both); only a bind that names the port with the option
/// could, and nothing here names a port the kernel picked. A port picked while free and then
/// released, as these harnesses did, could be lost to any of them: in CI a node refused to start
/// with "Address already in use", and its cluster, one node short, lost its quorum at the first
/// kill.
///
/// Linux only: there two sockets with `SO_REUSEADDR` may share a port while neither listens.
/// The BSDs (macOS) would ask `SO_REUSEPORT` of both, which tokio does not set, so there the
/// port is let go once picked, to be bound by the node, as before.
#[derive(Clone, Debug)]
pub struct HeldPort {
    port: u16,
    _socket: Option<std::sync::Arc<socket2::Socket>>,
}

impl HeldPort {
    /// Holds `port` (0: one the kernel picks), or fails if any socket is bound there.
    pub fn bind(port: u16) -> std::io::Result<HeldPort> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        socket.bind(&addr.into())?;
        let port = socket
            .local_addr()?
            .as_socket()
            .map(|bound| bound.port())
            .ok_or_else(|| std::io::Error::other("a held port's socket is not an IP socket"))?;
        let held = if cfg!(target_os = "linux") {
            socket.set_reuse_address(true)?;
            Some(std::sync::Arc::new(socket))
        } else {
            None
        };
        Ok(HeldPort {
            port,
            _socket: held,
        })
    }

    /// `count` ports the kernel picks, each held.
    pub fn any(count: usize) -> std::io::Result<Vec<HeldPort>> {
        (0..count).map(|_| HeldPort::bind(0)).collect()
    }

    /// The port held.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Ports no outgoing connection takes on its own and no port-0 bind hands out: those below the
/// kernel's ephemeral range (from 10000, clear of the usual services' ports) or, failing a
/// thousand there, above it. Where a test needs ports in a pattern (`cluster --port`'s
/// consecutive ones), it looks for them here, and holds them (see [`HeldPort`]).
pub fn unassigned_ports() -> Option<std::ops::Range<u16>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let mut bounds = text.iter().flat_map(|t| t.split_whitespace());
    let (low, high) = match (bounds.next(), bounds.next()) {
        (Some(low), Some(high)) => (low.parse::<u16>().ok()?, high.parse::<u16>().ok()?),
        // Linux's default range.
        _ => (32_768, 60_999),
    };
    const FLOOR: u16 = 10_000;
    const ENOUGH: u16 = 1_000;
    if low.saturating_sub(FLOOR) >= ENOUGH {
        Some(FLOOR..low)
    } else if u16::MAX - high >= ENOUGH {
        Some(high + 1..u16::MAX)
    } else {
        None
    }
}

/// A node's two addresses: one for clients, one for its peers.
#[derive(Clone, Debug)]
pub struct PlaneAddrs {
    /// Where clients reach the node.
    pub client: String,
    /// Where the other nodes reach it.
    pub peer: String,
    /// The ports of these addresses, held as long as this (and the cluster made from it)
    /// lives; none where someone else answers for the addresses (`cluster --port`'s).
    pub held: Vec<HeldPort>,
}

/// Addresses on 127.0.0.1 for `count` nodes, on ports held for them (see [`HeldPort`]).
pub fn local_addrs(count: usize) -> std::io::Result<Vec<PlaneAddrs>> {
    let ports = HeldPort::any(2 * count)?;
    Ok(ports
        .chunks(2)
        .map(|pair| PlaneAddrs {
            client: pair[0].addr(),
            peer: pair[1].addr(),
            held: pair.to_vec(),
        })
        .collect())
}

/// `serve`'s flag for a node with TLS and authorization off.
const NO_AUTHORIZATION: &str = "--no-authorization";

/// One node of a [`LocalCluster`]: its addresses, files and process.
pub struct LocalNode {
    /// Its id in the cluster.
    pub id: u64,
    /// Where clients reach it.
    pub addr: String,
    /// Where the other nodes reach it.
    pub peer_addr: String,
    /// Its data dir.
    pub data_dir: PathBuf,
    /// The file its stderr goes to.
    pub log: PathBuf,
    child: Option<Child>,
}

/// `serve` processes on this machine, one per node, started, killed and restarted on demand:
/// what `leasehold cluster` runs, and what the multi-process tests drive.
pub struct LocalCluster {
    binary: PathBuf,
    nodes: Vec<LocalNode>,
    manual_clock: bool,
    /// More `serve` flags, the same for every node.
    extra_args: Vec<String>,
    /// More `serve` flags for one node only, by id.
    node_args: std::collections::BTreeMap<u64, Vec<String>>,
    /// A command that runs one node's `serve` (`prlimit --nofile=N --`), by id.
    node_wrappers: std::collections::BTreeMap<u64, Vec<String>>,
    /// Another build one node runs from its next start (a rolling upgrade), by id.
    node_binaries: std::collections::BTreeMap<u64, PathBuf>,
    /// Nodes started with `--join`, to be added with `member add`: not in `--peers`.
    joining: std::collections::BTreeSet<u64>,
    /// Environment every node gets (the console's supervisor, say).
    env: Vec<(String, String)>,
    /// The ports the nodes' addresses name, held while the cluster lives.
    held: Vec<HeldPort>,
}

impl LocalCluster {
    /// Describes (does not start) one node per pair of client and peer address, numbered from
    /// 1, under `dir`.
    pub fn new(binary: &Path, dir: &Path, addrs: &[PlaneAddrs], manual_clock: bool) -> Self {
        let nodes = addrs
            .iter()
            .enumerate()
            .map(|(i, addrs)| {
                let id = i as u64 + 1;
                LocalNode {
                    id,
                    addr: addrs.client.clone(),
                    peer_addr: addrs.peer.clone(),
                    data_dir: dir.join(format!("node-{id}")),
                    log: dir.join(format!("node-{id}.log")),
                    child: None,
                }
            })
            .collect();
        LocalCluster {
            binary: binary.to_owned(),
            nodes,
            manual_clock,
            extra_args: Vec::new(),
            node_args: Default::default(),
            node_wrappers: Default::default(),
            node_binaries: Default::default(),
            joining: Default::default(),
            env: Vec::new(),
            held: addrs.iter().flat_map(|a| a.held.iter().cloned()).collect(),
        }
    }

    /// Holds `ports` (those of flags given with [`with_node_args`](Self::with_node_args), say)
    /// as long as the cluster lives.
    pub fn holding(mut self, ports: impl IntoIterator<Item = HeldPort>) -> Self {
        self.held.extend(ports);
        self
    }

    /// Sets `name` to `value` in every node's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Passes `args` to every node's `serve` as well, after the flags set before.
    pub fn with_serve_args(mut self, args: &[&str]) -> Self {
        self.extra_args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Sizes every node's runtime to its share of this machine's cores (`serve
    /// --runtime-threads`), at least one thread: the nodes run side by side, and a runtime as
    /// wide as the machine in each adds threads that contend for the same cores. Measured on
    /// two cores, three nodes with one worker each against two, in two sets of interleaved
    /// runs: put at 64 clients 8,563-9,125 ops/s against 6,463-7,811 (p99 18-20 ms against
    /// 30-37), then 6,326-6,721 against 5,532-6,414 (p99 21-25 against 25-34).
    pub fn with_shared_cores(mut self) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let share = (cores / self.nodes.len()).max(1);
        self.extra_args
            .extend(["--runtime-threads".to_owned(), share.to_string()]);
        self
    }

    /// Turns TLS on for every node, with client certificates demanded, from `certs`: each node
    /// serves with its own certificate.
    pub fn with_tls(mut self, certs: &crate::tls::certs::ClusterCerts) -> Self {
        let ca = certs.node(1).ca.display().to_string();
        self.extra_args
            .extend(["--tls-ca".to_owned(), ca, "--client-cert-auth".to_owned()]);
        // A node with TLS needs a choice of authorization: off, until `with_auth` turns it on.
        self.extra_args.push(NO_AUTHORIZATION.to_owned());
        for id in 1..=self.nodes.len() as u64 {
            let files = certs.node(id);
            self.node_args.entry(id).or_default().extend([
                "--tls-cert".to_owned(),
                files.cert.display().to_string(),
                "--tls-key".to_owned(),
                files.key.display().to_string(),
            ]);
        }
        self
    }

    /// Clients need not show a certificate (after [`with_tls`](Self::with_tls)): one without
    /// may bring a bearer token instead.
    pub fn with_client_certs_optional(mut self) -> Self {
        self.extra_args.retain(|arg| arg != "--client-cert-auth");
        self
    }

    /// Every node turns authorization on for a new cluster with `admin` its first admin
    /// (`serve --auth-admin`); needs [`with_tls`](Self::with_tls).
    pub fn with_auth(mut self, admin: &str) -> Self {
        self.extra_args.retain(|arg| arg != NO_AUTHORIZATION);
        self.extra_args
            .extend(["--auth-admin".to_owned(), admin.to_owned()]);
        self
    }

    /// Starts nodes `ids` with `serve --join` instead of `--peers`: they wait to be added.
    pub fn with_joining(mut self, ids: &[u64]) -> Self {
        self.joining.extend(ids);
        self
    }

    /// Runs node `id`'s `serve` under `wrapper`, a command that takes the node's command line
    /// as its last arguments (`prlimit --nofile=1024:1024 --`).
    pub fn with_node_wrapper(mut self, id: u64, wrapper: &[&str]) -> Self {
        let wrapper = wrapper.iter().map(|a| (*a).to_owned()).collect();
        self.node_wrappers.insert(id, wrapper);
        self
    }

    /// Runs node `id` from `binary` from its next start on: another build, as a rolling upgrade
    /// (or its undoing) replaces one node's.
    pub fn set_binary(&mut self, id: u64, binary: &Path) {
        self.node_binaries.insert(id, binary.to_owned());
    }

    /// The build node `id` runs.
    fn binary(&self, id: u64) -> &Path {
        self.node_binaries.get(&id).unwrap_or(&self.binary)
    }

    /// Passes `args` to node `id`'s `serve` only (a node configured unlike the others), after
    /// those it has already.
    pub fn with_node_args(mut self, id: u64, args: &[&str]) -> Self {
        self.node_args
            .entry(id)
            .or_default()
            .extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Every node, by id order.
    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    /// The nodes' client addresses.
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    fn node(&self, id: u64) -> &LocalNode {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut LocalNode {
        &mut self.nodes[(id - 1) as usize]
    }

    /// The nodes' peer addresses.
    pub fn peer_endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.peer_addr.clone()).collect()
    }

    /// `--peers` as every node of this cluster is started with (the joining ones aside).
    pub fn peers(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| !self.joining.contains(&n.id))
            .map(|n| format!("{}={}", n.id, n.peer_addr))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The arguments of `serve` for node `id`.
    pub fn serve_args(&self, id: u64) -> Vec<String> {
        let node = self.node(id);
        let mut args = vec![
            "serve".to_owned(),
            "--id".to_owned(),
            id.to_string(),
            "--listen".to_owned(),
            node.addr.clone(),
            "--peer-listen".to_owned(),
            node.peer_addr.clone(),
            "--data-dir".to_owned(),
            node.data_dir.display().to_string(),
        ];
        if self.joining.contains(&id) {
            args.push("--join".to_owned());
        } else {
            args.extend(["--peers".to_owned(), self.peers()]);
        }
        if self.manual_clock {
            args.push("--manual-clock".to_owned());
        }
        args.extend(self.extra_args.iter().cloned());
        args.extend(self.node_args.get(&id).into_iter().flatten().cloned());
        args
    }

    /// A shell line that brings node `id` back, logging where `start` would.
    pub fn restart_command(&self, id: u64) -> String {
        format!(
            "{} {} 2>>{}",
            self.binary(id).display(),
            self.serve_args(id).join(" "),
            self.node(id).log.display()
        )
    }

    /// Starts node `id`, its stderr (the node's log) appended to its log file.
    pub fn start(&mut self, id: u64) -> std::io::Result<u32> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.node(id).log)?;
        let mut command = match self.node_wrappers.get(&id).map(Vec::as_slice) {
            Some([wrapper, wrapper_args @ ..]) => {
                let mut command = Command::new(wrapper);
                command.args(wrapper_args).arg(self.binary(id));
                command
            }
            _ => Command::new(self.binary(id)),
        };
        // The nodes take their settings from the flags above only: a `LEASEHOLD_*` variable
        // of the caller's (a client's TLS files, say) would otherwise set a `serve` flag.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("LEASEHOLD_") {
                command.env_remove(name);
            }
        }
        let child = command
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .args(self.serve_args(id))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let pid = child.id();
        self.node_mut(id).child = Some(child);
        Ok(pid)
    }

    /// Starts every node.
    pub fn start_all(&mut self) -> std::io::Result<()> {
        for id in 1..=self.nodes.len() as u64 {
            self.start(id)?;
        }
        Ok(())
    }

    /// Node `id`'s process id, while it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.node(id).child.as_ref().map(Child::id)
    }

    /// `kill -9` of node `id`, reaped at once.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.node_mut(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops node `id` as a service manager does: SIGTERM (a leader hands its leadership over
    /// first), then SIGKILL if it still runs after `grace`; reaped either way.
    pub fn stop(&mut self, id: u64, grace: std::time::Duration) {
        self.signal(id, libc::SIGCONT);
        self.signal(id, libc::SIGTERM);
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline && self.try_reap(id).is_none() {
            if self.pid(id).is_none() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.kill(id);
    }

    /// Sends `signal` to node `id` without reaping it (SIGSTOP, SIGCONT, SIGTERM).
    pub fn signal(&self, id: u64, signal: i32) {
        if let Some(pid) = self.pid(id) {
            // SAFETY: kill(2) on a pid this process spawned and has not reaped yet.
            unsafe {
                libc::kill(pid as i32, signal);
            }
        }
    }

    /// Node `id`'s exit status, if it exited since the last call; it is then forgotten.
    pub fn try_reap(&mut self, id: u64) -> Option<ExitStatus> {
        let node = self.node_mut(id);
        let status = node.child.as_mut()?.try_wait().ok()??;
        node.child = None;
        Some(status)
    }

    /// Asks every running node to stop, waits up to `grace`, then kills what is left.
    pub fn stop_all(&mut self, grace: std::time::Duration) {
        for id in 1..=self.nodes.len() as u64 {
            self.signal(id, libc::SIGCONT);
            self.signal(id, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + grace;
        for node in &mut self.nodes {
            let Some(child) = node.child.as_mut() else {
                continue;
            };
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            node.child = None;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harnesses' promise: a held port refuses another holder (any bind without
    /// `SO_REUSEADDR`), takes the node's bind across its restarts, and refuses connections
    /// while the node is down; ports held at once differ.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_held_port_refuses_other_holders_admits_the_nodes_bind_and_refuses_connections_while_down()
    {
        let held = HeldPort::bind(0).unwrap();
        let addr = held.addr();
        assert!(HeldPort::bind(held.port()).is_err(), "held twice");
        let refused = |addr: &str| {
            std::net::TcpStream::connect(addr)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        };
        assert!(refused(&addr), "a held port must not accept connections");
        for _ in 0..2 {
            // A node's bind (std's, like tokio's, sets SO_REUSEADDR), a kill, a restart.
            let node = std::net::TcpListener::bind(&addr).unwrap();
            let dialed = std::net::TcpStream::connect(&addr).unwrap();
            assert_eq!(node.accept().unwrap().1, dialed.local_addr().unwrap());
            assert!(std::net::TcpListener::bind(&addr).is_err(), "two listeners");
            drop(node);
            assert!(refused(&addr), "refused while the node is down");
        }
        let any: std::collections::BTreeSet<u16> = HeldPort::any(6)
            .unwrap()
            .iter()
            .map(HeldPort::port)
            .collect();
        assert_eq!(any.len(), 6, "{any:?}");
        assert!(!any.contains(&held.port()), "{any:?} holds {}", held.port());
    }
}
