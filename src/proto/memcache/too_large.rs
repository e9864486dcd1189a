//! A store refused as too large (over `max_value_size`) still removes the
//! key's old value, as memcached does: when memcached cannot allocate an
//! item for a `set` (text or binary SET/SETQ) or any meta `ms`, it unlinks
//! the old item before answering, so a reader never sees the value the
//! client just tried to replace. The proxy refuses the value before it
//! arrives (it never buffers more than `max_value_size`), so it sends the
//! key's server a delete in the store's place and answers the client
//! memcached's refusal once the delete is done; the value itself is
//! discarded as it comes in.
//!
//! `add`, `replace`, `append`, `prepend` and `cas` leave the old item in
//! memcached, so they are refused without a delete.

use memchr::memchr;

use super::binary::{self, opcode as opc, status, Head, Header, HEADER_LEN};
use super::refused::{Refused, TOO_LARGE};
use super::text_request::{command_line, Tokens};
use super::{text_response, McOp};
use crate::proto::{Parse, Response, ResponseError};

/// Write the delete the server gets in place of the refused store
/// `bytes` (its command line, or its binary header, extras and key).
pub fn write_request(refused: Refused, noreply: bool, bytes: &[u8], out: &mut Vec<u8>) {
    match refused {
        Refused::Text | Refused::Meta => {
            let nl = memchr(b'\n', bytes).unwrap_or(bytes.len());
            let line = command_line(bytes, nl);
            let toks: smallvec::SmallVec<[std::ops::Range<usize>; 8]> = Tokens::new(line).collect();
            let key = toks.get(1).map_or(&b""[..], |r| &line[r.clone()]);
            if refused == Refused::Text {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                if noreply {
                    out.extend_from_slice(b" noreply");
                }
            } else {
                out.extend_from_slice(b"md ");
                out.extend_from_slice(key);
                let b64 = toks.iter().skip(3).any(|r| line[r.start] == b'b');
                if b64 {
                    out.extend_from_slice(b" b");
                }
            }
            out.extend_from_slice(b"\r\n");
        }
        Refused::Bin { opaque, .. } => {
            let Some(h) = Header::decode(bytes) else {
                return;
            };
            let start = HEADER_LEN + h.extras_len;
            let key = bytes.get(start..start + h.key_len).unwrap_or_default();
            let start = out.len();
            binary::write_response(
                out,
                Head {
                    opcode: opc::DELETE,
                    status: 0,
                    opaque,
                    cas: 0,
                },
                &[],
                key,
                &[],
            );
            out[start] = binary::REQ_MAGIC;
        }
    }
}

/// Parse the server's reply to the delete.
pub fn parse_response(refused: Refused, buf: &[u8]) -> Result<Parse<Response>, ResponseError> {
    match refused {
        Refused::Text => text_response::parse_response(buf, McOp::Delete),
        Refused::Meta => super::meta::parse_response(buf),
        Refused::Bin { opaque, .. } => {
            super::binary_response::parse_response(buf, opc::DELETE, opaque)
        }
    }
}

/// The reply the client gets once the delete is answered: memcached's
/// refusal of the store.
pub fn refusal(refused: Refused) -> Vec<u8> {
    match refused {
        Refused::Text | Refused::Meta => TOO_LARGE.to_vec(),
        Refused::Bin { opcode, opaque } => {
            let mut out = Vec::new();
            binary::write_error(&mut out, opcode, opaque, status::TOO_LARGE, "Too large.");
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Limits, Op, Request, RequestError};

    fn limits() -> Limits {
        Limits {
            max_value: 10,
            ..Limits::default()
        }
    }

    fn forwarded(e: RequestError) -> Request {
        assert!(e.reply.is_empty() && !e.close);
        *e.forward.expect("a delete is forwarded")
    }

    #[test]
    fn text_set_deletes_other_stores_do_not() {
        let line = b"set kk 0 0 11\r\n";
        let e = super::super::parse_request(line, &limits()).unwrap_err();
        assert_eq!(e.skip, line.len() + 13);
        let req = forwarded(e);
        assert_eq!(req.len, line.len());
        assert_eq!(&line[req.keys[0].clone()], b"kk");
        let mut out = Vec::new();
        write_request(Refused::Text, false, line, &mut out);
        assert_eq!(out, b"delete kk\r\n");
        out.clear();
        write_request(Refused::Text, true, b"set kk 0 0 11 noreply\r\n", &mut out);
        assert_eq!(out, b"delete kk noreply\r\n");
        let e = super::super::parse_request(b"set kk 0 0 11 noreply\r\n", &limits()).unwrap_err();
        assert!(forwarded(e).noreply);
        for verb in ["add", "replace", "append", "prepend"] {
            let l = format!("{verb} kk 0 0 11\r\n");
            let e = super::super::parse_request(l.as_bytes(), &limits()).unwrap_err();
            assert!(e.forward.is_none());
            assert_eq!(e.reply, TOO_LARGE);
        }
        assert_eq!(refusal(Refused::Text), TOO_LARGE);
    }

    #[test]
    fn meta_set_deletes_with_its_key_encoding() {
        let line = b"ms Zm9v 11 b T0 q\r\n";
        let e = super::super::parse_request(line, &limits()).unwrap_err();
        let req = forwarded(e);
        assert_eq!(req.op, Op::Mc(McOp::TooLarge(Refused::Meta)));
        assert!(!req.noreply);
        let mut out = Vec::new();
        write_request(Refused::Meta, false, line, &mut out);
        assert_eq!(out, b"md Zm9v b\r\n");
    }

    #[test]
    fn binary_set_deletes_with_the_clients_opaque() {
        let mut pkt = Vec::new();
        binary::write_response(
            &mut pkt,
            Head {
                opcode: opc::SETQ,
                status: 0,
                opaque: 77,
                cas: 0,
            },
            &[0; 8],
            b"key",
            &[b'v'; 11],
        );
        pkt[0] = binary::REQ_MAGIC;
        // The key is not there yet: wait for it, not for the value.
        assert_eq!(
            super::super::parse_request(&pkt[..HEADER_LEN + 4], &limits()).unwrap(),
            Parse::Incomplete {
                hint: HEADER_LEN + 8 + 3
            }
        );
        let e = super::super::parse_request(&pkt[..HEADER_LEN + 11], &limits()).unwrap_err();
        assert_eq!(e.skip, pkt.len());
        let req = forwarded(e);
        let refused = Refused::Bin {
            opcode: opc::SETQ,
            opaque: 77,
        };
        assert_eq!(req.op, Op::Mc(McOp::TooLarge(refused)));
        let mut out = Vec::new();
        write_request(refused, false, &pkt[..req.len], &mut out);
        let h = Header::decode(&out).unwrap();
        assert_eq!(
            (out[0], h.opcode, h.opaque),
            (binary::REQ_MAGIC, opc::DELETE, 77)
        );
        assert_eq!(&out[HEADER_LEN..], b"key");
        let r = refusal(refused);
        let h = Header::decode(&r).unwrap();
        assert_eq!(
            (h.opcode, h.status, h.opaque),
            (opc::SETQ, status::TOO_LARGE, 77)
        );
        // ADD is refused without a delete.
        pkt[1] = opc::ADD;
        let e = super::super::parse_request(&pkt[..HEADER_LEN + 11], &limits()).unwrap_err();
        assert!(e.forward.is_none() && !e.reply.is_empty());
    }
}
