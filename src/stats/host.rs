//! The master and its workers as the admin port and `/metrics` report
//! them (filled in by the master, read by `admin/` and `prometheus.rs`).

use std::path::PathBuf;

/// One worker as the master sees it.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// Worker index (slot).
    pub index: usize,
    /// Process id.
    pub pid: i32,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Still running.
    pub alive: bool,
    /// Times this slot's worker was restarted after dying.
    pub respawns: u64,
}

/// What the master reports about itself.
#[derive(Debug, Clone)]
pub struct HostInfo {
    /// Master pid.
    pub master_pid: u32,
    /// Master uptime in seconds.
    pub uptime_secs: u64,
    /// Configuration file.
    pub conf_path: PathBuf,
    /// Generation of the current workers (1, then +1 per reload).
    pub generation: u64,
    /// Workers of the current generation.
    pub workers: Vec<WorkerInfo>,
    /// Workers of older generations still draining.
    pub draining: usize,
    /// Parameters changed at run time, in the order set.
    pub runtime: Vec<(String, String)>,
}
