//! `bench --floor-dir DIR`: the floor under one client's latency, measured on this machine in the
//! same run: the disk's `fdatasync` in DIR (where the nodes keep their logs) and a loopback
//! round trip. A put acknowledged by a three-node cluster waits at least for one round trip from
//! the client to the leader, one from the leader to a follower, and one log write made durable
//! on a majority (the leader's in parallel with the follower's): `fdatasync + 2 round trips`.
//! When the three nodes share one disk, as a local cluster's do, their writes are made at once
//! on it and each waits on the others': the shared floor takes, for the write, the second
//! shortest of three `fdatasync`s made at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Samples of each, after as many unmeasured ones as warm-up.
const DISK_SAMPLES: usize = 200;
const ROUND_TRIP_SAMPLES: usize = 2_000;
/// What one log append writes, about: an entry of a few small commands.
const WRITE_BYTES: usize = 4_096;
/// What one small request or answer is on the wire, about.
const MESSAGE_BYTES: usize = 128;
/// The nodes of a cluster sharing the disk, and how many of them make a majority.
const NODES: usize = 3;
const MAJORITY: usize = NODES / 2 + 1;

/// The floor, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Floor {
    pub fdatasync_p50_ms: f64,
    pub loopback_rtt_p50_ms: f64,
    /// `fdatasync_p50_ms + 2 * loopback_rtt_p50_ms`.
    pub put_floor_ms: f64,
    /// Rounds of three writers, each with its file in the dir, writing and `fdatasync`ing at
    /// once: the p50 over the rounds of the second shortest of each round's three times (each
    /// timed from its own start), a majority's write when three nodes share this disk.
    pub shared_fdatasync_p50_ms: f64,
    /// `shared_fdatasync_p50_ms + 2 * loopback_rtt_p50_ms`.
    pub shared_put_floor_ms: f64,
}

