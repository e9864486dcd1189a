//! The merge of a split MGET whose fragment replies are held in chunks
//! (one of them was large): the same reply [`super::merge_responses`]
//! gives, built chunk by chunk, so no value is ever copied into one
//! contiguous buffer. Each fragment's values are in its keys' order, so
//! the merge reads every fragment once, front to back.

/// A fragment reply that is not an array of as many values as the
/// fragment has keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Bytes held in chunks, read once from the front (the worker's spool).
pub trait Chunks {
    /// Read the next line (up to and including its LF) into `line`, the
    /// line being at most `max` bytes. `false`: no LF within `max` bytes.
    fn read_line(&mut self, line: &mut Vec<u8>, max: usize) -> bool;
    /// Move exactly `n` bytes from the front to the back of `out`;
    /// `false` (and nothing moved) when fewer are held.
    fn move_to(&mut self, out: &mut Self, n: usize) -> bool;
    /// Append `bytes` at the back.
    fn push(&mut self, bytes: &[u8]);
}

/// Longest header line of a value in an MGET reply (`$<len>\r\n`).
const HEADER_MAX: usize = 32;

/// What a client is told when the replies to its split request cannot be
/// merged (a large reply to another command than MGET, or a malformed one).
pub fn unexpected_reply(out: &mut Vec<u8>) {
    super::error_reply("unexpected reply from a server to a split request", out);
}

/// Joins MGET fragment replies into `out`: `*<nkeys>` then each key's value
/// in the client's key order. `frags` pairs each fragment's key indices
/// (ascending) with its reply. `Err(Malformed)`: a reply is not an array of as
/// many values as the fragment has keys (the caller answers with the
/// protocol's "unexpected reply" error).
pub fn merge_mget<C: Chunks>(
    nkeys: usize,
    frags: &mut [(&[usize], C)],
    out: &mut C,
) -> Result<(), Malformed> {
    // Which fragment holds each key's value (fragments list their keys in
    // ascending order, so the values are read from each in order).
    let mut owner: Vec<Option<usize>> = vec![None; nkeys];
    let mut line = Vec::with_capacity(HEADER_MAX);
    for (fi, (keys, reply)) in frags.iter_mut().enumerate() {
        if !reply.read_line(&mut line, HEADER_MAX) || count(&line, b'*') != Some(keys.len()) {
            return Err(Malformed);
        }
        for &k in keys.iter() {
            *owner.get_mut(k).ok_or(Malformed)? = Some(fi);
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
            return Err(Malformed);
        }
        out.push(&line);
        match line.first() {
            Some(b'$') => {
                if let Some(n) = count(&line, b'$') {
                    if !reply.move_to(out, n + 2) {
                        return Err(Malformed);
                    }
                }
            }
            // RESP3 null, or a value a server may send in an MGET reply
            // on one line.
            Some(b'_' | b'+' | b':') => {}
            _ => return Err(Malformed),
        }
    }
    Ok(())
}

/// The count of a `<kind><n>\r\n` line; `None` for a negative count, a
/// malformed line or another kind.
fn count(line: &[u8], kind: u8) -> Option<usize> {
    match super::resp::header(line, kind)? {
        (n, b"") => usize::try_from(n).ok(),
        _ => None,
    }
}

/// The checks every [`Chunks`] holder's merge must pass: run by the tests
/// below over small chunks and by the worker's spool tests over its own.
#[cfg(test)]
pub(crate) mod check {
    use super::{merge_mget, Chunks, Malformed};
    use crate::proto::redis::parse_request;
    use crate::proto::{Limits, Parse};

    fn held<C: Chunks + Default>(b: &[u8]) -> C {
        let mut c = C::default();
        c.push(b);
        c
    }

    /// The chunked merge gives exactly the whole-buffer merge's bytes, with
    /// a value of `big` bytes; `bytes` reads a holder's bytes back.
    pub fn same_reply_as_the_buffered_merge<C: Chunks + Default>(
        big: usize,
        bytes: impl Fn(C) -> Vec<u8>,
    ) {
        let req_bytes = b"*5\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n";
        let Ok(Parse::Done(req)) = parse_request(req_bytes, &Limits::default()) else {
            panic!()
        };
        let mut f0 = format!("*2\r\n${big}\r\n").into_bytes();
        f0.extend(std::iter::repeat_n(b'x', big));
        f0.extend_from_slice(b"\r\n$-1\r\n");
        let f1: &[u8] = b"*2\r\n$3\r\nbee\r\n_\r\n";
        let (k0, k1): (&[usize], &[usize]) = (&[0, 2], &[1, 3]);
        let mut want = Vec::new();
        crate::proto::redis::merge_responses(req_bytes, &req, &[(k0, &f0), (k1, f1)], &mut want);
        let mut frags = [(k0, held::<C>(&f0)), (k1, held(f1))];
        let mut out = C::default();
        assert_eq!(merge_mget(4, &mut frags, &mut out), Ok(()));
        assert_eq!(bytes(out), want);
    }

    /// A fragment reply that is not an array of one value per key is refused.
    pub fn malformed_fragments_are_refused<C: Chunks + Default>() {
        let keys: &[usize] = &[0, 1];
        for bad in [
            &b"*3\r\n$1\r\na\r\n$1\r\nb\r\n"[..],
            b"*2\r\n$1\r\na\r\n",
            b"*2\r\n$5\r\na\r\n$1\r\nb\r\n",
            b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"$1\r\na\r\n",
            b"*-1\r\n",
        ] {
            let mut frags = [(keys, held::<C>(bad))];
            let mut out = C::default();
            assert_eq!(
                merge_mget(2, &mut frags, &mut out),
                Err(Malformed),
                "{bad:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes in chunks of at most 7 (so lines and values cross them).
    #[derive(Default)]
    struct Small(std::collections::VecDeque<Vec<u8>>);

    impl Chunks for Small {
        fn read_line(&mut self, line: &mut Vec<u8>, max: usize) -> bool {
            line.clear();
            while line.len() < max {
                let Some(c) = self.0.front_mut() else {
                    return false;
                };
                let b = c.remove(0);
                if c.is_empty() {
                    self.0.pop_front();
                }
                line.push(b);
                if b == b'\n' {
                    return true;
                }
            }
            false
        }
        fn move_to(&mut self, out: &mut Self, n: usize) -> bool {
            if self.0.iter().map(Vec::len).sum::<usize>() < n {
                return false;
            }
            let mut line = Vec::new();
            for _ in 0..n {
                let c = self.0.front_mut().unwrap();
                line.push(c.remove(0));
                if c.is_empty() {
                    self.0.pop_front();
                }
            }
            out.push(&line);
            true
        }
        fn push(&mut self, bytes: &[u8]) {
            self.0.extend(bytes.chunks(7).map(<[u8]>::to_vec));
        }
    }

    #[test]
    fn same_reply_as_the_buffered_merge() {
        check::same_reply_as_the_buffered_merge::<Small>(1000, |s| {
            s.0.into_iter().flatten().collect()
        });
    }

    #[test]
    fn malformed_fragments_are_refused() {
        check::malformed_fragments_are_refused::<Small>();
        assert_eq!(count(b"*12\r\n", b'*'), Some(12));
        assert_eq!(count(b"$-1\r\n", b'$'), None);
        assert_eq!(count(b"$12\r\n", b'*'), None);
        assert_eq!(count(b"*12\r\nx", b'*'), None);
    }
}
