//! Hash functions and key distributions, identical to twemproxy 0.5.
//!
//! [`HashKind`] names the twelve key hashes, [`Distribution`] the three
//! distributions; [`Ring`] is a pool's placement structure and
//! [`Placement`] the complete key -> server decision.

pub(crate) mod crc16;
mod crc32;
pub mod fnv;
mod hsieh;
mod jenkins;
pub mod ketama;
mod md5;
pub mod modula;
mod murmur;
mod one_at_a_time;
mod placement;
pub mod random;
mod ring;
mod server;

pub use placement::{ketama_server_name, key_hash_input, Placement};
pub use ring::Ring;
pub use server::{server_order, Point, RingServer};

/// A key hash function (`hash:` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum HashKind {
    /// `one_at_a_time`
    OneAtATime,
    /// `md5`
    Md5,
    /// `crc16`
    Crc16,
    /// `crc32` (libmemcached's 15-bit variant)
    Crc32,
    /// `crc32a` (standard CRC-32)
    Crc32a,
    /// `fnv1_64`
    Fnv1_64,
    /// `fnv1a_64` (computed in 32 bits)
    Fnv1a_64,
    /// `fnv1_32`
    Fnv1_32,
    /// `fnv1a_32`
    Fnv1a_32,
    /// `hsieh`
    Hsieh,
    /// `murmur`
    Murmur,
    /// `jenkins`
    Jenkins,
}

impl HashKind {
    /// Every hash, in twemproxy's order.
    pub const ALL: [HashKind; 12] = [
        HashKind::OneAtATime,
        HashKind::Md5,
        HashKind::Crc16,
        HashKind::Crc32,
        HashKind::Crc32a,
        HashKind::Fnv1_64,
        HashKind::Fnv1a_64,
        HashKind::Fnv1_32,
        HashKind::Fnv1a_32,
        HashKind::Hsieh,
        HashKind::Murmur,
        HashKind::Jenkins,
    ];

    /// The hash named `s` in a configuration file.
    pub fn from_name(s: &str) -> Option<HashKind> {
        HashKind::ALL.into_iter().find(|h| h.name() == s)
    }

    /// The configuration name of the hash.
    pub fn name(self) -> &'static str {
        match self {
            HashKind::OneAtATime => "one_at_a_time",
            HashKind::Md5 => "md5",
            HashKind::Crc16 => "crc16",
            HashKind::Crc32 => "crc32",
            HashKind::Crc32a => "crc32a",
            HashKind::Fnv1_64 => "fnv1_64",
            HashKind::Fnv1a_64 => "fnv1a_64",
            HashKind::Fnv1_32 => "fnv1_32",
            HashKind::Fnv1a_32 => "fnv1a_32",
            HashKind::Hsieh => "hsieh",
            HashKind::Murmur => "murmur",
            HashKind::Jenkins => "jenkins",
        }
    }

    /// Hashes `key` (the raw function; see [`Placement::key_hash`] for the
    /// empty-key and hash-tag rules).
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            HashKind::OneAtATime => one_at_a_time::hash(key),
            HashKind::Md5 => md5::hash(key),
            HashKind::Crc16 => crc16::hash(key),
            HashKind::Crc32 => crc32::hash(key),
            HashKind::Crc32a => crc32::hash_a(key),
            HashKind::Fnv1_64 => fnv::fnv1_64(key),
            HashKind::Fnv1a_64 => fnv::fnv1a_64(key),
            HashKind::Fnv1_32 => fnv::fnv1_32(key),
            HashKind::Fnv1a_32 => fnv::fnv1a_32(key),
            HashKind::Hsieh => hsieh::hash(key),
            HashKind::Murmur => murmur::hash(key),
            HashKind::Jenkins => jenkins::hash(key),
        }
    }
}

/// A key distribution (`distribution:` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// `ketama`: consistent hashing.
    Ketama,
    /// `modula`: hash modulo the total weight.
    Modula,
    /// `random`: a random live server per request.
    Random,
}

impl Distribution {
    /// The distribution named `s` in a configuration file.
    pub fn from_name(s: &str) -> Option<Distribution> {
        match s {
            "ketama" => Some(Distribution::Ketama),
            "modula" => Some(Distribution::Modula),
            "random" => Some(Distribution::Random),
            _ => None,
        }
    }

    /// The configuration name of the distribution.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Ketama => "ketama",
            Distribution::Modula => "modula",
            Distribution::Random => "random",
        }
    }
}

/// Written as in a configuration file (`fnv1a_64`), for logs and admin
/// replies.
impl std::fmt::Display for HashKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Written as in a configuration file (`ketama`).
impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// twemproxy's test_all.c values (from libmemcached's hash_results.h).
    const APPLE: [(HashKind, u32); 12] = [
        (HashKind::OneAtATime, 2_297_466_611),
        (HashKind::Md5, 3_195_025_439),
        (HashKind::Crc16, 3_662_830_516),
        (HashKind::Crc32, 10_542),
        (HashKind::Crc32a, 2_838_417_488),
        (HashKind::Fnv1_64, 473_199_127),
        (HashKind::Fnv1a_64, 1_488_911_807),
        (HashKind::Fnv1_32, 67_176_023),
        (HashKind::Fnv1a_32, 280_767_167),
        (HashKind::Hsieh, 3_738_850_110),
        (HashKind::Murmur, 4_142_305_122),
        (HashKind::Jenkins, 1_442_444_624),
    ];

    #[test]
    fn apple_vectors() {
        for (h, v) in APPLE {
            assert_eq!(h.hash(b"apple"), v, "{}", h.name());
        }
    }

    #[test]
    fn names_round_trip() {
        for h in HashKind::ALL {
            assert_eq!(HashKind::from_name(h.name()), Some(h));
        }
        assert_eq!(HashKind::from_name("fnv1a"), None);
        for d in [
            Distribution::Ketama,
            Distribution::Modula,
            Distribution::Random,
        ] {
            assert_eq!(Distribution::from_name(d.name()), Some(d));
        }
        assert_eq!(Distribution::from_name("Ketama"), None);
    }

    #[test]
    fn no_panic_on_any_length() {
        let data: Vec<u8> = (0..=255u8).collect();
        for h in HashKind::ALL {
            for n in 0..data.len() {
                let _ = h.hash(&data[..n]);
            }
        }
    }
}
