//! The client commands: one request each, printed as text for people or one JSON object.

use std::time::Duration;

use serde::Serialize;

use super::printed::{
    json, lines, print, table, Advanced, Listed, NamedLease, NodeRow, Nodes, Row,
};
use super::{ClientOpts, Exit, Output};
use crate::proto::v1 as pb;
use leasehold_client::{
    Acquired, Answer, ClientError, Code, Deleted, HeldBy, LeaseClient, LeaseState, Listing, Page,
    Released, TokenStatus, Written,
};
use leasehold_core::Limits;

/// A duration on the command line, milliseconds on the wire: bare seconds (fractions
/// allowed: `30`, `0.5`), or with a unit as people write it (`500ms`, `30s`, `1m`, `1h 30m`).
pub fn parse_seconds(text: &str) -> Result<u64, String> {
    let Ok(seconds) = text.trim().parse::<f64>() else {
        let duration = humantime::parse_duration(text.trim()).map_err(|e| {
            format!("{text:?} is not a duration ({e}): give seconds (30, 0.5) or a unit (500ms, 30s, 1m)")
        })?;
        return u64::try_from(duration.as_millis()).map_err(|_| format!("{text:?} is too long"));
    };
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

/// Runs one write with a client of `opts`, then closes the session it opened, answered or not,
/// so that a CLI call leaves no session in the store for its idle hour. A close the cluster
/// refuses (while a node runs 0.2.0, which reads no log format 2) leaves the session to expire,
/// as before.
async fn once<T>(
    opts: &ClientOpts,
    write: impl AsyncFnOnce(&LeaseClient) -> Result<T, leasehold_client::ClientError>,
) -> anyhow::Result<T> {
    let client = opts.one_shot_client()?;
    let answer = write(&client).await;
    // A cluster that could not be reached (or not in time) would only make the close wait as
    // long again; one that answered, even with a refusal of bad input, takes it.
    let unreached = answer.as_ref().err().map(|e| e.code());
    if !matches!(unreached, Some(Code::Unavailable | Code::DeadlineExceeded)) {
        let _ = client.close_session().await;
    }
    Ok(answer?)
}

/// Prints `text`, or the answer as one JSON object (its outcome's fields beside where it was
/// applied), and returns the exit status.
fn emit<T: Serialize>(opts: &ClientOpts, answer: &Answer<T>, text: String, exit: Exit) -> Exit {
    print(opts.output, answer, || text);
    exit
}

/// The text for a refusal by a holder, shared by acquire and release.
pub fn held_by_text(held: &HeldBy) -> String {
    format!("held by {}", held.holder)
}

pub async fn acquire(
    opts: &ClientOpts,
    lease: &str,
    holder: &str,
    ttl_ms: u64,
) -> anyhow::Result<Exit> {
    let r = once(opts, async |c| c.acquire(lease, holder, ttl_ms).await).await?;
    let (text, exit) = match &r.outcome {
        Acquired::Granted {
            token,
            expires_at_ms,
            renewed,
        } => (
            format!(
                "{} token: {token}, expires at {}",
                if *renewed { "renewed," } else { "granted," },
                seconds(*expires_at_ms)
            ),
            Exit::Ok,
        ),
        Acquired::HeldBy(h) => (
            format!(
                "{} (token {}, expires at {})",
                held_by_text(h),
                h.token,
                seconds(h.expires_at_ms)
            ),
            Exit::Refused,
        ),
    };
    Ok(emit(opts, &r, text, exit))
}

pub async fn release(
    opts: &ClientOpts,
    lease: &str,
    holder: &str,
    token: u64,
) -> anyhow::Result<Exit> {
    let r = once(opts, async |c| c.release(lease, holder, token).await).await?;
    let (text, exit) = match &r.outcome {
        Released::Released { token } => (format!("released, token: {token}"), Exit::Ok),
        Released::NotHeld => ("not held".into(), Exit::Refused),
        Released::HeldBy(h) => (held_by_text(h), Exit::Refused),
        Released::WrongToken { current_token } => (
            format!("wrong token (the current token is {current_token})"),
            Exit::Refused,
        ),
    };
    Ok(emit(opts, &r, text, exit))
}

pub async fn put(
    opts: &ClientOpts,
    key: &str,
    value: &str,
    fence: Option<(&str, u64)>,
) -> anyhow::Result<Exit> {
    let r = once(opts, async |c| c.put(key, value.as_bytes(), fence).await).await?;
    let (text, exit) = match r.outcome {
        Written::Written => ("ok".to_owned(), Exit::Ok),
        Written::StaleToken { fence } => (
            format!("stale token (the store has seen token {fence})"),
            Exit::Refused,
        ),
    };
    Ok(emit(opts, &r, text, exit))
}

pub async fn delete(
    opts: &ClientOpts,
    key: &str,
    fence: Option<(&str, u64)>,
) -> anyhow::Result<Exit> {
    let r = once(opts, async |c| c.delete(key, fence).await).await?;
    let (text, exit) = match r.outcome {
        Deleted::Deleted { existed: true } => ("deleted".to_owned(), Exit::Ok),
        Deleted::Deleted { existed: false } => {
            ("deleted (there was no such key)".to_owned(), Exit::Ok)
        }
        Deleted::StaleToken { fence } => (
            format!("stale token (the store has seen token {fence}); the row stays"),
            Exit::Refused,
        ),
    };
    Ok(emit(opts, &r, text, exit))
}

pub async fn check(opts: &ClientOpts, lease: &str, token: u64) -> anyhow::Result<Exit> {
    let r = opts.one_shot_client()?.check_token(lease, token).await?;
    let (text, exit) = match &r.outcome {
        TokenStatus::Current {
            holder,
            expires_at_ms,
        } => (
            format!(
                "current: held by {holder} until {}",
                seconds(*expires_at_ms)
            ),
            Exit::Ok,
        ),
        TokenStatus::Stale {
            current_token,
            holder,
        } => (
            match holder {
                None => format!("stale: nobody holds it (latest token {current_token})"),
                Some(holder) => format!("stale: held by {holder} with token {current_token}"),
            },
            Exit::Refused,
        ),
    };
    Ok(emit(opts, &r, text, exit))
}

pub async fn get(opts: &ClientOpts, key: &str) -> anyhow::Result<Exit> {
    let r = opts.one_shot_client()?.get(key).await?;
    let value = r.outcome.as_deref().map(String::from_utf8_lossy);
    let text = match &value {
        Some(v) => v.to_string(),
        None => "(not found)".to_owned(),
    };
    let row = Answer {
        outcome: Row { key, value },
        applied: r.applied,
    };
    Ok(emit(opts, &row, text, Exit::Ok))
}

pub async fn lease(opts: &ClientOpts, name: &str) -> anyhow::Result<Exit> {
    let r = opts.one_shot_client()?.get_lease(name).await?;
    let now_ms = r.applied.store_time_ms;
    let l = &r.outcome;
    let text = match &l.holder {
        None => format!(
            "free (last token {}, fence {}; store time {})",
            l.token,
            l.fence,
            seconds(now_ms)
        ),
        Some(holder) => format!(
            "held by {holder}, token: {}, expires at {} (fence {}; store time {})",
            l.token,
            seconds(l.expires_at_ms),
            l.fence,
            seconds(now_ms)
        ),
    };
    let named = Answer {
        outcome: NamedLease {
            lease: name,
            state: l,
        },
        applied: r.applied,
    };
    Ok(emit(opts, &named, text, Exit::Ok))
}

/// Reads a listing page by page with `page`, handing each page's entries to `each` with the
/// store time it was read at, until `limit` entries (0: all) or the end; how many there were.
async fn list_pages<T>(
    mut listing: Listing,
    limit: usize,
    mut page: impl AsyncFnMut(&Listing) -> Result<Answer<Page<T>>, ClientError>,
    mut each: impl FnMut(Vec<(String, T)>, u64),
) -> anyhow::Result<usize> {
    let mut shown = 0;
    loop {
        let left = if limit == 0 {
            usize::MAX
        } else {
            limit - shown
        };
        listing.limit = left.min(Limits::MAX_LIST_PAGE) as u32;
        let r = page(&listing).await?;
        shown += r.outcome.entries.len();
        each(r.outcome.entries, r.applied.store_time_ms);
        match r.outcome.next {
            Some(next) if limit == 0 || shown < limit => listing.page_token = next,
            _ => return Ok(shown),
        }
    }
}

/// `leasehold leases`: the leases under a prefix, a table row (or a JSON object) each. The
/// table comes a page at a time, so that a listing of millions streams; its columns are as wide
/// as before the first page unless a cell is wider, so that pages line up.
pub async fn leases(opts: &ClientOpts, listing: Listing, limit: usize) -> anyhow::Result<Exit> {
    let client = opts.one_shot_client()?;
    let text = opts.output == Output::Text;
    let mut first = true;
    let each = |page: Vec<(String, LeaseState)>, now_ms: u64| {
        if !text {
            for (lease, state) in &page {
                let entry = NamedLease { lease, state };
                println!(
                    "{}",
                    json(&Listed {
                        entry,
                        store_time_ms: now_ms
                    })
                );
            }
            return;
        }
        let header = ["LEASE", "HOLDER", "TOKEN", "TIME LEFT"];
        let mut rows = table(&header, &[2, 3], &[40, 24, 8, 10]);
        for (name, l) in page {
            let (holder, left) = match l.holder {
                Some(holder) => (holder, seconds(l.expires_at_ms.saturating_sub(now_ms))),
                None => ("(free)".to_owned(), "-".to_owned()),
            };
            rows.add_row(vec![name, holder, l.token.to_string(), left]);
        }
        for line in lines(&rows).skip(usize::from(!first)) {
            println!("{line}");
        }
        first = false;
    };
    let shown = list_pages(listing, limit, async |l| client.list_leases(l).await, each).await?;
    if text && shown == 0 {
        println!("(no leases)");
    }
    Ok(Exit::Ok)
}

/// `leasehold keys`: the rows under a prefix, a line (key, tab, value) or a JSON object each.
pub async fn keys(opts: &ClientOpts, listing: Listing, limit: usize) -> anyhow::Result<Exit> {
    let client = opts.one_shot_client()?;
    let text = opts.output == Output::Text;
    let each = |page: Vec<(String, Vec<u8>)>, _| {
        for (key, value) in &page {
            let value = String::from_utf8_lossy(value);
            match text {
                true => println!("{key}\t{value}"),
                false => println!(
                    "{}",
                    json(&Row {
                        key,
                        value: Some(value)
                    })
                ),
            }
        }
    };
    let shown = list_pages(listing, limit, async |l| client.list_keys(l).await, each).await?;
    if text && shown == 0 {
        println!("(no keys)");
    }
    Ok(Exit::Ok)
}

pub async fn advance(opts: &ClientOpts, by_ms: u64) -> anyhow::Result<Exit> {
    let applied = once(opts, async |c| c.advance(by_ms).await).await?;
    let advanced = Answer {
        outcome: Advanced::Advanced,
        applied,
    };
    let text = format!("store time: {}", seconds(applied.store_time_ms));
    Ok(emit(opts, &advanced, text, Exit::Ok))
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

/// The status table, one row per node, then what is wrong or worth knowing, a line each.
pub fn status_table(nodes: &[pb::NodeStatus]) -> String {
    let header = [
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
        "SNAPSHOT",
    ];
    let mut rows = table(&header, &[4, 5, 6, 7, 8, 9, 10, 11, 12], &[]);
    let mut unreachable = String::new();
    for n in nodes {
        if n.role == pb::Role::Unreachable as i32 {
            // A member never reached has given out no client address: name its peer one.
            let address = match n.address.is_empty() {
                true => format!("peer {}", n.peer_address),
                false => n.address.clone(),
            };
            rows.add_row(vec![
                n.id.to_string(),
                address,
                "-".into(),
                "unreachable".into(),
            ]);
            unreachable += &format!("node {}: unreachable: {}\n", n.id, n.error);
            continue;
        }
        let leader = match n.leader {
            0 => "-".into(),
            id => id.to_string(),
        };
        rows.add_row(vec![
            n.id.to_string(),
            n.address.clone(),
            n.pid.to_string(),
            role_name(n.role).into(),
            n.term.to_string(),
            leader,
            n.last_log_index.to_string(),
            n.applied_index.to_string(),
            seconds(n.store_time_ms),
            n.leases.to_string(),
            n.rows.to_string(),
            n.sessions.to_string(),
            bytes(n.snapshot_bytes),
        ]);
    }
    let table: String = lines(&rows).map(|line| line + "\n").collect();
    table + &unreachable + &security(nodes) + &versions(nodes) + &clocks(nodes)
}

/// A line for each node whose clock is odd against the majority's: it does not lead.
fn clocks(nodes: &[pb::NodeStatus]) -> String {
    let odd = nodes.iter().filter(|n| n.clock_odd);
    odd.map(|n| {
        let rate = match n.clock_rate_ratio {
            0.0 => String::new(),
            r => format!(" ({r:.2}x the majority's rate)"),
        };
        format!(
            "clock: node {} {}{rate}: it does not campaign while it is off, and steps down if it \
             leads; check its time source (NTP, the hypervisor's clock)\n",
            n.id, n.clock_odd_reason
        )
    })
    .collect()
}

/// What the nodes that answered run: one line when they agree, one per node mid-upgrade.
fn versions(nodes: &[pb::NodeStatus]) -> String {
    let up: Vec<_> = nodes
        .iter()
        .filter(|n| n.role != pb::Role::Unreachable as i32)
        .collect();
    let of = |n: &pb::NodeStatus| {
        format!(
            "{} (protocol {}, log format {})",
            n.version, n.protocol, n.log_format
        )
    };
    match up.first() {
        None => String::new(),
        Some(first) if up.iter().all(|n| of(n) == of(first)) => {
            format!("version: {} on every node\n", of(first))
        }
        Some(_) => {
            let each: Vec<String> = up
                .iter()
                .map(|n| format!("node {}: {}", n.id, of(n)))
                .collect();
            format!(
                "versions (mixed: an upgrade in progress): {}\n",
                each.join("; ")
            )
        }
    }
}

/// The last line of the status table: how the nodes that answered authenticate and authorize
/// their clients, plainly when they do not.
fn security(nodes: &[pb::NodeStatus]) -> String {
    let up: Vec<_> = nodes
        .iter()
        .filter(|n| n.role != pb::Role::Unreachable as i32)
        .collect();
    let line = if up.is_empty() {
        return String::new();
    } else if up.iter().any(|n| !n.tls) {
        "no TLS and no authentication: anyone who reaches a client port may do anything, \
         `member remove` included (see the README's Security section)"
    } else if up.iter().all(|n| n.authorization && n.client_certificates) {
        "TLS; authorization on, identities from client certificates (`leasehold auth whoami`)"
    } else if up.iter().all(|n| n.authorization) {
        "TLS; authorization on, identities from client certificates or bearer tokens \
         (`leasehold auth whoami`)"
    } else if up.iter().all(|n| n.client_certificates) {
        "TLS with client certificates; authorization off: every certificate may do anything, \
         admin calls (`member remove`, `snapshot save`) included (`leasehold auth enable`)"
    } else {
        "TLS; authorization off: anyone who reaches a client port may do anything, admin \
         calls (`member remove`, `snapshot save`) included (`leasehold auth enable`)"
    };
    format!("security: {line}\n")
}

/// A size for people: bytes, KiB or MiB.
fn bytes(n: u64) -> String {
    match n {
        0..1_024 => format!("{n} B"),
        1_024..1_048_576 => format!("{:.1} KiB", n as f64 / 1_024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn status_json(nodes: &[pb::NodeStatus]) -> String {
    let nodes = nodes
        .iter()
        .map(|n| NodeRow::of(n, role_name(n.role)))
        .collect();
    json(&Nodes { nodes })
}

pub async fn status(opts: &ClientOpts, watch: bool) -> anyhow::Result<Exit> {
    let client = opts.one_shot_client()?;
    if !watch {
        let nodes = client.status().await?;
        match opts.output {
            Output::Text => print!("{}", status_table(&nodes)),
            Output::Json => println!("{}", status_json(&nodes)),
        }
        return Ok(Exit::Ok);
    }
    // Short deadline: a refresh that cannot reach any node says so and tries again.
    let client = client.with_deadline(Duration::from_millis(400));
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        let screen = match client.status().await {
            Ok(nodes) => match opts.output {
                Output::Text => status_table(&nodes),
                Output::Json => format!("{}\n", status_json(&nodes)),
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
        assert_eq!(parse_seconds("500ms"), Ok(500));
        assert_eq!(parse_seconds("30s"), Ok(30_000));
        assert_eq!(parse_seconds("1m"), Ok(60_000));
        assert_eq!(parse_seconds("1h 30m"), Ok(5_400_000));
        let ten = parse_seconds("ten").unwrap_err();
        assert!(
            ten.contains("not a duration") && ten.contains("500ms"),
            "{ten}"
        );
        assert!(parse_seconds("-1").is_err());
        assert_eq!(seconds(15_000), "15s");
        assert_eq!(seconds(1_500), "1.500s");
    }
}
