//! The merge of a split Redis MGET whose fragment replies are held in
//! spools (one of them was large): the same reply `merge_responses` gives,
//! built chunk by chunk, so no value is ever copied into one contiguous
//! buffer. Each fragment's values are in its keys' order, so the merge
//! reads every fragment once, front to back.

use super::spool::Spool;

/// Longest header line of a value in an MGET reply (`$<len>\r\n`).
const HEADER_MAX: usize = 32;

/// Joins MGET fragment replies into `out`: `*<nkeys>` then each key's value
/// in the client's key order. `frags` pairs each fragment's key indices
/// (ascending) with its reply. `Err(())`: a reply is not an array of as
/// many values as the fragment has keys (the caller answers with the
/// protocol's "unexpected reply" error).
pub(super) fn merge_mget(
    nkeys: usize,
    frags: &mut [(&[usize], Spool)],
    out: &mut Spool,
) -> Result<(), ()> {
    // Which fragment holds each key's value (fragments list their keys in
    // ascending order, so the values are read from each in order).
    let mut owner: Vec<Option<usize>> = vec![None; nkeys];
    let mut line = Vec::with_capacity(HEADER_MAX);
    for (fi, (keys, reply)) in frags.iter_mut().enumerate() {
        if !reply.read_line(&mut line, HEADER_MAX) || count(&line, b'*') != Some(keys.len()) {
            return Err(());
        }
        for &k in keys.iter() {
            *owner.get_mut(k).ok_or(())? = Some(fi);
        }
    }
    out.push(format!("*{nkeys}\r\n").as_bytes());
    for o in owner {
        let Some(fi) = o else {
            out.push(b"$-1\r\n");
            continue;
        };
        let reply = &mut frags[fi].1;
        if !reply.read_line(&mut line, HEADER_MAX) {
            return Err(());
        }
        out.push(&line);
        match line.first() {
            Some(b'$') => {
                if let Some(n) = count(&line, b'$') {
                    if !reply.move_to(out, n + 2) {
                        return Err(());
                    }
                }
            }
            // RESP3 null, or a value a server may send in an MGET reply
            // on one line.
            Some(b'_' | b'+' | b':') => {}
            _ => return Err(()),
        }
    }
    Ok(())
}

/// The count of a `<kind><n>\r\n` line; `None` for a negative count, a
/// malformed line or another kind.
fn count(line: &[u8], kind: u8) -> Option<usize> {
    let digits = line.strip_prefix(&[kind])?.strip_suffix(b"\r\n")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || digits.len() > 19 {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::redis::parse_request;
    use crate::proto::{Limits, Parse};

    fn spool(b: &[u8]) -> Spool {
        let mut s = Spool::default();
        s.push(b);
        s
    }

    fn drained(mut s: Spool) -> Vec<u8> {
        let mut v = Vec::new();
        while !s.is_empty() {
            let n = s.front().len();
            v.extend_from_slice(s.front());
            s.consume(n);
        }
        v
    }

    /// The spooled merge gives exactly the whole-buffer merge's bytes.
    #[test]
    fn same_reply_as_the_buffered_merge() {
        let big = vec![b'x'; 200_000];
        let req_bytes = b"*5\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n";
        let req = match parse_request(req_bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        };
        let mut f0 = b"*2\r\n$200000\r\n".to_vec();
        f0.extend_from_slice(&big);
        f0.extend_from_slice(b"\r\n$-1\r\n");
        let f1: &[u8] = b"*2\r\n$3\r\nbee\r\n_\r\n";
        let (k0, k1): (&[usize], &[usize]) = (&[0, 2], &[1, 3]);
        let mut want = Vec::new();
        crate::proto::redis::merge_responses(req_bytes, &req, &[(k0, &f0), (k1, f1)], &mut want);
        let mut frags = [(k0, spool(&f0)), (k1, spool(f1))];
        let mut out = Spool::default();
        assert_eq!(merge_mget(4, &mut frags, &mut out), Ok(()));
        assert_eq!(drained(out), want);
    }

    #[test]
    fn malformed_fragments_are_refused() {
        let keys: &[usize] = &[0, 1];
        for bad in [
            &b"*3\r\n$1\r\na\r\n$1\r\nb\r\n"[..],
            b"*2\r\n$1\r\na\r\n",
            b"*2\r\n$5\r\na\r\n$1\r\nb\r\n",
            b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"$1\r\na\r\n",
        ] {
            let mut frags = [(keys, spool(bad))];
            let mut out = Spool::default();
            assert_eq!(merge_mget(2, &mut frags, &mut out), Err(()), "{bad:?}");
        }
    }
}
