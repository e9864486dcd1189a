//! The master ↔ worker channel: one socketpair per worker carrying small
//! typed messages, each framed as a 4-byte length then the payload, the
//! length checked before anything is buffered.

use crate::config::runtime::Param;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

/// Largest message accepted.
pub const MAX_MESSAGE: usize = 4096;

/// A command or reply on the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Stop now.
    Stop,
    /// Stop accepting, finish in-flight requests, exit.
    Graceful,
    /// Reopen log files.
    ReopenLogs,
    /// Set a runtime parameter (validated by the master).
    Set(Param),
    /// Worker's answer to `Set`: empty when applied, else the error.
    Ack(String),
    /// Hand every client to the workers listening on this handover
    /// socket name, then exit.
    Handover(String),
    /// Worker's answer to `Handover`: it reads no more requests.
    Stopped,
    /// A new worker runs its event loop (the generation it replaces may
    /// hand its clients over).
    Ready,
}

impl Message {
    fn encode(&self) -> Vec<u8> {
        let body = match self {
            Message::Stop => "stop".to_string(),
            Message::Graceful => "graceful".to_string(),
            Message::ReopenLogs => "reopen".to_string(),
            Message::Set(p) => format!("set {}", p.encode()),
            Message::Ack(e) => format!("ack {e}"),
            Message::Handover(to) => format!("handover {to}"),
            Message::Stopped => "stopped".to_string(),
            Message::Ready => "ready".to_string(),
        };
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body.as_bytes());
        out
    }

    fn decode(body: &[u8]) -> Option<Message> {
        let s = std::str::from_utf8(body).ok()?;
        let (cmd, rest) = s.split_once(' ').unwrap_or((s, ""));
        Some(match cmd {
            "stop" => Message::Stop,
            "graceful" => Message::Graceful,
            "reopen" => Message::ReopenLogs,
            "set" => Message::Set(Param::decode(rest)?),
            "ack" => Message::Ack(rest.to_string()),
            "handover" if !rest.is_empty() => Message::Handover(rest.to_string()),
            "stopped" => Message::Stopped,
            "ready" => Message::Ready,
            _ => return None,
        })
    }
}

/// One end of a channel, non-blocking.
pub struct Channel {
    sock: UnixStream,
    inbuf: Vec<u8>,
}

impl Channel {
    /// A connected pair (master end, worker end).
    pub fn pair() -> io::Result<(Channel, Channel)> {
        let (a, b) = UnixStream::pair()?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        Ok((
            Channel {
                sock: a,
                inbuf: Vec::new(),
            },
            Channel {
                sock: b,
                inbuf: Vec::new(),
            },
        ))
    }

    /// Send one message (small: fits the socket buffer; a full buffer means
    /// the peer is stuck and the message is dropped with an error).
    pub fn send(&mut self, m: &Message) -> io::Result<()> {
        self.sock.write_all(&m.encode())
    }

    /// Read every complete message available. `Err` on EOF or a bad frame.
    pub fn recv(&mut self) -> io::Result<Vec<Message>> {
        let mut buf = [0u8; 1024];
        loop {
            match self.sock.read(&mut buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "channel closed",
                    ))
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let mut out = Vec::new();
        loop {
            if self.inbuf.len() < 4 {
                break;
            }
            let len =
                u32::from_be_bytes([self.inbuf[0], self.inbuf[1], self.inbuf[2], self.inbuf[3]])
                    as usize;
            if len > MAX_MESSAGE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "oversized channel message",
                ));
            }
            if self.inbuf.len() < 4 + len {
                break;
            }
            let m = Message::decode(&self.inbuf[4..4 + len])
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad channel message"))?;
            self.inbuf.drain(..4 + len);
            out.push(m);
        }
        Ok(out)
    }

    /// The descriptor (for polling).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let (mut a, mut b) = Channel::pair().unwrap();
        a.send(&Message::Set(Param::LogLevel(7))).unwrap();
        a.send(&Message::Set(Param::PoolTimeout {
            pool: "a b".into(),
            ms: 5,
        }))
        .unwrap();
        a.send(&Message::Graceful).unwrap();
        a.send(&Message::Handover("walnut-handover-42".into()))
            .unwrap();
        b.send(&Message::Stopped).unwrap();
        let got = b.recv().unwrap();
        assert_eq!(
            got,
            vec![
                Message::Set(Param::LogLevel(7)),
                Message::Set(Param::PoolTimeout {
                    pool: "a b".into(),
                    ms: 5
                }),
                Message::Graceful,
                Message::Handover("walnut-handover-42".into()),
            ]
        );
        assert_eq!(a.recv().unwrap(), vec![Message::Stopped]);
        drop(a);
        assert!(b.recv().is_err());
    }

    #[test]
    fn unknown_parameter_text_rejected() {
        let (a, mut b) = Channel::pair().unwrap();
        let body = b"set log_level x";
        (&a.sock)
            .write_all(&(body.len() as u32).to_be_bytes())
            .unwrap();
        (&a.sock).write_all(body).unwrap();
        assert!(b.recv().is_err());
    }

    #[test]
    fn oversized_frame_rejected() {
        let (a, mut b) = Channel::pair().unwrap();
        (&a.sock).write_all(&(1u32 << 30).to_be_bytes()).unwrap();
        assert!(b.recv().is_err());
    }
}
