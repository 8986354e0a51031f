//! `leasehold hold LEASE --holder H --ttl SECONDS -- CMD ARGS...`: runs a command while holding a
//! lease, and never lets it run while another holder may hold it.
//!
//! The lease is kept by a [`Holder`], whose safe deadline counts from the send of the last
//! successful renewal. When renewals fail, the command's process group gets SIGTERM a grace
//! period before the deadline and SIGKILL at it; a renewal that finds the lease taken kills it
//! at once. Either way `hold` exits 4. When the command ends by itself, `hold` releases the
//! lease and exits with the command's code.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_client::{default_margin, HoldError, Holder, Lost};
use tokio::time::Instant;

use super::{ClientOpts, Exit};

/// Exit code when the lease was lost under the command.
pub const LOST_EXIT: u8 = 4;

#[derive(clap::Args)]
pub struct HoldArgs {
    lease: String,
    /// The holder's name; a suffix unique to this process is added unless --exact-holder.
    #[arg(long)]
    holder: String,
    /// Time to live, in seconds (fractions allowed); renewed every third of it.
    #[arg(long = "ttl", value_name = "SECONDS", value_parser = super::commands::parse_seconds)]
    ttl_ms: u64,
    /// Wait while another holds the lease (woken by a watch of it) instead of exiting 3.
    #[arg(long)]
    wait: bool,
    /// How long before the store's expiry, counted from the send of the last renewal, the
    /// holding stops being safe. Default: the larger of 100 ms and a tenth of the TTL, at most
    /// a quarter of it.
    #[arg(long, value_name = "MS")]
    margin: Option<u64>,
    /// How long before the safe deadline the command gets SIGTERM (SIGKILL follows at the
    /// deadline). Default: a quarter of the TTL, at most 1000 ms.
    #[arg(long, value_name = "MS")]
    grace: Option<u64>,
    /// Use --holder as given, without the per-process suffix.
    #[arg(long)]
    exact_holder: bool,
    /// One line on stderr per renewal: when it was sent and until when the holding is safe.
    #[arg(short, long)]
    verbose: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Milliseconds since the Unix epoch of `at`, an instant of the monotonic clock.
fn unix_ms(at: Instant) -> u128 {
    let now = Instant::now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let wall = if at <= now {
        wall.saturating_sub(now - at)
    } else {
        wall + (at - now)
    };
    wall.as_millis()
}

/// Sends `signal` to the command's whole process group.
fn signal_group(pgid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

pub async fn run(opts: &ClientOpts, args: HoldArgs) -> anyhow::Result<Exit> {
    let ttl = Duration::from_millis(args.ttl_ms);
    let grace = Duration::from_millis(args.grace.unwrap_or((args.ttl_ms / 4).min(1_000)));
    let margin = args
        .margin
        .map_or_else(|| default_margin(ttl), Duration::from_millis);
    // Checked before anything is acquired: SIGTERM must come after a renewal's usual time (a
    // third of the TTL in), or every healthy cycle would stop the command.
    if margin + grace >= ttl - ttl / 3 {
        anyhow::bail!(
            "--margin ({} ms) and --grace ({} ms) must add up to less than two thirds of the TTL \
             ({} ms), so that the command is stopped only when renewals fail",
            margin.as_millis(),
            grace.as_millis(),
            (ttl - ttl / 3).as_millis()
        );
    }
    let client = Arc::new(opts.client()?);
    let mut options = Holder::options(&args.lease, &args.holder, ttl);
    if let Some(margin) = args.margin {
        options = options.margin(Duration::from_millis(margin));
    }
    if args.wait {
        options = options.wait();
    }
    if args.exact_holder {
        options = options.exact_name();
    }
    let holder = match options.acquire(client).await {
        Ok(holder) => holder,
        Err(HoldError::Held(held)) => {
            eprintln!(
                "leasehold hold: {} is held by {} (token {}); pass --wait to wait for it",
                args.lease, held.holder, held.token
            );
            return Ok(Exit::Refused);
        }
        Err(e) => return Err(e.into()),
    };
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LEASEHOLD_LEASE", holder.lease())
        .env("LEASEHOLD_TOKEN", holder.token().to_string())
        .env("LEASEHOLD_HOLDER", holder.holder())
        // Its own process group, so SIGTERM and SIGKILL reach whatever it started too.
        .process_group(0);
    let hold_pid = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (prctl, getppid) and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // If `hold` itself dies (kill -9, a crash), nothing would stop the command at the
            // deadline any more: the kernel kills it with its parent instead.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // `hold` died before the prctl took effect.
            if libc::getppid() != hold_pid {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {:?}: {e}", args.command[0]))?;
    let pgid = child.id().map_or(0, |pid| pid as i32);
    let mut standing = holder.standing();
    if args.verbose {
        let granted = standing.borrow().clone();
        eprintln!(
            "leasehold hold: {} granted to {} with token {}; sent at unix ms {}, safe until unix \
             ms {}; running {:?} as process group {pgid}",
            holder.lease(),
            holder.holder(),
            holder.token(),
            unix_ms(granted.sent),
            unix_ms(granted.safe_until),
            args.command
        );
    }
    let mut terminated = false;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // The command is in a process group of its own, away from the terminal's: a Ctrl-Z stops
    // `hold` only, and its renewals, while the command ran on. So `hold` stops the command,
    // then itself, and on resuming lets it run again only while the holding is safe.
    let mut suspend =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(libc::SIGTSTP))?;
    let lost = loop {
        let now = standing.borrow_and_update().clone();
        // Both end in SIGKILL at once, below. A loss the store answered means another may act
        // already; a deadline passed means another may be granted the lease any moment.
        if let Some(lost) = now.lost {
            break lost;
        }
        if Instant::now() >= now.safe_until {
            break Lost::Unrenewed;
        }
        let term_at = now.safe_until.checked_sub(grace).unwrap_or(now.safe_until);
        if terminated && Instant::now() < term_at {
            // A renewal came through after all; the command got SIGTERM and decides itself.
            terminated = false;
        }
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                if terminated {
                    // It ended on the SIGTERM of a failing lease, not by itself.
                    break Lost::Unrenewed;
                }
                // Past the deadline a release is moot: the lease is expiring anyway.
                let safe_until = holder.safe_until();
                match tokio::time::timeout_at(safe_until, holder.release()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => eprintln!(
                        "leasehold hold: the lease was not released ({e}); it expires by itself"
                    ),
                    Err(_) => eprintln!(
                        "leasehold hold: the lease was not released in time; it expires by itself"
                    ),
                }
                return Ok(exit_of(status));
            }
            changed = standing.changed() => {
                if changed.is_err() {
                    break Lost::Unrenewed;
                }
                if args.verbose {
                    let renewed = standing.borrow().clone();
                    eprintln!(
                        "leasehold hold: renewed; sent at unix ms {}, safe until unix ms {}",
                        unix_ms(renewed.sent),
                        unix_ms(renewed.safe_until)
                    );
                }
            }
            () = tokio::time::sleep_until(term_at), if !terminated => {
                eprintln!(
                    "leasehold hold: renewals of {} failing; SIGTERM to the command, SIGKILL in {} ms",
                    holder.lease(),
                    grace.as_millis()
                );
                signal_group(pgid, libc::SIGTERM);
                terminated = true;
            }
            () = tokio::time::sleep_until(now.safe_until) => {}
            _ = interrupt.recv() => signal_group(pgid, libc::SIGINT),
            _ = suspend.recv() => {
                signal_group(pgid, libc::SIGSTOP);
                // SAFETY: raise(3) stops this process until SIGCONT; no memory is shared.
                unsafe {
                    libc::raise(libc::SIGSTOP);
                }
                if Instant::now() < holder.safe_until() {
                    signal_group(pgid, libc::SIGCONT);
                }
                // Past the deadline, the loop's first check kills it, still stopped.
            }
            _ = terminate.recv() => signal_group(pgid, libc::SIGTERM),
        }
    };
    // Whatever of its process group is left, and reap it.
    signal_group(pgid, libc::SIGKILL);
    let _ = child.wait().await;
    eprintln!(
        "leasehold hold: lease {} lost ({lost}); the command was killed",
        holder.lease()
    );
    Ok(Exit::Code(LOST_EXIT))
}

/// The command's exit, as `hold`'s: its code, or 128 + the signal that ended it.
fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal)) => Exit::Code(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => Exit::Code(1),
    }
}
