//! `leasehold __hold-guard` (hidden): the parent of the command that `leasehold hold` runs, and
//! the one that enforces the holding's safe deadline on it.
//!
//! `hold` cannot do that alone: a stopped `hold` (SIGSTOP, a debugger, SIGTTOU) sends no
//! signal, and PR_SET_PDEATHSIG fires only on death. So `hold` execs this guard, in a process
//! group of its own that the command shares, and tells it every new deadline through a pipe.
//! The guard SIGTERMs everything the command started a grace period before the deadline and
//! SIGKILLs it at the deadline, unless a later deadline came first; it kills at once when `hold`
//! says the lease is lost, or when `hold` is gone (the pipe closes, or it is no longer our
//! parent). As a child subreaper it adopts whatever the command double-forks or `setsid`s away,
//! and it kills by walking the process tree, not the process group, so a daemon cannot escape.
//! When the command ends by itself, what it left running gets SIGTERM and, after the grace, SIGKILL
//! before the guard exits: `hold` releases the lease only when nothing of it runs.
//!
//! Single threaded and without the async runtime, so that blocking signals here blocks them for
//! the whole process.

use std::ops::ControlFlow;
use std::os::unix::process::CommandExt;

/// A message of `hold` on the pipe: a new safe deadline, in CLOCK_BOOTTIME nanoseconds (a clock
/// every process of a machine shares, which counts the time the host was suspended, as the
/// store's clock does: safety review 161302a, finding 5), or one of these.
pub const LOST: u64 = 0;
/// Stop everything the command started (Ctrl-Z on `hold`).
pub const STOP: u64 = u64::MAX;
/// Let it run again, if the deadline has not passed.
pub const CONT: u64 = u64::MAX - 1;

#[derive(clap::Args)]
pub struct GuardArgs {
    /// The read end of `hold`'s pipe.
    #[arg(long)]
    fd: libc::c_int,
    /// `hold`'s pid: once it is not our parent any more, `hold` is gone.
    #[arg(long)]
    hold_pid: libc::pid_t,
    /// SIGTERM this long before the deadline.
    #[arg(long)]
    grace_ms: u64,
    /// The first safe deadline (CLOCK_BOOTTIME ns).
    #[arg(long)]
    until_ns: u64,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// CLOCK_BOOTTIME now, in nanoseconds: CLOCK_MONOTONIC plus the time the host was suspended,
/// as the holders' clock reads it.
pub fn boot_ns() -> u64 {
    leasehold_client::clock::boottime().as_nanos() as u64
}

/// What the guard does about its deadline at `now`, all in CLOCK_BOOTTIME ns.
#[derive(Debug, PartialEq, Eq)]
struct Step {
    /// The deadline has passed: kill everything, now.
    kill: bool,
    /// Send SIGTERM now (the grace period before the deadline began).
    term: bool,
    /// Whether the command has had its SIGTERM for this deadline.
    terminated: bool,
    /// When to look again, at the latest.
    wake_at: u64,
}

/// The guard's step at `now` toward deadline `until`, SIGTERM `grace_ns` before it;
/// `terminated` whether that SIGTERM was sent. A pure function of the clock's reading, so that
/// a reading that jumps (a resume from suspend) past the deadline kills at once.
fn step(now: u64, until: u64, grace_ns: u64, terminated: bool) -> Step {
    let term_at = until.saturating_sub(grace_ns);
    let kill = now >= until;
    // Before the grace period, a renewal came after all: the SIGTERM was sent, the command
    // decides.
    let terminated = terminated && now >= term_at;
    let term = !kill && !terminated && now >= term_at;
    let terminated = terminated || term;
    let wake_at = if terminated { until } else { term_at };
    Step {
        kill,
        term,
        terminated,
        wake_at,
    }
}

/// A timer on CLOCK_BOOTTIME, polled beside the pipe: `ppoll`'s own timeout runs on
/// CLOCK_MONOTONIC, which stops while the host is suspended, so after a resume it would wait
/// out the rest of its time however late the deadline had become.
struct BootTimer(libc::c_int);

impl BootTimer {
    fn new() -> Self {
        // SAFETY: timerfd_create returns a new descriptor or -1; nothing is shared.
        BootTimer(unsafe {
            libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
        })
    }

