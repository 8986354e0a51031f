//! `bench --floor-dir DIR`: the floor under one client's latency, measured on this machine in the
//! same run: the disk's `fdatasync` in DIR (where the nodes keep their logs) and a loopback
//! round trip. A put acknowledged by a three-node cluster waits at least for one round trip from
//! the client to the leader, one from the leader to a follower, and one log write made durable
//! on a majority (the leader's in parallel with the follower's): `fdatasync + 2 round trips`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Samples of each, after as many unmeasured ones as warm-up.
const DISK_SAMPLES: usize = 200;
const ROUND_TRIP_SAMPLES: usize = 2_000;
/// What one log append writes, about: an entry of a few small commands.
const WRITE_BYTES: usize = 4_096;
/// What one small request or answer is on the wire, about.
const MESSAGE_BYTES: usize = 128;

/// The floor, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Floor {
    pub fdatasync_p50_ms: f64,
    pub loopback_rtt_p50_ms: f64,
    /// `fdatasync_p50_ms + 2 * loopback_rtt_p50_ms`.
    pub put_floor_ms: f64,
}

/// Measures the floor in `dir` (its disk) and on loopback.
pub fn measure(dir: &Path) -> anyhow::Result<Floor> {
    let fdatasync = median_ms(disk(dir)?);
    let round_trip = median_ms(round_trips()?);
    Ok(Floor {
        fdatasync_p50_ms: fdatasync,
        loopback_rtt_p50_ms: round_trip,
        put_floor_ms: fdatasync + 2.0 * round_trip,
    })
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// Each `fdatasync` of a 4 KiB write into a file in `dir`, as the log writes into blocks it
/// allocated before: the file is filled once first, then overwritten in place.
fn disk(dir: &Path) -> anyhow::Result<Vec<Duration>> {
    let path = dir.join(format!(".leasehold-floor-{}", std::process::id()));
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path);
    let mut f = opened.map_err(|e| anyhow::anyhow!("--floor-dir {}: {e}", path.display()))?;
    let samples = overwrite(&mut f);
    let _ = std::fs::remove_file(&path);
    samples
}

fn overwrite(f: &mut std::fs::File) -> anyhow::Result<Vec<Duration>> {
    let block = vec![0x5a; WRITE_BYTES];
    f.write_all(&block)?;
    f.sync_all()?;
    let mut samples = Vec::with_capacity(DISK_SAMPLES);
    for i in 0..DISK_SAMPLES * 2 {
        use std::os::unix::fs::FileExt;
        let started = Instant::now();
        f.write_all_at(&block, 0)?;
        f.sync_data()?;
        if i >= DISK_SAMPLES {
            samples.push(started.elapsed());
        }
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
        assert!(measure(&dir.path().join("missing")).is_err());
    }
}
