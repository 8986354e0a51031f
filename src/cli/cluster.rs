//! `leasehold cluster`: a local cluster in one command. Starts the nodes, prints who is where,
//! then reports role changes and deaths as they happen, with the command that brings a dead
//! node back. Ctrl-C stops every node, including ones brought back by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::SignalKind;

use super::console_control::{self, Control, CONSOLE_CONTROL_ENV};
use super::local::{LocalCluster, PlaneAddrs};
use super::Exit;
use crate::proto::v1 as pb;
use crate::tls::certs::{ADMIN_NAME, CLIENT_NAME};
use crate::tls::TlsFiles;
use leasehold_client::LeaseClient;

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// How many nodes: 3 or 5.
    #[arg(long, default_value_t = 3, value_parser = parse_node_count)]
    nodes: u64,
    /// Where the nodes keep their data and logs; reused on the next start.
    #[arg(long, default_value = "leasehold-cluster")]
    dir: PathBuf,
    /// The first node's client port; the others follow it.
    #[arg(long, default_value_t = 7001)]
    port: u16,
    /// The first node's peer port (Raft traffic, never clients); the others follow it.
    /// Defaults to --port plus 100.
    #[arg(long)]
    peer_port: Option<u16>,
    /// Only `leasehold advance` moves store time.
    #[arg(long)]
    manual_clock: bool,
    /// TLS on both planes, with client certificates demanded: makes a CA and certificates in
    /// DIR/tls (once), and prints the environment a client needs.
    #[arg(long)]
    tls: bool,
    /// Serve each node's Prometheus metrics and probes (/metrics, /healthz, /readyz) from this
    /// port on, one port per node.
    #[arg(long, value_name = "PORT")]
    metrics_port: Option<u16>,
    /// Serve each node's client API over HTTP and JSON (`serve --http-listen`), and its
    /// console (`/ui`), from this port on, one port per node. Defaults to --port plus 200.
    #[arg(long, value_name = "PORT")]
    http_port: Option<u16>,
}

fn parse_node_count(text: &str) -> Result<u64, String> {
    match text {
        "3" => Ok(3),
        "5" => Ok(5),
        _ => Err(format!("{text:?}: a cluster has 3 or 5 nodes")),
    }
}

/// The default peer ports start this far above the client ports.
const PEER_PORT_OFFSET: u16 = 100;

/// The default HTTP ports (the API over JSON and the console) start this far above them.
const HTTP_PORT_OFFSET: u16 = 200;

/// How often the nodes are looked at.
const POLL: Duration = Duration::from_millis(200);

/// What was last seen of a node, to report only changes.
#[derive(Clone, PartialEq)]
enum Seen {
    Up { role: i32, term: u64, pid: u32 },
    Unreachable,
    Dead,
}

pub async fn run(mut args: ClusterArgs) -> anyhow::Result<Exit> {
    // The console is on by default: a newcomer opens it in a browser.
    if args.http_port.is_none() {
        args.http_port = args.port.checked_add(HTTP_PORT_OFFSET);
    }
    let (peer_port, addrs) = plane_addrs(&args)?;
    std::fs::create_dir_all(&args.dir)?;
    let dir = args.dir.canonicalize()?;
    check_layout(&dir, &args, peer_port)?;
    let resumed = dir.join("node-1").exists();
    check_free(&addrs, &args)?;
    // The console's buttons reach this process through it.
    let control = console_control::listen(1..=args.nodes).await?;
    let cluster = LocalCluster::new(&std::env::current_exe()?, &dir, &addrs, args.manual_clock)
        .with_shared_cores()
        .with_env(CONSOLE_CONTROL_ENV, &control.env_value());
    let (cluster, identities) = with_tls(cluster, &args, &dir, resumed)?;
    let mut cluster = with_side_ports(cluster, &args);
    cluster.start_all()?;

    print_started(&cluster, &args, &dir, resumed);
    let tls = announce(&cluster, &identities).await?;
    let outcome = monitor(&mut cluster, tls, control).await;
    cluster.stop_all(Duration::from_secs(5));
    println!("all nodes stopped");
    outcome
}

