//! twemproxy-compatible stats JSON (filled in with the stats listener).
