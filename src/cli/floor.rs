//! `bench --floor-dir DIR`: the floor under one client's latency, measured on this machine in the
//! same run: the disk's `fdatasync` in DIR (where the nodes keep their logs) and a loopback
//! round trip. A put acknowledged by a three-node cluster waits at least for one round trip from
//! the client to the leader, one from the leader to a follower, and one log write made durable
//! on a majority (the leader's in parallel with the follower's): `fdatasync + 2 round trips`.
//! When the three nodes share one disk, as a local cluster's do, their writes are made at once
//! on it and each waits on the others': the shared floor takes, for the write, the second of
//! three `fdatasync`s made at once.

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
    /// Three writers, each with its file in the dir, write and `fdatasync` at once: the second
    /// of them to be done, a majority's write when three nodes share this disk.
    pub shared_fdatasync_p50_ms: f64,
    /// `shared_fdatasync_p50_ms + 2 * loopback_rtt_p50_ms`.
    pub shared_put_floor_ms: f64,
}

/// Measures the floor in `dir` (its disk) and on loopback.
pub fn measure(dir: &Path) -> anyhow::Result<Floor> {
    let fdatasync = median_ms(one_writer(dir)?);
    let shared = median_ms(writers_at_once(dir)?);
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

/// Each write and `fdatasync` of one writer alone.
fn one_writer(dir: &Path) -> anyhow::Result<Vec<Duration>> {
    let scratch = Scratch::create(dir, 0)?;
    let mut samples = Vec::with_capacity(DISK_SAMPLES);
    for i in 0..DISK_SAMPLES * 2 {
        let took = scratch.write()?;
        if i >= DISK_SAMPLES {
            samples.push(took);
        }
    }
    Ok(samples)
}

/// Rounds of [`NODES`] writers, one thread and file each, released together to write and
/// `fdatasync`: each round's sample is the [`MAJORITY`]th shortest of their times, each timed
/// from its own start (so that a thread's late wake-up is not counted as the disk's).
fn writers_at_once(dir: &Path) -> anyhow::Result<Vec<Duration>> {
    let scratches = (0..NODES)
        .map(|n| Scratch::create(dir, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let release = Barrier::new(NODES);
    // Every writer goes through every round, even after an error, so that none waits forever
    // at the barrier for one that stopped.
    let times: Vec<Vec<std::io::Result<Duration>>> = std::thread::scope(|scope| {
        let writers: Vec<_> = scratches
            .iter()
            .map(|scratch| {
                let release = &release;
                scope.spawn(move || {
                    (0..DISK_SAMPLES * 2)
                        .map(|_| {
                            release.wait();
                            scratch.write()
                        })
                        .collect()
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut samples = Vec::with_capacity(DISK_SAMPLES);
    for round in DISK_SAMPLES..DISK_SAMPLES * 2 {
        let mut took = Vec::with_capacity(NODES);
        for writer in &times {
            match &writer[round] {
                Ok(d) => took.push(*d),
                Err(e) => anyhow::bail!("--floor-dir {}: {e}", dir.display()),
            }
        }
        took.sort();
        samples.push(took[MAJORITY - 1]);
    }
    Ok(samples)
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
}
