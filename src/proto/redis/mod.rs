//! Redis RESP protocol.

/// Redis operation (filled in by the RESP module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisOp {
    /// placeholder
    Other,
}
