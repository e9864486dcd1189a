//! memcached protocols: text (this issue), binary and meta (later).

/// memcached text operation (filled in by the text protocol module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McOp {
    /// placeholder
    Get,
}
