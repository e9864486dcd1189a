//! Counters: declared once as tables of (name, kind, description) like
//! twemproxy's nc_stats.h, stored in a shared-memory region where each
//! worker writes only its own slot and the master reads all of them.

pub mod carry;
pub mod histogram;
pub mod host;
pub mod hotkeys;
pub mod json;
pub mod prometheus;
pub mod shm;
pub mod slowlog;

/// Whether a field counts events or reports a current level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// Current value.
    Gauge,
    /// A timestamp (µs since the epoch); summing takes the maximum.
    Timestamp,
}

macro_rules! fields {
    ($(#[$m:meta])* $name:ident { $($var:ident = ($s:literal, $k:ident, $d:literal)),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub enum $name { $(#[doc = $d] $var),* }
        impl $name {
            /// Every field, in the order of the stats document.
            pub const ALL: &'static [$name] = &[$($name::$var),*];
            /// Number of fields.
            pub const COUNT: usize = [$($name::$var),*].len();
            /// Name in the stats document.
            pub fn name(self) -> &'static str { match self { $($name::$var => $s),* } }
            /// Counter or gauge.
            pub fn kind(self) -> Kind { match self { $($name::$var => Kind::$k),* } }
            /// Description printed by `-D`.
            pub fn description(self) -> &'static str { match self { $($name::$var => $d),* } }
        }
    };
}

fields!(
    /// Per-pool fields (twemproxy's pool stats).
    PoolField {
        ClientEof = ("client_eof", Counter, "# eof on client connections"),
        ClientErr = ("client_err", Counter, "# errors on client connections"),
        ClientConnections = ("client_connections", Gauge, "# active client connections"),
        ServerEjects = ("server_ejects", Counter, "# times backend server was ejected"),
        ForwardError = ("forward_error", Counter, "# times we encountered a forwarding error"),
        Fragments = ("fragments", Counter, "# fragments created from a multi-vector request"),
        ZoneFailovers = ("zone_failovers", Counter, "# requests of a zone pool answered by a zone other than the local one"),
    }
);

fields!(
    /// Per-server fields (twemproxy's server stats).
    ServerField {
        ServerEof = ("server_eof", Counter, "# eof on server connections"),
        ServerErr = ("server_err", Counter, "# errors on server connections"),
        ServerTimedout = ("server_timedout", Counter, "# timeouts on server connections"),
        ServerConnections = ("server_connections", Gauge, "# active server connections"),
        ServerEjectedAt = ("server_ejected_at", Timestamp, "timestamp when server was ejected in usec since epoch"),
        Requests = ("requests", Counter, "# requests"),
        RequestBytes = ("request_bytes", Counter, "total request bytes"),
        Responses = ("responses", Counter, "# responses"),
        ResponseBytes = ("response_bytes", Counter, "total response bytes"),
        InQueue = ("in_queue", Gauge, "# requests in incoming queue"),
        InQueueBytes = ("in_queue_bytes", Gauge, "current request bytes in incoming queue"),
        OutQueue = ("out_queue", Gauge, "# requests in outgoing queue"),
        OutQueueBytes = ("out_queue_bytes", Gauge, "current request bytes in outgoing queue"),
        ServerDown = ("server_down", Gauge, "# workers whose last connection or request to the server failed"),
    }
);

fields!(
    /// Per-worker process fields (walnut's own).
    WorkerField {
        TotalConnections = ("total_connections", Counter, "# connections accepted"),
        ServerConnects = ("server_connects", Counter, "# server connections opened"),
        CurrConnections = ("curr_connections", Gauge, "# connections open"),
        AcceptEagain = ("accept_eagain", Counter, "# wakeups to accept that found no connection"),
        Requests = ("requests", Counter, "# client requests"),
        OutputBytes = ("output_bytes", Gauge, "bytes of replies buffered for clients"),
        BudgetEvictions = ("budget_evictions", Counter, "# times clients were closed to keep replies under buffer_budget"),
        Heartbeat = ("heartbeat", Timestamp, "last event loop iteration, usec since epoch"),
        ShadowDropped = ("shadow_dropped", Counter, "# requests not copied to a shadow pool (its queue full or its server down)"),
        HandedOut = ("handed_out", Counter, "# client connections handed to a successor (reload, upgrade)"),
        HandedIn = ("handed_in", Counter, "# client connections taken over from a predecessor"),
        CmdGet = ("cmd_get", Counter, "# keys asked for by memcached retrievals"),
        CmdSet = ("cmd_set", Counter, "# memcached storage requests"),
        GetHits = ("get_hits", Counter, "# keys memcached retrievals found"),
        FleetHeld = ("fleet_held", Counter, "# requests held for the fleet (a key moving before its barrier passed, or the member catching up)"),
        FleetHeldUs = ("fleet_held_us", Counter, "total usec requests were held for the fleet"),
        FleetRefused = ("fleet_refused", Counter, "# requests refused for the fleet (key moving, membership lapsed), at once or after the hold bound"),
        Pulled = ("pulled", Counter, "# keys a request of a migrating pool pulled from an old owner before it ran"),
        MovedReads = ("moved_reads", Counter, "# GETs of a moved key read where the key is instead of pulled"),
        MovedRereads = ("moved_rereads", Counter, "# times such a GET went on to the next server (a nil, or the server not reached)"),
    }
);

/// Print the descriptions of every field (the `-D` flag).
pub fn describe() -> String {
    let mut s = String::from("This is walnut-");
    s.push_str(env!("CARGO_PKG_VERSION"));
    s.push_str("\nasync event backend: epoll\n\npool stats:\n");
    for f in PoolField::ALL {
        s.push_str(&format!("  {:<20}\"{}\"\n", f.name(), f.description()));
    }
    s.push_str("\nserver stats:\n");
    for f in ServerField::ALL {
        s.push_str(&format!("  {:<20}\"{}\"\n", f.name(), f.description()));
    }
    s
}
