//! Vectors for the streamed-request machine, each fed cut at every byte,
//! and the whole-request invariant (`stream_check`) over generated
//! requests.

use super::*;
use crate::proto::redis::{stream_check, stream_head};

const T: usize = 8;

fn limits() -> Limits {
    Limits {
        max_value: 4096,
        max_keys: 64,
        pre_auth: false,
    }
}

fn text(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

/// The head the data path finds in `data` read up to its first large
/// argument's first value byte, and its length.
fn head_of(data: &[u8]) -> StreamHead {
    (1..=data.len())
        .find_map(|n| stream_head(&data[..n], &limits(), T))
        .expect("a streamed head")
}

/// The steps taken for `data` when the first `cut` bytes after the head
/// arrive first and then the rest, as text; runs of forwarded or held
/// bytes joined, so that every cut gives the same transcript.
fn transcript(data: &[u8], cut: usize) -> Vec<String> {
    let head = head_of(data);
    let mut m = StreamMachine::new(&head, limits(), T);
    let mut at = head.req.len;
    let mut have = (at + cut).min(data.len());
    let mut out: Vec<String> = Vec::new();
    let push = |out: &mut Vec<String>, what: &str, bytes: &[u8]| match out.last_mut() {
        Some(last) if last.starts_with(what) && (what == "forward " || what == "hold ") => {
            last.push_str(&text(bytes))
        }
        _ => out.push(format!("{what}{}", text(bytes))),
    };
    for _ in 0..10_000 {
        let input = &data[at..have];
        let step = m.step(input);
        match step {
            StreamStep::More if have == data.len() => {
                out.push("more".into());
                return out;
            }
            StreamStep::More => have = data.len(),
            StreamStep::Forward(n) => {
                push(&mut out, "forward ", &input[..n]);
                at += n;
            }
            StreamStep::Hold(n) => {
                push(&mut out, "hold ", &input[..n]);
                at += n;
            }
            StreamStep::Route { key, len } => {
                out.push(format!(
                    "route {} {}",
                    text(&input[key]),
                    text(&input[..len])
                ));
                at += len;
            }
            StreamStep::Refuse { reply, len } => {
                out.push(format!("refuse {} {}", text(&reply), text(&input[..len])));
                at += len;
            }
            StreamStep::Pair {
                index,
                key,
                cmd,
                len,
                large,
            } => {
                out.push(format!(
                    "pair {index} {} {} large={large}",
                    text(&input[key]),
                    text(&cmd)
                ));
                at += len;
            }
            StreamStep::PairEnd => out.push("pair end".into()),
            StreamStep::Done => {
                out.push(format!("done +{}", data.len() - at));
                return out;
            }
            StreamStep::Fail(reply) => {
                out.push(format!("fail {}", text(&reply)));
                return out;
            }
        }
    }
    panic!("no end: {out:?}");
}

/// `data` gives `want` however it is cut after its head; the invariant
/// against the whole-request parser holds for every chunk size.
fn check(data: &[u8], want: &[&str]) {
    let head = head_of(data);
    for cut in 0..=data.len() - head.req.len {
        assert_eq!(transcript(data, cut), want, "cut {cut}");
    }
    // Read a byte at a time it streams; in larger chunks it may arrive
    // whole and be parsed whole.
    assert!(stream_check::check(data, &[0], &limits(), T));
    for step in 1..64u8 {
        stream_check::check(data, &[step], &limits(), T);
    }
}

#[test]
fn set_with_a_large_value_passes_as_it_is() {
    check(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n",
        &["forward 0123456789\\r\\n", "done +0"],
    );
    // The arguments after the value pass too; the next request stays.
    check(
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n$2\r\nEX\r\n$2\r\n10\r\n*1\r\n$4\r\nPING\r\n",
        &[
            "forward 0123456789\\r\\n$2\\r\\nEX\\r\\n$2\\r\\n10\\r\\n",
            "done +14",
        ],
    );
    // Unfinished: more is needed, nothing ends.
    let head = head_of(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123");
    let mut m = StreamMachine::new(&head, limits(), T);
    assert_eq!(m.step(b"0123"), StreamStep::Forward(4));
    assert_eq!(m.step(b""), StreamStep::More);
}

#[test]
fn mset_goes_pair_by_pair() {
    check(
        b"*7\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n0123456789\r\n$1\r\nb\r\n$1\r\nx\r\n$2\r\ncc\r\n$9\r\nyyyyyyyyy\r\n",
        &[
            "pair 0 a *3\\r\\n$4\\r\\nMSET\\r\\n$1\\r\\na\\r\\n$10\\r\\n large=true",
            "forward 0123456789\\r\\n",
            "pair end",
            "pair 1 b *3\\r\\n$4\\r\\nMSET\\r\\n$1\\r\\nb\\r\\n$1\\r\\nx\\r\\n large=false",
            "pair 2 cc *3\\r\\n$4\\r\\nMSET\\r\\n$2\\r\\ncc\\r\\n$9\\r\\n large=true",
            "forward yyyyyyyyy\\r\\n",
            "pair end",
            "done +0",
        ],
    );
    let head = head_of(b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n");
    let mut m = StreamMachine::new(&head, limits(), T);
    assert!(m.pairs());
    assert_eq!(m.pairs_unsent(), 0..2);
    assert!(matches!(
        m.step(b"$1\r\na\r\n$10\r\n"),
        StreamStep::Pair { index: 0, .. }
    ));
    assert_eq!(m.pairs_unsent(), 1..2);
}

#[test]
fn eval_script_is_held_until_its_key() {
    check(
        b"*5\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n",
        &[
            "hold return 1;;\\r\\n$1\\r\\n1\\r\\n",
            "route k $1\\r\\nk\\r\\n",
            "forward $1\\r\\nv\\r\\n",
            "done +0",
        ],
    );
    // A large argument after the key passes as a single-key request's.
    check(
        b"*5\r\n$4\r\nEVAL\r\n$1\r\ns\r\n$1\r\n1\r\n$1\r\nk\r\n$9\r\nvvvvvvvvv\r\n",
        &["forward vvvvvvvvv\\r\\n", "done +0"],
    );
}

#[test]
fn eval_numkeys_refused_as_redis_does() {
    check(
        b"*4\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n0\r\n$1\r\nx\r\n",
        &[
            "hold return 1;;\\r\\n",
            "refuse -ERR EVAL with numkeys 0 and a script of 1 MB or more is not supported by the proxy\\r\\n $1\\r\\n0\\r\\n",
            "forward $1\\r\\nx\\r\\n",
            "done +0",
        ],
    );
    check(
        b"*4\r\n$7\r\nEVALSHA\r\n$10\r\nreturn 1;;\r\n$1\r\n5\r\n$1\r\nx\r\n",
        &[
            "hold return 1;;\\r\\n",
            "refuse -ERR Number of keys can\\'t be greater than number of args\\r\\n $1\\r\\n5\\r\\n",
            "forward $1\\r\\nx\\r\\n",
            "done +0",
        ],
    );
    check(
        b"*4\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$2\r\nno\r\n$1\r\nx\r\n",
        &[
            "hold return 1;;\\r\\n",
            "refuse -ERR value is not an integer or out of range\\r\\n $2\\r\\nno\\r\\n",
            "forward $1\\r\\nx\\r\\n",
            "done +0",
        ],
    );
}

#[test]
fn malformed_input_fails_as_redis_does() {
    check(
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n:1\r\n",
        &[
            "forward 0123456789\\r\\n",
            "fail -ERR Protocol error: expected \\'$\\', got \\':\\'\\r\\n",
        ],
    );
    check(
        b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n0123456789\r\n+b\r\n$1\r\nx\r\n",
        &[
            "pair 0 a *3\\r\\n$4\\r\\nMSET\\r\\n$1\\r\\na\\r\\n$10\\r\\n large=true",
            "forward 0123456789\\r\\n",
            "pair end",
            "fail -ERR Protocol error: expected \\'$\\', got \\'+\\'\\r\\n",
        ],
    );
    check(
        b"*5\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n1\r\n$-1\r\n$1\r\nv\r\n",
        &[
            "hold return 1;;\\r\\n$1\\r\\n1\\r\\n",
            "fail -ERR Protocol error: invalid bulk length\\r\\n",
        ],
    );
    // A value over max_value.
    check(
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n$9999\r\n",
        &[
            "forward 0123456789\\r\\n",
            "fail -ERR Protocol error: invalid bulk length\\r\\n",
        ],
    );
}

/// A small deterministic generator: requests that stream at `T`, cut and
/// altered, checked against the whole-request parser.
#[test]
fn whole_request_invariant_over_generated_requests() {
    let seeds: [&[u8]; 6] = [
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n$2\r\nEX\r\n$2\r\n10\r\n",
        b"*7\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n0123456789\r\n$1\r\nb\r\n$1\r\nx\r\n$2\r\ncc\r\n$9\r\nyyyyyyyyy\r\n",
        b"*5\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n",
        b"*6\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n2\r\n$1\r\nk\r\n$1\r\nj\r\n$1\r\nv\r\n",
        b"*4\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n0\r\n$1\r\nx\r\n",
        b"*4\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n$12\r\n0123456789ab\r\n$1\r\nz\r\n",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet = b"*$\r\n0123456789-:+abkEVALMSETx";
    let mut streamed = 0;
    for _ in 0..20_000 {
        let mut data = seeds[rand() as usize % seeds.len()].to_vec();
        for _ in 0..rand() % 3 {
            let at = rand() as usize % data.len();
            match rand() % 3 {
                0 => data[at] = alphabet[rand() as usize % alphabet.len()],
                1 => {
                    data.remove(at);
                }
                _ => data.insert(at, alphabet[rand() as usize % alphabet.len()]),
            }
        }
        let steps: Vec<u8> = (0..4).map(|_| (rand() % 12) as u8).collect();
        streamed += usize::from(stream_check::check(&data, &steps, &limits(), T));
    }
    assert!(streamed > 10_000, "{streamed} streamed");
}