    /// Fires at `at` (CLOCK_BOOTTIME ns), or at once if that has passed.
    fn set(&self, at: u64) {
        let at = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            // Zero would disarm it: a nanosecond is as good as "passed".
            it_value: libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000).max(1) as libc::c_long,
            },
        };
        // SAFETY: timerfd_settime on our own descriptor with a value we own; a failed timer
        // (-1) leaves ppoll's own timeout, which still bounds the wait.
        unsafe {
            libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &at, std::ptr::null_mut());
        }
    }

    /// Drains the expiry count, so that the timer can fire again.
    fn drain(&self) {
        let mut count = [0u8; 8];
        // SAFETY: read(2) of 8 bytes into a buffer we own from a non-blocking descriptor.
        unsafe {
            libc::read(self.0, count.as_mut_ptr().cast(), count.len());
        }
    }
}

/// The guard's exit code when it killed the command (as a SIGKILL would show).
const KILLED: u8 = 128 + libc::SIGKILL as u8;

/// The exit code `hold` reports for a wait status: the command's code, or 128 + its signal.
fn exit_code(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else {
        (128 + libc::WTERMSIG(status)) as u8
    }
}

/// Runs the guard; the exit code is the command's.
pub fn run(args: GuardArgs) -> u8 {
    let signals = block_signals(args.fd);
    let mut pipe = Pipe {
        fd: args.fd,
        partial: Vec::new(),
        until: args.until_ns,
        gone: false,
    };
    // The deadline is checked once more, and a loss `hold` already sent read, before anything
    // starts.
    pipe.read();
    if pipe.gone || pipe.until <= boot_ns() || parent() != args.hold_pid {
        return KILLED;
    }
    let child = match spawn(&args.command) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("error: cannot run {:?}: {e}", args.command[0]);
            return 1;
        }
    };
    let watch = Watch {
        child,
        pipe,
        signals,
        grace_ns: args.grace_ms.saturating_mul(1_000_000),
        hold_pid: args.hold_pid,
    };
    watch.run()
}

