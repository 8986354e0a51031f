//! The fault suites' seeded draws (splitmix64), without a dependency: the in-process simulation
//! and the real-process fault run draw their schedules from it, and the log store's simulated
//! disk what a power loss keeps, so that a seed printed by a failing run makes the same choices
//! again.

/// A seeded generator; the seed is its whole state.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.bits() % n
    }

    /// A draw in `low..high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low)
    }

    /// Heads or tails.
    pub fn coin(&mut self) -> bool {
        self.bits() & 1 == 1
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
