//! walnut: a memcached and Redis proxy that keeps twemproxy's configuration,
//! key placement and stats, on nginx's master + worker process model.
//! See ARCHITECTURE.md for the map of the code.

pub mod admin;
pub mod cli;
pub mod config;
pub mod fleet;
pub mod hash;
#[macro_use]
pub mod log;
pub mod manpage;
pub mod master;
pub mod migrate;
pub mod net;
pub mod proto;
pub mod route;
pub mod stats;
pub mod util;
pub mod worker;
