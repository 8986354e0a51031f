//! `leasehold serve`: one node, until SIGTERM or Ctrl-C.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use tracing_subscriber::EnvFilter;

use super::Exit;
use crate::node::{self, NodeConfig};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Serve Prometheus metrics at /metrics, and the probes /healthz and /readyz, over HTTP on
    /// this address (keep it off the public network).
    #[arg(long, env = "LEASEHOLD_METRICS_LISTEN", value_name = "HOST:PORT", value_parser = host_port)]
    metrics_listen: Option<String>,
    /// Serve the client API over HTTP/1.1 and JSON on this address as well: `POST
    /// /v1/<Rpc>` with the request message in proto3 JSON (see the README). Same limits,
    /// TLS and authorization as the gRPC client port.
    #[arg(long, env = "LEASEHOLD_HTTP_LISTEN", value_name = "HOST:PORT", value_parser = host_port)]
    http_listen: Option<String>,
    /// How the node logs to stderr: `text` for people, `json` (one object per line) for log
    /// collectors.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Check the flags (the id is one of --peers, which name 1, 3 or 5 voters unless --join; the
    /// planes differ; addresses are HOST:PORT), print the configuration and exit, binding and
    /// resolving nothing.
    #[arg(long)]
    check_config: bool,
    /// This node's id: one of the ids in --peers.
    #[arg(
        long,
        env = "LEASEHOLD_ID",
        required_unless_present = "id_from_hostname",
        conflicts_with = "id_from_hostname"
    )]
    id: Option<u64>,
    /// Take the id from the host name (the HOSTNAME variable, else the system's), as a
    /// Kubernetes StatefulSet names its pods: the number after the last `-`, plus one, so
    /// `leasehold-0` is node 1.
    #[arg(long, env = "LEASEHOLD_ID_FROM_HOSTNAME")]
    id_from_hostname: bool,
    /// Address to listen on for clients (the lease API, status, health, reflection):
    /// HOST:PORT, the host a name or an IP address.
    #[arg(long, env = "LEASEHOLD_LISTEN", value_parser = host_port)]
    listen: String,
    /// Address to listen on for peers (Raft messages, forwarded writes, log read-back): keep it
    /// reachable by the other nodes only. Nothing here is served on --listen.
    #[arg(long, env = "LEASEHOLD_PEER_LISTEN", value_parser = host_port)]
    peer_listen: String,
    /// The client address this node gives out (in status) when --listen is not one clients can
    /// dial, such as 0.0.0.0:7001. Defaults to --listen.
    #[arg(long, env = "LEASEHOLD_ADVERTISE", value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Where this node keeps its log, vote and snapshots.
    #[arg(long, env = "LEASEHOLD_DATA_DIR")]
    data_dir: PathBuf,
    /// Every voter's peer address (its --peer-listen) as ID=HOST:PORT, comma separated, this
    /// node included. The same on every node.
    #[arg(long, env = "LEASEHOLD_PEERS", value_parser = parse_peers, required_unless_present = "join", conflicts_with = "join")]
    peers: Option<BTreeMap<u64, String>>,
    /// Start empty and wait to be added to a running cluster (`leasehold member add ID --peer
    /// THIS_PEER_ADDR --client THIS_CLIENT_ADDR`), instead of forming one with --peers.
    #[arg(long, env = "LEASEHOLD_JOIN")]
    join: bool,
    /// Only `advance` moves store time (demos and deterministic tests).
    #[arg(long, env = "LEASEHOLD_MANUAL_CLOCK")]
    manual_clock: bool,
    /// A file that sets this node's clock's rate and jumps, for the fault suite (see the node's
    /// `clock_control`).
    #[arg(long, hide = true, value_name = "FILE")]
    clock_control: Option<PathBuf>,
    /// TLS on both planes: this node's certificate (PEM), which must name it as
    /// leasehold-node-ID and, for clients, carry the host they dial. Needs --tls-key and
    /// --tls-ca. Peers must then show a certificate from the same CA naming another member.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LEASEHOLD_TLS_KEY", value_name = "FILE", requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<PathBuf>,
    /// The CA (PEM) that signed every node's and client's certificate.
    #[arg(long, env = "LEASEHOLD_TLS_CA", value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// Clients must show a certificate from --tls-ca as well.
    #[arg(long, env = "LEASEHOLD_CLIENT_CERT_AUTH", requires = "tls_cert")]
    client_cert_auth: bool,
    /// Authorization on from the cluster's creation, with NAME (the name a client
    /// certificate carries) its first admin: only NAME may then change the policy
    /// (`leasehold auth`), membership or take a snapshot, and others only what their roles
    /// grant. Give every node the same. Needs TLS; clients without a certificate may use
    /// bearer tokens (`leasehold auth token add`).
    #[arg(
        long,
        env = "LEASEHOLD_AUTH_ADMIN",
        value_name = "NAME",
        requires = "tls_cert"
    )]
    auth_admin: Option<String>,
    /// With TLS, start with authorization off: every client that reaches the client port may
    /// make admin calls (`member remove`, `snapshot save`, `auth enable` naming itself) until
    /// someone turns it on. A node with TLS needs this or --auth-admin: the choice is the
    /// operator's to make, not a default's.
    #[arg(
        long,
        env = "LEASEHOLD_NO_AUTHORIZATION",
        conflicts_with = "auth_admin",
        requires = "tls_cert"
    )]
    no_authorization: bool,
    /// Requests this node's clients have it work on at once (writes other nodes forward here
    /// were admitted by them); past it a request is refused at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_REQUESTS", value_name = "N", default_value_t = crate::limits::MAX_CONCURRENT_REQUESTS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_requests: u64,
    /// Watches this node serves at once, a budget apart from requests so that readers never
    /// take the places of writes; past it a watch is refused at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_WATCHES", value_name = "N", default_value_t = crate::limits::MAX_WATCHES as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_watches: u64,
    /// Sessions open in the whole cluster (each client holds one until it closes it or leaves
    /// it idle for an hour); past it the leader refuses a registration with RESOURCE_EXHAUSTED
    /// (SESSIONS_EXHAUSTED). Give every node the same.
    #[arg(long, env = "LEASEHOLD_MAX_SESSIONS", value_name = "N", default_value_t = crate::limits::MAX_SESSIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_sessions: u64,
    /// Sessions one identity (a client certificate's or bearer token's name) may hold open;
    /// past it, as --max-sessions. Give every node the same.
    #[arg(long, env = "LEASEHOLD_MAX_SESSIONS_PER_IDENTITY", value_name = "N", default_value_t = crate::limits::MAX_SESSIONS_PER_IDENTITY as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_sessions_per_identity: u64,
    /// Leases one identity may have created that the store still keeps (held, or free until
    /// forgotten after --lease-retention); past it the leader refuses an acquire of a new name
    /// with RESOURCE_EXHAUSTED (LEASES_EXHAUSTED). Give every node the same.
    #[arg(long, env = "LEASEHOLD_MAX_LEASES_PER_IDENTITY", value_name = "N", default_value_t = crate::limits::MAX_LEASES_PER_IDENTITY as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    max_leases_per_identity: u64,
    /// Rows one identity may have created and not deleted; past it the leader refuses a put
    /// that creates one with RESOURCE_EXHAUSTED (ROWS_EXHAUSTED). Give every node the same.
    #[arg(long, env = "LEASEHOLD_MAX_ROWS_PER_IDENTITY", value_name = "N", default_value_t = crate::limits::MAX_ROWS_PER_IDENTITY as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    max_rows_per_identity: u64,
    /// Forget a lease once it has been free (released or expired) this long in store time;
    /// its tokens are never handed out again.
    #[arg(long, env = "LEASEHOLD_LEASE_RETENTION", value_name = "SECONDS",
          default_value_t = crate::limits::DEFAULT_LEASE_RETENTION_SECS, value_parser = super::commands::parse_seconds)]
    lease_retention: u64,
    /// Snapshot the state every this many applied entries, and purge the log behind it.
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_EVERY", value_name = "ENTRIES", default_value_t = crate::limits::DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(10..))]
    snapshot_every: u64,
    /// Worker threads of the node's async runtime; by default tokio's: one per core the
    /// process may use, or `TOKIO_WORKER_THREADS`. Nodes that share a host share its cores:
    /// `leasehold cluster` gives each its share.
    #[arg(long, env = "LEASEHOLD_RUNTIME_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    runtime_threads: Option<u64>,
}

