//! The `leasehold` binary's commands. Exit codes: 0 granted or accepted, 3 refused by the store
//! (held by, stale token), 1 on errors with one line on stderr; `hold` exits with its command's
//! code, or 4 when the lease was lost under it.

mod auth;
pub use auth::{every_permission_but_admin, give_role};
mod bench;
#[cfg(feature = "etcd")]
mod bench_etcd;
pub mod certs;
mod cluster;
mod commands;
mod console_control;
mod demo;
mod floor;
// `hold` keeps its command under a guard that is a child subreaper with a parent-death signal,
// woken by a signalfd: Linux calls. Elsewhere the command says so.
#[cfg(target_os = "linux")]
mod hold;
#[cfg(target_os = "linux")]
mod hold_guard;
pub mod local;
mod member;
mod printed;
mod serve;
mod snapshot;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use leasehold_client::LeaseClient;

/// The local cluster's addresses, the default for every client command.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "A replicated lease store with fencing tokens"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    client: ClientOpts,
}

/// Options every client command takes.
#[derive(clap::Args, Clone)]
pub struct ClientOpts {
    /// Nodes to talk to, comma separated; any node will do.
    #[arg(long, env = "LEASEHOLD_ENDPOINTS", default_value = DEFAULT_ENDPOINTS, global = true)]
    endpoints: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text, global = true)]
    output: Output,
    /// How long a command waits for its answer, trying node after node: seconds or with a
    /// unit (500ms, 30s, 1m). Default 10 s.
    #[arg(long, env = "LEASEHOLD_TIMEOUT", value_name = "DURATION", global = true,
          value_parser = commands::parse_seconds)]
    timeout: Option<u64>,
    /// Talk TLS: the CA (PEM) that signed the nodes' certificates.
    #[arg(long, env = "LEASEHOLD_TLS_CA", value_name = "FILE", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// This client's certificate (PEM), for nodes that demand one; needs --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", value_name = "FILE", global = true, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LEASEHOLD_TLS_KEY", value_name = "FILE", global = true, requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<std::path::PathBuf>,
    /// A bearer token (`auth token add`), the identity of a client without a certificate; over
    /// TLS only. Prefer the environment variable: a flag shows in the process list.
    #[arg(
        long,
        env = "LEASEHOLD_BEARER_TOKEN",
        value_name = "TOKEN",
        global = true,
        hide_env_values = true
    )]
    // Checked in `lease_client`, not by clap's `requires`: with the token from the environment
    // and --tls-ca given as a flag before the command, clap reported --tls-ca missing.
    bearer_token: Option<String>,
}

impl ClientOpts {
    /// The TLS settings the client flags ask for; `None` without --tls-ca.
    pub fn tls_config(&self) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        Ok(Some(match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => crate::tls::Tls::load(&crate::tls::TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            })?
            .client_config(None),
            _ => {
                let pem =
                    std::fs::read(ca).map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))?;
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(pem))
            }
        }))
    }

    /// A client for --endpoints, over TLS when --tls-ca is given.
    pub fn client(&self) -> anyhow::Result<LeaseClient> {
        let endpoints: Vec<&str> = self
            .endpoints
            .split(',')
            .filter(|e| !e.trim().is_empty())
            .collect();
        self.lease_client(&endpoints)
    }

    /// A client for one command that asks and is done: it says at once why no node can serve
    /// it (nothing listens, no majority, a refused certificate), rather than at its deadline.
    /// Not for `watch` or `hold`, which ride out a restart of the whole cluster.
    pub fn one_shot_client(&self) -> anyhow::Result<LeaseClient> {
        Ok(self.client()?.with_quick_give_up())
    }

    /// A client for `endpoints`, over TLS when --tls-ca is given.
    pub fn lease_client<S: AsRef<str>>(&self, endpoints: &[S]) -> anyhow::Result<LeaseClient> {
        let client = LeaseClient::new(endpoints)?;
        let client = match self.timeout {
            Some(0) => anyhow::bail!("--timeout must be more than 0: every call would fail"),
            Some(ms) => client.with_deadline(std::time::Duration::from_millis(ms)),
            None => client,
        };
        let client = match self.tls_config()? {
            Some(tls) => client.with_tls(tls)?,
            None => client,
        };
        Ok(match &self.bearer_token {
            Some(_) if self.tls_ca.is_none() => anyhow::bail!(
                "a bearer token is sent over TLS only, and no --tls-ca (LEASEHOLD_TLS_CA) is \
                 given: pass the CA of the nodes' certificates"
            ),
            Some(token) => client.with_bearer_token(token)?,
            None => client,
        })
    }
}

