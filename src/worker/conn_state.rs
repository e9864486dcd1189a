//! State that a client connection carries for one feature, kept apart
//! from the code that drives it: a request held while its moved keys are
//! pulled from their old owners (`migrate.rs`; each pull's steps decided
//! by `Pulls`, `pull.rs`), while the fleet holds it (`fleet_hold.rs`), or
//! while a moved key is read where it is. A client's transaction
//! (`Txn`) is in `transaction.rs` and its subscriptions (`Subs`) in
//! `subscriber.rs`, each with what changes it.

use super::pull::{AfterPull, Pulls};
use crate::proto::Request;

/// A request held back, and the client's next requests behind it.
#[derive(Debug)]
pub struct Gate {
    /// The request (key ranges into `bytes`).
    pub req: Request,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The keys being pulled (none when held for something else).
    pub pulls: Pulls,
    /// Where the request goes once its keys are pulled.
    pub then: AfterPull,
    /// A read of a moved key asked where the key is instead of pulled
    /// (`Worker::read_where_it_is`): the client's reply slot whose answer
    /// lets the client's next requests go.
    pub read: Option<u64>,
}

impl Gate {
    /// `req` held while `pulls` pull its keys over.
    pub fn pulling(req: &Request, bytes: &[u8], pulls: Pulls, then: AfterPull) -> Gate {
        Gate {
            req: req.clone(),
            bytes: bytes.to_vec(),
            pulls,
            then,
            read: None,
        }
    }

    /// `req` held for something else (the fleet's barrier).
    pub fn held(req: &Request, bytes: &[u8], then: AfterPull) -> Gate {
        Gate::pulling(req, bytes, Pulls::default(), then)
    }

    /// `req`, a read of a moved key, sent already: the client's next
    /// requests wait for its answer in reply slot `seq`.
    pub fn reading(req: &Request, seq: u64) -> Gate {
        Gate {
            req: req.clone(),
            bytes: Vec::new(),
            pulls: Pulls::default(),
            then: AfterPull::Route,
            read: Some(seq),
        }
    }
}
