//! The worker's loop: one pass waits for events (bounded by the nearest
//! timer), accepts, reads and writes each ready socket, fires expired
//! timers, then writes every connection that got output in the pass, so
//! the requests parsed in one pass leave in one write per server. The
//! controller (the master's channel) is read once per pass and says when
//! to stop: at once, gracefully, or by handing clients to a successor.

use super::closes::Close;
use super::dirty;
use super::params;
use super::sweep;
use super::timers;
use super::tokens::{self, TokenKind};
use super::{Control, Stop, Worker};
use crate::stats::WorkerField;
use mio::{Events, Interest, Token};
use std::time::{Duration, Instant};

/// When a stop began: what the loop remembers between passes.
#[derive(Debug, Default)]
struct Stopping {
    /// A graceful stop (or a handover that fell back to one) began.
    graceful_since: Option<Instant>,
    /// Handing clients over began.
    handover_since: Option<Instant>,
}

/// What a handover's stop still waits for.
#[derive(Debug, Clone, Copy)]
struct Left {
    /// A client here, or one handed in and not yet taken.
    clients: bool,
    /// A TLS client relayed to the successor (it keeps this worker
    /// until it ends).
    relays: bool,
    /// A subscriber or a client in a transaction: its server connections
    /// are this worker's, it crosses once it leaves that state.
    pinned: bool,
}

/// What a pass's end does about the controller's word (`Stopping::step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopStep {
    /// Go on serving.
    Run,
    /// End the loop now.
    Exit,
    /// Hand the clients over (begun, or going on).
    Handover,
    /// Finish the clients here: a graceful stop, or a handover that fell
    /// back to one (it stays one).
    Graceful,
}

impl Stopping {
    /// What the controller's `stop` comes to at `now`: a handover goes on
    /// as one only until it fell back to a graceful stop; a graceful stop's
    /// time starts with it.
    fn step(&mut self, stop: Stop, now: Instant) -> StopStep {
        match stop {
            Stop::Run => StopStep::Run,
            Stop::Fast => StopStep::Exit,
            Stop::Handover if self.graceful_since.is_none() => StopStep::Handover,
            Stop::Graceful | Stop::Handover => {
                self.graceful_since.get_or_insert(now);
                StopStep::Graceful
            }
        }
    }

    /// Whether a handover's stop is done at `now`: every client handed
    /// over, or `bound` past since handing over began; either way only
    /// once no relayed client and no client pinned here is left.
    fn handover_done(&mut self, left: Left, bound: Duration, now: Instant) -> bool {
        let since = *self.handover_since.get_or_insert(now);
        (!left.clients || now.duration_since(since) > bound) && !left.relays && !left.pinned
    }

    /// Whether a graceful stop is done at `now`: no client left, or
    /// `bound` past since it began.
    fn graceful_done(&mut self, clients: bool, bound: Duration, now: Instant) -> bool {
        let since = *self.graceful_since.get_or_insert(now);
        !clients || now.duration_since(since) > bound
    }
}

