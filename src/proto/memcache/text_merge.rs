//! Splitting multi-key retrievals across servers and joining the replies;
//! joining broadcast replies; error replies for backend failures.

use std::collections::HashMap;
use std::ops::Range;

use super::text_request::Tokens;
use super::text_response::{for_each_value, is_error_line, value_entries};
use super::McOp;
use crate::proto::{Op, Request};

fn mc_op(req: &Request) -> McOp {
    match req.op {
        Op::Mc(op) => op,
        Op::Redis(_) => McOp::Get,
    }
}

/// Write the request a server gets for the subset `key_idx` (indices into
/// `req.keys`, in client order) of the multi-key retrieval `req` whose
/// bytes are `req_bytes`, e.g. `gets k1 k5\r\n` or `gat 100 k2\r\n`.
/// Indices out of range are ignored.
pub fn write_fragment(req_bytes: &[u8], req: &Request, key_idx: &[usize], out: &mut Vec<u8>) {
    let op = mc_op(req);
    out.extend_from_slice(op.name().as_bytes());
    if op.has_exptime_arg() {
        // The expiration time is the token after the command word, before
        // the first key: copied as the client wrote it.
        let head_end = req.keys.first().map_or(0, |k| k.start).min(req_bytes.len());
        let head = &req_bytes[..head_end];
        if let Some(exptime) = Tokens::new(head).nth(1) {
            out.push(b' ');
            out.extend_from_slice(&head[exptime]);
        }
    }
    for &i in key_idx {
        if let Some(key) = req.keys.get(i).and_then(|r| req_bytes.get(r.clone())) {
            out.push(b' ');
            out.extend_from_slice(key);
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// The first line of `reply` including its terminator.
fn first_line(reply: &[u8]) -> &[u8] {
    match memchr::memchr(b'\n', reply) {
        Some(i) => &reply[..=i],
        None => reply,
    }
}

/// Where a client key's value is found, while merging.
#[derive(Clone, Default)]
struct KeySlot {
    /// A fragment carried the key (else it repeats one that was sent).
    sent: bool,
    /// (fragment, entry range in that fragment's reply).
    at: Option<(usize, Range<usize>)>,
}

/// Merge the fragment replies of a multi-key retrieval into one reply in
/// the client's key order: the values in the order of the keys the client
/// asked (misses omitted), then one `END`.
///
/// `frags[i]` is (key indices sent in fragment i, reply bytes of fragment
/// i). A server answers a key repeated in its fragment once per
/// occurrence; a repeated key the data path sent only once is answered
/// with that one value at each of its positions. If a fragment's reply is
/// an error, the merged reply is the first such error line.
pub fn merge_responses(
    req_bytes: &[u8],
    req: &Request,
    frags: &[(&[usize], &[u8])],
    out: &mut Vec<u8>,
) {
    for (_, reply) in frags {
        let line = first_line(reply);
        if is_error_line(line.strip_suffix(b"\r\n").unwrap_or(line)) {
            out.extend_from_slice(line);
            return;
        }
    }
    let key = |i: usize| -> &[u8] {
        req.keys
            .get(i)
            .and_then(|r| req_bytes.get(r.clone()))
            .unwrap_or_default()
    };
    let n = req.keys.len();
    // Per client key: whether a fragment carried it, and its value's
    // (fragment, entry range in that fragment's reply). One list, filled
    // as each reply is walked: this runs for every multi-key get.
    let mut slots: Vec<KeySlot> = vec![KeySlot::default(); n];
    for (f, (idx, reply)) in frags.iter().enumerate() {
        let mut carried = idx.iter().copied().filter(|&k| k < n);
        // memcached answers in request order, skipping misses: each entry
        // belongs to the first key still to match that it names (an entry
        // naming none of them matches nothing, nor does any after it).
        let whole = for_each_value(reply, |e| {
            for k in carried.by_ref() {
                slots[k].sent = true;
                if reply.get(e.key.clone()) == Some(key(k)) {
                    slots[k].at = Some((f, e.entry.clone()));
                    return;
                }
            }
        });
        for k in carried {
            slots[k].sent = true;
        }
        if !whole {
            // A reply that does not parse gives no values.
            for &k in idx.iter().filter(|&&k| k < n) {
                if slots[k].at.as_ref().is_some_and(|(g, _)| *g == f) {
                    slots[k].at = None;
                }
            }
        }
    }
    if slots.iter().any(|s| !s.sent) {
        let mut found: HashMap<&[u8], (usize, Range<usize>)> = HashMap::new();
        for (k, slot) in slots.iter().enumerate() {
            if let Some(s) = &slot.at {
                found.entry(key(k)).or_insert_with(|| s.clone());
            }
        }
        for (k, slot) in slots.iter_mut().enumerate() {
            if !slot.sent {
                slot.at = found.get(key(k)).cloned();
            }
        }
    }
    for (f, range) in slots.into_iter().filter_map(|s| s.at) {
        if let Some(entry) = frags.get(f).and_then(|(_, r)| r.get(range)) {
            out.extend_from_slice(entry);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// The keys of the fragment `key_idx` of the multi-key retrieval `req`
/// that its server's `reply` did not return a value for (indices into
/// `req.keys`, in fragment order), matched as [`merge_responses`] does;
/// `None` when the reply is an error or not a whole retrieval reply, so
/// that nothing is read elsewhere on a reply that cannot be trusted.
pub fn missed_keys(
    req_bytes: &[u8],
    req: &Request,
    key_idx: &[usize],
    reply: &[u8],
) -> Option<Vec<usize>> {
    if !reply.ends_with(b"END\r\n") {
        return None;
    }
    let entries = value_entries(reply);
    let mut next = entries.iter().peekable();
    let mut missed = Vec::new();
    for &k in key_idx {
        let key = req.keys.get(k).and_then(|r| req_bytes.get(r.clone()));
        match next.peek() {
            Some(e) if key.is_some() && reply.get(e.key.clone()) == key => {
                next.next();
            }
            _ => missed.push(k),
        }
    }
    Some(missed)
}

/// Merge the replies of a broadcast (`flush_all`) to every server: `OK` if
/// every server said so (empty replies, from `noreply`, are ignored), else
/// the first line of the first other reply.
pub fn merge_broadcast(replies: &[&[u8]], out: &mut Vec<u8>) {
    match replies.iter().find(|r| !r.is_empty() && **r != b"OK\r\n") {
        Some(r) => out.extend_from_slice(first_line(r)),
        None => out.extend_from_slice(b"OK\r\n"),
    }
}

/// Error reply for a backend failure, as twemproxy writes it:
/// `SERVER_ERROR <strerror text>\r\n` (e.g. "Connection refused"). Line
/// breaks in `msg` are replaced so the reply stays one line.
pub fn server_error(msg: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend(
        msg.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::memcache::parse_request;
    use crate::proto::{Limits, Parse};

    fn req(b: &[u8]) -> Request {
        match parse_request(b, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missed_keys_of_a_fragment() {
        let b = b"get a b c d\r\n";
        let r = req(b);
        let reply = b"VALUE b 0 1\r\nx\r\nVALUE d 5 2\r\nyz\r\nEND\r\n";
        assert_eq!(missed_keys(b, &r, &[0, 1, 3], reply), Some(vec![0]));
        assert_eq!(missed_keys(b, &r, &[2], b"END\r\n"), Some(vec![2]));
        assert_eq!(
            missed_keys(b, &r, &[2], b"SERVER_ERROR out of memory\r\n"),
            None
        );
    }

    #[test]
    fn fragments() {
        let b = b"gat  -5 k1 k2 k3\r\n";
        let r = req(b);
        let mut out = Vec::new();
        write_fragment(b, &r, &[0, 2], &mut out);
        assert_eq!(out, b"gat -5 k1 k3\r\n");
        let b = b"gets a b c\n";
        let r = req(b);
        out.clear();
        write_fragment(b, &r, &[1], &mut out);
        assert_eq!(out, b"gets b\r\n");
    }

    #[test]
    fn merge_in_client_order() {
        let b = b"get a b c a d\r\n";
        let r = req(b);
        // server 1 got a, c, a (indices 0, 2, 3); server 2 got b, d.
        let f1: &[u8] = b"VALUE a 0 1\r\n1\r\nVALUE a 0 1\r\n1\r\nEND\r\n";
        let f2: &[u8] = b"VALUE b 0 1\r\n2\r\nVALUE d 3 1\r\n4\r\nEND\r\n";
        let mut out = Vec::new();
        merge_responses(b, &r, &[(&[0, 2, 3], f1), (&[1, 4], f2)], &mut out);
        assert_eq!(
            out,
            b"VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nVALUE a 0 1\r\n1\r\nVALUE d 3 1\r\n4\r\nEND\r\n"
        );
        // The repeated key sent once.
        out.clear();
        let f1: &[u8] = b"VALUE a 0 1\r\n1\r\nEND\r\n";
        merge_responses(b, &r, &[(&[0, 2], f1), (&[1, 4], f2)], &mut out);
        assert_eq!(
            out,
            b"VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nVALUE a 0 1\r\n1\r\nVALUE d 3 1\r\n4\r\nEND\r\n"
        );
        out.clear();
        merge_responses(
            b,
            &r,
            &[
                (&[0, 2, 3], b"END\r\n"),
                (&[1, 4], b"SERVER_ERROR boom\r\n"),
            ],
            &mut out,
        );
        assert_eq!(out, b"SERVER_ERROR boom\r\n");
    }

    /// The merge as first written (entries listed per fragment, then
    /// matched): what the one-pass merge must agree with.
    fn merge_listed(req_bytes: &[u8], req: &Request, frags: &[(&[usize], &[u8])]) -> Vec<u8> {
        let key = |i: usize| &req_bytes[req.keys[i].clone()];
        let n = req.keys.len();
        let mut slots: Vec<Option<(usize, Range<usize>)>> = vec![None; n];
        let mut sent = vec![false; n];
        for (f, (idx, reply)) in frags.iter().enumerate() {
            let entries = value_entries(reply);
            let mut next = entries.iter().peekable();
            for &k in idx.iter().filter(|&&k| k < n) {
                sent[k] = true;
                if let Some(e) = next.peek() {
                    if &reply[e.key.clone()] == key(k) {
                        slots[k] = Some((f, e.entry.clone()));
                        next.next();
                    }
                }
            }
        }
        for k in 0..n {
            if !sent[k] {
                slots[k] = (0..n)
                    .find(|&j| slots[j].is_some() && key(j) == key(k))
                    .and_then(|j| slots[j].clone());
            }
        }
        let mut out = Vec::new();
        for (f, r) in slots.into_iter().flatten() {
            out.extend_from_slice(&frags[f].1[r]);
        }
        out.extend_from_slice(b"END\r\n");
        out
    }

    #[test]
    fn one_pass_merge_agrees_with_the_listed_one() {
        // Keys a..d, some repeated; two servers by key; each key a hit or
        // a miss by a bit of `mask`; some fragments carry a repeat once,
        // some answer out of order or with junk.
        let b = b"get a b c a d b e\r\n";
        let r = req(b);
        let names = ["a", "b", "c", "a", "d", "b", "e"];
        let value = |k: &str| format!("VALUE {k} 0 1\r\n{k}\r\n");
        for mask in 0u32..128 {
            for variant in 0..4 {
                let (mut s1, mut s2) = (Vec::new(), Vec::new());
                for (i, k) in names.iter().enumerate() {
                    // Variant 1: a repeated key sent only once.
                    if variant == 1 && names[..i].contains(k) {
                        continue;
                    }
                    if matches!(*k, "a" | "c" | "e") {
                        s1.push(i);
                    } else {
                        s2.push(i);
                    }
                }
                let reply = |idx: &[usize]| {
                    let mut out = String::new();
                    let mut hits: Vec<&str> = idx
                        .iter()
                        .filter(|&&i| mask & (1 << i) != 0)
                        .map(|&i| names[i])
                        .collect();
                    if variant == 2 {
                        hits.reverse();
                    }
                    for k in hits {
                        out += &value(k);
                    }
                    if variant == 3 && mask % 3 == 0 {
                        out += "VALUE z 0 x\r\n";
                    }
                    out + "END\r\n"
                };
                let (r1, r2) = (reply(&s1), reply(&s2));
                let frags: [(&[usize], &[u8]); 2] = [(&s1, r1.as_bytes()), (&s2, r2.as_bytes())];
                let mut out = Vec::new();
                merge_responses(b, &r, &frags, &mut out);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&merge_listed(b, &r, &frags)),
                    "mask {mask} variant {variant}"
                );
            }
        }
    }

    #[test]
    fn broadcast_and_errors() {
        let mut out = Vec::new();
        merge_broadcast(&[b"OK\r\n", b"OK\r\n"], &mut out);
        assert_eq!(out, b"OK\r\n");
        out.clear();
        merge_broadcast(&[b"OK\r\n", b"SERVER_ERROR x\r\n", b"ERROR\r\n"], &mut out);
        assert_eq!(out, b"SERVER_ERROR x\r\n");
        out.clear();
        server_error("Connection refused", &mut out);
        assert_eq!(out, b"SERVER_ERROR Connection refused\r\n");
    }
}
