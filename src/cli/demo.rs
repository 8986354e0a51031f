//! `leasehold demo`: the seed page's scenario, against a fresh three-node manual-clock cluster
//! that the demo starts and stops itself. Node a freezes past its lease; b takes over; a's
//! plain write silently wins, and its fenced write is refused.

use std::time::Duration;

use super::local::{local_addrs, LocalCluster};
use super::Exit;
use leasehold_client::{Acquired, Answer, LeaseClient, Written};

const LEASE: &str = "report-writer";
const TTL_MS: u64 = 10_000;

pub async fn run() -> anyhow::Result<Exit> {
    let binary = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("leasehold-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut cluster = LocalCluster::new(&binary, &dir, &local_addrs(3)?, true).with_shared_cores();
    let addrs = cluster.endpoints();
    let outcome = match cluster.start_all() {
        Ok(()) => {
            // Generous: the first call waits for the new cluster's first election.
            let client = LeaseClient::new(&addrs)?.with_deadline(Duration::from_secs(20));
            scenario(&client).await
        }
        Err(e) => Err(e.into()),
    };
    cluster.stop_all(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// The acquire's answer, the way the seed page prints it.
fn acquired(response: &Answer<Acquired>) -> Result<u64, String> {
    match &response.outcome {
        Acquired::Granted { token, .. } => Ok(*token),
        Acquired::HeldBy(h) => Err(super::commands::held_by_text(h)),
    }
}

fn written(response: &Answer<Written>) -> &'static str {
    match response.outcome {
        Written::Written => "ok",
        Written::StaleToken { .. } => "stale token",
    }
}

fn value(response: &Answer<Option<Vec<u8>>>) -> String {
    response
        .outcome
        .as_deref()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "(not found)".into())
}

async fn scenario(c: &LeaseClient) -> anyhow::Result<Exit> {
    let unexpected =
        |what: &str, got: String| anyhow::anyhow!("demo went off script: {what}: {got}");

    // Step 1: a takes the lease; b is refused while a's lease is valid.
    let token_a = acquired(&c.acquire(LEASE, "a", TTL_MS).await?)
        .map_err(|e| unexpected("a's acquire", e))?;
    println!("a holds the lease, token: {token_a}");
    let b_first = acquired(&c.acquire(LEASE, "b", TTL_MS).await?);
    println!(
        "b asks for the lease: {}",
        b_first
            .as_ref()
            .map_or_else(String::clone, |t| format!("granted token {t}"))
    );

    // Step 2: a freezes; 15 s pass on the store's clock; b takes the lease and writes.
    c.advance(15_000).await?;
    let token_b = acquired(&c.acquire(LEASE, "b", TTL_MS).await?)
        .map_err(|e| unexpected("b's acquire", e))?;
    println!("b holds the lease, token: {token_b}");
    c.put("plain_report", b"report by b", None).await?;
    c.put("fenced_report", b"report by b", Some((LEASE, token_b)))
        .await?;

    // Step 3: a wakes up and writes, still believing it leads.
    let plain = c.put("plain_report", b"report by a", None).await?;
    let fenced = c
        .put("fenced_report", b"report by a", Some((LEASE, token_a)))
        .await?;
    println!("a's plain write: {}", written(&plain));
    println!("a's fenced write: {}", written(&fenced));
    println!("plain report: {}", value(&c.get("plain_report").await?));
    println!("fenced report: {}", value(&c.get("fenced_report").await?));

    let again = acquired(&c.acquire(LEASE, "a", TTL_MS).await?);
    println!(
        "a asks again: {}",
        again
            .as_ref()
            .map_or_else(String::clone, |t| format!("granted token {t}"))
    );
    Ok(Exit::Ok)
}
