//! What a multi-key request becomes in its pool, as one value the worker
//! carries out (`PoolRt::split_send`): its keys grouped by server (by
//! slot in a cluster pool), then refused, sent whole as a single-key
//! request, or sent in fragments; no server is the pool's error.

use super::key_groups::Split;
use super::pool::PoolRt;
use super::send_plan::{NotSent, SendPlan};
use crate::proto::Request;
use std::time::Instant;

impl PoolRt {
    /// How a multi-key request of client `client_id` goes out: `None`
    /// when its keys are on one server and it goes whole, as a
    /// single-key request does; else its plan (`split_plan`: a fragment
    /// per server), or why it is not sent (no server; refused, as only
    /// one server can promise what its command does and its keys live on
    /// several).
    pub(super) fn split_send(
        &mut self,
        client_id: u64,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<Result<SendPlan, NotSent>> {
        let groups = if self.cluster.is_some() {
            self.slot_groups(client_id, req, bytes)
        } else {
            let Some(groups) = self.server_groups(req, bytes, now) else {
                return Some(Err(NotSent::NoServer));
            };
            groups
        };
        match self.split(req, groups.len()) {
            Split::Refused(out) => Some(Err(NotSent::Answered(out))),
            Split::Whole => None,
            Split::Fragments => Some(Ok(PoolRt::split_plan(req, bytes, groups))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::pool::tests::{parse, pool};

    /// A Redis request of these arguments, with its bytes.
    fn redis(p: &PoolRt, args: &[&str]) -> (Request, Vec<u8>) {
        let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            bytes.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        (parse(p, &bytes), bytes)
    }

    const TWO: &str = "r:\n  listen: 127.0.0.1:22980\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1 a\n   - 127.0.0.1:6380:1 b\n";

    /// Two keys of `p` that live on different servers.
    fn apart(p: &mut PoolRt) -> (String, String) {
        let now = Instant::now();
        let first = p.server_for(b"k0", now);
        let other = (1..100)
            .map(|i| format!("k{i}"))
            .find(|k| p.server_for(k.as_bytes(), now) != first)
            .expect("a key on the other server");
        ("k0".into(), other)
    }

    #[test]
    fn keys_on_several_servers_go_in_a_fragment_each() {
        let mut p = pool(TWO);
        let (a, b) = apart(&mut p);
        let (req, bytes) = redis(&p, &["MGET", &a, &b, &a]);
        let Some(Ok(plan)) = p.split_send(1, &req, &bytes, Instant::now()) else {
            panic!("a split");
        };
        assert_eq!(plan.to.len(), 2, "one fragment per server");
        assert_eq!(plan.frag, Some(0));
        assert_eq!(
            plan.to[0].1,
            vec![0, 2],
            "the first server's keys, in order"
        );
    }

    #[test]
    fn keys_on_one_server_go_whole() {
        let mut p = pool(TWO);
        let (a, _) = apart(&mut p);
        let (req, bytes) = redis(&p, &["MGET", &a, &a]);
        assert!(p.split_send(1, &req, &bytes, Instant::now()).is_none());
    }

    #[test]
    fn a_one_server_command_over_several_is_refused() {
        let mut p = pool(TWO);
        let (a, b) = apart(&mut p);
        let (req, bytes) = redis(&p, &["MSETNX", &a, "1", &b, "2"]);
        let sent = p.split_send(1, &req, &bytes, Instant::now());
        assert!(
            matches!(&sent, Some(Err(NotSent::Answered(out))) if out.starts_with(b"-")),
            "{sent:?}"
        );
    }

    #[test]
    fn no_server_for_a_key_is_the_pools_error() {
        let mut p = pool(TWO);
        let now = Instant::now();
        for s in &mut p.servers {
            s.ejected_until = Some(now + std::time::Duration::from_secs(60));
        }
        p.rebuild(now);
        let (req, bytes) = redis(&p, &["MGET", "a", "b"]);
        assert!(matches!(
            p.split_send(1, &req, &bytes, now),
            Some(Err(NotSent::NoServer))
        ));
    }

    #[test]
    fn a_cluster_pool_groups_by_slot() {
        let mut p = pool(
            "c:\n  listen: 127.0.0.1:22981\n  redis: true\n  redis_cluster: true\n  servers:\n   - 127.0.0.1:7000:1\n",
        );
        // Different slots: a fragment each, even on one node.
        let (req, bytes) = redis(&p, &["MGET", "a", "b"]);
        let Some(Ok(plan)) = p.split_send(1, &req, &bytes, Instant::now()) else {
            panic!("a split");
        };
        assert_eq!(plan.to.len(), 2);
        // One slot (a hash tag): whole.
        let (req, bytes) = redis(&p, &["MGET", "{t}a", "{t}b"]);
        assert!(p.split_send(1, &req, &bytes, Instant::now()).is_none());
    }
}
