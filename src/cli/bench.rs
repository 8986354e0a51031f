//! `leasehold bench`: a closed-loop load generator against a running cluster. Each client is
//! one task with its own connection, sending its next request when the last one is answered.
//! Latencies go into an HDR histogram; refusals (held by, stale token) are counted apart from
//! errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::printed::json;
use super::printed::BenchReport;
use hdrhistogram::Histogram;

use super::floor::Floor;
use tokio::time::Instant;

use super::{ClientOpts, Exit, Output};
use crate::proto::v1 as pb;
use leasehold_client::{Acquired, Answer, LeaseClient, Listing, Renewal, Renewed, Written};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A grant of a fresh lease per request.
    Acquire,
    /// Each client renews its own leases (`--leases`), all of them in one request.
    Renew,
    /// Each client writes its own key, fenced with its lease's token.
    FencedPut,
    /// Plain writes.
    Put,
    /// Linearizable reads.
    Get,
    /// A few contended leases: acquire or renew, fenced put, get.
    Mixed,
    /// Linearizable pages of 100 leases, each client walking the whole listing page after page
    /// (fill the store first, with `--workload acquire --ttl 3600`). Leasehold's only.
    List,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connect {
    /// Every client talks to the leader.
    Leader,
    /// Client i talks to follower i mod F: every write is forwarded to the leader.
    Follower,
    /// Client i talks to node i mod N (followers forward to the leader).
    Spread,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value_t = Workload::FencedPut)]
    workload: Workload,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured time, in seconds.
    #[arg(long = "duration", value_name = "SECONDS", default_value = "10", value_parser = super::commands::parse_seconds)]
    duration_ms: u64,
    /// Unmeasured time before it, in seconds.
    #[arg(long = "warmup", value_name = "SECONDS", default_value = "1", value_parser = super::commands::parse_seconds)]
    warmup_ms: u64,
    /// Bytes per written value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    #[arg(long, value_enum, default_value_t = Connect::Spread)]
    connect: Connect,
    /// The TTL of the leases the workloads acquire, in seconds (etcd's are whole seconds, at
    /// least 1). Short ones, with `acquire`, make leases expire as fast as they are granted.
    #[arg(long = "ttl", value_name = "SECONDS", default_value = "60", value_parser = super::commands::parse_seconds)]
    ttl_ms: u64,
    /// With `renew`: how many leases each client holds and renews in each request, at most
    /// 512 (etcd keeps one lease alive for all of a client's keys, so it renews one).
    #[arg(long, default_value_t = 1)]
    leases: usize,
    /// Which API the clients speak: Leasehold's own, or etcd v3's through the `etcd-client`
    /// crate (needs `--features etcd`), to whatever serves it at --endpoints: etcd, or
    /// Leasehold's etcd API, so one client drives both systems. (`--target` is its older name.)
    #[arg(long = "api", alias = "target", value_enum, default_value_t = Target::Leasehold)]
    target: Target,
    /// Also measure, before the run, the floor under one client's latency: the disk's
    /// fdatasync in DIR (where the nodes keep their data) and a loopback round trip, and the
    /// same with a majority's fdatasync when three nodes share that disk (the second shortest
    /// of three made at once); the summary sets the p50 beside both.
    #[arg(long, value_name = "DIR")]
    floor_dir: Option<std::path::PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Leasehold,
    Etcd,
}

/// What one client saw while measuring.
struct Tally {
    latency_us: Histogram<u64>,
    refusals: u64,
    errors: u64,
    last_error: Option<String>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            // 1 µs to 60 s at 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)
                .expect("valid histogram bounds"),
            refusals: 0,
            errors: 0,
            last_error: None,
        }
    }
}

/// How a request ended, for the tally.
enum Done {
    Accepted,
    Refused,
}

