//! State that a client connection carries for one feature, kept apart
//! from the code that drives it: a request held while its moved keys are
//! pulled from their old owners (`migrate.rs`; each pull's steps decided
//! by `Pulls`, `pull.rs`) or while the fleet holds it (`fleet_hold.rs`).
//! (A read of a moved key holds the client's next requests with a flag
//! of its own, `Client::hold_for_read`.) A client's transaction
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
}

impl Gate {
    /// `req` held while `pulls` pull its keys over.
    pub fn pulling(req: &Request, bytes: &[u8], pulls: Pulls, then: AfterPull) -> Gate {
        Gate {
            req: req.clone(),
            bytes: bytes.to_vec(),
            pulls,
            then,
        }
    }

    /// `req` held for something else (the fleet's barrier).
    pub fn held(req: &Request, bytes: &[u8], then: AfterPull) -> Gate {
        Gate::pulling(req, bytes, Pulls::default(), then)
    }
}
