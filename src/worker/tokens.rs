//! The worker's poll tokens: one number space cut into ranges, each
//! naming what a token stands for. Client and server connections take
//! their slab key (below every range here); the rest sit far above any
//! slab key.
//!
//! ```text
//! 0 ..                 connections (slab keys)
//! SENTINEL_BASE ..     sentinel conversations, one per watching pool
//! RELAY_BASE ..        relays: 2 i its TLS side, 2 i + 1 its unix side
//! HANDIN_CONN_BASE ..  handover connections whose message has not come
//! HANDIN               the socket clients are handed to this worker on
//! CONTROL              the master channel
//! LISTENER_BASE ..     listeners
//! ```

use mio::Token;

/// Tokens from here are sentinel conversations.
const SENTINEL_BASE: usize = 1 << 37;
/// Tokens from here are relays.
const RELAY_BASE: usize = 1 << 38;
/// Tokens from here up to [`HANDIN`] are handover connections whose
/// message has not arrived yet.
const HANDIN_CONN_BASE: usize = 1 << 39;
/// The socket clients are handed to this worker on.
pub(super) const HANDIN: Token = Token((1 << 40) - 2);
/// The master channel.
pub(super) const CONTROL: Token = Token((1 << 40) - 1);
/// Tokens at or above this are listeners.
const LISTENER_BASE: usize = 1 << 40;
/// The timer (not a poll token) that wakes the loop for a cluster pool's
/// TRYAGAIN retries: no connection has it, so no slab key can be it.
pub(super) const RETRY_TIMER: Token = Token((1 << 40) - 2);

// The ranges are in order.
const _: () = assert!(SENTINEL_BASE < RELAY_BASE && RELAY_BASE < HANDIN_CONN_BASE);
const _: () = assert!(HANDIN_CONN_BASE < HANDIN.0 && HANDIN.0 < CONTROL.0);
const _: () = assert!(CONTROL.0 < LISTENER_BASE);

/// What a poll token stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// A client or server connection (its slab key).
    Conn(usize),
    /// Sentinel conversation `i`.
    Sentinel(usize),
    /// Relay `i`.
    Relay(usize),
    /// Handover connection `key` (its slab key in the hand-in table).
    HandinConn(usize),
    /// [`HANDIN`].
    Handin,
    /// [`CONTROL`].
    Control,
    /// Listener `i`.
    Listener(usize),
}

/// What `token` stands for (connections first: nearly every event is one).
#[inline]
pub(super) fn kind(token: Token) -> TokenKind {
    match token.0 {
        t if t < SENTINEL_BASE => TokenKind::Conn(t),
        t if t < RELAY_BASE => TokenKind::Sentinel(t - SENTINEL_BASE),
        t if t < HANDIN_CONN_BASE => TokenKind::Relay((t - RELAY_BASE) / 2),
        t if t == HANDIN.0 => TokenKind::Handin,
        t if t == CONTROL.0 => TokenKind::Control,
        t if t < LISTENER_BASE => TokenKind::HandinConn(t - HANDIN_CONN_BASE),
        t => TokenKind::Listener(t - LISTENER_BASE),
    }
}

/// The token of listener `i`.
pub(super) fn listener(i: usize) -> Token {
    Token(LISTENER_BASE + i)
}

/// The token of sentinel conversation `i`.
pub(super) fn sentinel(i: usize) -> Token {
    Token(SENTINEL_BASE + i)
}

/// The tokens of relay `i`: its TLS side and its unix side.
pub(super) fn relay(i: usize) -> (Token, Token) {
    (Token(RELAY_BASE + 2 * i), Token(RELAY_BASE + 2 * i + 1))
}

/// The token of handover connection `key`.
pub(super) fn handin_conn(key: usize) -> Token {
    Token(HANDIN_CONN_BASE + key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_reads_back() {
        assert_eq!(kind(Token(0)), TokenKind::Conn(0));
        assert_eq!(
            kind(Token(SENTINEL_BASE - 1)),
            TokenKind::Conn(SENTINEL_BASE - 1)
        );
        assert_eq!(kind(sentinel(3)), TokenKind::Sentinel(3));
        let (tls, unix) = relay(5);
        assert_eq!(
            (kind(tls), kind(unix)),
            (TokenKind::Relay(5), TokenKind::Relay(5))
        );
        assert_eq!(kind(handin_conn(0)), TokenKind::HandinConn(0));
        assert_eq!(
            kind(handin_conn(HANDIN.0 - HANDIN_CONN_BASE - 1)),
            TokenKind::HandinConn(HANDIN.0 - HANDIN_CONN_BASE - 1)
        );
        assert_eq!(kind(HANDIN), TokenKind::Handin);
        assert_eq!(kind(CONTROL), TokenKind::Control);
        assert_eq!(kind(listener(0)), TokenKind::Listener(0));
        assert_eq!(kind(listener(7)), TokenKind::Listener(7));
    }
}