/// How a command prints its answer (`-o`): `text`, lines for people, or `json`, one document
/// for scripts.
// The variants go undocumented: clap shows a variant's doc as the value's help, which would
// turn every command's `--help` into the long form.
#[allow(missing_docs)]
#[derive(ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// What `leases` and `keys` list.
#[derive(clap::Args)]
struct ListArgs {
    /// Only names (keys) that start with it.
    #[arg(long, default_value = "")]
    prefix: String,
    /// At most this many; 0 for all.
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// Read the answering node's state as it stands, which may be behind the leader's.
    #[arg(long)]
    serializable: bool,
}

impl ListArgs {
    fn listing(&self) -> leasehold_client::Listing {
        leasehold_client::Listing {
            prefix: self.prefix.clone(),
            serializable: self.serializable,
            ..leasehold_client::Listing::default()
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node.
    // Boxed: its flags make it the largest variant by far (clippy's `large_enum_variant`).
    Serve(Box<serve::ServeArgs>),
    /// Run a local cluster of 3 or 5 nodes on this machine, and report what happens to it.
    Cluster(cluster::ClusterArgs),
    /// Replay the fencing-token scenario against a fresh three-node cluster.
    Demo,
    /// Make a CA, a certificate per node, one for clients and one for the first admin, for
    /// `serve --tls-*` on several hosts; or, with --client NAME, one for identity NAME.
    Certs(certs::CertsArgs),
    /// Measure throughput and latency against a running cluster.
    Bench(bench::BenchArgs),
    /// Acquire a lease, or renew it if HOLDER already holds it.
    Acquire {
        lease: String,
        #[arg(long)]
        holder: String,
        /// Time to live: seconds (fractions allowed) or with a unit (500ms, 30s, 1m).
        #[arg(long = "ttl", value_name = "DURATION", value_parser = commands::parse_seconds)]
        ttl_ms: u64,
    },
    /// Release a lease held by HOLDER with TOKEN.
    Release {
        lease: String,
        #[arg(long)]
        holder: String,
        #[arg(long)]
        token: u64,
    },
    /// Write a row; with --lease and --token, a fenced write.
    Put {
        key: String,
        value: String,
        #[arg(long, requires = "token")]
        lease: Option<String>,
        #[arg(long, requires = "lease")]
        token: Option<u64>,
    },
    /// Remove a row; with --lease and --token, only if that token is not stale (as put).
    Delete {
        key: String,
        #[arg(long, requires = "token")]
        lease: Option<String>,
        #[arg(long, requires = "lease")]
        token: Option<u64>,
    },
    /// Is TOKEN the lease's current grant (held, not expired)? Exit 0 yes, 3 stale.
    Check {
        lease: String,
        #[arg(long)]
        token: u64,
    },
    /// Read a row.
    Get { key: String },
    /// Read a lease: holder, token, expiry, fence and the store's time.
    Lease { lease: String },
    /// List the leases under a prefix, held or free: holder, token and time left.
    Leases(ListArgs),
    /// List the rows under a prefix, with their values.
    Keys(ListArgs),
    /// Move store time forward (clusters started with --manual-clock only).
    Advance {
        #[arg(value_name = "SECONDS", value_parser = commands::parse_seconds)]
        by_ms: u64,
    },
    /// Run a command while holding a lease: LEASEHOLD_LEASE, LEASEHOLD_TOKEN and
    /// LEASEHOLD_HOLDER in its environment. Exits with its code; 3 at once if the lease is held
    /// (without --wait); 4 if the lease was lost, after killing the command before another
    /// holder could be granted it.
    #[cfg(target_os = "linux")]
    Hold(hold::HoldArgs),
    /// `hold` needs Linux; on this system, use a client library's `Holder`.
    #[cfg(not(target_os = "linux"))]
    Hold {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        rest: Vec<String>,
    },
    /// The parent of `hold`'s command, which enforces its deadline (run by `hold` only).
    #[cfg(target_os = "linux")]
    #[command(name = "__hold-guard", hide = true)]
    HoldGuard(hold_guard::GuardArgs),
    /// Print lease events (granted, renewed, released, expired) as they are applied.
    Watch(watch::WatchArgs),
    /// Add, remove or list the cluster's members.
    #[command(subcommand)]
    Member(member::MemberCmd),
    /// Who may do what: roles on lease and key prefixes, bound to client certificates' names.
    #[command(subcommand)]
    Auth(auth::AuthCmd),
    /// Back the state up to a file, or make a new cluster's data dirs from one.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
    /// Show every node's role, term and log position.
    Status {
        /// Refresh every half second until interrupted.
        #[arg(long)]
        watch: bool,
    },
}

/// What a command ended with, as the process's exit code.
pub enum Exit {
    /// Done as asked: 0.
    Ok,
    /// The store refused it (held by another, a stale token, bad input): 1.
    Refused,
    /// This exit code (`hold`: its command's, or 4 for a lost lease).
    Code(u8),
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line on stderr: clap's own report, without its usage block.
            let rendered = e.render().to_string();
            let line: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{}", line.join(" "));
            return ExitCode::from(1);
        }
    };
    // Single threaded, without the runtime: the guard blocks signals for the whole process.
    #[cfg(target_os = "linux")]
    if let Cmd::HoldGuard(args) = cli.command {
        return ExitCode::from(hold_guard::run(args));
    }
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli.command, &cli.client)) {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(Exit::Refused) => ExitCode::from(3),
        Ok(Exit::Code(code)) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The runtime a command runs on: tokio's default, but for a node whose `serve
/// --runtime-threads` sizes it (nodes that share a host share its cores).
fn runtime_for(command: &Cmd) -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Cmd::Serve(args) = command {
        if let Some(threads) = args.runtime_threads() {
            builder.worker_threads(threads);
        }
    }
    builder
}

