//! The client commands: one request each, printed as text for people or one JSON object.

use std::time::Duration;

use serde_json::{json, Value};

use super::{ClientOpts, Exit, Output};
use crate::client::LeaseClient;
use crate::proto::v1 as pb;

/// Seconds on the command line (fractions allowed), milliseconds on the wire.
pub fn parse_seconds(text: &str) -> Result<u64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{text:?} must be a positive number of seconds"));
    }
    let ms = (seconds * 1000.0).round();
    if ms > u64::MAX as f64 {
        return Err(format!("{text:?} seconds is too large"));
    }
    Ok(ms as u64)
}

/// Store time for people: whole seconds when whole, milliseconds otherwise.
pub fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}

fn client(opts: &ClientOpts) -> anyhow::Result<LeaseClient> {
    let endpoints: Vec<&str> = opts
        .endpoints
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .collect();
    opts.lease_client(&endpoints)
}

/// Prints `text` or `fields` (plus where it was applied) and returns the exit status.
fn emit(
    opts: &ClientOpts,
    applied: Option<&pb::Applied>,
    text: String,
    mut fields: Value,
    exit: Exit,
) -> Exit {
    match opts.output {
        Output::Text => println!("{text}"),
        Output::Json => {
            let applied = applied.cloned().unwrap_or_default();
            fields["log_index"] = json!(applied.log_index);
            fields["position"] = json!(applied.position);
            fields["store_time_ms"] = json!(applied.store_time_ms);
            println!("{fields}");
        }
    }
    exit
}

/// The text for a refusal by a holder, shared by acquire and release.
pub fn held_by_text(held: &pb::HeldBy) -> String {
    format!("held by {}", held.holder)
}

pub async fn acquire(
    opts: &ClientOpts,
    lease: &str,
    holder: &str,
    ttl_ms: u64,
) -> anyhow::Result<Exit> {
    let r = client(opts)?.acquire(lease, holder, ttl_ms).await?;
    use pb::acquire_response::Outcome;
    Ok(match &r.outcome {
        Some(Outcome::Granted(g)) => emit(
            opts,
            r.applied.as_ref(),
            format!(
                "{} token: {}, expires at {}",
                if g.renewed { "renewed," } else { "granted," },
                g.token,
                seconds(g.expires_at_ms)
            ),
            json!({"outcome": "granted", "token": g.token, "expires_at_ms": g.expires_at_ms, "renewed": g.renewed}),
            Exit::Ok,
        ),
        Some(Outcome::HeldBy(h)) => emit(
            opts,
            r.applied.as_ref(),
            format!(
                "{} (token {}, expires at {})",
                held_by_text(h),
                h.token,
                seconds(h.expires_at_ms)
            ),
            json!({"outcome": "held_by", "holder": h.holder, "token": h.token, "expires_at_ms": h.expires_at_ms}),
            Exit::Refused,
        ),
        None => anyhow::bail!("the server answered without an outcome"),
    })
}

pub async fn release(
    opts: &ClientOpts,
    lease: &str,
    holder: &str,
    token: u64,
) -> anyhow::Result<Exit> {
    let r = client(opts)?.release(lease, holder, token).await?;
    use pb::release_response::Outcome;
    let (text, fields, exit) = match &r.outcome {
        Some(Outcome::Released(x)) => (
            format!("released, token: {}", x.token),
            json!({"outcome": "released", "token": x.token}),
            Exit::Ok,
        ),
        Some(Outcome::NotHeld(_)) => (
            "not held".into(),
            json!({"outcome": "not_held"}),
            Exit::Refused,
        ),
        Some(Outcome::HeldBy(h)) => (
            held_by_text(h),
            json!({"outcome": "held_by", "holder": h.holder, "expires_at_ms": h.expires_at_ms}),
            Exit::Refused,
        ),
        Some(Outcome::WrongToken(w)) => (
            format!("wrong token (the current token is {})", w.current_token),
            json!({"outcome": "wrong_token", "current_token": w.current_token}),
            Exit::Refused,
        ),
        None => anyhow::bail!("the server answered without an outcome"),
    };
    Ok(emit(opts, r.applied.as_ref(), text, fields, exit))
}

