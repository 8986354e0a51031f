//! `leasehold bench`: a closed-loop load generator against a running cluster. Each client is
//! one task with its own connection, sending its next request when the last one is answered.
//! Latencies go into an HDR histogram; refusals (held by, stale token) are counted apart from
//! errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;
use tokio::time::Instant;

use super::{ClientOpts, Exit, Output};
use crate::client::LeaseClient;
use crate::proto::v1 as pb;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A grant of a fresh lease per request.
    Acquire,
    /// Each client renews its own lease.
    Renew,
    /// Each client writes its own key, fenced with its lease's token.
    FencedPut,
    /// Plain writes.
    Put,
    /// Linearizable reads.
    Get,
    /// A few contended leases: acquire or renew, fenced put, get.
    Mixed,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connect {
    /// Every client talks to the leader.
    Leader,
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

pub async fn run(opts: &ClientOpts, args: BenchArgs) -> anyhow::Result<Exit> {
    anyhow::ensure!(args.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(args.duration_ms >= 1, "--duration must be positive");
    anyhow::ensure!(
        args.value_size <= crate::lease::Limits::MAX_VALUE_BYTES,
        "--value-size must be at most {} bytes",
        crate::lease::Limits::MAX_VALUE_BYTES
    );
    let all: Vec<String> = opts
        .endpoints
        .split(',')
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    anyhow::ensure!(!all.is_empty(), "--endpoints names no node");
    let leader = match args.connect {
        Connect::Leader => Some(leader_endpoint(&all).await?),
        Connect::Spread => None,
    };
    // A fresh prefix per run, so fresh-lease workloads never meet an earlier run's leases.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 1_000_000_000;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let measure_from = start + Duration::from_millis(args.warmup_ms);
    let until = measure_from + Duration::from_millis(args.duration_ms);
    let mut tasks = Vec::new();
    for i in 0..args.clients {
        let endpoints = match &leader {
            Some(leader) => vec![leader.clone()],
            None => {
                let mut rotated = all.clone();
                rotated.rotate_left(i % all.len());
                rotated
            }
        };
        let client = LeaseClient::new(&endpoints)?;
        let ctx = ClientCtx {
            id: i,
            run_id,
            workload: args.workload,
            value: vec![b'x'; args.value_size],
        };
        tasks.push(tokio::spawn(client_loop(
            client,
            ctx,
            measure_from,
            until,
            done.clone(),
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
    print_summary(opts, &args, &total);
    Ok(Exit::Ok)
}

/// The address of the node that leads now.
async fn leader_endpoint(endpoints: &[String]) -> anyhow::Result<String> {
    let status = LeaseClient::new(endpoints)?.status().await?;
    status
        .nodes
        .iter()
        .find(|n| n.role == pb::Role::Leader as i32)
        .map(|n| n.address.clone())
        .ok_or_else(|| {
            anyhow::anyhow!("no node leads right now; try again, or use --connect spread")
        })
}

struct ClientCtx {
    id: usize,
    run_id: u128,
    workload: Workload,
    value: Vec<u8>,
}

const TTL_MS: u64 = 60_000;
/// Leases the mixed workload's clients contend for.
const MIXED_LEASES: u64 = 4;

async fn client_loop(
    client: LeaseClient,
    ctx: ClientCtx,
    measure_from: Instant,
    until: Instant,
    done: Arc<AtomicU64>,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::new();
    let holder = format!("bench-{}-{}", ctx.run_id, ctx.id);
    let own_lease = holder.clone();
    let key = holder.clone();
    // Setup, unmeasured: the client's own lease and key.
    let mut token = match ctx.workload {
        Workload::Renew | Workload::FencedPut => {
            granted(&client.acquire(&own_lease, &holder, TTL_MS).await?)
                .ok_or_else(|| anyhow::anyhow!("could not acquire {own_lease} for the benchmark"))?
        }
        _ => 0,
    };
    if ctx.workload == Workload::Get {
        client.put(&key, &ctx.value, None).await?;
    }
    let mut seq: u64 = 0;
    // A simple per-client generator for the mixed workload's choices.
    let mut state = (ctx.id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while Instant::now() < until {
        seq += 1;
        let sent = Instant::now();
        let result: Result<Done, crate::client::ClientError> = match ctx.workload {
            Workload::Acquire => {
                let lease = format!("{holder}-{seq}");
                client
                    .acquire(&lease, &holder, TTL_MS)
                    .await
                    .map(|r| accepted(granted(&r).is_some()))
            }
            Workload::Renew => client
                .acquire(&own_lease, &holder, TTL_MS)
                .await
                .map(|r| accepted(granted(&r).is_some())),
            Workload::FencedPut => client
                .put(&key, &ctx.value, Some((&own_lease, token)))
                .await
                .map(|r| accepted(written(&r))),
            Workload::Put => client
                .put(&key, &ctx.value, None)
                .await
                .map(|r| accepted(written(&r))),
            Workload::Get => client.get(&key).await.map(|_| Done::Accepted),
            Workload::Mixed => {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let lease = format!("mixed-{}-{}", ctx.run_id, state % MIXED_LEASES);
                match (state >> 8) % 4 {
                    0 => client
                        .acquire(&lease, &holder, 1_000)
                        .await
                        .map(|r| match granted(&r) {
                            Some(t) => {
                                token = t;
                                Done::Accepted
                            }
                            None => Done::Refused,
                        }),
                    1 if token > 0 => client
                        .put(&lease, &ctx.value, Some((&lease, token)))
                        .await
                        .map(|r| accepted(written(&r))),
                    _ => client.get(&lease).await.map(|_| Done::Accepted),
                }
            }
        };
        let latency_us = sent.elapsed().as_micros() as u64;
        if sent < measure_from {
            continue;
        }
        match result {
            Ok(Done::Accepted) => {
                tally.latency_us.saturating_record(latency_us.max(1));
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Done::Refused) => {
                tally.latency_us.saturating_record(latency_us.max(1));
                tally.refusals += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tally.errors += 1;
                tally.last_error = Some(e.to_string());
            }
        }
    }
    Ok(tally)
}

fn accepted(ok: bool) -> Done {
    if ok {
        Done::Accepted
    } else {
        Done::Refused
    }
}

fn granted(r: &pb::AcquireResponse) -> Option<u64> {
    match &r.outcome {
        Some(pb::acquire_response::Outcome::Granted(g)) => Some(g.token),
        _ => None,
    }
}

fn written(r: &pb::PutResponse) -> bool {
    matches!(r.outcome, Some(pb::put_response::Outcome::Written(_)))
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

fn print_summary(opts: &ClientOpts, args: &BenchArgs, total: &Tally) {
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
                "{workload}: {} clients, {:.1} s: {rate:.0} ops/s; latency ms p50 {:.2} p99 {:.2} p999 {:.2} max {:.2}; \
                 {} refused, {} errors",
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
        }
        Output::Json => println!(
            "{}",
            json!({
                "workload": workload,
                "clients": args.clients,
                "duration_s": seconds,
                "ops": ops,
                "ops_per_s": rate,
                "p50_ms": ms(h.value_at_quantile(0.5)),
                "p99_ms": ms(h.value_at_quantile(0.99)),
                "p999_ms": ms(h.value_at_quantile(0.999)),
                "max_ms": ms(h.max()),
                "refused": total.refusals,
                "errors": total.errors,
                "last_error": total.last_error,
            })
        ),
    }
}