async fn run(command: Cmd, client: &ClientOpts) -> anyhow::Result<Exit> {
    match command {
        Cmd::Serve(args) => serve::run(*args).await,
        Cmd::Cluster(args) => cluster::run(args).await,
        Cmd::Demo => demo::run().await,
        Cmd::Certs(args) => certs::run(args),
        Cmd::Bench(args) => bench::run(client, args).await,
        Cmd::Acquire {
            lease,
            holder,
            ttl_ms,
        } => commands::acquire(client, &lease, &holder, ttl_ms).await,
        Cmd::Release {
            lease,
            holder,
            token,
        } => commands::release(client, &lease, &holder, token).await,
        Cmd::Put {
            key,
            value,
            lease,
            token,
        } => {
            let fence = lease.as_deref().zip(token);
            commands::put(client, &key, &value, fence).await
        }
        Cmd::Delete { key, lease, token } => {
            commands::delete(client, &key, lease.as_deref().zip(token)).await
        }
        Cmd::Check { lease, token } => commands::check(client, &lease, token).await,
        Cmd::Get { key } => commands::get(client, &key).await,
        Cmd::Lease { lease } => commands::lease(client, &lease).await,
        Cmd::Leases(args) => commands::leases(client, args.listing(), args.limit).await,
        Cmd::Keys(args) => commands::keys(client, args.listing(), args.limit).await,
        Cmd::Advance { by_ms } => commands::advance(client, by_ms).await,
        Cmd::Status { watch } => commands::status(client, watch).await,
        #[cfg(target_os = "linux")]
        Cmd::Hold(args) => hold::run(client, args).await,
        #[cfg(target_os = "linux")]
        Cmd::HoldGuard(_) => unreachable!("main runs the guard before the runtime starts"),
        #[cfg(not(target_os = "linux"))]
        Cmd::Hold { .. } => Err(anyhow::anyhow!(
            "hold needs Linux (its command's guard is a child subreaper with a parent-death \
             signal); on this system, hold the lease with the Rust or Python client's Holder"
        )),
        Cmd::Watch(args) => watch::run(client, args).await,
        Cmd::Snapshot(command) => snapshot::run(client, command).await,
        Cmd::Member(command) => member::run(client, command).await,
        Cmd::Auth(command) => auth::run(client, command).await,
    }
}
