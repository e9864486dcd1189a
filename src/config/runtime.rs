//! A parameter changed at run time (admin `config set`, TTIN/TTOU, the end
//! of a migration): parsed and validated once, in the master, against the
//! running configuration, then carried typed on the master ↔ worker
//! channel so a worker only applies it and never refuses a value.
//!
//! The channel's text for a parameter is its kind, its value in the unit
//! the worker uses, then the pool name for pool parameters: the name comes
//! last so any name (dots, spaces) survives the trip.

use super::scalar::{parse_micros, parse_millis, parse_size};
use std::num::NonZeroUsize;
use std::time::Duration;

/// Parameters `config set` accepts besides `pool.NAME.timeout`, in the
/// order the admin port lists them.
pub const NAMES: &[&str] = &[
    "log_level",
    "slowlog_threshold",
    "client_idle_timeout",
    "tcp_quickack",
    "latency",
    "client_output_limit",
    "client_max_inflight",
    "reply_hold",
];

/// One runtime parameter with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// Log verbosity.
    LogLevel(u8),
    /// TCP_QUICKACK after reads.
    TcpQuickack(bool),
    /// Close clients idle this long (`None`: the pools' own setting).
    ClientIdleTimeout(Option<Duration>),
    /// Slow-log threshold in µs (0: off).
    SlowlogThreshold(u64),
    /// Every pool's `client_output_limit`, in bytes.
    ClientOutputLimit(usize),
    /// Every pool's `client_max_inflight`.
    ClientMaxInflight(NonZeroUsize),
    /// Record reply latencies.
    Latency(bool),
    /// How long a pipelined batch's ready replies may wait for the rest,
    /// in µs (0: off).
    ReplyHold(u64),
    /// A pool's server timeout in ms (0: none).
    PoolTimeout {
        /// The pool's name.
        pool: String,
        /// The timeout.
        ms: u64,
    },
    /// A pool's migration ended: its keys are no longer pulled.
    MigrationDone {
        /// The pool's name.
        pool: String,
    },
    /// The fleet passed the barrier of a change (`fleet/agent.rs`): the
    /// pool's moved keys are pulled from now on, no longer refused.
    FleetGo {
        /// The pool's name.
        pool: String,
    },
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(format!("bad boolean '{value}'")),
    }
}

