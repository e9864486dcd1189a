//! Multi-key requests (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH): per-server
//! fragments and the merge of their replies in the client's key order.

use super::args::{Arg, Args};
use super::commands::CmdClass;
use super::reply;
use super::resp::{parse_int, scan_value, Scan};
use crate::proto::{Op, Request};
use std::ops::Range;

fn class_of(req: &Request) -> Option<CmdClass> {
    match req.op {
        Op::Redis(op) => Some(op.class),
        Op::Mc(_) => None,
    }
}

fn name_of(req: &Request) -> &'static str {
    match req.op {
        Op::Redis(op) => op.cmd.name(),
        Op::Mc(_) => "",
    }
}

/// Writes the request one server gets for the keys `key_idx` (indices into
/// `req.keys`, in client order), e.g. `*3\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$2\r\nk5\r\n`.
/// MSET fragments carry each key's value. A request that is not split is
/// written unchanged.
pub fn write_fragment(req_bytes: &[u8], req: &Request, key_idx: &[usize], out: &mut Vec<u8>) {
    let class = class_of(req);
    let per_key = match class {
        Some(CmdClass::MGet | CmdClass::SumInt) => 1,
        Some(CmdClass::MSet) => 2,
        _ => {
            out.extend_from_slice(req_bytes);
            return;
        }
    };
    let key = |i: usize| {
        req.keys
            .get(i)
            .and_then(|r| req_bytes.get(r.clone()))
            .unwrap_or_default()
    };
    reply::array(1 + per_key * key_idx.len(), out);
    reply::bulk(name_of(req).as_bytes(), out);
    if per_key == 1 {
        for &i in key_idx {
            reply::bulk(key(i), out);
        }
        return;
    }
    // MSET: argument 2i+2 is the value of key i.
    let args = Args::new(req_bytes);
    let values: Vec<Arg> = args.skip(2).step_by(2).collect();
    let args = Args::new(req_bytes);
    let mut v = Vec::new();
    for &i in key_idx {
        reply::bulk(key(i), out);
        v.clear();
        if let Some(arg) = values.get(i) {
            args.value(arg, &mut v);
        }
        reply::bulk(&v, out);
    }
}

/// A fragment reply that cannot be merged.
fn bad_fragment(out: &mut Vec<u8>) {
    reply::error_reply("unexpected reply from a server to a split request", out);
}

/// The span of the single reply value at the start of `frag`.
fn whole(frag: &[u8]) -> Option<Range<usize>> {
    match scan_value(frag, 0) {
        Ok(Scan::End(end)) => Some(0..end),
        _ => None,
    }
}

/// Joins the fragments' replies into the client's reply. `frags` pairs each
/// fragment's key indices (as given to [`write_fragment`]) with that
/// server's reply bytes. MGET: one array in the client's key order, each
/// value (nil included) in its place; DEL, UNLINK, EXISTS, TOUCH: the sum of
/// the integers; MSET: `+OK`. The first error reply of a fragment is the
/// reply.
pub fn merge_responses(
    req_bytes: &[u8],
    req: &Request,
    frags: &[(&[usize], &[u8])],
    out: &mut Vec<u8>,
) {
    for (_, f) in frags {
        if matches!(f.first(), Some(b'-' | b'!')) {
            match whole(f) {
                Some(r) => out.extend_from_slice(&f[r]),
                None => bad_fragment(out),
            }
            return;
        }
    }
    match class_of(req) {
        Some(CmdClass::MGet) => merge_mget(req.keys.len(), frags, out),
        Some(CmdClass::SumInt) => {
            let mut sum: i64 = 0;
            for (_, f) in frags {
                let n = f
                    .strip_prefix(b":")
                    .and_then(|l| l.strip_suffix(b"\r\n"))
                    .and_then(parse_int);
                match n {
                    Some(n) => sum = sum.saturating_add(n),
                    None => return bad_fragment(out),
                }
            }
            reply::integer(sum, out);
        }
        Some(CmdClass::MSet) => {
            if frags.iter().all(|(_, f)| *f == b"+OK\r\n") {
                out.extend_from_slice(b"+OK\r\n");
            } else {
                bad_fragment(out);
            }
        }
        _ => match frags.first() {
            Some((_, f)) => out.extend_from_slice(f),
            None => {
                let _ = req_bytes;
                bad_fragment(out)
            }
        },
    }
}

/// The keys of the MGET fragment `key_idx` its server's `reply` holds a
/// nil for (in fragment order); `None` when the reply is not an array of
/// one value per key (an error), so that nothing is read elsewhere on a
/// reply that cannot be trusted.
pub fn mget_missed(key_idx: &[usize], reply: &[u8]) -> Option<Vec<usize>> {
    let nl = memchr::memchr(b'\n', reply)?;
    let count = reply
        .strip_prefix(b"*")
        .and_then(|h| h.get(..nl.checked_sub(2)?))
        .and_then(parse_int)?;
    if count != i64::try_from(key_idx.len()).ok()? {
        return None;
    }
    let mut pos = nl + 1;
    let mut missed = Vec::new();
    for &k in key_idx {
        let Ok(Scan::End(end)) = scan_value(reply, pos) else {
            return None;
        };
        if matches!(&reply[pos..end], b"$-1\r\n" | b"_\r\n") {
            missed.push(k);
        }
        pos = end;
    }
    (pos == reply.len()).then_some(missed)
}

