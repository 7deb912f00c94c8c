//! The seeded choices of the generated-input tests (splitmix64): the same inputs every run.

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// 0 to `max` bytes, ASCII or, one time in four, any byte (invalid UTF-8 too).
    pub fn bytes(&mut self, max: u64) -> Vec<u8> {
        let any = self.below(4) == 0;
        (0..self.below(max + 1))
            .map(|_| if any { self.below(256) as u8 } else { b' ' + self.below(90) as u8 })
            .collect()
    }
}
