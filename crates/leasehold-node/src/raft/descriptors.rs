//! Opening a data-dir file when the process is out of descriptors (safety review 161302a,
//! finding 3): retried, never a storage error.
//!
//! openraft stops for good on a storage error, so an `EMFILE` on a new log segment, the state
//! file or a snapshot would end the node over a passing shortage: a burst of connections, a
//! slow close. The listeners' bounds (`connections`) leave room for the data dir, and this is
//! the second line: a few spare descriptors are kept open (on `/dev/null`), and an open that
//! finds none left gives one back and tries again; with none to give, it waits for one to free
//! up, logging, for up to [`DESCRIPTOR_WAIT`]. Only then is it an error.

use std::fmt::Display;
use std::fs::File;
use std::io;
use std::sync::Mutex;
use std::time::Instant;

use crate::limits::{DESCRIPTOR_RETRY, DESCRIPTOR_WAIT, SPARE_DESCRIPTORS};

/// Descriptors held back for the data dir; given back one at a time when an open needs one.
static SPARES: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Whether `e` says that the process (`EMFILE`) or the system (`ENFILE`) has no descriptor to
/// give.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    let raw = e.raw_os_error();
    raw == Some(rustix::io::Errno::MFILE.raw_os_error())
        || raw == Some(rustix::io::Errno::NFILE.raw_os_error())
}

/// Tops the spare descriptors up to [`SPARE_DESCRIPTORS`], as far as descriptors are to be had.
/// Called at start, and after each open that succeeds.
pub(crate) fn keep_spares() {
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    while spares.len() < SPARE_DESCRIPTORS {
        match File::open("/dev/null") {
            Ok(file) => spares.push(file),
            Err(_) => return,
        }
    }
}

/// Gives one spare back to the process; false if none is left.
fn give_back_one() -> bool {
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    spares.pop().is_some()
}

/// `open()`, tried again while it fails for want of a descriptor: at once after giving back a
/// spare, then every [`DESCRIPTOR_RETRY`] for up to [`DESCRIPTOR_WAIT`]. `what` names the file
/// in the log and in the error. Blocks: call it where blocking is allowed (the log's writer
/// and the snapshot work run on the blocking pool).
pub(crate) fn retrying<T>(
    what: &dyn Display,
    mut open: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let started = Instant::now();
    let mut warned = false;
    loop {
        match open() {
            Err(e) if out_of_descriptors(&e) => {
                if give_back_one() {
                    continue;
                }
                if started.elapsed() >= DESCRIPTOR_WAIT {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{what}: {e}, and no descriptor came free within {} s: raise the \
                             open-files limit (`ulimit -n`, LimitNOFILE=)",
                            DESCRIPTOR_WAIT.as_secs()
                        ),
                    ));
                }
                if !warned {
                    tracing::warn!(
                        file = %what,
                        "out of file descriptors: waiting for one to come free"
                    );
                    warned = true;
                }
                std::thread::sleep(DESCRIPTOR_RETRY);
            }
            done => {
                if warned && done.is_ok() {
                    tracing::info!(file = %what, "opened after waiting for a descriptor");
                }
                keep_spares();
                return done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error())
    }

    #[test]
    fn an_open_short_of_descriptors_is_tried_again_until_it_succeeds() {
        let mut failures = 3;
        let opened = retrying(&"segment", || {
            if failures > 0 {
                failures -= 1;
                return Err(emfile());
            }
            Ok(7)
        });
        assert_eq!(opened.unwrap(), 7);
        assert_eq!(failures, 0);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let mut calls = 0;
        let opened: io::Result<()> = retrying(&"segment", || {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        });
        assert_eq!(opened.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(calls, 1);
    }

    #[test]
    fn spares_are_kept_and_given_back_one_at_a_time() {
        // The spares are the process's: other tests spend some meanwhile, at most a few.
        keep_spares();
        assert!(give_back_one(), "a spare was kept");
        keep_spares();
        assert!(give_back_one(), "the spare given back was replaced");
    }
}
