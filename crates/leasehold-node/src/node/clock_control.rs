//! The fault suite's hand on a node's clock (issue 42): `serve --clock-control FILE`, a flag
//! hidden from `--help`, names a file the node reads every [`CHECK_EVERY`]. It holds `RATE_PPM
//! JUMP_MS` and, optionally, a tag: each new content runs the node's own clock (`local_clock`,
//! the one its stamps, carried time and clock readings count on) at `RATE_PPM` parts per million
//! of real time, after a jump of `JUMP_MS` (negative: back). The tag lets the same jump be asked
//! twice. Only who may write the file reaches it, as with the data dir; a missing or malformed
//! file changes nothing (a malformed one is logged once per content).

use std::path::PathBuf;
use std::time::Duration;

use super::local_clock::RATE_REAL;
use super::Node;

/// How often the file is read.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// The most of the file read: a rate, a jump and a tag.
const MOST_BYTES: u64 = 128;

/// The rates a file may set: from a hundredth to a hundred times real time.
const RATES_PPM: std::ops::RangeInclusive<u64> = RATE_REAL / 100..=RATE_REAL * 100;

/// The largest jump a file may ask for, either way: a day.
const MOST_JUMP_MS: i64 = 86_400_000;

/// What a file asks of the clock: its rate and a jump.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClockSetting {
    pub rate_ppm: u64,
    pub jump_ms: i64,
}

/// Reads `text` as `RATE_PPM JUMP_MS [TAG]`, or says what is wrong with it.
pub(crate) fn parse(text: &str) -> Result<ClockSetting, String> {
    let mut words = text.split_whitespace();
    let rate_ppm: u64 = (words.next().ok_or("empty")?)
        .parse()
        .map_err(|e| format!("RATE_PPM: {e}"))?;
    let jump_ms: i64 = match words.next() {
        Some(word) => word.parse().map_err(|e| format!("JUMP_MS: {e}"))?,
        None => 0,
    };
    if !RATES_PPM.contains(&rate_ppm) {
        return Err(format!("RATE_PPM {rate_ppm} is outside {RATES_PPM:?}"));
    }
    if jump_ms.unsigned_abs() > MOST_JUMP_MS.unsigned_abs() {
        return Err(format!("JUMP_MS {jump_ms} is beyond a day either way"));
    }
    Ok(ClockSetting { rate_ppm, jump_ms })
}

/// Follows the file at `path`, until aborted.
pub async fn follow(node: Node, path: PathBuf) {
    use tokio::io::AsyncReadExt;
    let mut seen = String::new();
    let mut every = tokio::time::interval(CHECK_EVERY);
    loop {
        every.tick().await;
        let mut text = String::new();
        let Ok(file) = tokio::fs::File::open(&path).await else {
            continue;
        };
        if file
            .take(MOST_BYTES)
            .read_to_string(&mut text)
            .await
            .is_err()
            || text == seen
        {
            continue;
        }
        match parse(&text) {
            Ok(setting) => {
                tracing::warn!(
                    rate_ppm = setting.rate_ppm,
                    jump_ms = setting.jump_ms,
                    "this node's clock is set by --clock-control (a test's fault)"
                );
                node.set_clock(setting.rate_ppm, setting.jump_ms);
            }
            Err(why) => tracing::warn!(path = %path.display(), why, "--clock-control not read"),
        }
        seen = text;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_a_rate_and_a_jump_within_bounds() {
        let set = |rate_ppm, jump_ms| Ok(ClockSetting { rate_ppm, jump_ms });
        assert_eq!(parse("2000000"), set(2_000_000, 0));
        assert_eq!(parse("1000000 -10000 second\n"), set(1_000_000, -10_000));
        assert!(parse("").is_err());
        assert!(parse("fast").is_err());
        assert!(parse("0 0").unwrap_err().contains("outside"));
        assert!(parse("1000000 99999999999").unwrap_err().contains("a day"));
    }
}
