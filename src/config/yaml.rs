//! Stage 1: YAML text → raw sections with line numbers.
//!
//! twemproxy accepts a small subset of YAML: one block-style document whose
//! root maps names to mappings of `key: scalar` entries, where one entry
//! (`servers`) may hold a sequence of scalars. Flow collections (`[..]`,
//! `{..}`), anchors, aliases, tags, directives and `---`/`...` markers are
//! rejected. This module checks that shape and keeps every key, duplicates
//! included, with its line, so later stages can report precisely.

use super::error::ConfigError;
use std::path::Path;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, Scanner, TokenType};

/// A scalar as written, with its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scalar {
    pub text: String,
    pub line: usize,
}

/// The value of a `key:` inside a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawValue {
    /// `key: value`
    Scalar(Scalar),
    /// `key:` followed by `- item` lines.
    Seq(Vec<Scalar>),
}

/// One `key: value` entry of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub key: Scalar,
    pub value: RawValue,
}

/// One top-level `name:` mapping (a pool, or the `_walnut` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawSection {
    pub name: Scalar,
    pub entries: Vec<RawEntry>,
}

/// A generic YAML node built from parser events.
#[derive(Debug)]
enum Node {
    Scalar(String, usize),
    Seq(Vec<Node>, usize),
    Map(Vec<(Node, Node)>, usize),
    Alias(usize),
}

impl Node {
    fn line(&self) -> usize {
        match self {
            Node::Scalar(_, l) | Node::Seq(_, l) | Node::Map(_, l) | Node::Alias(l) => *l,
        }
    }
}

enum Partial {
    Seq(Vec<Node>, usize),
    Map(Vec<(Node, Node)>, Option<Node>, usize),
}

/// Builds [`Node`] trees from marked parser events.
#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Partial>,
    roots: Vec<Node>,
    documents: usize,
}

impl TreeBuilder {
    fn push_node(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.roots.push(node),
            Some(Partial::Seq(items, _)) => items.push(node),
            Some(Partial::Map(pairs, pending, _)) => match pending.take() {
                Some(key) => pairs.push((key, node)),
                None => *pending = Some(node),
            },
        }
    }
}

fn line_of(mark: Marker) -> usize {
    mark.line().max(1)
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = line_of(mark);
        match ev {
            Event::DocumentStart => self.documents += 1,
            Event::Scalar(text, ..) => self.push_node(Node::Scalar(text, line)),
            Event::Alias(_) => self.push_node(Node::Alias(line)),
            Event::SequenceStart(..) => self.stack.push(Partial::Seq(Vec::new(), line)),
            Event::MappingStart(..) => self.stack.push(Partial::Map(Vec::new(), None, line)),
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Partial::Seq(items, l)) => Node::Seq(items, l),
                    Some(Partial::Map(pairs, _, l)) => Node::Map(pairs, l),
                    None => return,
                };
                self.push_node(node);
            }
            _ => {}
        }
    }
}

/// Rejects the YAML tokens twemproxy refuses (see module docs).
fn check_tokens(text: &str, file: &Path, errors: &mut Vec<ConfigError>) -> bool {
    let mut scanner = Scanner::new(text.chars());
    let mut last_line = 0;
    for token in scanner.by_ref() {
        let what = match token.1 {
            TokenType::VersionDirective(..) => "a %YAML directive",
            TokenType::TagDirective(..) => "a %TAG directive",
            TokenType::DocumentStart => "a document start marker '---'",
            TokenType::DocumentEnd => "a document end marker '...'",
            TokenType::FlowSequenceStart
            | TokenType::FlowSequenceEnd
            | TokenType::FlowMappingStart
            | TokenType::FlowMappingEnd
            | TokenType::FlowEntry => "a flow collection ('[', ']', '{', '}' or ',' in flow style)",
            TokenType::Alias(_) => "an alias",
            TokenType::Anchor(_) => "an anchor",
            TokenType::Tag(..) => "a tag",
            _ => continue,
        };
        let line = line_of(token.0);
        if line != last_line {
            errors.push(ConfigError::new(
                file,
                line,
                format!("{what} is not allowed; write plain block-style YAML"),
            ));
            last_line = line;
        }
    }
    if let Some(e) = scanner.get_error() {
        errors.push(ConfigError::new(
            file,
            line_of(*e.marker()),
            format!("YAML syntax error: {}", e.info()),
        ));
        return false;
    }
    true
}

/// Parses `text` into raw sections, collecting every structural problem.
pub(crate) fn parse_sections(text: &str, file: &Path) -> (Vec<RawSection>, Vec<ConfigError>) {
    let mut errors = Vec::new();
    if !check_tokens(text, file, &mut errors) {
        return (Vec::new(), errors);
    }
    let mut builder = TreeBuilder::default();
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, true) {
        errors.push(ConfigError::new(
            file,
            line_of(*e.marker()),
            format!("YAML syntax error: {}", e.info()),
        ));
        return (Vec::new(), errors);
    }
    if builder.documents != 1 || builder.roots.len() != 1 {
        errors.push(ConfigError::new(
            file,
            0,
            format!(
                "must contain exactly one YAML document; found {}",
                builder.documents
            ),
        ));
        return (Vec::new(), errors);
    }
    let Some(root) = builder.roots.pop() else {
        return (Vec::new(), errors);
    };
    let sections = root_sections(root, file, &mut errors);
    (sections, errors)
}

