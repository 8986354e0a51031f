//! `leasehold hold LEASE --holder H --ttl SECONDS -- CMD ARGS...`: runs a command while holding a
//! lease, and never lets it run while another holder may hold it.
//!
//! The lease is kept by a [`Holder`], whose safe deadline counts from the send of the last
//! successful renewal. The deadline is enforced from the command's side, by a guard process
//! (`leasehold __hold-guard`, see [`super::hold_guard`]) that is the command's parent: `hold`
//! sends it every new deadline, and when renewals fail it SIGTERMs everything the command
//! started a grace period before the deadline and SIGKILLs it at the deadline, even when `hold`
//! itself is stopped; a renewal that finds the lease taken has it kill at once. Either way
//! `hold` exits 4. When the command ends by itself, `hold` releases the lease and exits with
//! the command's code.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_client::{clock, default_margin, HoldError, Holder, Lost};
use tokio::time::Instant;

use super::hold_guard::{self, CONT, LOST, STOP};
use super::{ClientOpts, Exit};

/// Exit code when the lease was lost under the command.
pub const LOST_EXIT: u8 = 4;

#[derive(clap::Args)]
pub struct HoldArgs {
    lease: String,
    /// The holder's name; a suffix unique to this process is added unless --exact-holder
    /// (so at most 98 bytes, 128 with --exact-holder).
    #[arg(long)]
    holder: String,
    /// Time to live, in seconds (fractions allowed); renewed every third of it.
    #[arg(long = "ttl", value_name = "DURATION", value_parser = super::commands::parse_seconds)]
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

/// Milliseconds since the Unix epoch of `at`, an instant of the holders' clock.
fn unix_ms(at: Instant) -> u128 {
    let now = clock::now();
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

/// Sends `signal` to the guard's process group, which the command shares.
fn signal_group(pgid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// `at`, an instant of the holders' clock, in CLOCK_BOOTTIME nanoseconds: the clock the guard
/// reads, which counts a suspended host as the holders' does. Read before `clock::now()`, it
/// makes the result a little early, never late.
fn boot_ns(at: Instant) -> u64 {
    let clock = hold_guard::boot_ns();
    let now = clock::now();
    if at >= now {
        clock.saturating_add((at - now).as_nanos() as u64)
    } else {
        clock.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// `hold`'s end of the pipe to the guard.
struct Guard(std::os::fd::OwnedFd);

impl Guard {
    /// Sends a deadline or a message. The pipe never fills (a message per renewal), and a
    /// guard that is gone has killed the command already: a failed write needs nothing done.
    fn tell(&self, message: u64) {
        use std::os::fd::AsRawFd;
        let bytes = message.to_le_bytes();
        // SAFETY: write(2) of a buffer we own to a pipe we own; 8 bytes are written whole.
        unsafe {
            libc::write(self.0.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        }
    }
}

/// A pipe's (read, write) ends, both close-on-exec, the write end non-blocking.
fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 and fcntl on fds we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ends = (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        );
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        Ok(ends)
    }
}

/// How long `hold` waits to close its session once the lease is released.
const SESSION_CLOSE_WAIT: Duration = Duration::from_secs(1);

pub async fn run(opts: &ClientOpts, args: HoldArgs) -> anyhow::Result<Exit> {
    let tty_dispositions = ignore_terminal_stops();
    let timing = Timing::of(&args)?;
    let client = Arc::new(opts.client()?);
    let holder = match acquire(&args, timing.ttl, client.clone()).await? {
        Ok(holder) => holder,
        Err(refused) => return Ok(refused),
    };
    let mut standing = holder.standing();
    let start = standing.borrow_and_update().clone();
    // An acquire answered after its safe deadline (its retries took the TTL) starts nothing.
    let too_late = (clock::now() >= start.safe_until).then_some(Lost::Unrenewed);
    if let Some(lost) = start.lost.clone().or(too_late) {
        eprintln!(
            "leasehold hold: lease {} lost ({lost}) before the command started; it was not run",
            holder.lease()
        );
        return Ok(Exit::Code(LOST_EXIT));
    }
    become_subreaper();
    let (child, guard) = spawn_guard(&args, &holder, &start, timing.grace, tty_dispositions)?;
    let pgid = child.id().map_or(0, |pid| pid as i32);
    if args.verbose {
        print_granted(&holder, &start, &args.command, pgid);
    }
    let running = Running {
        holder,
        client,
        standing,
        child,
        guard,
        pgid,
        grace: timing.grace,
        verbose: args.verbose,
        terminated: false,
    };
    running.watch(timing.margin).await
}

/// A background `hold` that writes to the terminal (under `stty tostop`) or reads from it would
/// be stopped, and its renewals with it: both stops are ignored. The guard and the command get
/// the dispositions returned back.
fn ignore_terminal_stops() -> [(libc::c_int, libc::sighandler_t); 2] {
    // SAFETY: signal(2) with SIG_IGN; it returns the disposition it replaced.
    unsafe {
        [
            (libc::SIGTTOU, libc::signal(libc::SIGTTOU, libc::SIG_IGN)),
            (libc::SIGTTIN, libc::signal(libc::SIGTTIN, libc::SIG_IGN)),
        ]
    }
}

/// The TTL `hold` asks for, its margin and the command's grace, checked against each other.
struct Timing {
    ttl: Duration,
    margin: Duration,
    grace: Duration,
}

impl Timing {
    fn of(args: &HoldArgs) -> anyhow::Result<Timing> {
        let ttl = Duration::from_millis(args.ttl_ms);
        let grace = Duration::from_millis(args.grace.unwrap_or((args.ttl_ms / 4).min(1_000)));
        let margin = args
            .margin
            .map_or_else(|| default_margin(ttl), Duration::from_millis);
        // Checked before anything is acquired: SIGTERM must come after a renewal's usual time
        // (a third of the TTL in), or every healthy cycle would stop the command.
        if margin + grace >= ttl - ttl / 3 {
            anyhow::bail!(
                "--margin ({} ms) and --grace ({} ms) must add up to less than two thirds of the \
                 TTL ({} ms), so that the command is stopped only when renewals fail",
                margin.as_millis(),
                grace.as_millis(),
                (ttl - ttl / 3).as_millis()
            );
        }
        Ok(Timing { ttl, margin, grace })
    }
}

/// The lease, held; or, held by another (without --wait), the exit that says so.
async fn acquire(
    args: &HoldArgs,
    ttl: Duration,
    client: Arc<leasehold_client::LeaseClient>,
) -> anyhow::Result<Result<Holder, Exit>> {
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
    match options.acquire(client).await {
        Ok(holder) => Ok(Ok(holder)),
        Err(HoldError::Held(held)) => {
            eprintln!(
                "leasehold hold: {} is held by {} (token {}); pass --wait to wait for it",
                args.lease, held.holder, held.token
            );
            Ok(Err(Exit::Refused))
        }
        Err(e) => Err(e.into()),
    }
}

/// Starts the guard, which runs the command: its process, and `hold`'s end of the pipe that
/// carries its deadlines.
fn spawn_guard(
    args: &HoldArgs,
    holder: &Holder,
    start: &leasehold_client::Standing,
    grace: Duration,
    tty_dispositions: [(libc::c_int, libc::sighandler_t); 2],
) -> anyhow::Result<(tokio::process::Child, Guard)> {
    let (deadlines, writer) = pipe()?;
    let deadlines_fd = std::os::fd::AsRawFd::as_raw_fd(&deadlines);
    let hold_pid = std::process::id() as libc::pid_t;
    // /proc/self/exe rather than current_exe(): it names this very binary even if its file was
    // replaced or removed since `hold` started.
    let mut command = tokio::process::Command::new("/proc/self/exe");
    command
        .arg0("leasehold")
        .arg("__hold-guard")
        .arg(format!("--fd={deadlines_fd}"))
        .arg(format!("--hold-pid={hold_pid}"))
        .arg(format!("--grace-ms={}", grace.as_millis()))
        .arg(format!("--until-ns={}", boot_ns(start.safe_until)))
        .arg("--")
        .args(&args.command)
        // Through the guard to the command.
        .env("LEASEHOLD_LEASE", holder.lease())
        .env("LEASEHOLD_TOKEN", holder.token().to_string())
        .env("LEASEHOLD_HOLDER", holder.holder())
        // A process group of its own, away from `hold`'s: a `kill -STOP %1` or a Ctrl-Z for
        // `hold` does not stop the guard. The command shares the guard's group.
        .process_group(0);
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (prctl, getppid, fcntl, signal) and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // If `hold` dies (kill -9, a crash), the guard gets SIGHUP, which it takes for a
            // wake-up: it then finds `hold` gone and kills the command and all it started.
            hold_guard::signalled_when_parent_dies(hold_pid, libc::SIGHUP)?;
            // The guard's read end of the pipe, kept open across the exec.
            if libc::fcntl(deadlines_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (signal, disposition) in tty_dispositions {
                libc::signal(signal, disposition);
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run the guard of {:?}: {e}", args.command[0]))?;
    Ok((child, Guard(writer)))
}

/// The command running under the lease, through its guard, and what `hold` watches meanwhile.
struct Running {
    holder: Holder,
    client: Arc<leasehold_client::LeaseClient>,
    standing: tokio::sync::watch::Receiver<leasehold_client::Standing>,
    child: tokio::process::Child,
    guard: Guard,
    /// The guard's process group, which the command shares.
    pgid: i32,
    grace: Duration,
    verbose: bool,
    /// Whether the guard has SIGTERMed the command (renewals failing).
    terminated: bool,
}

impl Running {
    /// Until the command ends by itself (the lease released) or the lease is lost (the
    /// command killed): `hold`'s exit.
    async fn watch(mut self, margin: Duration) -> anyhow::Result<Exit> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        // The command is in the guard's process group, away from the terminal's: a Ctrl-Z
        // stops `hold` only, and its renewals, while the command ran on. So `hold` has the
        // guard stop the command, then stops itself, and on resuming lets it run again only
        // while the holding is safe (the guard checks too).
        let mut suspend = signal(SignalKind::from_raw(libc::SIGTSTP))?;
        let lost = loop {
            let now = self.standing.borrow_and_update().clone();
            let term_at = now
                .safe_until
                .checked_sub(self.grace)
                .unwrap_or(now.safe_until);
            if let Some(lost) = self.lost(&now, term_at) {
                break lost;
            }
            if self.terminated && clock::now() < term_at {
                // A renewal came through after all; the command got SIGTERM and decides itself.
                self.terminated = false;
            }
            tokio::select! {
                status = self.child.wait() => {
                    let status = status?;
                    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
                        return Ok(guard_killed(self.holder, signal));
                    }
                    if self.terminated || clock::now() >= term_at {
                        // It ended on the guard's SIGTERM of a failing lease, not by itself.
                        break Lost::Unrenewed;
                    }
                    return Ok(self.release(status).await);
                }
                changed = self.standing.changed() => {
                    if changed.is_err() {
                        break Lost::Unrenewed;
                    }
                    self.renewed();
                }
                () = clock::sleep_until(term_at), if !self.terminated => {
                    say_terminated(self.holder.lease(), self.grace);
                    // Sent by the guard, to everything the command started, at this same time.
                    self.terminated = true;
                }
                () = clock::sleep_until(now.safe_until) => {}
                _ = interrupt.recv() => signal_group(self.pgid, libc::SIGINT),
                _ = suspend.recv() => self.suspend(),
                _ = terminate.recv() => signal_group(self.pgid, libc::SIGTERM),
            }
        };
        Ok(self.kill(lost, margin).await)
    }

    /// The loss in `now`, or a safe deadline passed. Both end in SIGKILL at once (the guard
    /// kills by itself at the deadline): a loss the store answered means another may act
    /// already; a deadline passed means another may be granted the lease any moment.
    fn lost(&self, now: &leasehold_client::Standing, term_at: Instant) -> Option<Lost> {
        let past_deadline = clock::now() >= now.safe_until;
        let lost = now
            .lost
            .clone()
            .or(past_deadline.then_some(Lost::Unrenewed))?;
        if !self.terminated && !self.grace.is_zero() && clock::now() >= term_at {
            // Woken only past the SIGTERM's time (a loaded machine; CI saw it, before the loss
            // or the deadline): the guard sent SIGTERM at its time all the same, which is said
            // here as it would have been.
            say_terminated(self.holder.lease(), self.grace);
        }
        Some(lost)
    }

    /// A new standing: its deadline to the guard, and with -v a line.
    fn renewed(&self) {
        let renewed = self.standing.borrow().clone();
        self.guard.tell(boot_ns(renewed.safe_until));
        // A loss changes the standing too: said by `lost`, not as a renewal.
        if self.verbose && renewed.lost.is_none() {
            eprintln!(
                "leasehold hold: renewed; sent at unix ms {}, safe until unix ms {}",
                unix_ms(renewed.sent),
                unix_ms(renewed.safe_until)
            );
        }
    }

    /// Ctrl-Z: the guard stops the command, `hold` stops itself; on SIGCONT the command goes
    /// on only while the holding is safe.
    fn suspend(&self) {
        self.guard.tell(STOP);
        // SAFETY: raise(3) stops this process until SIGCONT; no memory is shared.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
        if clock::now() < self.holder.safe_until() {
            self.guard.tell(CONT);
        }
        // Past the deadline the guard has killed it, still stopped.
    }

    /// The command ended by itself, and the guard once nothing it started runs any more: the
    /// lease goes, and the command's exit is `hold`'s.
    async fn release(self, status: std::process::ExitStatus) -> Exit {
        // Past the deadline a release is moot: the lease is expiring anyway.
        let safe_until = self.holder.safe_until();
        match tokio::time::timeout_at(clock::timer(safe_until), self.holder.release()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                eprintln!("leasehold hold: the lease was not released ({e}); it expires by itself")
            }
            Err(_) => eprintln!(
                "leasehold hold: the lease was not released in time; it expires by itself"
            ),
        }
        // Its session too, briefly: one not closed expires by itself.
        let _ = tokio::time::timeout(SESSION_CLOSE_WAIT, self.client.close_session()).await;
        exit_of(status)
    }

    /// The lease is lost: the guard kills everything the command started, and exits. Should
    /// it not within the margin (the time left until the store's own expiry; 20 ms at least,
    /// for the guard to walk the process tree), the process group is killed, guard included.
    async fn kill(mut self, lost: Lost, margin: Duration) -> Exit {
        self.guard.tell(LOST);
        let backstop = margin.max(Duration::from_millis(20));
        if tokio::time::timeout(backstop, self.child.wait())
            .await
            .is_err()
        {
            signal_group(self.pgid, libc::SIGKILL);
            let _ = self.child.wait().await;
        }
        eprintln!(
            "leasehold hold: lease {} lost ({lost}); the command was killed",
            self.holder.lease()
        );
        Exit::Code(LOST_EXIT)
    }
}

/// What `hold` says when the guard SIGTERMs the command, `grace` before the safe deadline.
fn say_terminated(lease: &str, grace: Duration) {
    eprintln!(
        "leasehold hold: renewals of {lease} failing; SIGTERM to the command, SIGKILL in {} ms",
        grace.as_millis()
    );
}

/// Like the guard, `hold` adopts what is orphaned under it: should the guard be killed (kill -9,
/// the OOM killer), what the command started becomes ours to kill, not init's.
fn become_subreaper() {
    // SAFETY: prctl(2) on this process; nothing is shared.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
}

/// `-v`'s line for the grant: who holds it, until when, and what runs under it.
fn print_granted(
    holder: &Holder,
    granted: &leasehold_client::Standing,
    command: &[String],
    pgid: i32,
) {
    eprintln!(
        "leasehold hold: {} granted to {} with token {}; sent at unix ms {}, safe until unix ms \
         {}; running {command:?} as process group {pgid}",
        holder.lease(),
        holder.holder(),
        holder.token(),
        unix_ms(granted.sent),
        unix_ms(granted.safe_until),
    );
}

/// The guard was killed by `signal` (it exits by itself otherwise, with the command's code):
/// what the command started may run on, adopted by `hold`. It is killed, and the lease is left
/// to expire: released now, a rival could be granted it while something of ours still ran
/// (safety review 161302a, finding 6).
fn guard_killed(holder: Holder, signal: i32) -> Exit {
    hold_guard::kill_all();
    eprintln!(
        "leasehold hold: the guard of the command was killed by signal {signal}; what the \
         command left running was killed, and lease {} expires by itself",
        holder.lease()
    );
    holder.abandon();
    Exit::Code(u8::try_from(128 + signal).unwrap_or(1))
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