/// An MGET reply without its nils (`mget_missed` said it parses): the
/// reply of a fragment whose missed keys were moved to other fragments.
pub fn mget_hits(reply: &[u8]) -> Vec<u8> {
    let mut values = Vec::new();
    let mut n = 0usize;
    let mut pos = memchr::memchr(b'\n', reply).map_or(reply.len(), |i| i + 1);
    while let Ok(Scan::End(end)) = scan_value(reply, pos) {
        if !matches!(&reply[pos..end], b"$-1\r\n" | b"_\r\n") {
            values.extend_from_slice(&reply[pos..end]);
            n += 1;
        }
        pos = end;
    }
    let mut out = Vec::with_capacity(values.len() + 16);
    reply::array(n, &mut out);
    out.extend_from_slice(&values);
    out
}

fn merge_mget(nkeys: usize, frags: &[(&[usize], &[u8])], out: &mut Vec<u8>) {
    // (fragment, value span) of each key.
    let mut slots: Vec<Option<(usize, Range<usize>)>> = vec![None; nkeys];
    for (fi, (idx, f)) in frags.iter().enumerate() {
        let Some(nl) = memchr::memchr(b'\n', f) else {
            return bad_fragment(out);
        };
        let count = f
            .strip_prefix(b"*")
            .and_then(|h| h.get(..nl.saturating_sub(2)))
            .and_then(parse_int);
        if count != i64::try_from(idx.len()).ok() || nl < 2 {
            return bad_fragment(out);
        }
        let mut pos = nl + 1;
        for &k in idx.iter() {
            let end = match scan_value(f, pos) {
                Ok(Scan::End(end)) => end,
                _ => return bad_fragment(out),
            };
            match slots.get_mut(k) {
                Some(slot) => *slot = Some((fi, pos..end)),
                None => return bad_fragment(out),
            }
            pos = end;
        }
    }
    reply::array(nkeys, out);
    for slot in &slots {
        match slot {
            Some((fi, r)) => out.extend_from_slice(&frags[*fi].1[r.clone()]),
            None => out.extend_from_slice(b"$-1\r\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::redis::parse_request;
    use crate::proto::{Limits, Parse};

    fn req(b: &[u8]) -> Request {
        match parse_request(b, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mget_misses_moved_to_another_fragment() {
        let a: &[u8] = b"*3\r\n$1\r\na\r\n$-1\r\n_\r\n";
        assert_eq!(mget_missed(&[0, 2, 3], a), Some(vec![2, 3]));
        assert_eq!(mget_hits(a), b"*1\r\n$1\r\na\r\n");
        assert_eq!(mget_missed(&[0, 2], a), None, "a count that does not match");
        assert_eq!(mget_missed(&[0], b"-ERR x\r\n"), None);
        // The merge: each key from the fragment that carries it.
        let b = b"*4\r\n$4\r\nmget\r\n$2\r\nk1\r\n$2\r\nk2\r\n$2\r\nk3\r\n";
        let r = req(b);
        let hits = mget_hits(b"*3\r\n$-1\r\n$1\r\nb\r\n$-1\r\n");
        let mut o = Vec::new();
        let warm: &[u8] = b"*2\r\n$1\r\na\r\n$-1\r\n";
        merge_responses(b, &r, &[(&[1], &hits), (&[0, 2], warm)], &mut o);
        assert_eq!(o, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
    }

    #[test]
    fn mget_fragments_and_merge() {
        let b = b"*4\r\n$4\r\nmget\r\n$2\r\nk1\r\n$2\r\nk2\r\n$2\r\nk3\r\n";
        let r = req(b);
        let mut o = Vec::new();
        write_fragment(b, &r, &[0, 2], &mut o);
        assert_eq!(o, b"*3\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$2\r\nk3\r\n");
        o.clear();
        let a: &[u8] = b"*2\r\n$1\r\na\r\n$-1\r\n";
        let c: &[u8] = b"*1\r\n$1\r\nb\r\n";
        merge_responses(b, &r, &[(&[0, 2], a), (&[1], c)], &mut o);
        assert_eq!(o, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
    }

    #[test]
    fn mset_fragment_carries_values() {
        let b = b"MSET k1 v1 k2 \"v 2\"\r\n";
        let r = req(b);
        let mut o = Vec::new();
        write_fragment(b, &r, &[1], &mut o);
        assert_eq!(o, b"*3\r\n$4\r\nMSET\r\n$2\r\nk2\r\n$3\r\nv 2\r\n");
        o.clear();
        merge_responses(b, &r, &[(&[0], b"+OK\r\n"), (&[1], b"+OK\r\n")], &mut o);
        assert_eq!(o, b"+OK\r\n");
    }

    #[test]
    fn sums_and_errors() {
        let b = b"*4\r\n$3\r\nDEL\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";
        let r = req(b);
        let mut o = Vec::new();
        merge_responses(b, &r, &[(&[0, 2], b":2\r\n"), (&[1], b":1\r\n")], &mut o);
        assert_eq!(o, b":3\r\n");
        o.clear();
        merge_responses(
            b,
            &r,
            &[(&[0, 2], b":2\r\n"), (&[1], b"-ERR x\r\n")],
            &mut o,
        );
        assert_eq!(o, b"-ERR x\r\n");
    }
}