/// Measures the floor in `dir` (its disk) and on loopback.
pub fn measure(dir: &Path) -> anyhow::Result<Floor> {
    let fdatasync = median_ms(writes_at_once(dir, 1, 1)?);
    let shared = median_ms(writes_at_once(dir, NODES, MAJORITY)?);
    let round_trip = median_ms(round_trips()?);
    Ok(Floor {
        fdatasync_p50_ms: fdatasync,
        loopback_rtt_p50_ms: round_trip,
        put_floor_ms: fdatasync + 2.0 * round_trip,
        shared_fdatasync_p50_ms: shared,
        shared_put_floor_ms: shared + 2.0 * round_trip,
    })
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// A file in the dir, written once and made durable, that each sample overwrites in place with
/// a 4 KiB write and its `fdatasync`, as the log writes into blocks it wrote before. Removed
/// when dropped.
struct Scratch {
    path: PathBuf,
    file: std::fs::File,
}

impl Scratch {
    fn create(dir: &Path, n: usize) -> anyhow::Result<Scratch> {
        let path = dir.join(format!(".leasehold-floor-{}-{n}", std::process::id()));
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path);
        let file = opened.map_err(|e| anyhow::anyhow!("--floor-dir {}: {e}", path.display()))?;
        let scratch = Scratch { path, file };
        (&scratch.file).write_all(&[0x5a; WRITE_BYTES])?;
        scratch.file.sync_all()?;
        Ok(scratch)
    }

    fn write(&self) -> std::io::Result<Duration> {
        use std::os::unix::fs::FileExt;
        let started = Instant::now();
        self.file.write_all_at(&[0x5a; WRITE_BYTES], 0)?;
        self.file.sync_data()?;
        Ok(started.elapsed())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Rounds of `writers` threads, one file each in `dir`, released together to write and
/// `fdatasync`: each round's sample is the `kth` shortest of their times, each timed from its
/// own start (so that a thread's late wake-up is not counted as the disk's). One writer: the
/// disk's write alone; three, the second: a majority's when three nodes share the disk. The
/// first half of the rounds warms up, unmeasured; a write that fails in any round fails it all.
fn writes_at_once(dir: &Path, writers: usize, kth: usize) -> anyhow::Result<Vec<Duration>> {
    let scratches = (0..writers)
        .map(|n| Scratch::create(dir, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let times = rounds(&scratches, DISK_SAMPLES * 2)
        .map_err(|e| anyhow::anyhow!("--floor-dir {}: {e}", dir.display()))?;
    let samples = (DISK_SAMPLES..DISK_SAMPLES * 2)
        .map(|round| kth_shortest(times.iter().map(|t| t[round]).collect(), kth))
        .collect();
    Ok(samples)
}

/// `count` rounds of a write on each of `scratches`, one thread each, released together: each
/// writer's times, or the first error met.
fn rounds(scratches: &[Scratch], count: usize) -> std::io::Result<Vec<Vec<Duration>>> {
    let release = Barrier::new(scratches.len());
    std::thread::scope(|scope| {
        let threads: Vec<_> = scratches
            .iter()
            .map(|scratch| {
                let release = &release;
                scope.spawn(move || {
                    let mut times = Vec::with_capacity(count);
                    let mut error = None;
                    for _ in 0..count {
                        // A writer whose write failed writes no more but still comes to every
                        // round's barrier, so that none waits there for it.
                        release.wait();
                        if error.is_none() {
                            match scratch.write() {
                                Ok(took) => times.push(took),
                                Err(e) => error = Some(e),
                            }
                        }
                    }
                    error.map_or(Ok(times), Err)
                })
            })
            .collect();
        // A writer's thread does not panic (its write returns errors): no other is left at
        // the barrier by one.
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// The `kth` shortest (1 the shortest) of `times`.
fn kth_shortest(mut times: Vec<Duration>, kth: usize) -> Duration {
    times.sort();
    times[kth - 1]
}

/// Each round trip of a small message to an echo on 127.0.0.1, `TCP_NODELAY` on both ends.
fn round_trips() -> anyhow::Result<Vec<Duration>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut peer, _) = listener.accept()?;
        peer.set_nodelay(true)?;
        let mut message = [0; MESSAGE_BYTES];
        while peer.read_exact(&mut message).is_ok() {
            peer.write_all(&message)?;
        }
        Ok(())
    });
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut message = [0x5a; MESSAGE_BYTES];
    let mut samples = Vec::with_capacity(ROUND_TRIP_SAMPLES);
    for i in 0..ROUND_TRIP_SAMPLES * 2 {
        let started = Instant::now();
        stream.write_all(&message)?;
        stream.read_exact(&mut message)?;
        if i >= ROUND_TRIP_SAMPLES {
            samples.push(started.elapsed());
        }
    }
    drop(stream);
    let _ = echo.join();
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_a_durable_write_and_two_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let floor = measure(dir.path()).unwrap();
        assert!(floor.fdatasync_p50_ms > 0.0, "{floor:?}");
        assert!(floor.loopback_rtt_p50_ms > 0.0, "{floor:?}");
        let sum = floor.fdatasync_p50_ms + 2.0 * floor.loopback_rtt_p50_ms;
        assert!((floor.put_floor_ms - sum).abs() < 1e-9, "{floor:?}");
        assert!(floor.shared_fdatasync_p50_ms > 0.0, "{floor:?}");
        let shared = floor.shared_fdatasync_p50_ms + 2.0 * floor.loopback_rtt_p50_ms;
        assert!(
            (floor.shared_put_floor_ms - shared).abs() < 1e-9,
            "{floor:?}"
        );
        assert!(measure(&dir.path().join("missing")).is_err());
        // Its scratch files are gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_rounds_sample_is_its_kth_shortest_write() {
        let ms = Duration::from_millis;
        assert_eq!(kth_shortest(vec![ms(3), ms(1), ms(2)], MAJORITY), ms(2));
        assert_eq!(kth_shortest(vec![ms(3), ms(1), ms(2)], 1), ms(1));
        assert_eq!(kth_shortest(vec![ms(5)], 1), ms(5));
    }

    #[test]
    fn a_write_that_fails_mid_way_fails_the_rounds_and_stops_every_writer() {
        let dir = tempfile::tempdir().unwrap();
        let mut scratches: Vec<Scratch> = (0..NODES)
            .map(|n| Scratch::create(dir.path(), n).unwrap())
            .collect();
        // The last writer's file, opened again read-only: its writes fail.
        let last = scratches.last_mut().unwrap();
        last.file = std::fs::File::open(&last.path).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(rounds(&scratches, 10).map(|_| ())));
        let outcome = finished.recv_timeout(Duration::from_secs(20));
        assert!(
            matches!(outcome, Ok(Err(_))),
            "the rounds should end with the write's error: {outcome:?}"
        );
    }

    #[test]
    fn a_scratch_file_that_cannot_be_made_fails_the_floor_and_none_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let taken = dir
            .path()
            .join(format!(".leasehold-floor-{}-1", std::process::id()));
        std::fs::write(&taken, b"").unwrap();
        assert!(measure(dir.path()).is_err());
        // Only the file that was there before: the first writer's was made, then removed.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, [taken]);
    }
}
