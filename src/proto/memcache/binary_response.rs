//! memcached binary protocol replies from a server: framing, error
//! classification, broadcast merging and the proxy's own error replies.

use super::binary::{loud, opcode as opc, status, write_error, Header, HEADER_LEN, RES_MAGIC};
use crate::proto::{Parse, Response, ResponseError};

/// Statuses that are ordinary outcomes rather than errors.
fn is_outcome(st: u16) -> bool {
    matches!(
        st,
        status::SUCCESS | status::KEY_NOT_FOUND | status::KEY_EXISTS | status::NOT_STORED
    )
}

/// Parse one binary reply to a request whose client opcode is `opcode` and
/// opaque `opaque`. The server got the non-quiet form of the opcode, so
/// its reply must carry that opcode and the opaque; anything else means the
/// stream is out of step and the connection is closed.
pub fn parse_response(
    buf: &[u8],
    opcode: u8,
    opaque: u32,
) -> Result<Parse<Response>, ResponseError> {
    let Some(h) = Header::decode(buf) else {
        if buf.first().is_some_and(|&b| b != RES_MAGIC) {
            return Err(ResponseError("bad magic in memcached binary reply".into()));
        }
        return Ok(Parse::Incomplete { hint: HEADER_LEN });
    };
    if h.magic != RES_MAGIC {
        return Err(ResponseError("bad magic in memcached binary reply".into()));
    }
    let sent = loud(opcode).unwrap_or(opcode);
    if h.opcode != sent || h.opaque != opaque {
        return Err(ResponseError(format!(
            "memcached binary reply out of step: opcode {:#04x} opaque {} for {:#04x} opaque {}",
            h.opcode, h.opaque, sent, opaque
        )));
    }
    if h.extras_len + h.key_len > h.body_len {
        return Err(ResponseError(
            "memcached binary reply lengths inconsistent".into(),
        ));
    }
    let total = HEADER_LEN.saturating_add(h.body_len);
    if buf.len() < total {
        return Ok(Parse::Incomplete { hint: total });
    }
    Ok(Parse::Done(Response {
        len: total,
        is_error: !is_outcome(h.status),
        values: 0,
    }))
}

/// Merge the replies of a broadcast (FLUSH): the first failure, else the
/// first reply.
pub fn merge_broadcast(replies: &[&[u8]], out: &mut Vec<u8>) {
    let failed = replies
        .iter()
        .find(|r| Header::decode(r).is_some_and(|h| h.status != status::SUCCESS));
    if let Some(r) = failed.or_else(|| replies.first()) {
        out.extend_from_slice(r);
    }
}

/// The reply for a request the proxy could not get served (backend down,
/// timed out, ...): status 0x0086 "temporary failure" with the failure
/// text as value, the client's opcode and opaque. libmemcached maps it to
/// a server-side temporary failure, as it does for twemproxy's text
/// `SERVER_ERROR`.
pub fn error_reply(opcode: u8, opaque: u32, msg: &str, out: &mut Vec<u8>) {
    write_error(out, opcode, opaque, status::TEMPORARY_FAILURE, msg);
}

/// Whether `opcode` is one of the binary opcodes answering with a value
/// (used in tests and by the fuzz targets to build replies).
pub fn is_retrieval(opcode: u8) -> bool {
    matches!(
        loud(opcode).unwrap_or(opcode),
        opc::GET | opc::GETK | opc::GAT | opc::GATK
    )
}

#[cfg(test)]
mod tests {
    use super::super::binary::{write_response, Head};
    use super::*;

    #[test]
    fn frames_and_checks() {
        let mut r = Vec::new();
        write_response(
            &mut r,
            Head {
                opcode: opc::GETK,
                status: 0,
                opaque: 5,
                cas: 1,
            },
            &[0; 4],
            b"key",
            b"value",
        );
        assert_eq!(
            parse_response(&r, opc::GETKQ, 5).unwrap(),
            Parse::Done(Response {
                len: r.len(),
                is_error: false,
                values: 0,
            })
        );
        for cut in 0..r.len() {
            assert!(matches!(
                parse_response(&r[..cut], opc::GETKQ, 5),
                Ok(Parse::Incomplete { .. })
            ));
        }
        assert!(parse_response(&r, opc::GET, 5).is_err());
        assert!(parse_response(&r, opc::GETK, 6).is_err());
        assert!(parse_response(b"VALUE", opc::GETK, 6).is_err());
        let mut e = Vec::new();
        error_reply(opc::SET, 9, "Connection refused", &mut e);
        assert_eq!(
            parse_response(&e, opc::SET, 9).unwrap(),
            Parse::Done(Response {
                len: e.len(),
                is_error: true,
                values: 0,
            })
        );
    }

    #[test]
    fn broadcast_prefers_failures() {
        let mut ok = Vec::new();
        write_response(
            &mut ok,
            Head {
                opcode: opc::FLUSH,
                status: 0,
                opaque: 1,
                cas: 0,
            },
            &[],
            &[],
            &[],
        );
        let mut bad = Vec::new();
        error_reply(opc::FLUSH, 1, "down", &mut bad);
        let mut out = Vec::new();
        merge_broadcast(&[&ok, &bad], &mut out);
        assert_eq!(out, bad);
        out.clear();
        merge_broadcast(&[&ok, &ok], &mut out);
        assert_eq!(out, ok);
    }
}
