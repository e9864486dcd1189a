//! State that a client connection carries for one feature, kept apart
//! from the code that drives it: a request held while its moved keys are
//! pulled from their old owners (`migrate.rs`). A client's transaction
//! (`Txn`) is in `transaction.rs` and its subscriptions (`Subs`) in
//! `subscriber.rs`, each with what changes it.

use crate::proto::Request;

/// A request held back while its moved keys are pulled over.
#[derive(Debug)]
pub struct Gate {
    /// The request (key ranges into `bytes`).
    pub req: Request,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The keys being pulled.
    pub pulls: Vec<Pull>,
    /// Pulls not finished.
    pub left: usize,
    /// Where the request goes once its keys are pulled.
    pub then: AfterPull,
    /// Already sent, queued behind its keys' copies on the same server
    /// connections (`Worker::send_behind_copies`): the gate now only
    /// keeps the client's next requests back until the old copies go.
    pub sent: bool,
    /// A read of a moved key asked where the key is instead of pulled
    /// (`Worker::read_where_it_is`): the client's reply slot whose answer
    /// lets the client's next requests go.
    pub read: Option<u64>,
}

/// Where a held request goes once its keys are on their new owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPull {
    /// Routed by its keys, as any request.
    Route,
    /// To its client's transaction connection (see `txn.rs`).
    Txn,
}

/// One key pulled from its old owners to its new ones.
#[derive(Debug)]
pub struct Pull {
    /// The key.
    pub key: Vec<u8>,
    /// The servers it may be on (newest placement first): asked in turn
    /// until one has it.
    pub olds: Vec<usize>,
    /// Which of `olds` is being asked.
    pub at: usize,
    /// Its owners now (more than one in a replicated pool).
    pub news: Vec<usize>,
    /// Copies to the new owners not answered yet.
    pub stores: usize,
    /// Deletes of the old copies not answered yet.
    pub deletes: usize,
    /// A copy failed: the old copies are kept.
    pub store_failed: bool,
    /// Redis: the `DUMP` payload, once read.
    pub dump: Option<Vec<u8>>,
    /// Finished (copied, found absent, or given up).
    pub done: bool,
}

/// Which request of a pull a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPart {
    /// Redis `DUMP key` on the old owner.
    Dump,
    /// Redis `PTTL key` on the old owner (after `Dump`).
    Ttl,
    /// memcached `mg key v f t` on the old owner.
    Get,
    /// The copy on the new owner (`RESTORE`, `ms ... ME`).
    Store,
    /// The delete on the old owner (the pull is done once every old copy's
    /// is answered).
    Delete,
    /// Redis `MIGRATE` on the old owner: it sends the key to the new
    /// owner itself (no `REPLACE`) and drops it.
    Migrate,
}