/// The first peer port, and each node's client and peer address: ports that fit below 65536
/// and do not overlap.
fn plane_addrs(args: &ClusterArgs) -> anyhow::Result<(u16, Vec<PlaneAddrs>)> {
    let named = [
        ("--port", Some(args.port)),
        ("--peer-port", args.peer_port),
        ("--http-port", args.http_port),
        ("--metrics-port", args.metrics_port),
    ];
    for (flag, port) in named {
        // Port 0 asks the system for any port: the nodes would not know each other's, and the
        // addresses printed for clients would be wrong.
        anyhow::ensure!(
            port != Some(0),
            "{flag} 0: a local cluster's ports are fixed, one per node from the one given; \
             give a port, say 7001"
        );
    }
    let peer_port = match args.peer_port {
        Some(port) => port,
        None => args.port.checked_add(PEER_PORT_OFFSET).ok_or_else(|| {
            anyhow::anyhow!(
                "--port {} leaves no room for peer ports; pass --peer-port",
                args.port
            )
        })?,
    };
    for (flag, first) in [("--port", args.port), ("--peer-port", peer_port)] {
        anyhow::ensure!(
            u64::from(first) + args.nodes - 1 <= 65_535,
            "{flag} {first} leaves no room for {} nodes",
            args.nodes
        );
    }
    let clients = u64::from(args.port)..u64::from(args.port) + args.nodes;
    let peers = u64::from(peer_port)..u64::from(peer_port) + args.nodes;
    anyhow::ensure!(
        clients.end <= peers.start || peers.end <= clients.start,
        "client ports {}-{} and peer ports {}-{} overlap; pick another --peer-port",
        clients.start,
        clients.end - 1,
        peers.start,
        peers.end - 1
    );
    let addrs = clients
        .zip(peers)
        .map(|(client, peer)| PlaneAddrs {
            client: format!("127.0.0.1:{client}"),
            peer: format!("127.0.0.1:{peer}"),
            // The ports named: this process checks they are free, and the nodes bind them.
            held: Vec::new(),
        })
        .collect();
    Ok((peer_port, addrs))
}

/// With --tls, the certificates a client shows: the one `cluster` prints, and the admin's
/// when a new cluster starts with authorization on.
#[derive(Default)]
struct Identities {
    client: Option<TlsFiles>,
    admin: Option<TlsFiles>,
}

/// `cluster` with TLS, if --tls, and authorization on if the cluster is new.
fn with_tls(
    cluster: LocalCluster,
    args: &ClusterArgs,
    dir: &std::path::Path,
    resumed: bool,
) -> anyhow::Result<(LocalCluster, Identities)> {
    if !args.tls {
        return Ok((cluster, Identities::default()));
    }
    let certs = crate::tls::certs::ensure(dir, args.nodes)?;
    let mut cluster = cluster.with_tls(&certs);
    let mut identities = Identities {
        client: Some(certs.client()),
        admin: None,
    };
    // A new cluster starts with authorization on (a set made before the admin certificate,
    // without its CA's key, has none to start it with).
    if let (false, Some(files)) = (resumed, certs.admin()) {
        cluster = cluster.with_auth(ADMIN_NAME);
        identities.admin = Some(files);
    }
    Ok((cluster, identities))
}

/// Prints what a client needs (endpoints, TLS files, the admin's grants, a first command),
/// granting the client's role first on a new authorized cluster; the TLS `cluster` dials its
/// nodes with.
async fn announce(
    cluster: &LocalCluster,
    identities: &Identities,
) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
    let endpoints = cluster.endpoints().join(",");
    // The README's commands name no endpoints: they reach 127.0.0.1:7001-7003 unless told.
    let (flag, export) = match endpoints == super::DEFAULT_ENDPOINTS {
        true => (String::new(), String::new()),
        false => (
            format!(" --endpoints {endpoints}"),
            format!(" (for every command: export LEASEHOLD_ENDPOINTS={endpoints})"),
        ),
    };
    println!("endpoints: {endpoints}{export}");
    let tls = match &identities.client {
        Some(files) => {
            println!(
                "TLS on; a client needs: export LEASEHOLD_TLS_CA={} LEASEHOLD_TLS_CERT={} \
                 LEASEHOLD_TLS_KEY={}",
                files.ca.display(),
                files.cert.display(),
                files.key.display()
            );
            Some(crate::tls::Tls::load(files)?.client_config(None))
        }
        None => None,
    };
    if let Some(files) = &identities.admin {
        grant_the_client_role(&cluster.endpoints(), files).await?;
        println!(
            "authorization on: {ADMIN_NAME} ({}) is the admin; {CLIENT_NAME} may read, \
             write and delete every key, and hold any lease as {CLIENT_NAME} or \
             {CLIENT_NAME}/NAME (`leasehold auth --help`)",
            files.cert.display()
        );
    }
    println!("try: leasehold status --watch{flag}    (Ctrl-C here stops every node)");
    Ok(tls)
}