impl Param {
    /// The parameter `key` set to `value`, as the admin port names them;
    /// `has_pool` says whether the running configuration has a pool.
    /// The error is the reply's text.
    pub fn parse(key: &str, value: &str, has_pool: impl Fn(&str) -> bool) -> Result<Param, String> {
        Ok(match key {
            "log_level" => Param::LogLevel(
                value
                    .parse()
                    .map_err(|_| format!("bad log level '{value}'"))?,
            ),
            "tcp_quickack" => Param::TcpQuickack(parse_bool(value)?),
            "client_idle_timeout" => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| format!("bad timeout '{value}'"))?;
                Param::ClientIdleTimeout((ms > 0).then(|| Duration::from_millis(ms)))
            }
            "slowlog_threshold" => Param::SlowlogThreshold(
                parse_micros(value).ok_or_else(|| format!("bad slowlog_threshold '{value}'"))?,
            ),
            "client_output_limit" => Param::ClientOutputLimit(
                parse_size(value).ok_or_else(|| format!("bad client_output_limit '{value}'"))?,
            ),
            "client_max_inflight" => Param::ClientMaxInflight(
                value
                    .parse()
                    .map_err(|_| format!("bad client_max_inflight '{value}'"))?,
            ),
            "latency" => Param::Latency(parse_bool(value)?),
            "reply_hold" => Param::ReplyHold(
                parse_micros(value).ok_or_else(|| format!("bad reply_hold '{value}'"))?,
            ),
            _ => {
                let Some((pool, param)) =
                    key.strip_prefix("pool.").and_then(|r| r.rsplit_once('.'))
                else {
                    return Err(format!("unknown parameter '{key}'"));
                };
                if !has_pool(pool) {
                    return Err(format!("unknown pool '{pool}'"));
                }
                match param {
                    "timeout" => Param::PoolTimeout {
                        pool: pool.to_string(),
                        ms: parse_millis(value).ok_or_else(|| format!("bad timeout '{value}'"))?,
                    },
                    _ => return Err(format!("unknown parameter '{key}'")),
                }
            }
        })
    }

    /// The name the admin port and `config show` give the parameter.
    pub fn key(&self) -> String {
        match self {
            Param::PoolTimeout { pool, .. } => format!("pool.{pool}.timeout"),
            Param::MigrationDone { pool } => format!("pool.{pool}.migration"),
            Param::FleetGo { pool } => format!("pool.{pool}.fleet"),
            _ => self.kind().to_string(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Param::LogLevel(_) => "log_level",
            Param::TcpQuickack(_) => "tcp_quickack",
            Param::ClientIdleTimeout(_) => "client_idle_timeout",
            Param::SlowlogThreshold(_) => "slowlog_threshold",
            Param::ClientOutputLimit(_) => "client_output_limit",
            Param::ClientMaxInflight(_) => "client_max_inflight",
            Param::Latency(_) => "latency",
            Param::ReplyHold(_) => "reply_hold",
            Param::PoolTimeout { .. } => "pool_timeout",
            Param::MigrationDone { .. } => "migration_done",
            Param::FleetGo { .. } => "fleet_go",
        }
    }

    /// The channel's text.
    pub fn encode(&self) -> String {
        let kind = self.kind();
        match self {
            Param::LogLevel(n) => format!("{kind} {n}"),
            Param::TcpQuickack(b) | Param::Latency(b) => format!("{kind} {}", u8::from(*b)),
            Param::ClientIdleTimeout(d) => {
                format!("{kind} {}", d.map_or(0, |d| d.as_millis()))
            }
            Param::SlowlogThreshold(n) | Param::ReplyHold(n) => format!("{kind} {n}"),
            Param::ClientOutputLimit(n) => format!("{kind} {n}"),
            Param::ClientMaxInflight(n) => format!("{kind} {n}"),
            Param::PoolTimeout { pool, ms } => format!("{kind} {ms} {pool}"),
            Param::MigrationDone { pool } | Param::FleetGo { pool } => format!("{kind} {pool}"),
        }
    }

    /// The parameter from the channel's text; `None` for anything
    /// [`Param::encode`] does not write.
    pub fn decode(text: &str) -> Option<Param> {
        let (kind, rest) = text.split_once(' ')?;
        let num = |s: &str| -> Option<u64> {
            // Digits only: `u64::from_str` also takes a leading '+',
            // which would decode two texts to one parameter.
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse().ok())
                .flatten()
        };
        let flag = |s: &str| match s {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        };
        let named = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Some(match kind {
            "log_level" => Param::LogLevel(u8::try_from(num(rest)?).ok()?),
            "tcp_quickack" => Param::TcpQuickack(flag(rest)?),
            "client_idle_timeout" => {
                let ms = num(rest)?;
                Param::ClientIdleTimeout((ms > 0).then(|| Duration::from_millis(ms)))
            }
            "slowlog_threshold" => Param::SlowlogThreshold(num(rest)?),
            "client_output_limit" => Param::ClientOutputLimit(usize::try_from(num(rest)?).ok()?),
            "client_max_inflight" => {
                Param::ClientMaxInflight(NonZeroUsize::new(usize::try_from(num(rest)?).ok()?)?)
            }
            "latency" => Param::Latency(flag(rest)?),
            "reply_hold" => Param::ReplyHold(num(rest)?),
            "pool_timeout" => {
                let (ms, pool) = rest.split_once(' ')?;
                Param::PoolTimeout {
                    ms: num(ms)?,
                    pool: named(pool)?,
                }
            }
            "migration_done" => Param::MigrationDone { pool: named(rest)? },
            "fleet_go" => Param::FleetGo { pool: named(rest)? },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(p: &str) -> bool {
        p == "beta" || p == "a.b c"
    }

    #[test]
    fn every_variant_round_trips() {
        let all = [
            Param::LogLevel(0),
            Param::LogLevel(255),
            Param::TcpQuickack(true),
            Param::TcpQuickack(false),
            Param::ClientIdleTimeout(None),
            Param::ClientIdleTimeout(Some(Duration::from_millis(300))),
            Param::SlowlogThreshold(0),
            Param::SlowlogThreshold(50_000),
            Param::ClientOutputLimit(1 << 20),
            Param::ClientMaxInflight(NonZeroUsize::new(7).unwrap()),
            Param::Latency(true),
            Param::Latency(false),
            Param::ReplyHold(0),
            Param::ReplyHold(200),
            Param::PoolTimeout {
                pool: "beta".into(),
                ms: 0,
            },
            Param::PoolTimeout {
                pool: "a.b c".into(),
                ms: 750,
            },
            Param::MigrationDone {
                pool: "a.b c".into(),
            },
            Param::FleetGo {
                pool: "beta".into(),
            },
        ];
        for p in all {
            let text = p.encode();
            assert_eq!(Param::decode(&text), Some(p.clone()), "{text}");
        }
    }

    #[test]
    fn admin_values_parse_to_the_workers_units() {
        let parse = |k, v| Param::parse(k, v, pools);
        assert_eq!(parse("log_level", "7"), Ok(Param::LogLevel(7)));
        assert_eq!(parse("tcp_quickack", "on"), Ok(Param::TcpQuickack(true)));
        assert_eq!(parse("latency", "false"), Ok(Param::Latency(false)));
        assert_eq!(
            parse("client_idle_timeout", "300"),
            Ok(Param::ClientIdleTimeout(Some(Duration::from_millis(300))))
        );
        assert_eq!(
            parse("client_idle_timeout", "0"),
            Ok(Param::ClientIdleTimeout(None))
        );
        assert_eq!(
            parse("slowlog_threshold", "50ms"),
            Ok(Param::SlowlogThreshold(50_000))
        );
        assert_eq!(parse("reply_hold", "1ms"), Ok(Param::ReplyHold(1000)));
        assert_eq!(
            parse("client_output_limit", "1m"),
            Ok(Param::ClientOutputLimit(1 << 20))
        );
        assert_eq!(
            parse("client_max_inflight", "3"),
            Ok(Param::ClientMaxInflight(NonZeroUsize::new(3).unwrap()))
        );
        assert_eq!(
            parse("pool.a.b c.timeout", "2s"),
            Ok(Param::PoolTimeout {
                pool: "a.b c".into(),
                ms: 2000
            })
        );
        assert_eq!(
            parse("pool.beta.timeout", "5").unwrap().key(),
            "pool.beta.timeout"
        );
    }

    #[test]
    fn invalid_values_are_refused_with_the_admin_wording() {
        let parse = |k, v| Param::parse(k, v, pools);
        let cases = [
            ("log_level", "x", "bad log level 'x'"),
            ("log_level", "256", "bad log level '256'"),
            ("tcp_quickack", "yes", "bad boolean 'yes'"),
            ("latency", "2", "bad boolean '2'"),
            ("client_idle_timeout", "5s", "bad timeout '5s'"),
            ("slowlog_threshold", "soon", "bad slowlog_threshold 'soon'"),
            ("reply_hold", "-1", "bad reply_hold '-1'"),
            ("client_output_limit", "1t", "bad client_output_limit '1t'"),
            ("client_max_inflight", "0", "bad client_max_inflight '0'"),
            ("client_max_inflight", "-1", "bad client_max_inflight '-1'"),
            ("pool.nope.timeout", "5", "unknown pool 'nope'"),
            ("pool.beta.timeout", "x", "bad timeout 'x'"),
            (
                "pool.beta.colour",
                "5",
                "unknown parameter 'pool.beta.colour'",
            ),
            (
                "pool.beta.migration",
                "done",
                "unknown parameter 'pool.beta.migration'",
            ),
            ("nope", "1", "unknown parameter 'nope'"),
        ];
        for (k, v, want) in cases {
            assert_eq!(parse(k, v), Err(want.to_string()), "{k} {v}");
        }
    }

    #[test]
    fn foreign_channel_text_is_refused() {
        for text in [
            "",
            "log_level",
            "log_level +7",
            "log_level 256",
            "tcp_quickack on",
            "client_max_inflight 0",
            "pool_timeout 5",
            "pool_timeout 5 ",
            "migration_done ",
            "colour 1",
        ] {
            assert_eq!(Param::decode(text), None, "{text}");
        }
    }
}
