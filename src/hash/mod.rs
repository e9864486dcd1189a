//! Hash functions and key distributions, identical to twemproxy 0.5.
//!
//! Only the names are defined here; the functions live in the hash branch.

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
