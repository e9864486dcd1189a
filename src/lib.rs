//! walnut: a memcached and Redis proxy that keeps twemproxy's configuration,
//! key placement and stats, on nginx's master + worker process model.
//! See ARCHITECTURE.md for the map of the code.

pub mod cli;
pub mod config;
pub mod hash;
pub mod proto;
