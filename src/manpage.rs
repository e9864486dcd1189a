//! `walnut.8`, written from the same clap definitions as `--help` (the
//! hidden `walnut --man` prints it; `make man` keeps it in
//! `target/man/walnut.8`). The OPTIONS section is generated, so a new flag
//! cannot be missing from the page; the rest (signals, files, upgrade) is
//! prose kept here beside it. A small roff writer instead of clap_mangen:
//! the page needs only `.TH/.SH/.TP/.B`, and it keeps the binary's
//! dependencies to what the proxy itself uses.

use crate::cli::Cli;
use clap::CommandFactory;
use std::fmt::Write;

/// The man page as roff source.
pub fn render() -> String {
    let mut cmd = Cli::command();
    // Adds clap's own -h/--help, so the page lists it as --help does.
    cmd.build();
    let mut s = String::new();
    let version = env!("CARGO_PKG_VERSION");
    let _ = writeln!(
        s,
        ".TH WALNUT 8 \"\" \"walnut {version}\" \"System Administration\""
    );
    s.push_str(".SH NAME\nwalnut \\- ");
    s.push_str(&escape(
        &cmd.get_about().map(|a| a.to_string()).unwrap_or_default(),
    ));
    s.push_str("\n.SH SYNOPSIS\n.B walnut\n[\\fIOPTIONS\\fR]\n");
    s.push_str(DESCRIPTION);
    s.push_str(".SH OPTIONS\n");
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let mut names = Vec::new();
        if let Some(c) = arg.get_short() {
            names.push(format!("\\fB\\-{}\\fR", escape(&c.to_string())));
        }
        if let Some(l) = arg.get_long() {
            names.push(format!("\\fB\\-\\-{}\\fR", escape(l)));
        }
        let mut line = names.join(", ");
        if let Some(values) = arg.get_value_names() {
            if arg.get_num_args().is_some_and(|n| n.takes_values()) {
                let v: Vec<String> = values.iter().map(|v| escape(v)).collect();
                let v = format!("\\fI{}\\fR", v.join(" "));
                // `--top [ADDR]`: the value may be left out.
                if arg.get_num_args().is_some_and(|n| n.min_values() == 0) {
                    let _ = write!(line, " [{v}]");
                } else {
                    let _ = write!(line, " {v}");
                }
            }
        }
        let mut help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        // clap drops the final period of a one-line doc comment.
        if !help.ends_with('.') {
            help.push('.');
        }
        let _ = writeln!(s, ".TP\n{line}\n{}", escape(&help));
        let takes_values = arg.get_num_args().is_some_and(|n| n.takes_values());
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        if takes_values && !defaults.is_empty() && !help.contains("default") {
            let _ = writeln!(s, "Default: {}.", escape(&defaults.join(" ")));
        }
    }
    s.push_str(REST);
    s
}

/// roff escaping: a backslash is `\e`, every hyphen a minus sign (so that
/// flags can be searched and copied), and a line never starts with a
/// control character.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split('\n') {
        if !out.is_empty() {
            out.push('\n');
        }
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        for c in line.chars() {
            match c {
                '\\' => out.push_str("\\e"),
                '-' => out.push_str("\\-"),
                c => out.push(c),
            }
        }
    }
    out
}

const DESCRIPTION: &str = r#".SH DESCRIPTION
walnut is a memcached and Redis proxy that replaces twemproxy (nutcracker)
0.5: it reads the same YAML configuration and flags, places every key on the
same server and serves the same stats JSON. It runs as nginx does: a master
process that owns the listening sockets and forks one or more worker
processes, each a single-threaded event loop. A worker that dies is restarted
at once; the configuration is reloaded and the binary replaced without
dropping a connection.
.PP
Without \fB\-c\fR, walnut reads \fIconf/nutcracker.yml\fR in the working
directory, as nutcracker does, and when that file does not exist
\fI/etc/walnut/nutcracker.yml\fR (the directory is fixed when walnut is
built: \fBWALNUT_SYSCONFDIR\fR, default \fI/etc\fR).
"#;

const REST: &str = r#".SH SIGNALS
Sent to the master process (its pid is in the \fB\-p\fR file):
.TP
.B TERM, INT
Fast stop.
.TP
.B QUIT
Graceful stop: stop accepting, finish the requests in flight, exit.
.TP
.B HUP
Reopen the log file and reload the configuration. The new file is validated
first; a file with errors is logged and the running configuration stays.
.TP
.B USR1
Reopen the log file (after log rotation).
.TP
.B USR2
Hot upgrade: start the binary on disk as a new master that inherits the
listening sockets. The pid file moves to \fIPIDFILE.oldbin\fR; once the new
master serves, send QUIT to the old one.
.TP
.B WINCH
Stop the workers gracefully and keep the master.
.TP
.B TTIN, TTOU
Raise or lower the log level by one; the new level is logged.
.SH HOT UPGRADE UNDER SYSTEMD
The unit runs walnut with \fB\-d \-p /run/walnut/walnut.pid\fR and
\fBPIDFile=\fR, so systemd follows the new master when the old one exits:
.PP
.nf
    cp walnut\-new /usr/sbin/walnut.new && mv /usr/sbin/walnut.new /usr/sbin/walnut
    systemctl kill \-s USR2 \-\-kill\-whom=main walnut
    # wait until /run/walnut/walnut.pid names the new master, then
    kill \-QUIT "$(cat /run/walnut/walnut.pid.oldbin)"
.fi
.PP
\fBsystemctl reload walnut\fR checks the file with \fB\-t\fR, then sends HUP.
.SH FILES
.TP
.I /etc/walnut/nutcracker.yml
The configuration the packaged service uses (twemproxy's YAML; process
settings in its \fB_walnut:\fR section).
.TP
.I /run/walnut/walnut.pid
The master's pid under systemd.
.SH EXIT STATUS
0 on a clean stop or a valid configuration with \fB\-t\fR; 1 when the
configuration is invalid or a listening port cannot be opened.
.SH SEE ALSO
.BR nutcracker (8),
.BR memcached (1),
.BR redis\-server (1),
.BR systemctl (1)
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_flag_is_documented() {
        let page = render();
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let shown = page.contains(&format!("\\fB\\-\\-{}\\fR", escape(long)));
            assert_eq!(shown, !arg.is_hide_set(), "--{long}");
        }
        assert!(page.starts_with(".TH WALNUT 8 "));
        assert!(page.contains("\\fB\\-c\\fR, \\fB\\-\\-conf\\-file\\fR \\fIFILE\\fR"));
        assert!(page.contains("\\fB\\-\\-top\\fR [\\fIADDR\\fR]"));
        assert!(page.contains("\\fB\\-h\\fR, \\fB\\-\\-help\\fR"));
        assert!(page.contains("Default: 30000."), "-i's default");
    }

    #[test]
    fn escapes_roff() {
        assert_eq!(escape("a-b\\c"), "a\\-b\\ec");
        assert_eq!(escape(".x\n'y"), "\\&.x\n\\&'y");
    }
}