/// Refuses ports another process holds: the nodes' client and peer ports, and their HTTP
/// and metrics ports.
fn check_free(addrs: &[PlaneAddrs], args: &ClusterArgs) -> anyhow::Result<()> {
    let side_ports = [args.http_port, args.metrics_port].into_iter().flatten();
    let side_addrs: Vec<String> = (side_ports)
        .flat_map(|first| (0..args.nodes).map(move |i| u64::from(first) + i))
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let planes = addrs.iter().flat_map(|a| [&a.client, &a.peer]);
    // Held until every one is bound, so that a port named twice (a peer port among the HTTP
    // ports, say) is caught too.
    let mut held = Vec::new();
    for addr in planes.chain(&side_addrs) {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => held.push(listener),
            Err(e) => anyhow::bail!(
                "{addr} is not free ({e}): another cluster runs, or two of --port, --peer-port, \
                 --http-port and --metrics-port overlap; pick others"
            ),
        }
    }
    drop(held);
    Ok(())
}

/// What `cluster` says once its nodes are started: where each one is.
fn print_started(cluster: &LocalCluster, args: &ClusterArgs, dir: &std::path::Path, resumed: bool) {
    println!(
        "{} {}-node cluster in {}{}",
        if resumed {
            "resumed the"
        } else {
            "started a new"
        },
        args.nodes,
        dir.display(),
        if args.manual_clock {
            " (manual clock)"
        } else {
            ""
        }
    );
    for node in cluster.nodes() {
        println!(
            "  node {}  {}  peers at {}  pid {}  data {}  log {}",
            node.id,
            node.addr,
            node.peer_addr,
            cluster.pid(node.id).unwrap_or(0),
            node.data_dir.display(),
            node.log.display()
        );
    }
    // etcd's v3 API is served on the same client ports: what etcd's clients are pointed at.
    let endpoints: Vec<&str> = cluster.nodes().iter().map(|n| n.addr.as_str()).collect();
    println!(
        "etcd v3 API on the client ports: ETCDCTL_API=3 etcdctl --endpoints={}",
        endpoints.join(",")
    );
    if let Some(first) = args.http_port {
        let scheme = if args.tls { "https" } else { "http" };
        let last = u64::from(first) + args.nodes - 1;
        println!("HTTP/JSON API: POST {scheme}://127.0.0.1:{first}-{last}/v1/<Rpc> (etcd's JSON gateway: /v3/...)");
        println!("console: {scheme}://127.0.0.1:{first}/ui (every node serves one, on ports {first}-{last})");
    }
}

/// `cluster` with each node's metrics and HTTP API listeners, one port per node from the
/// first port asked for.
fn with_side_ports(mut cluster: LocalCluster, args: &ClusterArgs) -> LocalCluster {
    for (ports, flag) in [
        (args.metrics_port, "--metrics-listen"),
        (args.http_port, "--http-listen"),
    ] {
        let Some(first) = ports else { continue };
        for id in 1..=args.nodes {
            let addr = format!("127.0.0.1:{}", u64::from(first) + id - 1);
            cluster = cluster.with_node_args(id, &[flag, &addr]);
        }
    }
    cluster
}

/// On a new local cluster, gives the ordinary client certificate a role with every permission
/// but admin, on every name, as the admin: a local cluster is for trying things, and the admin
/// calls stay the admin's.
async fn grant_the_client_role(endpoints: &[String], admin: &TlsFiles) -> anyhow::Result<()> {
    let tls = crate::tls::Tls::load(admin)?.client_config(None);
    let client = LeaseClient::new(endpoints)?
        .with_tls(tls)?
        .with_deadline(Duration::from_secs(30));
    let grants = super::auth::every_permission_but_admin("");
    super::auth::give_role(&client, CLIENT_NAME, CLIENT_ROLE, grants).await?;
    Ok(())
}

/// The role `cluster --tls` gives the ordinary client certificate.
const CLIENT_ROLE: &str = "client";

