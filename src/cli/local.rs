//! `serve` processes on this machine: what `cluster`, `demo` and the multi-process tests run.
//! Every child is killed and reaped when the `LocalCluster` is dropped.

use std::fs::OpenOptions;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// `count` ports on 127.0.0.1 that were free a moment ago.
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    // Hold every listener until all are chosen, so the same port is not handed out twice.
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// A node's two addresses: one for clients, one for its peers.
#[derive(Clone, Debug)]
pub struct PlaneAddrs {
    /// Where clients reach the node.
    pub client: String,
    /// Where the other nodes reach it.
    pub peer: String,
}

/// Addresses on 127.0.0.1 for `count` nodes, on ports that were free a moment ago.
pub fn local_addrs(count: usize) -> std::io::Result<Vec<PlaneAddrs>> {
    let ports = free_ports(2 * count)?;
    Ok(ports
        .chunks(2)
        .map(|pair| PlaneAddrs {
            client: format!("127.0.0.1:{}", pair[0]),
            peer: format!("127.0.0.1:{}", pair[1]),
        })
        .collect())
}

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
    /// Nodes started with `--join`, to be added with `member add`: not in `--peers`.
    joining: std::collections::BTreeSet<u64>,
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
            joining: Default::default(),
        }
    }

    /// Passes `args` to every node's `serve` as well.
    pub fn with_serve_args(mut self, args: &[&str]) -> Self {
        self.extra_args = args.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// Turns TLS on for every node, with client certificates demanded, from `certs`: each node
    /// serves with its own certificate.
    pub fn with_tls(mut self, certs: &crate::tls::certs::ClusterCerts) -> Self {
        let ca = certs.node(1).ca.display().to_string();
        self.extra_args
            .extend(["--tls-ca".to_owned(), ca, "--client-cert-auth".to_owned()]);
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
        self.extra_args
            .extend(["--auth-admin".to_owned(), admin.to_owned()]);
        self
    }

    /// Starts nodes `ids` with `serve --join` instead of `--peers`: they wait to be added.
    pub fn with_joining(mut self, ids: &[u64]) -> Self {
        self.joining.extend(ids);
        self
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
            self.binary.display(),
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
        let mut command = Command::new(&self.binary);
        // The nodes take their settings from the flags above only: a `LEASEHOLD_*` variable
        // of the caller's (a client's TLS files, say) would otherwise set a `serve` flag.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("LEASEHOLD_") {
                command.env_remove(name);
            }
        }
        let child = command
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
