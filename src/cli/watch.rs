//! `leasehold watch [LEASE] [--prefix P] [--from-index N]`: one line per lease event, until
//! interrupted. Resumes on another node by itself when the one streaming fails.

use leasehold_client::{LeaseEvent, WatchFrom, WatchSelect};

use super::commands::seconds;
use super::printed::json;
use super::{ClientOpts, Exit, Output};

#[derive(clap::Args)]
pub struct WatchArgs {
    /// The lease to watch; without it, every lease (or those --prefix names).
    #[arg(conflicts_with = "prefix")]
    lease: Option<String>,
    /// Watch every lease whose name starts with this.
    #[arg(long)]
    prefix: Option<String>,
    /// Start at this log index (events of the past too, while the node keeps them); default:
    /// from now.
    #[arg(long, value_name = "N")]
    from_index: Option<u64>,
}

fn line(output: Output, e: &LeaseEvent) -> String {
    match output {
        Output::Json => json(e),
        Output::Text => format!(
            "{:>8} {:>10} {:<8} {} holder={} token={} expires_at={}",
            e.log_index,
            seconds(e.store_time_ms),
            e.kind.as_str(),
            e.lease,
            e.holder,
            e.token,
            seconds(e.expires_at_ms)
        ),
    }
}

pub async fn run(opts: &ClientOpts, args: WatchArgs) -> anyhow::Result<Exit> {
    let client = opts.client()?;
    let select = match args.lease {
        Some(lease) => WatchSelect::Lease(lease),
        None => WatchSelect::Prefix(args.prefix.unwrap_or_default()),
    };
    let from = args.from_index.map_or(WatchFrom::Now, WatchFrom::Index);
    let mut watch = client.watch(select, from);
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        tokio::select! {
            event = watch.next() => println!("{}", line(opts.output, &event?)),
            _ = interrupt.recv() => return Ok(Exit::Ok),
        }
    }
}