/// The options' bounds, checked before anything is sent.
fn check(args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(args.duration_ms >= 1, "--duration must be positive");
    anyhow::ensure!(
        (1..=crate::lease::Limits::MAX_RENEWALS).contains(&args.leases),
        "--leases must be between 1 and {}",
        crate::lease::Limits::MAX_RENEWALS
    );
    anyhow::ensure!(
        args.leases == 1 || args.workload == Workload::Renew,
        "--leases is for the renew workload"
    );
    anyhow::ensure!(
        args.value_size <= crate::lease::Limits::MAX_VALUE_BYTES,
        "--value-size must be at most {} bytes",
        crate::lease::Limits::MAX_VALUE_BYTES
    );
    Ok(())
}

pub async fn run(opts: &ClientOpts, args: BenchArgs) -> anyhow::Result<Exit> {
    check(&args)?;
    // Before any load, so that the run's own traffic does not raise it.
    let floor = match &args.floor_dir {
        Some(dir) => {
            let dir = dir.clone();
            Some(tokio::task::spawn_blocking(move || super::floor::measure(&dir)).await??)
        }
        None => None,
    };
    let all: Vec<String> = opts
        .endpoints
        .split(',')
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    anyhow::ensure!(!all.is_empty(), "--endpoints names no node");
    // With one client, spread would measure whichever role the first endpoint happens to
    // have, on each system a coin toss of its own election: leader and follower name it.
    let targets = match args.connect {
        Connect::Spread => all,
        Connect::Leader => vec![roles(opts, args.target, &all).await?.leader],
        Connect::Follower => {
            let followers = roles(opts, args.target, &all).await?.followers;
            anyhow::ensure!(!followers.is_empty(), "--endpoints names no follower");
            followers
        }
    };
    // A fresh prefix per run, so fresh-lease workloads never meet an earlier run's leases.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 1_000_000_000;
    // Every client's own leases and keys first, unmeasured and apart from the warmup.
    let mut ready = Vec::new();
    for setup in set_up_clients(opts, &args, &targets, run_id)? {
        ready.push(setup.await??);
    }
    let done = Arc::new(AtomicU64::new(0));
    let measure_from = Instant::now() + Duration::from_millis(args.warmup_ms);
    let until = measure_from + Duration::from_millis(args.duration_ms);
    let mut tasks = Vec::new();
    for (backend, ctx, names) in ready {
        let done = done.clone();
        tasks.push(tokio::spawn(client_loop(
            backend,
            ctx,
            names,
            measure_from,
            until,
            done,
        )));
    }
    let progress = tokio::spawn(report_progress(done.clone(), measure_from, until));

    let mut total = Tally::new();
    for task in tasks {
        let tally = task.await??;
        total.latency_us.add(&tally.latency_us)?;
        total.refusals += tally.refusals;
        total.errors += tally.errors;
        total.last_error = total.last_error.or(tally.last_error);
    }
    progress.abort();
    eprint!("\r\x1b[K");
    print_summary(opts, &args, &total, floor);
    Ok(Exit::Ok)
}

/// Which endpoint leads now and which follow, as the system under test reports it.
struct Roles {
    leader: String,
    followers: Vec<String>,
}

async fn roles(opts: &ClientOpts, target: Target, endpoints: &[String]) -> anyhow::Result<Roles> {
    match target {
        Target::Leasehold => {
            let nodes = opts.lease_client(endpoints)?.status().await?;
            let (leaders, followers): (Vec<_>, Vec<_>) = nodes
                .into_iter()
                .filter(|n| {
                    n.role == pb::Role::Leader as i32 || n.role == pb::Role::Follower as i32
                })
                .partition(|n| n.role == pb::Role::Leader as i32);
            Ok(Roles {
                leader: (leaders.into_iter().next().map(|n| n.address))
                    .ok_or_else(|| anyhow::anyhow!("no node leads right now; try again"))?,
                followers: followers.into_iter().map(|n| n.address).collect(),
            })
        }
        #[cfg(feature = "etcd")]
        Target::Etcd => {
            let (leader, followers) =
                super::bench_etcd::roles(endpoints, opts.tls_config()?).await?;
            Ok(Roles { leader, followers })
        }
        #[cfg(not(feature = "etcd"))]
        Target::Etcd => anyhow::bail!(WITHOUT_ETCD),
    }
}