/// Refuses to reuse a directory laid out for another cluster shape.
fn check_layout(dir: &std::path::Path, args: &ClusterArgs, peer_port: u16) -> anyhow::Result<()> {
    let path = dir.join("cluster.conf");
    let wanted = format!(
        "nodes={} port={} peer-port={peer_port}\n",
        args.nodes, args.port
    );
    match std::fs::read_to_string(&path) {
        Ok(found) if found == wanted => Ok(()),
        Ok(found) if !found.contains("peer-port=") => anyhow::bail!(
            "{} holds a cluster made by an older Leasehold, whose nodes took peers on the \
             client port; this version cannot resume it: use another --dir",
            dir.display()
        ),
        Ok(found) => anyhow::bail!(
            "{} holds a cluster of {}; start it with those flags, or use another --dir",
            dir.display(),
            found.trim()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(std::fs::write(&path, wanted)?),
        Err(e) => Err(e.into()),
    }
}

/// Node `addr`'s own status, if it answers within a poll.
async fn node_status(client: &LeaseClient) -> Option<pb::NodeStatus> {
    tokio::time::timeout(Duration::from_millis(400), client.node_status())
        .await
        .ok()?
        .ok()
}

async fn monitor(
    cluster: &mut LocalCluster,
    tls: Option<tonic::transport::ClientTlsConfig>,
    mut control: Control,
) -> anyhow::Result<Exit> {
    let mut clients = BTreeMap::new();
    for node in cluster.nodes() {
        let client = LeaseClient::new(&[&node.addr])?.with_deadline(Duration::from_millis(300));
        let client = match &tls {
            Some(tls) => client.with_tls(tls.clone())?,
            None => client,
        };
        clients.insert(node.id, client);
    }
    let mut seen = Watched {
        seen: BTreeMap::new(),
        external_pids: BTreeMap::new(),
        states: control.states.clone(),
    };
    // One stream each for the whole run: a signal that lands while a node is being asked is
    // kept. SIGTERM (`kill`, a service manager) stops the nodes as Ctrl-C does.
    let mut interrupt = tokio::signal::unix::signal(SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(SignalKind::terminate())?;
    loop {
        for (&id, client) in &clients {
            seen.look_at(cluster, id, client).await;
        }
        let stop = tokio::select! {
            _ = tokio::time::sleep(POLL) => false,
            Some(request) = control.requests.recv() => {
                console_control::answer(cluster, &seen.states, request);
                // Every request waiting is answered before the nodes are looked at again.
                while let Ok(request) = control.requests.try_recv() {
                    console_control::answer(cluster, &seen.states, request);
                }
                false
            }
            _ = interrupt.recv() => true,
            _ = terminate.recv() => true,
        };
        if stop {
            println!("stopping...");
            stop_external(cluster, seen.external_pids);
            return Ok(Exit::Ok);
        }
    }
}

/// What the monitor knows of the nodes.
struct Watched {
    /// What was last seen of each node, to report only changes.
    seen: BTreeMap<u64, Seen>,
    /// Nodes brought back by hand are not our children: stopped by pid on Ctrl-C.
    external_pids: BTreeMap<u64, u32>,
    /// Each node as the console shows it, shared with the console's listener.
    states: std::sync::Arc<std::sync::Mutex<console_control::States>>,
}

impl Watched {
    /// Looks at node `id` (through `client`), and reports what changed.
    async fn look_at(&mut self, cluster: &mut LocalCluster, id: u64, client: &LeaseClient) {
        let seen = &mut self.seen;
        if let Some(status) = cluster.try_reap(id) {
            seen.insert(id, Seen::Dead);
            let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
            if states.get(&id) != Some(&"killed") {
                states.insert(id, "exited");
            }
            println!(
                "node {id} died ({status}); bring it back with:\n  {}",
                cluster.restart_command(id)
            );
        }
        let now = match node_status(client).await {
            Some(s) => Seen::Up {
                role: s.role,
                term: s.term,
                pid: s.pid,
            },
            None if seen.get(&id) == Some(&Seen::Dead) => Seen::Dead,
            // Not yet listening after start: nothing to report until it first answers.
            None if !seen.contains_key(&id) => return,
            None => Seen::Unreachable,
        };
        let before = seen.insert(id, now.clone());
        if before.as_ref() == Some(&now) {
            return;
        }
        match (&before, &now) {
            (_, Seen::Up { role, term, pid }) => {
                if matches!(before, Some(Seen::Dead) | Some(Seen::Unreachable)) {
                    println!("node {id} is back (pid {pid})");
                    let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
                    if states.get(&id) != Some(&"paused") {
                        states.insert(id, "running");
                    }
                }
                // A pid comes over gRPC: 0 or 1 would signal a process group or init,
                // and anything past i32 is no pid.
                if cluster.pid(id) != Some(*pid) && *pid > 1 && i32::try_from(*pid).is_ok() {
                    self.external_pids.insert(id, *pid);
                }
                let was_role = match &before {
                    Some(Seen::Up { role, .. }) => Some(*role),
                    _ => None,
                };
                if was_role != Some(*role) && *role == pb::Role::Leader as i32 {
                    println!("node {id} is now the leader (term {term})");
                } else if was_role != Some(*role) && was_role.is_some() {
                    println!(
                        "node {id} is now a {} (term {term})",
                        super::commands::role_name(*role)
                    );
                }
            }
            (Some(Seen::Up { .. }), Seen::Unreachable) => println!("node {id} does not answer"),
            _ => {}
        }
    }
}

/// Stops the nodes brought back by hand (not this command's children, so not stopped with
/// it), by the pids they reported.
fn stop_external(cluster: &LocalCluster, external_pids: BTreeMap<u64, u32>) {
    for (id, pid) in external_pids {
        if cluster.pid(id).is_none() {
            // SAFETY: kill(2) with SIGTERM on the pid the node itself reported.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    }
}
