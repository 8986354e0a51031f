//! A worker of which one acts at a time: several copies run, the one holding the lease does the
//! work, the others stand by, woken when the lease comes free.
//!
//! ```text
//! cargo run --example singleton_worker -- 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 reports w1 2000
//! ```
//!
//! Arguments: the nodes, the lease, this worker's name, the TTL in ms. Every piece of work is a
//! write fenced with the holding's token, so the store refuses it once a successor was granted
//! the lease, even if this worker was paused (GC, SIGSTOP, a slow disk) long past its deadline.
//! The worker also refuses to start work itself once its holding is not safe. It prints one
//! line per step, for people and for the test that runs three of it through leader kills and
//! pauses.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_client::{HoldError, Holder, LeaseClient, Written};
use tokio::time::Instant;

/// Milliseconds since the Unix epoch of `at`, an instant of the monotonic clock.
fn unix_ms(at: Instant) -> u128 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let now = leasehold_client::clock::now();
    if at <= now {
        wall.saturating_sub(now - at).as_millis()
    } else {
        (wall + (at - now)).as_millis()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoints, lease, name, ttl_ms] = args.as_slice() else {
        eprintln!("usage: singleton_worker ENDPOINTS LEASE NAME TTL_MS");
        std::process::exit(2);
    };
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    let ttl = Duration::from_millis(ttl_ms.parse()?);
    let client = Arc::new(LeaseClient::new(&endpoints)?);
    loop {
        // Stand by until the lease is free, woken by a watch of it.
        let holder = match Holder::options(lease, name, ttl)
            .wait()
            .acquire(client.clone())
            .await
        {
            Ok(holder) => holder,
            Err(e) => {
                println!("acquire-failed error={e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        println!(
            "acquired holder={} token={}",
            holder.holder(),
            holder.token()
        );
        work(&holder).await;
        // Dropping the holder releases the lease (best effort) and stops renewing.
    }
}

/// Does work under `holder` until the holding is not safe any more.
async fn work(holder: &Holder) {
    let token = holder.token();
    for seq in 1.. {
        let decided = leasehold_client::clock::now();
        let safe_until = holder.safe_until();
        let value = format!("{}:{token}:{seq}", holder.holder());
        match holder
            .fenced_put("singleton/output", value.as_bytes())
            .await
        {
            Ok(answer) if answer.outcome == Written::Written => println!(
                "acted token={token} seq={seq} decided_unix_ms={} safe_until_unix_ms={} \
                 log_index={}",
                unix_ms(decided),
                unix_ms(safe_until),
                answer.applied.log_index
            ),
            Ok(answer) => {
                println!("stale token={token} seq={seq} answer={:?}", answer.outcome);
                return;
            }
            Err(HoldError::NotSafe(lost)) => {
                println!("refused-locally token={token} seq={seq} reason={lost}");
                return;
            }
            // No answer (the cluster is electing): the holding decides whether to go on.
            Err(e) => println!("no-answer token={token} seq={seq} error={e}"),
        }
        tokio::select! {
            lost = holder.lost() => {
                println!("lost token={token} reason={lost}");
                return;
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}
