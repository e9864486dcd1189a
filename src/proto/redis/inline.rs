//! Inline commands (`GET foo\r\n`), split into arguments with the same
//! rules as redis-server: blanks separate arguments, double quotes allow
//! `\n`, `\xHH`-style escapes, single quotes allow `\'`, and a closing quote
//! must be followed by a blank or the end of the line.

use std::ops::Range;

/// One argument of an inline command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// The argument's bytes: the text between the quotes for a quoted
    /// argument without escapes, else the raw text as typed.
    pub range: Range<usize>,
    /// `range` holds exactly the argument's value (no escape or quote to
    /// interpret).
    pub exact: bool,
}

/// The inline line contains a quote that is not closed, or a closing quote
/// followed by something other than a blank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unbalanced;

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Splits arguments off `buf[..end]` starting at `pos`. A NUL byte ends the
/// line as it does in redis-server.
#[derive(Debug, Clone)]
pub(crate) struct Tokens<'a> {
    buf: &'a [u8],
    end: usize,
    pos: usize,
}

impl<'a> Tokens<'a> {
    /// Tokens of `buf[start..end]`.
    pub fn new(buf: &'a [u8], start: usize, end: usize) -> Self {
        Tokens {
            buf,
            end: end.min(buf.len()),
            pos: start,
        }
    }

    fn at(&self, i: usize) -> u8 {
        if i < self.end {
            self.buf[i]
        } else {
            0
        }
    }

    /// The next argument, `None` at the end of the line.
    pub fn next_token(&mut self) -> Result<Option<Token>, Unbalanced> {
        let mut p = self.pos;
        while self.at(p) != 0 && is_space(self.at(p)) {
            p += 1;
        }
        if self.at(p) == 0 {
            self.pos = p;
            return Ok(None);
        }
        let start = p;
        let mut exact = true;
        let (mut inq, mut insq) = (false, false);
        let token_end;
        loop {
            let c = self.at(p);
            if inq {
                if c == b'\\'
                    && self.at(p + 1) == b'x'
                    && self.at(p + 2).is_ascii_hexdigit()
                    && self.at(p + 3).is_ascii_hexdigit()
                {
                    exact = false;
                    p += 3;
                } else if c == b'\\' && self.at(p + 1) != 0 {
                    exact = false;
                    p += 1;
                } else if c == b'"' {
                    if self.at(p + 1) != 0 && !is_space(self.at(p + 1)) {
                        return Err(Unbalanced);
                    }
                    token_end = p + 1;
                    break;
                } else if c == 0 {
                    return Err(Unbalanced);
                }
            } else if insq {
                if c == b'\\' && self.at(p + 1) == b'\'' {
                    exact = false;
                    p += 1;
                } else if c == b'\'' {
                    if self.at(p + 1) != 0 && !is_space(self.at(p + 1)) {
                        return Err(Unbalanced);
                    }
                    token_end = p + 1;
                    break;
                } else if c == 0 {
                    return Err(Unbalanced);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        token_end = p;
                        break;
                    }
                    b'"' | b'\'' => {
                        if p != start {
                            exact = false;
                        }
                        inq = c == b'"';
                        insq = c == b'\'';
                    }
                    _ => {}
                }
            }
            p += 1;
        }
        self.pos = if self.at(token_end) != 0 {
            token_end + 1
        } else {
            token_end
        };
        let quoted = matches!(self.buf[start], b'"' | b'\'');
        let range = if exact && quoted {
            start + 1..token_end - 1
        } else {
            start..token_end
        };
        Ok(Some(Token { range, exact }))
    }
}

/// The value of an inline argument, with quotes and escapes interpreted.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    let at = |i: usize| raw.get(i).copied().unwrap_or(0);
    let (mut inq, mut insq) = (false, false);
    while i < raw.len() {
        let c = raw[i];
        if inq {
            if c == b'\\'
                && at(i + 1) == b'x'
                && at(i + 2).is_ascii_hexdigit()
                && at(i + 3).is_ascii_hexdigit()
            {
                let hex = |d: u8| (d as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(at(i + 2)) * 16 + hex(at(i + 3)));
                i += 3;
            } else if c == b'\\' && i + 1 < raw.len() {
                i += 1;
                out.push(match raw[i] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
            } else if c == b'"' {
                inq = false;
            } else {
                out.push(c);
            }
        } else if insq {
            if c == b'\\' && at(i + 1) == b'\'' {
                i += 1;
                out.push(b'\'');
            } else if c == b'\'' {
                insq = false;
            } else {
                out.push(c);
            }
        } else if c == b'"' {
            inq = true;
        } else if c == b'\'' {
            insq = true;
        } else {
            out.push(c);
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<(Vec<u8>, bool)>, Unbalanced> {
        let mut t = Tokens::new(line, 0, line.len());
        let mut v = Vec::new();
        while let Some(tok) = t.next_token()? {
            let mut val = Vec::new();
            if tok.exact {
                val.extend_from_slice(&line[tok.range]);
            } else {
                unescape(&line[tok.range], &mut val);
            }
            v.push((val, tok.exact));
        }
        Ok(v)
    }

    #[test]
    fn splits_like_redis() {
        let s = |l: &[u8]| {
            split(l)
                .unwrap()
                .into_iter()
                .map(|(v, _)| v)
                .collect::<Vec<_>>()
        };
        assert_eq!(s(b"GET foo"), vec![b"GET".to_vec(), b"foo".to_vec()]);
        assert_eq!(
            s(b"  a\t b\rc  "),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(s(b"ECHO \"a b\""), vec![b"ECHO".to_vec(), b"a b".to_vec()]);
        assert_eq!(
            s(b"ECHO \"a\\x41\\n\""),
            vec![b"ECHO".to_vec(), b"aA\n".to_vec()]
        );
        assert_eq!(
            s(b"ECHO 'a\\' b'"),
            vec![b"ECHO".to_vec(), b"a' b".to_vec()]
        );
        assert_eq!(s(b"ECHO ''"), vec![b"ECHO".to_vec(), b"".to_vec()]);
        assert_eq!(s(b"x a\"b c\""), vec![b"x".to_vec(), b"ab c".to_vec()]);
        assert_eq!(s(b"a\0b"), vec![b"a".to_vec()]);
        assert!(s(b"").is_empty());
        assert_eq!(split(b"ECHO \"a b"), Err(Unbalanced));
        assert_eq!(split(b"ECHO \"a\"b"), Err(Unbalanced));
        assert_eq!(split(b"ECHO 'a"), Err(Unbalanced));
    }

    #[test]
    fn exact_ranges() {
        let v = split(b"GET \"k1\" 'k2' k\"3\" \"k\\n\"").unwrap();
        let ex: Vec<bool> = v.iter().map(|(_, e)| *e).collect();
        assert_eq!(ex, vec![true, true, true, false, false]);
    }
}