fn root_sections(root: Node, file: &Path, errors: &mut Vec<ConfigError>) -> Vec<RawSection> {
    let pairs = match root {
        Node::Map(pairs, _) => pairs,
        Node::Scalar(ref s, _) if s.is_empty() => {
            errors.push(ConfigError::new(file, 0, "has no pools"));
            return Vec::new();
        }
        other => {
            errors.push(ConfigError::new(
                file,
                other.line(),
                "the top level must be a mapping of pool names to pool settings",
            ));
            return Vec::new();
        }
    };
    let mut sections = Vec::new();
    for (key, value) in pairs {
        let name = match key {
            Node::Scalar(text, line) if !text.is_empty() => Scalar { text, line },
            other => {
                errors.push(ConfigError::new(
                    file,
                    other.line(),
                    "a pool name must be a non-empty plain string",
                ));
                continue;
            }
        };
        match value {
            Node::Map(entries, _) => {
                let entries = section_entries(&name.text, entries, file, errors);
                sections.push(RawSection { name, entries });
            }
            other => {
                let got = match other {
                    Node::Scalar(ref s, _) if s.is_empty() => "nothing",
                    Node::Scalar(..) => "a single value",
                    Node::Seq(..) => "a list",
                    _ => "an unsupported value",
                };
                errors.push(
                    ConfigError::new(
                        file,
                        name.line,
                        format!("must be a mapping of settings (key: value), found {got}"),
                    )
                    .in_pool(&name.text),
                );
            }
        }
    }
    sections
}

fn section_entries(
    pool: &str,
    pairs: Vec<(Node, Node)>,
    file: &Path,
    errors: &mut Vec<ConfigError>,
) -> Vec<RawEntry> {
    let mut entries = Vec::new();
    let err = |line: usize, msg: String| ConfigError::new(file, line, msg).in_pool(pool);
    for (key, value) in pairs {
        let key = match key {
            Node::Scalar(text, line) if !text.is_empty() => Scalar { text, line },
            other => {
                errors.push(err(
                    other.line(),
                    "a setting name must be a non-empty plain string".into(),
                ));
                continue;
            }
        };
        let value = match value {
            Node::Scalar(text, line) => {
                if text.is_empty() {
                    errors.push(err(key.line, format!("'{}' has no value", key.text)));
                    continue;
                }
                RawValue::Scalar(Scalar { text, line })
            }
            Node::Seq(items, _) => {
                let mut list = Vec::new();
                for item in items {
                    match item {
                        Node::Scalar(text, line) if !text.is_empty() => {
                            list.push(Scalar { text, line })
                        }
                        other => errors.push(err(
                            other.line(),
                            format!("'{}' items must be non-empty plain strings", key.text),
                        )),
                    }
                }
                RawValue::Seq(list)
            }
            other => {
                errors.push(err(
                    other.line(),
                    format!(
                        "'{}' is nested too deeply (a value must be a string or a list of strings)",
                        key.text
                    ),
                ));
                continue;
            }
        };
        entries.push(RawEntry { key, value });
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<RawSection>, Vec<ConfigError>) {
        parse_sections(text, Path::new("t.yml"))
    }

    #[test]
    fn lines_are_one_based() {
        let (s, e) =
            parse("alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - a:1:1\n   - b:1:1\n");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name.line, 1);
        assert_eq!(s[0].entries[0].key.line, 2);
        match &s[0].entries[1].value {
            RawValue::Seq(items) => {
                assert_eq!(items[0].line, 4);
                assert_eq!(items[1].line, 5);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicates_are_kept() {
        let (s, e) = parse("a:\n  hash: md5\n  hash: crc16\na:\n  x: y\n");
        assert!(e.is_empty());
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].entries.len(), 2);
    }

    #[test]
    fn rejects_flow_anchor_tag_markers() {
        for (text, line) in [
            ("a:\n  servers: [x:1:1]\n", 2),
            ("a: &x\n  k: v\n", 1),
            ("a:\n  k: !!str v\n", 2),
            ("---\na:\n  k: v\n", 1),
            ("a:\n  k: {x: y}\n", 2),
        ] {
            let (_, e) = parse(text);
            assert!(!e.is_empty(), "{text}");
            assert_eq!(e[0].line, line, "{text}: {e:?}");
        }
    }

    #[test]
    fn syntax_error_has_line() {
        let (_, e) = parse("a:\n  k: v\n    bad: : x\n  - y\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].message.starts_with("YAML syntax error"));
        assert!(e[0].line >= 3);
    }

    #[test]
    fn empty_and_shapes() {
        let (_, e) = parse("");
        assert_eq!(e.len(), 1);
        let (_, e) = parse("# only a comment\n");
        assert_eq!(e.len(), 1);
        let (_, e) = parse("just a string\n");
        assert_eq!(e.len(), 1);
        let (_, e) = parse("a: b\n");
        assert_eq!(e[0].pool.as_deref(), Some("a"));
        let (_, e) = parse("a:\n  k:\n    deep: x\n");
        assert_eq!(e[0].line, 3);
        let (_, e) = parse("a:\n  timeout:\n  servers:\n  - x:1:1\n");
        assert_eq!(e[0].message, "'timeout' has no value");
        assert_eq!(e[0].line, 2);
    }
}