struct ClientCtx {
    id: usize,
    run_id: u128,
    workload: Workload,
    value: Vec<u8>,
    /// The TTL of every lease the client acquires (but the mixed workload's contended ones).
    ttl_ms: u64,
    /// How many leases the client renews in each request (renew).
    leases: usize,
}

#[cfg(not(feature = "etcd"))]
const WITHOUT_ETCD: &str = "this leasehold was built without etcd support; build it with \
     `cargo build --release --features etcd`";

/// Leases the mixed workload's clients contend for.
const MIXED_LEASES: u64 = 4;

/// One client's connection to the system under test, and what it holds there. (One per
/// benchmark client, made once and never moved in the loop: the variants' sizes cost nothing.)
#[cfg_attr(feature = "etcd", allow(clippy::large_enum_variant))]
enum Backend {
    Leasehold {
        client: LeaseClient,
        /// The client's own lease's token (fenced-put).
        token: u64,
        /// The client's own leases, as it renews them (renew).
        held: Vec<Renewal>,
        /// The token last granted on each contended lease (mixed), 0 when none.
        mixed_tokens: [u64; MIXED_LEASES as usize],
        /// Where the client's walk of the listing goes on (list).
        page_token: String,
    },
    #[cfg(feature = "etcd")]
    Etcd(Box<super::bench_etcd::Etcd>),
}

impl Backend {
    async fn connect(
        opts: &ClientOpts,
        target: Target,
        endpoints: &[String],
    ) -> anyhow::Result<Backend> {
        match target {
            Target::Leasehold => Ok(Backend::Leasehold {
                client: opts.lease_client(endpoints)?,
                token: 0,
                held: Vec::new(),
                mixed_tokens: [0; MIXED_LEASES as usize],
                page_token: String::new(),
            }),
            #[cfg(feature = "etcd")]
            Target::Etcd => Ok(Backend::Etcd(Box::new(
                super::bench_etcd::Etcd::connect(&endpoints[0], opts.tls_config()?).await?,
            ))),
            #[cfg(not(feature = "etcd"))]
            Target::Etcd => anyhow::bail!(WITHOUT_ETCD),
        }
    }