impl Worker<'_> {
    /// Run the loop until the controller says stop (and, for a graceful
    /// stop, until every client's requests are answered).
    pub fn run(&mut self, control: &mut dyn Control) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut stopping = Stopping::default();
        let mut last_sweep = Instant::now();
        if let Some(fd) = control.fd() {
            self.poll.registry().register(
                &mut mio::unix::SourceFd(&fd),
                tokens::CONTROL,
                Interest::READABLE,
            )?;
        }
        loop {
            // How long the wait may last: until the nearest timer, at
            // most a second; not at all when output or reads are left
            // from this pass.
            let before = Instant::now();
            let wait = timers::PassWait {
                timer: self.timers.wait(before),
                held: self.hold_deadlines.wait(before),
                late: self.read_deadlines.wait(before),
                queued: !self.dirty.is_empty() || !self.resume.is_empty(),
                stopping: !self.intake.accepting(),
                handing_over: self.handover.on(),
                fleet: self.fleet_holds.wait(before),
                handin_again: self.handin.again(),
                gated: self.gate.is_shut(),
            };
            // accept_mutex mode, not holding it: try again by then.
            let reg = self.poll.registry();
            let retry_lock = self.intake.trylock(reg, self.region, self.slot, wait.gated);
            let timeout = Some(wait.timeout(retry_lock));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let now = Instant::now();
            self.stats.tick();
            let control_ready = self.handle_events(&events, now);
            while let Some((token, id)) = self.timers.due(now) {
                let step =
                    super::server_health::timer_fired(&mut self.conns, &self.pools, token, id, now);
                self.upkeep(step, now);
            }
            // Read again from connections a stream's backpressure had
            // paused, each once, to the end of what waits (as after a
            // hang-up).
            for t in dirty::resumed(&mut self.resume) {
                self.on_event(t, true, true, false, now);
            }
            let due = super::cluster::upkeep_due(&mut self.pools, &self.conns, now);
            self.upkeep(due, now);
            super::sentinel::maintain(&mut self.sentinels, &self.pools, self.poll.registry(), now);
            if self.gate.opens(&self.sentinels, now) {
                // Take clients from now on: handed over and accepted.
                self.handin.start(self.poll.registry())?;
                self.intake.start(self.poll.registry())?;
            }
            if now.duration_since(last_sweep) >= Duration::from_secs(1) {
                // Once a second: the recorder's, the connections', the heap's.
                last_sweep = now;
                self.recorder.every_second(&self.stats, now);
                let second =
                    sweep::second(&mut self.conns, &mut self.pools, self.ctl.client_idle, now);
                self.upkeep(second, now);
                if self.trim.due() {
                    crate::log_debug!("returned free heap memory to the kernel");
                }
            }
            self.end_pass(now);
            if self.handover.on() && !self.hand_over_ready() {
                // Nobody to hand to: finish the clients here, as a
                // graceful stop does, each read again (what they sent
                // meanwhile waits in their sockets).
                self.resume.extend(sweep::clients(&self.conns));
                stopping.graceful_since.get_or_insert(now);
            }
            self.stats
                .worker_set(WorkerField::Heartbeat, crate::util::epoch_us());
            let stop = control.check(&mut self.ctl, control_ready);
            // The parameters the controller changed, given to the
            // recorder and the pools; a pool's new server timeout times
            // its connections anew.
            self.recorder.knobs(self.ctl.latency, self.ctl.slowlog_us);
            for (pool, timeout) in self.ctl.apply_to(&mut self.pools) {
                params::rearm(&mut self.conns, &mut self.timers, pool, timeout);
            }
            // After the controller's messages: a barrier's go releases
            // the requests held for it in this pass.
            for (token, step) in self
                .fleet_holds
                .ended(self.fleet, &self.pools, &self.conns, now)
            {
                self.run_held(token, step, now);
            }
            if self.stopped(stop, &mut stopping, control, now) {
                return Ok(());
            }
        }
    }

    /// Every ready socket of this pass; whether the master's channel is
    /// readable.
    fn handle_events(&mut self, events: &Events, now: Instant) -> bool {
        let mut control_ready = false;
        // Accept events first (nginx's posted accept events), then
        // release the accept mutex, then everything else.
        for ev in events.iter() {
            if let TokenKind::Listener(i) = tokens::kind(ev.token()) {
                let reg = self.poll.registry();
                let accepted = self.intake.accept_all(i, reg, &self.stats, &self.pools);
                self.take_in(accepted, now);
            }
        }
        self.intake.release();
        if self.handin.take_again() {
            let handed = self.handin.arrivals(self.poll.registry(), &self.pools);
            self.take_in(handed, now);
        }
        for ev in events.iter() {
            match tokens::kind(ev.token()) {
                TokenKind::Conn(t) => {
                    let hup = ev.is_read_closed() || ev.is_error();
                    let readable = ev.is_readable() || hup;
                    self.on_event(Token(t), readable, hup, ev.is_writable(), now);
                }
                TokenKind::Control => control_ready = true,
                TokenKind::Handin => {
                    let handed = self.handin.arrivals(self.poll.registry(), &self.pools);
                    self.take_in(handed, now);
                }
                TokenKind::HandinConn(key) => {
                    let reg = self.poll.registry();
                    let handed = self.handin.waiting_ready(reg, key, &self.pools);
                    self.take_in(handed, now);
                }
                TokenKind::Relay(i) => self.relays.event(self.poll.registry(), i),
                TokenKind::Sentinel(i) => {
                    let reg = self.poll.registry();
                    let due =
                        super::sentinel::event(&mut self.sentinels, &mut self.pools, reg, i, now);
                    self.upkeep(due, now);
                }
                TokenKind::Listener(_) => {}
            }
        }
        control_ready
    }

    /// The end of a pass: output written, the marked connections in
    /// rounds while writing gives more (`Dirty::round_due`), and what was
    /// batched over the pass added to the shared counters.
    fn end_pass(&mut self, now: Instant) {
        // Marked connections whose bytes waited under the mark too long:
        // read now, what is there.
        while let Some(t) = self.read_deadlines.next_late(&self.conns, now) {
            self.read_server(t, now, false);
        }
        self.hold_deadlines.release_due(now, &mut self.dirty);
        let mut rounds = 0;
        while self.dirty.round_due(rounds) {
            rounds += 1;
            // A connection is marked once per queued message: write each
            // once (a client that does not read would otherwise cost one
            // failed write per reply queued in this iteration).
            let mut servers = self.dirty.take_servers();
            for t in servers.drain(..) {
                self.write_server(t, Instant::now());
            }
            self.dirty.give_servers(servers);
            let mut clients = self.dirty.take_clients();
            for t in clients.drain(..) {
                if !self.hold_client(t, now) {
                    self.write_client(t);
                }
            }
            // Clients given output while these were written (more of a
            // held reply) stay marked: the next round writes them.
            self.dirty.give_clients(clients);
        }
        super::server::count_queued(&mut self.conns, self.dirty.counting(), &self.stats);
        self.recorder.end_pass(&self.stats);
    }

    /// Whether the loop ends after this pass, given what the controller
    /// said.
    fn stopped(
        &mut self,
        stop: Stop,
        stopping: &mut Stopping,
        control: &mut dyn Control,
        now: Instant,
    ) -> bool {
        match stopping.step(stop, now) {
            StopStep::Run => false,
            StopStep::Exit => true,
            StopStep::Handover => {
                if let Some(to) = self.ctl.handover_to.take() {
                    // Nothing held is routed once it reports stopped.
                    self.fleet_holds.close();
                    for (token, step) in
                        self.fleet_holds
                            .ended(self.fleet, &self.pools, &self.conns, now)
                    {
                        self.run_held(token, step, now);
                    }
                    if self.handover.begin(to) {
                        self.intake.stop(self.poll.registry());
                        // Take no more handed clients ourselves: the
                        // successor does.
                        self.handin.stop(self.poll.registry());
                    }
                    stopping.handover_since.get_or_insert(now);
                    control.stopped_routing();
                }
                let left = Left {
                    clients: sweep::any_client(&self.conns) || !self.handin.none_waiting(),
                    relays: !self.relays.is_empty(),
                    pinned: sweep::any_pinned(&self.conns),
                };
                stopping.handover_done(left, self.graceful_timeout, now)
            }
            StopStep::Graceful => {
                self.fleet_holds.close();
                for (token, step) in
                    self.fleet_holds
                        .ended(self.fleet, &self.pools, &self.conns, now)
                {
                    self.run_held(token, step, now);
                }
                self.intake.stop(self.poll.registry());
                // Every client with nothing in flight that has been
                // quiet for a while closes; done when none is left.
                let quiet = sweep::quiet_clients(&self.conns, now).into_iter();
                self.close_all(quiet.map(|token| Close::Client {
                    token,
                    error: false,
                }));
                let clients = sweep::any_client(&self.conns);
                stopping.graceful_done(clients, self.graceful_timeout, now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEFT: Left = Left {
        clients: false,
        relays: false,
        pinned: false,
    };

    #[test]
    fn a_handover_ends_once_its_clients_crossed_or_its_time_is_up() {
        let bound = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut s = Stopping::default();
        let clients = Left {
            clients: true,
            ..LEFT
        };
        assert!(
            !s.handover_done(clients, bound, t0),
            "clients left to hand over"
        );
        assert_eq!(s.handover_since, Some(t0), "the handover's time starts");
        assert!(
            !s.handover_done(clients, bound, t0 + bound),
            "within the bound"
        );
        assert!(s.handover_done(clients, bound, t0 + bound + Duration::from_millis(1)));
        assert!(
            s.handover_done(LEFT, bound, t0 + Duration::from_millis(1)),
            "none left"
        );
    }

    #[test]
    fn relayed_and_pinned_clients_hold_a_handover_past_its_bound() {
        let bound = Duration::from_secs(5);
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(60);
        let mut s = Stopping {
            handover_since: Some(t0),
            ..Stopping::default()
        };
        let relays = Left {
            relays: true,
            ..LEFT
        };
        let pinned = Left {
            pinned: true,
            clients: true,
            ..LEFT
        };
        assert!(!s.handover_done(relays, bound, late));
        assert!(!s.handover_done(pinned, bound, late));
        assert!(s.handover_done(LEFT, bound, late));
    }

    #[test]
    fn a_graceful_stop_ends_once_no_client_is_left_or_its_time_is_up() {
        let bound = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut s = Stopping::default();
        assert!(!s.graceful_done(true, bound, t0));
        assert_eq!(s.graceful_since, Some(t0));
        assert!(!s.graceful_done(true, bound, t0 + bound));
        assert!(s.graceful_done(true, bound, t0 + bound + Duration::from_millis(1)));
        assert!(s.graceful_done(false, bound, t0), "no client left");
    }

    #[test]
    fn a_handover_fallen_back_to_a_graceful_stop_stays_one() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let mut s = Stopping::default();
        assert_eq!(s.step(Stop::Run, t0), StopStep::Run);
        assert_eq!(s.step(Stop::Handover, t0), StopStep::Handover);
        assert_eq!(s.graceful_since, None);
        // Nobody to hand to: the loop finishes the clients here.
        s.graceful_since = Some(t0);
        assert_eq!(s.step(Stop::Handover, later), StopStep::Graceful);
        assert_eq!(s.graceful_since, Some(t0), "its time started once");
        assert_eq!(s.step(Stop::Fast, later), StopStep::Exit);
        let mut s = Stopping::default();
        assert_eq!(s.step(Stop::Graceful, later), StopStep::Graceful);
        assert_eq!(s.graceful_since, Some(later), "its time starts");
    }
}