impl ServeArgs {
    /// The runtime's worker threads, where `--runtime-threads` sets them.
    pub fn runtime_threads(&self) -> Option<usize> {
        self.runtime_threads.map(|n| n as usize)
    }
}

pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("{id:?} in {part:?} is not a node id (a positive integer)"))?;
        if id == 0 {
            return Err("node ids start at 1".into());
        }
        let addr = addr.trim();
        if !addr.contains(':') {
            return Err(format!("{addr:?} has no port; write HOST:PORT"));
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("node id {id} appears twice"));
        }
    }
    Ok(peers)
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

/// `HOST:PORT` with a port, the host a name or an address (`[::1]:7001` for IPv6).
fn host_port(text: &str) -> Result<String, String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} has no port; write HOST:PORT"))?;
    port.parse::<u16>()
        .map_err(|_| format!("{port:?} in {text:?} is not a port"))?;
    if host.is_empty() {
        return Err(format!(
            "{text:?} has no host; write HOST:PORT (0.0.0.0 for every address)"
        ));
    }
    Ok(text.to_owned())
}

/// --peers, or with --join this node alone at its --peer-listen.
fn peers(args: &ServeArgs, id: u64) -> BTreeMap<u64, String> {
    match &args.peers {
        Some(peers) => peers.clone(),
        None => BTreeMap::from([(id, args.peer_listen.clone())]),
    }
}