pub async fn put(
    opts: &ClientOpts,
    key: &str,
    value: &str,
    fence: Option<(&str, u64)>,
) -> anyhow::Result<Exit> {
    let r = client(opts)?.put(key, value.as_bytes(), fence).await?;
    use pb::put_response::Outcome;
    let (text, fields, exit) = match &r.outcome {
        Some(Outcome::Written(_)) => ("ok".to_owned(), json!({"outcome": "ok"}), Exit::Ok),
        Some(Outcome::StaleToken(s)) => (
            format!("stale token (the store has seen token {})", s.fence),
            json!({"outcome": "stale_token", "fence": s.fence}),
            Exit::Refused,
        ),
        None => anyhow::bail!("the server answered without an outcome"),
    };
    Ok(emit(opts, r.applied.as_ref(), text, fields, exit))
}

pub async fn delete(
    opts: &ClientOpts,
    key: &str,
    fence: Option<(&str, u64)>,
) -> anyhow::Result<Exit> {
    let r = client(opts)?.delete(key, fence).await?;
    use pb::delete_response::Outcome;
    let (text, fields, exit) = match &r.outcome {
        Some(Outcome::Deleted(d)) if d.existed => (
            "deleted".to_owned(),
            json!({"outcome": "deleted", "existed": true}),
            Exit::Ok,
        ),
        Some(Outcome::Deleted(_)) => (
            "deleted (there was no such key)".to_owned(),
            json!({"outcome": "deleted", "existed": false}),
            Exit::Ok,
        ),
        Some(Outcome::StaleToken(s)) => (
            format!(
                "stale token (the store has seen token {}); the row stays",
                s.fence
            ),
            json!({"outcome": "stale_token", "fence": s.fence}),
            Exit::Refused,
        ),
        None => anyhow::bail!("the server answered without an outcome"),
    };
    Ok(emit(opts, r.applied.as_ref(), text, fields, exit))
}

pub async fn check(opts: &ClientOpts, lease: &str, token: u64) -> anyhow::Result<Exit> {
    let r = client(opts)?.check_token(lease, token).await?;
    use pb::check_token_response::Outcome;
    let (text, fields, exit) = match &r.outcome {
        Some(Outcome::Current(c)) => (
            format!(
                "current: held by {} until {}",
                c.holder,
                seconds(c.expires_at_ms)
            ),
            json!({"outcome": "current", "holder": c.holder, "expires_at_ms": c.expires_at_ms}),
            Exit::Ok,
        ),
        Some(Outcome::Stale(s)) => (
            if s.holder.is_empty() {
                format!("stale: nobody holds it (latest token {})", s.current_token)
            } else {
                format!("stale: held by {} with token {}", s.holder, s.current_token)
            },
            json!({"outcome": "stale", "current_token": s.current_token, "holder": s.holder}),
            Exit::Refused,
        ),
        None => anyhow::bail!("the server answered without an outcome"),
    };
    Ok(emit(opts, r.applied.as_ref(), text, fields, exit))
}

pub async fn get(opts: &ClientOpts, key: &str) -> anyhow::Result<Exit> {
    let r = client(opts)?.get(key).await?;
    let value = r.value.as_deref().map(String::from_utf8_lossy);
    let text = match &value {
        Some(v) => v.to_string(),
        None => "(not found)".to_owned(),
    };
    Ok(emit(
        opts,
        r.applied.as_ref(),
        text,
        json!({"key": key, "value": value}),
        Exit::Ok,
    ))
}

pub async fn lease(opts: &ClientOpts, name: &str) -> anyhow::Result<Exit> {
    let r = client(opts)?.get_lease(name).await?;
    let now_ms = r.applied.as_ref().map_or(0, |a| a.store_time_ms);
    let text = if r.holder.is_empty() {
        format!(
            "free (last token {}, fence {}; store time {})",
            r.token,
            r.fence,
            seconds(now_ms)
        )
    } else {
        format!(
            "held by {}, token: {}, expires at {} (fence {}; store time {})",
            r.holder,
            r.token,
            seconds(r.expires_at_ms),
            r.fence,
            seconds(now_ms)
        )
    };
    let holder = (!r.holder.is_empty()).then_some(&r.holder);
    let fields = json!({"lease": name, "holder": holder, "token": r.token, "expires_at_ms": r.expires_at_ms, "fence": r.fence});
    Ok(emit(opts, r.applied.as_ref(), text, fields, Exit::Ok))
}

pub async fn advance(opts: &ClientOpts, by_ms: u64) -> anyhow::Result<Exit> {
    let r = client(opts)?.advance(by_ms).await?;
    let now_ms = r.applied.as_ref().map_or(0, |a| a.store_time_ms);
    Ok(emit(
        opts,
        r.applied.as_ref(),
        format!("store time: {}", seconds(now_ms)),
        json!({"outcome": "advanced"}),
        Exit::Ok,
    ))
}