/// Blocks the signals that would stop or kill the guard, adopts orphans, readies `hold`'s pipe
/// (`fd`); a signalfd of the wake-ups, or -1.
fn block_signals(fd: libc::c_int) -> libc::c_int {
    // SAFETY: plain system calls on values we own; the process is single threaded here.
    unsafe {
        // Blocked, these cannot stop the guard (SIGTSTP, SIGTTIN, SIGTTOU) nor kill it
        // (SIGINT, SIGTERM and SIGQUIT that `hold` or a user sends to the process group are
        // for the command); a blocked SIGTTOU also lets it write to the terminal. SIGCHLD and
        // SIGHUP (our PDEATHSIG, set by `hold`) are read from a signalfd, as wake-ups.
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut blocked);
        for signal in [
            libc::SIGCHLD,
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::sigaddset(&mut blocked, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
        let mut wake: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut wake);
        libc::sigaddset(&mut wake, libc::SIGCHLD);
        libc::sigaddset(&mut wake, libc::SIGHUP);
        // Orphans of the command's descendants become ours, not init's.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        // The command must not inherit the pipe; reads must never block the loop.
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        libc::signalfd(-1, &wake, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    }
}

/// Starts `command`, which dies with the guard and gets the signals the guard blocked: its pid.
fn spawn(command: &[String]) -> std::io::Result<libc::pid_t> {
    let mut spawned = std::process::Command::new(&command[0]);
    spawned.args(&command[1..]);
    let guard_pid = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid,
    // sigprocmask), and nothing is allocated.
    unsafe {
        spawned.pre_exec(move || {
            // The command dies with the guard, whatever kills the guard.
            signalled_when_parent_dies(guard_pid, libc::SIGKILL)?;
            // What the guard blocked, the command gets as usual.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    Ok(spawned.spawn()?.id() as libc::pid_t)
}

/// The command running, and what the guard watches: `hold`'s pipe, its signals, the clock.
struct Watch {
    child: libc::pid_t,
    pipe: Pipe,
    /// The signalfd of SIGCHLD and SIGHUP, or -1.
    signals: libc::c_int,
    grace_ns: u64,
    hold_pid: libc::pid_t,
}

impl Watch {
    /// Until the command and all it started have ended, or have been killed: the exit code.
    fn run(mut self) -> u8 {
        let mut status = None;
        let mut terminated = false;
        let timer = BootTimer::new();
        // Once the command has ended: until when what it left running may take its SIGTERM.
        let mut finish_by = None;
        loop {
            reap(self.child, &mut status);
            let now = boot_ns();
            let due = step(now, self.pipe.until, self.grace_ns, terminated);
            if self.pipe.gone || parent() != self.hold_pid || due.kill {
                kill_all();
                return status.map_or(KILLED, exit_code);
            }
            if due.term {
                signal_all(libc::SIGTERM);
            }
            terminated = due.terminated;
            let mut wake_at = due.wake_at;
            if let Some(status) = status {
                match self.finish(status, now, &mut finish_by) {
                    ControlFlow::Break(exit) => return exit,
                    ControlFlow::Continue(look_at) => wake_at = wake_at.min(look_at),
                }
            }
            if self.signals < 0 {
                // No signalfd: no word of the command's end but by looking.
                wake_at = wake_at.min(now + 20_000_000);
            }
            self.wait(&timer, now, wake_at);
            for message in self.pipe.read() {
                match message {
                    STOP => signal_all(libc::SIGSTOP),
                    CONT if boot_ns() < self.pipe.until => signal_all(libc::SIGCONT),
                    _ => {}
                }
            }
        }
    }

    /// The command has ended with `status`: what it left running gets SIGTERM, and SIGKILL
    /// once the grace is over (`finish_by`). The exit once nothing is left, or when to look
    /// again.
    fn finish(
        &self,
        status: libc::c_int,
        now: u64,
        finish_by: &mut Option<u64>,
    ) -> ControlFlow<u8, u64> {
        let by = *finish_by.get_or_insert_with(|| {
            signal_all(libc::SIGTERM);
            now + self.grace_ns
        });
        if descendants().is_empty() {
            return ControlFlow::Break(exit_code(status));
        }
        if now >= by {
            kill_all();
            return ControlFlow::Break(exit_code(status));
        }
        // Their deaths are not all ours to be told of: look again soon.
        ControlFlow::Continue(by.min(now + 10_000_000))
    }

    /// Waits until `wake_at` (CLOCK_BOOTTIME ns), a message of `hold` or a signal.
    fn wait(&self, timer: &BootTimer, now: u64, wake_at: u64) {
        let wait = wake_at.saturating_sub(now);
        let timeout = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        };
        timer.set(wake_at);
        let polled = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [polled(self.pipe.fd), polled(self.signals), polled(timer.0)];
        // SAFETY: ppoll on our own array; the signalfd is drained into a buffer we own.
        unsafe {
            libc::ppoll(fds.as_mut_ptr(), 3, &timeout, std::ptr::null());
            timer.drain();
            let mut info = [0u8; 128 * 8];
            while libc::read(self.signals, info.as_mut_ptr().cast(), info.len()) > 0 {}
        }
    }
}

/// The guard's end of `hold`'s pipe.
struct Pipe {
    fd: libc::c_int,
    partial: Vec<u8>,
    /// The latest deadline `hold` sent ([`LOST`]: at once).
    until: u64,
    /// The pipe closed: `hold` died.
    gone: bool,
}

impl Pipe {
    /// What `hold` sent since the last read; a deadline is taken in at once, the other
    /// messages are returned.
    fn read(&mut self) -> Vec<u64> {
        let mut messages = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            // SAFETY: read(2) into a buffer we own; the fd is non-blocking.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                0 => {
                    self.gone = true;
                    break;
                }
                n if n < 0 => {
                    if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                        break;
                    }
                }
                n => self.partial.extend_from_slice(&buf[..n as usize]),
            }
        }
        let whole = self.partial.len() / 8 * 8;
        for chunk in self.partial.drain(..whole).collect::<Vec<_>>().chunks(8) {
            let message = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            match message {
                STOP | CONT => messages.push(message),
                until => self.until = until,
            }
        }
        messages
    }
}