/// The address `flag`'s HOST:PORT resolves to now (a host name through the system's resolver).
async fn resolve(flag: &str, addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{flag} {addr}: cannot resolve it: {e}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{flag} {addr}: the name has no address"))
}

async fn resolve_if_given(flag: &str, addr: &Option<String>) -> anyhow::Result<Option<SocketAddr>> {
    match addr {
        Some(addr) => resolve(flag, addr).await.map(Some),
        None => Ok(None),
    }
}

/// The node id `--id` or `--id-from-hostname` gives.
fn node_id(args: &ServeArgs) -> anyhow::Result<u64> {
    if let Some(id) = args.id {
        return Ok(id);
    }
    let host = match std::env::var("HOSTNAME") {
        Ok(host) if !host.is_empty() => host,
        _ => hostname()?,
    };
    host.rsplit_once('-')
        .and_then(|(_, ordinal)| ordinal.parse::<u64>().ok())
        .map(|ordinal| ordinal + 1)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--id-from-hostname: host name {host:?} does not end in -ORDINAL, as a \
                 StatefulSet's pods do; pass --id"
            )
        })
}

/// The system's host name.
fn hostname() -> anyhow::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`, which we own.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        anyhow::bail!(
            "cannot read the host name: {}",
            std::io::Error::last_os_error()
        );
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// What `serve --check-config` checks without binding or resolving anything: the id is one
/// of --peers, the two planes differ. The lines it prints.
fn check_config(args: &ServeArgs, id: u64) -> anyhow::Result<Vec<String>> {
    let peers = peers(args, id);
    node::check_flags(id, &peers, args.join, &args.listen, &args.peer_listen)
        .map_err(anyhow::Error::msg)?;
    if args.tls_cert.is_some() && args.auth_admin.is_none() && !args.no_authorization {
        anyhow::bail!(
            "a node with TLS starts once authorization is chosen: --auth-admin NAME (on from \
             the start, NAME its first admin) or --no-authorization (off: every client may make \
             admin calls, `member remove` included, until it is turned on)"
        );
    }
    Ok(vec![
        format!("id {id}"),
        format!("listen {}", args.listen),
        format!("peer-listen {}", args.peer_listen),
        format!(
            "advertise {}",
            args.advertise.as_deref().unwrap_or(&args.listen)
        ),
        format!("data-dir {}", args.data_dir.display()),
        format!(
            "peers {}",
            peers
                .iter()
                .map(|(id, addr)| format!("{id}={addr}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
        format!(
            "metrics-listen {}",
            args.metrics_listen.as_deref().unwrap_or("(none)")
        ),
        format!(
            "http-listen {}",
            args.http_listen.as_deref().unwrap_or("(none)")
        ),
        format!(
            "authorization {}",
            match (&args.auth_admin, args.no_authorization) {
                (Some(admin), _) => format!("on, first admin {admin}"),
                (None, true) => "not set up by this node (--no-authorization): off on a new \
                                 cluster, as the replicated policy says on an existing one"
                    .to_owned(),
                (None, false) => "off (no TLS)".to_owned(),
            }
        ),
    ])
}

pub async fn run(args: ServeArgs) -> anyhow::Result<Exit> {
    let id = node_id(&args)?;
    let checked = check_config(&args, id)?;
    if args.check_config {
        for line in checked {
            println!("{line}");
        }
        return Ok(Exit::Ok);
    }
    // Logs go to stderr; `cluster` points each node's stderr at a file of its own.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match args.log_format {
        LogFormat::Text => logs.init(),
        // One JSON object per line, the event's fields at the top level beside `level`,
        // `target` and `timestamp`.
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    raise_open_files_limit();
    let listen = resolve("--listen", &args.listen).await?;
    let peer_listen = resolve("--peer-listen", &args.peer_listen).await?;
    let metrics_listen = resolve_if_given("--metrics-listen", &args.metrics_listen).await?;
    let http_listen = resolve_if_given("--http-listen", &args.http_listen).await?;
    let peers = peers(&args, id);
    if let Some(admin) = &args.auth_admin {
        leasehold_core::limits::name(
            "--auth-admin",
            admin,
            leasehold_core::Limits::MAX_NAME_BYTES,
        )?;
    }
    let config = NodeConfig {
        id,
        listen,
        peer_listen,
        advertise: args.advertise.unwrap_or(args.listen),
        data_dir: args.data_dir,
        peers,
        join: args.join,
        manual_clock: args.manual_clock,
        snapshot_every: args.snapshot_every,
        tls: match (args.tls_ca, args.tls_cert, args.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(crate::tls::TlsFiles { ca, cert, key }),
            _ => None,
        },
        client_cert_auth: args.client_cert_auth,
        auth_admin: args.auth_admin,
        max_requests: args.max_requests as usize,
        max_watches: args.max_watches as usize,
        caps: node::Caps {
            sessions: args.max_sessions as usize,
            sessions_per_identity: args.max_sessions_per_identity as usize,
            leases_per_identity: args.max_leases_per_identity as usize,
            rows_per_identity: args.max_rows_per_identity as usize,
        },
        lease_retention_ms: args.lease_retention,
        metrics_listen,
        http_listen,
        clock_control: args.clock_control,
    };
    node::run(config, shutdown_signal()).await?;
    Ok(Exit::Ok)
}

/// Raises the soft limit of open files to the hard limit, as Go's runtime does for etcd: a node
/// holds a socket and a duplicate of it for each lane it serves (up to 256 clients' and 64
/// peers'), beside its gRPC connections, log segments and snapshots, where a distribution's
/// default soft limit is 1,024. What it could not raise is logged, and the node serves on.
fn raise_open_files_limit() {
    #[cfg(target_os = "linux")]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: both calls read or write only the `rlimit` given. The error is read at
        // once, before anything else can set errno.
        let raised = unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                Err(std::io::Error::last_os_error())
            } else if limit.rlim_cur == limit.rlim_max {
                Ok(())
            } else {
                limit.rlim_cur = limit.rlim_max;
                match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            }
        };
        if let Err(error) = raised {
            tracing::warn!(%error, "could not raise the open files limit to its hard limit");
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_reject_with_a_reason() {
        let peers = parse_peers("1=127.0.0.1:7001,2=127.0.0.1:7002,3=h:7003").unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&3], "h:7003");
        assert!(parse_peers("1=a:1,1=b:2").unwrap_err().contains("twice"));
        assert!(parse_peers("x=a:1").unwrap_err().contains("not a node id"));
        assert!(parse_peers("1=a").unwrap_err().contains("no port"));
        assert!(parse_peers("0=a:1").is_err());
    }
}