    /// What the client's holder names start with: `IDENTITY/` for a Leasehold client whose
    /// certificate names one, since an identity holds leases only as holders it owns.
    async fn owner(&self) -> anyhow::Result<String> {
        match self {
            Backend::Leasehold { client, .. } => {
                let identity = client.who_am_i().await?.identity;
                Ok(match identity.is_empty() {
                    true => identity,
                    false => format!("{identity}/"),
                })
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Ok(String::new()),
        }
    }

    /// Unmeasured, at the end: a Leasehold client's session closed, so that a run leaves none
    /// in the store for its idle hour.
    async fn finish(&self) {
        match self {
            Backend::Leasehold { client, .. } => {
                let _ = client.close_session().await;
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => {}
        }
    }

    /// Unmeasured: the client's own lease and key.
    async fn setup(&mut self, ctx: &ClientCtx, names: &Names) -> anyhow::Result<()> {
        match self {
            Backend::Leasehold {
                client,
                token,
                held,
                ..
            } => {
                let mine = match ctx.workload {
                    Workload::FencedPut => 1,
                    Workload::Renew => ctx.leases,
                    _ => 0,
                };
                for i in 0..mine {
                    let lease = format!("{}-{i}", names.lease);
                    let acquired = client.acquire(&lease, &names.holder, ctx.ttl_ms).await?;
                    *token = granted(&acquired).ok_or_else(|| {
                        anyhow::anyhow!("could not acquire {lease} for the benchmark")
                    })?;
                    held.push(Renewal {
                        lease,
                        holder: names.holder.clone(),
                        token: *token,
                        ttl_ms: ctx.ttl_ms,
                    });
                }
                if ctx.workload == Workload::Get {
                    client.put(&names.key, &ctx.value, None).await?;
                }
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(etcd) => {
                if matches!(ctx.workload, Workload::Renew | Workload::FencedPut) {
                    anyhow::ensure!(
                        etcd.acquire(&names.lease, (ctx.ttl_ms / 1000).max(1) as i64)
                            .await?,
                        "could not acquire {} for the benchmark",
                        names.lease
                    );
                }
                if ctx.workload == Workload::Get {
                    etcd.put(&names.key, &ctx.value).await?;
                }
            }
        }
        Ok(())
    }

    /// One measured request. `choice` drives the mixed workload.
    async fn step(
        &mut self,
        ctx: &ClientCtx,
        names: &Names,
        seq: u64,
        choice: u64,
    ) -> Result<Done, String> {
        match self {
            Backend::Leasehold {
                client,
                token,
                held,
                mixed_tokens,
                page_token,
            } => {
                let result = match ctx.workload {
                    Workload::Acquire => {
                        let lease = format!("{}-{seq}", names.holder);
                        client
                            .acquire(&lease, &names.holder, ctx.ttl_ms)
                            .await
                            .map(|r| accepted(granted(&r).is_some()))
                    }
                    Workload::Renew => client.renew(held).await.map(|r| all_renewed(&r)),
                    Workload::FencedPut => client
                        .put(&names.key, &ctx.value, Some((&held[0].lease, *token)))
                        .await
                        .map(|r| accepted(written(&r))),
                    Workload::Put => client
                        .put(&names.key, &ctx.value, None)
                        .await
                        .map(|r| accepted(written(&r))),
                    Workload::Get => client.get(&names.key).await.map(|_| Done::Accepted),
                    Workload::List => list_page(client, page_token).await,
                    Workload::Mixed => {
                        let mixed = Mixed::of(ctx.run_id, choice);
                        mixed
                            .leasehold(client, &names.holder, mixed_tokens, &ctx.value)
                            .await
                    }
                };
                result.map_err(|e| e.to_string())
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(etcd) => {
                let result = match ctx.workload {
                    Workload::Acquire => {
                        let lock = format!("{}-{seq}", names.holder);
                        etcd.acquire(&lock, (ctx.ttl_ms / 1000).max(1) as i64)
                            .await
                            .map(accepted)
                    }
                    Workload::Renew => etcd.renew().await.map(|()| Done::Accepted),
                    Workload::FencedPut => etcd
                        .fenced_put(&names.lease, &names.key, &ctx.value)
                        .await
                        .map(accepted),
                    Workload::Put => etcd
                        .put(&names.key, &ctx.value)
                        .await
                        .map(|()| Done::Accepted),
                    Workload::Get => etcd.get(&names.key).await.map(|()| Done::Accepted),
                    Workload::List => return Err(LEASEHOLDS_ONLY.into()),
                    Workload::Mixed => Mixed::of(ctx.run_id, choice).etcd(etcd, &ctx.value).await,
                };
                result.map_err(|status| format!("{:?}: {}", status.code(), status.message()))
            }
        }
    }
}

/// One step of the mixed workload: on one of the contended leases, an acquire, a fenced put
/// under the token last granted to the client, or a read, as `choice` picks.
struct Mixed {
    slot: usize,
    action: u64,
    contended: String,
}

impl Mixed {
    fn of(run_id: u128, choice: u64) -> Mixed {
        let slot = (choice % MIXED_LEASES) as usize;
        Mixed {
            slot,
            action: (choice >> 8) % 4,
            contended: format!("mixed-{run_id}-{slot}"),
        }
    }

    async fn leasehold(
        &self,
        client: &LeaseClient,
        holder: &str,
        tokens: &mut [u64; MIXED_LEASES as usize],
        value: &[u8],
    ) -> Result<Done, leasehold_client::ClientError> {
        let contended = &self.contended;
        match self.action {
            0 => client
                .acquire(contended, holder, 1_000)
                .await
                .map(|r| match granted(&r) {
                    Some(t) => {
                        tokens[self.slot] = t;
                        Done::Accepted
                    }
                    None => Done::Refused,
                }),
            1 if tokens[self.slot] > 0 => client
                .put(contended, value, Some((contended, tokens[self.slot])))
                .await
                .map(|r| accepted(written(&r))),
            _ => client.get(contended).await.map(|_| Done::Accepted),
        }
    }

    #[cfg(feature = "etcd")]
    async fn etcd(
        &self,
        etcd: &mut super::bench_etcd::Etcd,
        value: &[u8],
    ) -> Result<Done, tonic::Status> {
        match self.action {
            0 => etcd.acquire(&self.contended, 1).await.map(accepted),
            1 if etcd.lock_revision > 0 => {
                let data = format!("{}-data", self.contended);
                etcd.fenced_put(&self.contended, &data, value)
                    .await
                    .map(accepted)
            }
            _ => etcd.get(&self.contended).await.map(|()| Done::Accepted),
        }
    }
}

/// Why etcd runs no list workload.
#[cfg(feature = "etcd")]
const LEASEHOLDS_ONLY: &str = "the list workload lists Leasehold's leases only";

/// The next page of a client's walk of the listing (list), from the start again at its end.
async fn list_page(
    client: &LeaseClient,
    page_token: &mut String,
) -> Result<Done, leasehold_client::ClientError> {
    let listing = Listing {
        page_token: std::mem::take(page_token),
        ..Listing::default()
    };
    let page = client.list_leases(&listing).await?;
    *page_token = page.outcome.next.unwrap_or_default();
    Ok(Done::Accepted)
}

/// A client's own names: its holder, its lease (or etcd lock key), its key.
struct Names {
    holder: String,
    lease: String,
    key: String,
}

type SetUp = tokio::task::JoinHandle<anyhow::Result<(Backend, ClientCtx, Names)>>;

/// Connects each client, client i to target i mod their number, and sets it up.
fn set_up_clients(
    opts: &ClientOpts,
    args: &BenchArgs,
    targets: &[String],
    run_id: u128,
) -> anyhow::Result<Vec<SetUp>> {
    let mut setups = Vec::new();
    for i in 0..args.clients {
        let mut endpoints = targets.to_vec();
        endpoints.rotate_left(i % targets.len());
        let ctx = ClientCtx {
            id: i,
            run_id,
            workload: args.workload,
            value: vec![b'x'; args.value_size],
            ttl_ms: args.ttl_ms,
            leases: args.leases,
        };
        let (opts, target) = (opts.clone(), args.target);
        setups.push(tokio::spawn(async move {
            let backend = Backend::connect(&opts, target, &endpoints).await?;
            set_up(backend, ctx).await
        }));
    }
    Ok(setups)
}

/// One client's names, and its own leases and key set up.
async fn set_up(
    mut backend: Backend,
    ctx: ClientCtx,
) -> anyhow::Result<(Backend, ClientCtx, Names)> {
    let holder = format!("{}bench-{}-{}", backend.owner().await?, ctx.run_id, ctx.id);
    let names = Names {
        lease: holder.clone(),
        key: format!("{holder}-key"),
        holder,
    };
    backend.setup(&ctx, &names).await?;
    Ok((backend, ctx, names))
}

async fn client_loop(
    mut backend: Backend,
    ctx: ClientCtx,
    names: Names,
    measure_from: Instant,
    until: Instant,
    done: Arc<AtomicU64>,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::new();
    let mut seq: u64 = 0;
    // A per-client xorshift for the mixed workload's choices.
    let mut choice = (ctx.id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while Instant::now() < until {
        seq += 1;
        choice ^= choice << 13;
        choice ^= choice >> 7;
        choice ^= choice << 17;
        let sent = Instant::now();
        let result = backend.step(&ctx, &names, seq, choice).await;
        let latency_us = sent.elapsed().as_micros() as u64;
        if sent < measure_from {
            continue;
        }
        match result {
            Ok(outcome) => {
                tally.latency_us.saturating_record(latency_us.max(1));
                if matches!(outcome, Done::Refused) {
                    tally.refusals += 1;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tally.errors += 1;
                tally.last_error = Some(e);
            }
        }
    }
    backend.finish().await;
    Ok(tally)
}

fn accepted(ok: bool) -> Done {
    if ok {
        Done::Accepted
    } else {
        Done::Refused
    }
}

fn granted(r: &Answer<Acquired>) -> Option<u64> {
    r.outcome.token()
}

fn all_renewed(r: &Answer<Vec<Renewed>>) -> Done {
    accepted(r.outcome.iter().all(Renewed::is_renewed))
}

fn written(r: &Answer<Written>) -> bool {
    r.outcome.is_written()
}

/// One line on stderr, rewritten every second.
async fn report_progress(done: Arc<AtomicU64>, measure_from: Instant, until: Instant) {
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Instant::now();
        let count = done.load(Ordering::Relaxed);
        if now < measure_from {
            eprint!("\r\x1b[Kwarming up...");
        } else {
            let left = until.saturating_duration_since(now).as_secs();
            eprint!(
                "\r\x1b[K{count} ops, {} ops/s in the last second, {left} s left",
                count - last
            );
        }
        last = count;
    }
}

fn print_summary(opts: &ClientOpts, args: &BenchArgs, total: &Tally, floor: Option<Floor>) {
    let h = &total.latency_us;
    let seconds = args.duration_ms as f64 / 1000.0;
    let ops = h.len();
    let rate = ops as f64 / seconds;
    let ms = |us: u64| us as f64 / 1000.0;
    let workload = clap::ValueEnum::to_possible_value(&args.workload)
        .map_or_else(String::new, |v| v.get_name().to_owned());
    match opts.output {
        Output::Text => {
            println!(
                "{workload}{}: {} clients, {:.1} s: {rate:.0} ops/s; latency ms p50 {:.2} p99 {:.2} p999 {:.2} max {:.2}; \
                 {} refused, {} errors",
                match args.leases {
                    1 => String::new(),
                    n => format!(" of {n} leases"),
                },
                args.clients,
                seconds,
                ms(h.value_at_quantile(0.5)),
                ms(h.value_at_quantile(0.99)),
                ms(h.value_at_quantile(0.999)),
                ms(h.max()),
                total.refusals,
                total.errors
            );
            if let Some(e) = &total.last_error {
                println!("last error: {e}");
            }
            if let Some(f) = floor {
                print_floor(ms(h.value_at_quantile(0.5)), &f);
            }
        }
        Output::Json => {
            let p50_ms = ms(h.value_at_quantile(0.5));
            let report = BenchReport {
                workload,
                clients: args.clients,
                leases_per_request: args.leases,
                duration_s: seconds,
                ops,
                ops_per_s: rate,
                p50_ms,
                p99_ms: ms(h.value_at_quantile(0.99)),
                p999_ms: ms(h.value_at_quantile(0.999)),
                max_ms: ms(h.max()),
                refused: total.refusals,
                errors: total.errors,
                last_error: total.last_error.as_deref(),
                floor,
                p50_vs_floor: floor.map(|f| p50_ms / f.put_floor_ms),
                p50_vs_shared_floor: floor.map(|f| p50_ms / f.shared_put_floor_ms),
            };
            println!("{}", json(&report));
        }
    }
}

/// One client's p50 (ms) against the floor measured before the run, alone and with three nodes
/// sharing the disk.
fn print_floor(p50: f64, f: &Floor) {
    println!(
        "floor: fdatasync p50 {:.2} ms, loopback round trip p50 {:.3} ms: a put's floor {:.2} ms \
         (fdatasync + 2 round trips); p50 is {:.2}x the floor",
        f.fdatasync_p50_ms,
        f.loopback_rtt_p50_ms,
        f.put_floor_ms,
        p50 / f.put_floor_ms
    );
    println!(
        "floor with three nodes on this disk: the second shortest of three fdatasyncs at once, \
         p50 {:.2} ms: a put's floor {:.2} ms; p50 is {:.2}x it",
        f.shared_fdatasync_p50_ms,
        f.shared_put_floor_ms,
        p50 / f.shared_put_floor_ms
    );
}
