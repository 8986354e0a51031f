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
    #[arg(long, env = "LEASEHOLD_METRICS_LISTEN", value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// How the node logs to stderr: `text` for people, `json` (one object per line) for log
    /// collectors.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// This node's id: one of the ids in --peers.
    #[arg(long, env = "LEASEHOLD_ID")]
    id: u64,
    /// Address to listen on for clients (the lease API, status, health, reflection).
    #[arg(long, env = "LEASEHOLD_LISTEN")]
    listen: SocketAddr,
    /// Address to listen on for peers (Raft messages, forwarded writes, log read-back): keep it
    /// reachable by the other nodes only. Nothing here is served on --listen.
    #[arg(long, env = "LEASEHOLD_PEER_LISTEN")]
    peer_listen: SocketAddr,
    /// The client address this node gives out (in status) when --listen is not one clients can
    /// dial, such as 0.0.0.0:7001. Defaults to --listen.
    #[arg(long, env = "LEASEHOLD_ADVERTISE", value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Where this node keeps its log, vote and snapshots.
    #[arg(long, env = "LEASEHOLD_DATA_DIR")]
    data_dir: PathBuf,
    /// Every voter's peer address (its --peer-listen) as ID=HOST:PORT, comma separated, this
    /// node included. The same on every node.
    #[arg(long, env = "LEASEHOLD_PEERS", value_parser = parse_peers)]
    peers: BTreeMap<u64, String>,
    /// Only `advance` moves store time (demos and deterministic tests).
    #[arg(long, env = "LEASEHOLD_MANUAL_CLOCK")]
    manual_clock: bool,
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
    /// Requests this node works on at once, client requests and forwarded writes alike;
    /// past it a request is refused at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_REQUESTS", value_name = "N", default_value_t = crate::node::MAX_CONCURRENT_REQUESTS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_requests: u64,
    /// Forget a lease once it has been free (released or expired) this long in store time;
    /// its tokens are never handed out again. Default one hour.
    #[arg(long, env = "LEASEHOLD_LEASE_RETENTION", value_name = "SECONDS", default_value = "3600", value_parser = super::commands::parse_seconds)]
    lease_retention: u64,
    /// Snapshot the state every this many applied entries, and purge the log behind it.
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_EVERY", value_name = "ENTRIES", default_value_t = crate::raft::DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(10..))]
    snapshot_every: u64,
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

pub async fn run(args: ServeArgs) -> anyhow::Result<Exit> {
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
    let config = NodeConfig {
        id: args.id,
        listen: args.listen,
        peer_listen: args.peer_listen,
        advertise: args.advertise.unwrap_or_else(|| args.listen.to_string()),
        data_dir: args.data_dir,
        peers: args.peers,
        manual_clock: args.manual_clock,
        snapshot_every: args.snapshot_every,
        tls: match (args.tls_ca, args.tls_cert, args.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(crate::tls::TlsFiles { ca, cert, key }),
            _ => None,
        },
        client_cert_auth: args.client_cert_auth,
        max_requests: args.max_requests as usize,
        lease_retention_ms: args.lease_retention,
        metrics_listen: args.metrics_listen,
    };
    node::run(config, shutdown_signal()).await?;
    Ok(Exit::Ok)
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