pub fn role_name(role: i32) -> &'static str {
    match pb::Role::try_from(role).unwrap_or(pb::Role::Unspecified) {
        pb::Role::Leader => "leader",
        pb::Role::Follower => "follower",
        pb::Role::Candidate => "candidate",
        pb::Role::Learner => "learner",
        pb::Role::Unreachable => "unreachable",
        pb::Role::Unspecified => "unknown",
    }
}

/// The status table, one row per node.
pub fn status_table(nodes: &[pb::NodeStatus]) -> String {
    let mut out = format!(
        "{:<4} {:<21} {:<8} {:<11} {:>5} {:>6} {:>9} {:>9} {:>11} {:>8} {:>8} {:>8} {:>10}\n",
        "ID",
        "ADDRESS",
        "PID",
        "ROLE",
        "TERM",
        "LEADER",
        "LAST LOG",
        "APPLIED",
        "STORE TIME",
        "LEASES",
        "ROWS",
        "SESSIONS",
        "SNAPSHOT"
    );
    for n in nodes {
        if n.role == pb::Role::Unreachable as i32 {
            // A member never reached has given out no client address: name its peer one.
            let address = if n.address.is_empty() {
                format!("peer {}", n.peer_address)
            } else {
                n.address.clone()
            };
            out += &format!(
                "{:<4} {:<21} {:<8} {:<11} {}\n",
                n.id, address, "-", "unreachable", n.error
            );
            continue;
        }
        let leader = if n.leader == 0 {
            "-".into()
        } else {
            n.leader.to_string()
        };
        out += &format!(
            "{:<4} {:<21} {:<8} {:<11} {:>5} {:>6} {:>9} {:>9} {:>11} {:>8} {:>8} {:>8} {:>10}\n",
            n.id,
            n.address,
            n.pid,
            role_name(n.role),
            n.term,
            leader,
            n.last_log_index,
            n.applied_index,
            seconds(n.store_time_ms),
            n.leases,
            n.rows,
            n.sessions,
            bytes(n.snapshot_bytes)
        );
    }
    out
}

/// A size for people: bytes, KiB or MiB.
fn bytes(n: u64) -> String {
    match n {
        0..1_024 => format!("{n} B"),
        1_024..1_048_576 => format!("{:.1} KiB", n as f64 / 1_024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn status_json(nodes: &[pb::NodeStatus]) -> Value {
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|n| {
            json!({
                "id": n.id, "address": n.address, "peer_address": n.peer_address, "pid": n.pid, "role": role_name(n.role),
                "term": n.term, "leader": n.leader, "last_log_index": n.last_log_index,
                "applied_index": n.applied_index, "store_time_ms": n.store_time_ms,
                "manual_clock": n.manual_clock, "error": n.error, "leases": n.leases,
                "rows": n.rows, "sessions": n.sessions, "snapshot_bytes": n.snapshot_bytes,
            })
        })
        .collect();
    json!({ "nodes": nodes })
}

pub async fn status(opts: &ClientOpts, watch: bool) -> anyhow::Result<Exit> {
    let client = client(opts)?;
    if !watch {
        let r = client.status().await?;
        match opts.output {
            Output::Text => print!("{}", status_table(&r.nodes)),
            Output::Json => println!("{}", status_json(&r.nodes)),
        }
        return Ok(Exit::Ok);
    }
    // Short deadline: a refresh that cannot reach any node says so and tries again.
    let client = client.with_deadline(Duration::from_millis(400));
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        let screen = match client.status().await {
            Ok(r) => match opts.output {
                Output::Text => status_table(&r.nodes),
                Output::Json => format!("{}\n", status_json(&r.nodes)),
            },
            Err(e) => format!("{e}\n"),
        };
        if opts.output == Output::Text {
            // Clear the screen and home the cursor, so the table refreshes in place.
            println!("\x1b[2J\x1b[H{screen}(refreshing every 0.5s; Ctrl-C to stop)");
        } else {
            print!("{screen}");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = interrupt.recv() => return Ok(Exit::Ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_to_milliseconds() {
        assert_eq!(parse_seconds("10"), Ok(10_000));
        assert_eq!(parse_seconds("0.25"), Ok(250));
        assert!(parse_seconds("ten").unwrap_err().contains("not a number"));
        assert!(parse_seconds("-1").is_err());
        assert_eq!(seconds(15_000), "15s");
        assert_eq!(seconds(1_500), "1.500s");
    }
}