fn parent() -> libc::pid_t {
    // SAFETY: getppid(2) cannot fail.
    unsafe { libc::getppid() }
}

/// Reaps every child that ended (the command, and orphans adopted as subreaper); the command's
/// wait status goes into `status`.
fn reap(command: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        let mut wait_status = 0;
        // SAFETY: waitpid(2) writes into a c_int we own.
        let pid = unsafe { libc::waitpid(-1, &mut wait_status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == command {
            *status = Some(wait_status);
        }
    }
}

/// Every live process under this one (the guard, or `hold`), whatever its process group or
/// session, from the parent links in /proc.
fn descendants() -> Vec<libc::pid_t> {
    let mut children: std::collections::HashMap<libc::pid_t, Vec<libc::pid_t>> =
        std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the name, which is in parentheses and may hold anything: state, ppid.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        // A zombie runs nothing, and its children have been handed on already.
        if state != "Z" {
            if let Ok(ppid) = ppid.parse() {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut found = Vec::new();
    let mut next = vec![std::process::id() as libc::pid_t];
    while let Some(pid) = next.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            found.push(child);
            next.push(child);
        }
    }
    found
}

fn signal_all(signal: libc::c_int) {
    for pid in descendants() {
        // SAFETY: kill(2) of a process found under us just now; a pid freed and reused by
        // another in between is the one race this leaves (pids are reused only after they
        // wrapped around).
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// SIGKILLs every descendant and reaps ours, again and again until none is left: one that
/// forked between the walk and the kill is found on the next walk (its parent's death makes it
/// ours).
pub(super) fn kill_all() {
    let mut ignored = None;
    loop {
        let left = descendants();
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: as in `signal_all`.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        reap(0, &mut ignored);
    }
}

/// For a child between fork and exec: `signal` comes to it when its parent dies, and it exits
/// at once if `parent` died before that took effect. Only async-signal-safe calls.
///
/// # Safety
/// Call only in a `pre_exec` closure, where `parent` is the pid that forked the child.
pub(super) unsafe fn signalled_when_parent_dies(
    parent: libc::pid_t,
    signal: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe; _exit ends the child only.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Safety review 161302a, finding 5: the guard's clock counts a suspension, so a reading
    /// that jumps past the deadline, as one does on resume, kills at once; before it, the
    /// guard waits for the grace period, then SIGTERMs once.
    #[test]
    fn a_guard_whose_clock_jumps_past_the_deadline_on_resume_kills_at_once() {
        let (until, grace) = (100 * S, 2 * S);
        let before = step(73 * S, until, grace, false);
        assert_eq!(
            before,
            Step {
                kill: false,
                term: false,
                terminated: false,
                wake_at: 98 * S
            }
        );
        // The host slept a minute: CLOCK_BOOTTIME moved, CLOCK_MONOTONIC did not.
        let resumed = step(133 * S, until, grace, false);
        assert!(resumed.kill, "{resumed:?}");
        let graced = step(99 * S, until, grace, false);
        assert_eq!(
            graced,
            Step {
                kill: false,
                term: true,
                terminated: true,
                wake_at: until
            }
        );
        let again = step(99 * S + 1, until, grace, true);
        assert!(!again.term && again.terminated, "one SIGTERM: {again:?}");
        // A renewal moved the deadline: out of the grace period, terminated no more.
        let renewed = step(99 * S, 130 * S, grace, true);
        assert!(!renewed.terminated && !renewed.kill, "{renewed:?}");
    }
}
