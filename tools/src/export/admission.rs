//! Who gets a connection slot in `drmtool export`'s server: the [`Slots`] (connections
//! with a thread, answering or still reading their head) and the [`Lobby`] (accepted
//! connections without one: silent, or speakers waiting for a slot). Pure bookkeeping with
//! its own tests; the server loop is in `server.rs`.

use super::http::{EVICT_AFTER, HEADER_TIMEOUT, SILENT_GRACE};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What [`Slots::make_room`] says to do before a waiting connection takes a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Room<H> {
    /// A slot is free: take it.
    Free,
    /// Every slot is taken; this idle connection (removed from the slots) gives way: shut
    /// it, then take its slot.
    Evict(H),
    /// Every slot is taken; the oldest idle connection may be evicted at this instant.
    WaitUntil(Instant),
    /// Every slot is answering a request: wait for one to end.
    WaitForRelease,
}

#[derive(Debug)]
struct Slot<H> {
    id: u64,
    opened: Instant,
    answering: bool,
    spoke: Arc<AtomicBool>,
    handle: H,
}

/// The connection slots of [`serve`](super::serve): which connections hold one, which of them have sent
/// a complete request (answering) and which are still idle, and who gives way when all
/// are taken. Pure bookkeeping; `H` is what shuts a connection (a clone of its socket).
#[derive(Debug)]
pub struct Slots<H> {
    cap: usize,
    next: u64,
    held: Vec<Slot<H>>,
}

impl<H> Slots<H> {
    /// `cap` slots, all free.
    pub fn new(cap: usize) -> Self {
        Slots {
            cap,
            next: 0,
            held: Vec::new(),
        }
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// What to do at `now` before a waiting connection takes a slot, when every slot is
    /// taken: the oldest connection that has sent nothing gives way once it has had
    /// [`SILENT_GRACE`], else the oldest idle one (no complete request head) once it has
    /// had [`EVICT_AFTER`].
    pub fn make_room(&mut self, now: Instant) -> Room<H> {
        if self.held.len() < self.cap {
            return Room::Free;
        }
        // Slots are kept in the order they were taken: the first of a kind is the oldest.
        let silent = self
            .held
            .iter()
            .position(|s| !s.answering && !s.spoke.load(Ordering::Relaxed))
            .map(|i| (i, self.held[i].opened + SILENT_GRACE));
        let idle = self
            .held
            .iter()
            .position(|s| !s.answering)
            .map(|i| (i, self.held[i].opened + EVICT_AFTER));
        // While a silent connection holds a slot, no connection that has begun gives way:
        // the silent one does, when it has had SILENT_GRACE.
        match (silent, idle) {
            (Some((i, at)), _) | (None, Some((i, at))) if now >= at => {
                Room::Evict(self.held.remove(i).handle)
            }
            (Some((_, at)), _) | (None, Some((_, at))) => Room::WaitUntil(at),
            (None, None) => Room::WaitForRelease,
        }
    }

    /// Marks as spoken every idle, silent connection for which `pending` says bytes have
    /// arrived (read or not by its thread).
    pub fn refresh_spoken(&mut self, pending: impl Fn(&H) -> bool) {
        for s in &self.held {
            if !s.answering && !s.spoke.load(Ordering::Relaxed) && pending(&s.handle) {
                s.spoke.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The flag the connection `id` sets at its first byte ([`serve_conn_flagged`](super::serve_conn_flagged)).
    pub fn spoke_flag(&self, id: u64) -> Option<Arc<AtomicBool>> {
        self.held
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.spoke.clone())
    }

    /// Takes a slot for a connection accepted at `now` (after [`Slots::make_room`] said
    /// [`Room::Free`] or evicted one); its id.
    pub fn take(&mut self, handle: H, now: Instant) -> u64 {
        let id = self.next;
        self.next += 1;
        self.held.push(Slot {
            id,
            opened: now,
            answering: false,
            spoke: Arc::new(AtomicBool::new(false)),
            handle,
        });
        id
    }

    /// Takes a slot, as [`Slots::take`], for a connection that has already spoken (what
    /// [`serve_with`](super::serve_with) promotes from its [`Lobby`]): [`SILENT_GRACE`] does not apply to it.
    pub fn take_spoken(&mut self, handle: H, now: Instant) -> u64 {
        let id = self.take(handle, now);
        if let Some(s) = self.held.last() {
            s.spoke.store(true, Ordering::Relaxed);
        }
        id
    }

    /// The connection `id` has sent its request head: it is no longer idle, so no new
    /// connection can evict it.
    pub fn answering(&mut self, id: u64) {
        if let Some(s) = self.held.iter_mut().find(|s| s.id == id) {
            s.answering = true;
        }
    }

    /// The connection `id` is done (a no-op when it was evicted).
    pub fn release(&mut self, id: u64) {
        self.held.retain(|s| s.id != id);
    }
}

/// What [`Lobby::admit`] did with a newly accepted connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<H> {
    /// It waits in the lobby under this id.
    In(u64),
    /// It waits under this id; the lobby was full, and this, its oldest silent connection,
    /// was put out for it: close it.
    Displaced(u64, H),
    /// The lobby is full of speakers waiting for a slot, which a silent connection never
    /// puts out: close the new connection (this).
    Refused(H),
}

/// What [`Lobby::promote`] did: speakers given a slot, slot holders that gave way for them.
#[derive(Debug, PartialEq, Eq)]
pub struct Promoted<H, S> {
    /// Speakers that took a slot, in the order they spoke: the connection and its slot id
    /// (its `spoke` flag already set). Serve each.
    pub admitted: Vec<(H, u64)>,
    /// Slot holders that gave way (idle past [`EVICT_AFTER`]): shut them.
    pub evicted: Vec<S>,
    /// Speakers whose slot handle could not be made: close them.
    pub dropped: Vec<H>,
    /// Speakers still wait and the oldest idle slot may give way at this instant (`None`
    /// while they wait for a release, or when none waits).
    pub retry_at: Option<Instant>,
}

#[derive(Debug)]
struct Guest<H> {
    id: u64,
    arrived: Instant,
    handle: H,
}

/// The connections of [`serve_with`](super::serve_with) that hold no slot: the silent ones (accepted, nothing
/// received yet), in the order they were accepted, and the speakers (first bytes received)
/// waiting for a slot, in the order they spoke (those seen in the same round in the order
/// they were accepted). At most `cap` in all; a silent one is closed at [`HEADER_TIMEOUT`]
/// or put out by a newcomer when the lobby is full; a speaker leaves only for a slot or
/// when its peer goes away. Pure bookkeeping; `H` is the connection.
#[derive(Debug)]
pub struct Lobby<H> {
    cap: usize,
    next: u64,
    silent: VecDeque<Guest<H>>,
    speakers: VecDeque<Guest<H>>,
}

impl<H> Lobby<H> {
    /// A lobby of at most `cap` connections (at least one).
    pub fn new(cap: usize) -> Self {
        Lobby {
            cap: cap.max(1),
            next: 0,
            silent: VecDeque::new(),
            speakers: VecDeque::new(),
        }
    }

    /// Connections in the lobby, silent or waiting.
    pub fn len(&self) -> usize {
        self.silent.len() + self.speakers.len()
    }

    /// Whether the lobby is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Speakers waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.speakers.len()
    }

    /// Lets in a connection accepted at `now`, silent: when the lobby is full, the oldest
    /// silent connection is put out for it, or, all of them having spoken, it is refused.
    pub fn admit(&mut self, handle: H, now: Instant) -> Admit<H> {
        let out = if self.len() >= self.cap {
            // Silent connections are kept in the order they were accepted.
            match self.silent.pop_front() {
                Some(g) => Some(g.handle),
                None => return Admit::Refused(handle),
            }
        } else {
            None
        };
        let id = self.next;
        self.next += 1;
        self.silent.push_back(Guest {
            id,
            arrived: now,
            handle,
        });
        match out {
            Some(h) => Admit::Displaced(id, h),
            None => Admit::In(id),
        }
    }

    /// The silent connection `id` has sent its first bytes: it waits for a slot behind the
    /// speakers seen before it. False when `id` is no silent connection of the lobby.
    pub fn spoke(&mut self, id: u64) -> bool {
        let Some(i) = self.silent.iter().position(|g| g.id == id) else {
            return false;
        };
        match self.silent.remove(i) {
            Some(g) => {
                self.speakers.push_back(g);
                true
            }
            None => false,
        }
    }

    /// Takes the connection `id` out (its peer went away): what to close.
    pub fn remove(&mut self, id: u64) -> Option<H> {
        for q in [&mut self.silent, &mut self.speakers] {
            if let Some(i) = q.iter().position(|g| g.id == id) {
                return q.remove(i).map(|g| g.handle);
            }
        }
        None
    }

    /// Takes out every silent connection that has been in the lobby [`HEADER_TIMEOUT`] at
    /// `now`: what to close. Speakers do not expire here (their head's deadline starts
    /// with their slot).
    pub fn expire(&mut self, now: Instant) -> Vec<H> {
        if self.next_expiry().is_none_or(|at| at > now) {
            return Vec::new();
        }
        let (gone, kept) = std::mem::take(&mut self.silent)
            .into_iter()
            .partition(|g| g.arrived + HEADER_TIMEOUT <= now);
        self.silent = kept;
        gone.into_iter().map(|g: Guest<H>| g.handle).collect()
    }

    /// When the next silent connection expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.silent.iter().map(|g| g.arrived + HEADER_TIMEOUT).min()
    }

    /// Every connection in the lobby, waiting speakers first: its id, the connection, and
    /// whether it has spoken.
    pub fn guests(&self) -> impl Iterator<Item = (u64, &H, bool)> {
        let speakers = self.speakers.iter().map(|g| (g.id, &g.handle, true));
        speakers.chain(self.silent.iter().map(|g| (g.id, &g.handle, false)))
    }

    /// Gives waiting speakers slots at `now`, in the order they spoke, as [`Slots`] makes
    /// room ([`Slots::make_room`]: a free slot, else the oldest idle one once it has had
    /// [`EVICT_AFTER`]); `slot_handle` makes what the slot keeps to shut the connection.
    /// Room is asked for only while a speaker waits, so no slot gives way for nothing;
    /// silent connections never take a slot.
    pub fn promote<S>(
        &mut self,
        slots: &mut Slots<S>,
        now: Instant,
        mut slot_handle: impl FnMut(&H) -> Option<S>,
    ) -> Promoted<H, S> {
        let mut out = Promoted {
            admitted: Vec::new(),
            evicted: Vec::new(),
            dropped: Vec::new(),
            retry_at: None,
        };
        while !self.speakers.is_empty() {
            match slots.make_room(now) {
                Room::Free => {}
                Room::Evict(h) => out.evicted.push(h),
                Room::WaitUntil(at) => {
                    out.retry_at = Some(at);
                    break;
                }
                Room::WaitForRelease => break,
            }
            let Some(g) = self.speakers.pop_front() else {
                break;
            };
            match slot_handle(&g.handle) {
                Some(s) => {
                    let id = slots.take_spoken(s, now);
                    out.admitted.push((g.handle, id));
                }
                None => out.dropped.push(g.handle),
            }
        }
        out
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// [`Lobby::promote`] with the connection's name for its slot handle.
    fn promote(
        l: &mut Lobby<&'static str>,
        s: &mut Slots<&'static str>,
        now: Instant,
    ) -> Promoted<&'static str, &'static str> {
        l.promote(s, now, |h| Some(*h))
    }

    fn names(p: &Promoted<&'static str, &'static str>) -> Vec<&'static str> {
        p.admitted.iter().map(|(h, _)| *h).collect()
    }

    /// However many silent connections come (more than the lobby holds), a speaker takes a
    /// free slot at once; silent ones never take a slot.
    #[test]
    fn silent_floods_never_delay_a_speaker() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(8), Slots::new(2));
        for _ in 0..100 {
            let _ = l.admit("silent", t0);
        }
        assert_eq!(l.len(), 8);
        let p = promote(&mut l, &mut s, t0);
        assert!(
            p.admitted.is_empty() && s.is_empty(),
            "no slot for the silent"
        );
        let Admit::Displaced(scraper, "silent") = l.admit("scraper", t0) else {
            panic!("the oldest silent one makes room");
        };
        assert!(l.spoke(scraper));
        // Once it has spoken, no flood puts it out.
        for _ in 0..100 {
            let _ = l.admit("silent", t0);
        }
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["scraper"]);
        assert_eq!(p.retry_at, None);
        assert_eq!(s.len(), 1);
        assert_eq!(l.len(), 7);
    }

    /// A full lobby puts out its oldest silent connection for a newcomer, never a speaker;
    /// full of speakers, it refuses the newcomer.
    #[test]
    fn the_lobby_bound_puts_out_the_oldest_silent() {
        let t0 = Instant::now();
        let mut l = Lobby::new(3);
        let Admit::In(_) = l.admit("a", t0) else {
            panic!()
        };
        let Admit::In(b) = l.admit("b", t0 + Duration::from_millis(1)) else {
            panic!()
        };
        let Admit::In(c) = l.admit("c", t0 + Duration::from_millis(2)) else {
            panic!()
        };
        assert!(l.spoke(b));
        let Admit::Displaced(d, "a") = l.admit("d", t0 + Duration::from_millis(3)) else {
            panic!("a, the oldest silent")
        };
        let Admit::Displaced(_, "c") = l.admit("e", t0 + Duration::from_millis(4)) else {
            panic!("c: b has spoken")
        };
        assert!(l.spoke(d));
        let Admit::Displaced(_, "e") = l.admit("f", t0) else {
            panic!("e, the only silent one")
        };
        assert!(!l.spoke(c), "gone");
        assert_eq!(l.remove(c), None);
        let f = l.guests().find(|g| *g.1 == "f").unwrap().0;
        assert!(l.spoke(f));
        assert_eq!(
            l.admit("g", t0),
            Admit::Refused("g"),
            "all three wait for a slot"
        );
        assert_eq!(l.len(), 3);
        assert_eq!(l.waiting(), 3);
    }

    /// A speaker waits for a free slot or an idle one that has had EVICT_AFTER (answering
    /// slots never give way), and silent newcomers never put it out meanwhile.
    #[test]
    fn a_speaker_waits_for_a_free_or_evictable_slot() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(2), Slots::new(2));
        let busy = s.take_spoken("busy", t0);
        s.answering(busy);
        s.take_spoken("idle", t0 + Duration::from_millis(100));
        let Admit::In(x) = l.admit("speaker", t0) else {
            panic!()
        };
        assert!(l.spoke(x));
        let now = t0 + Duration::from_millis(200);
        let p = promote(&mut l, &mut s, now);
        assert!(p.admitted.is_empty());
        let at = t0 + Duration::from_millis(100) + EVICT_AFTER;
        assert_eq!(p.retry_at, Some(at), "when the idle slot may give way");
        for _ in 0..10 {
            let _ = l.admit("silent", now);
        }
        assert_eq!(l.waiting(), 1, "still waiting, not put out");
        let p = promote(&mut l, &mut s, at);
        assert_eq!((names(&p), p.evicted), (vec!["speaker"], vec!["idle"]));
        // The speaker's slot has spoken: it is never taken for a silent one, and gives way
        // only as an idle one does.
        let speaker = p.admitted[0].1;
        assert!(s.spoke_flag(speaker).unwrap().load(Ordering::Relaxed));
        let Some((y, _, _)) = l.guests().next() else {
            panic!()
        };
        assert!(l.spoke(y));
        s.answering(speaker);
        let p = promote(&mut l, &mut s, at + EVICT_AFTER * 10);
        assert_eq!(
            (p.admitted.len(), p.retry_at),
            (0, None),
            "every slot answering"
        );
        s.release(busy);
        let p = promote(&mut l, &mut s, at + EVICT_AFTER * 10);
        assert_eq!(names(&p), ["silent"]);
        assert_eq!(l.waiting(), 0);
    }

    /// A silent connection is closed once it has been in the lobby HEADER_TIMEOUT; a
    /// speaker waiting for a slot is not.
    #[test]
    fn silent_connections_expire_at_the_header_timeout() {
        let t0 = Instant::now();
        let mut l = Lobby::new(4);
        let Admit::In(_) = l.admit("early", t0) else {
            panic!()
        };
        let later = t0 + Duration::from_millis(300);
        let Admit::In(_) = l.admit("later", later) else {
            panic!()
        };
        let Admit::In(sp) = l.admit("speaker", t0) else {
            panic!()
        };
        assert!(l.spoke(sp));
        assert_eq!(l.next_expiry(), Some(t0 + HEADER_TIMEOUT));
        let just_before = t0 + HEADER_TIMEOUT - Duration::from_millis(1);
        assert!(l.expire(just_before).is_empty());
        assert_eq!(l.expire(t0 + HEADER_TIMEOUT), ["early"]);
        assert_eq!(l.next_expiry(), Some(later + HEADER_TIMEOUT));
        assert_eq!(l.expire(later + HEADER_TIMEOUT * 5), ["later"]);
        assert_eq!(l.next_expiry(), None);
        assert_eq!(l.waiting(), 1, "the speaker stays");
        assert_eq!(l.remove(sp), Some("speaker"), "until its peer goes away");
        assert!(l.is_empty());
    }

    /// Speakers take slots in the order they spoke (in the order they were accepted when
    /// seen in the same round), whatever the silent ones around them.
    #[test]
    fn speakers_take_slots_in_the_order_they_spoke() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(8), Slots::new(8));
        let ids: Vec<u64> = ["a", "b", "c", "d", "e"]
            .into_iter()
            .map(|n| match l.admit(n, t0) {
                Admit::In(id) => id,
                other => panic!("{other:?}"),
            })
            .collect();
        // Seen in this order: d, then b and a in the same round (accept order: a, b).
        for i in [3, 0, 1] {
            assert!(l.spoke(ids[i]));
        }
        let spoken: Vec<_> = l.guests().filter(|g| g.2).map(|g| *g.1).collect();
        assert_eq!(spoken, ["d", "a", "b"]);
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["d", "a", "b"]);
        assert_eq!(l.len(), 2);
        // With one slot, the first speaker waits for it, then the next.
        let (mut l, mut s) = (Lobby::new(8), Slots::new(1));
        let first = s.take_spoken("holder", t0);
        s.answering(first);
        for n in ["x", "y"] {
            let Admit::In(id) = l.admit(n, t0) else {
                panic!()
            };
            assert!(l.spoke(id));
        }
        assert!(promote(&mut l, &mut s, t0).admitted.is_empty());
        s.release(first);
        let p = promote(&mut l, &mut s, t0);
        assert_eq!(names(&p), ["x"]);
    }

    /// A slot handle that cannot be made drops that speaker, not the next one.
    #[test]
    fn a_speaker_without_a_slot_handle_is_dropped() {
        let t0 = Instant::now();
        let (mut l, mut s) = (Lobby::new(4), Slots::new(1));
        for n in ["bad", "good"] {
            let Admit::In(id) = l.admit(n, t0) else {
                panic!()
            };
            assert!(l.spoke(id));
        }
        let p = l.promote(&mut s, t0, |h| (*h != "bad").then_some(*h));
        assert_eq!((names(&p), p.dropped), (vec!["good"], vec!["bad"]));
    }

    /// A connection that has sent nothing gives way after SILENT_GRACE, before an older one
    /// that has begun (a scraper mid-handshake), which keeps its slot until EVICT_AFTER and
    /// then only when no silent one is left.
    #[test]
    fn silent_connections_give_way_before_one_that_has_begun() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(2);
        let scraper = s.take("scraper", t0);
        let _idle = s.take("idle", t0 + Duration::from_millis(10));
        s.spoke_flag(scraper)
            .unwrap()
            .store(true, Ordering::Relaxed);
        assert_eq!(
            s.make_room(t0 + Duration::from_millis(20)),
            Room::WaitUntil(t0 + Duration::from_millis(10) + SILENT_GRACE)
        );
        let late = t0 + EVICT_AFTER * 3;
        assert_eq!(
            s.make_room(late),
            Room::Evict("idle"),
            "the silent one, not the older scraper"
        );
        let _next = s.take("next", late);
        s.spoke_flag(_next).unwrap().store(true, Ordering::Relaxed);
        // Only connections that have begun: the oldest past EVICT_AFTER.
        assert_eq!(s.make_room(late), Room::Evict("scraper"));
        assert!(SILENT_GRACE < EVICT_AFTER);
    }

    /// A scraper past EVICT_AFTER (a slow handshake on a loaded machine) is not cut off
    /// while a young silent connection holds a slot: the silent one goes once it has had
    /// SILENT_GRACE (the matrix caught the scraper evicted that way).
    #[test]
    fn a_slow_scraper_outlasts_young_silent_connections() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(2);
        let scraper = s.take("scraper", t0);
        s.spoke_flag(scraper)
            .unwrap()
            .store(true, Ordering::Relaxed);
        let young = t0 + EVICT_AFTER;
        s.take("silent", young);
        let now = young + Duration::from_millis(10);
        assert_eq!(s.make_room(now), Room::WaitUntil(young + SILENT_GRACE));
        assert_eq!(s.make_room(young + SILENT_GRACE), Room::Evict("silent"));
    }

    #[test]
    fn free_slots_are_taken_then_the_oldest_idle_gives_way() {
        let t0 = Instant::now();
        let mut s: Slots<&str> = Slots::new(3);
        assert_eq!(s.make_room(t0), Room::Free);
        let a = s.take("a", t0);
        let b = s.take("b", t0 + Duration::from_millis(10));
        let c = s.take("c", t0 + Duration::from_millis(20));
        assert_eq!(s.len(), 3);
        // All three have begun (a TLS handshake, part of a request): EVICT_AFTER applies.
        for id in [a, b, c] {
            s.spoke_flag(id).unwrap().store(true, Ordering::Relaxed);
        }
        // Full; no one has had EVICT_AFTER yet: wait until the oldest has.
        assert_eq!(s.make_room(t0), Room::WaitUntil(t0 + EVICT_AFTER));
        // a sent its request: answering connections never give way; b is the oldest idle.
        s.answering(a);
        let later = t0 + EVICT_AFTER + Duration::from_millis(5);
        assert_eq!(
            s.make_room(t0 + Duration::from_millis(15)),
            Room::WaitUntil(t0 + Duration::from_millis(10) + EVICT_AFTER)
        );
        assert_eq!(
            s.make_room(later + Duration::from_millis(10)),
            Room::Evict("b")
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.make_room(later), Room::Free);
        let d = s.take("d", later);
        s.spoke_flag(d).unwrap().store(true, Ordering::Relaxed);
        s.answering(c);
        s.answering(d);
        assert_eq!(s.make_room(later + EVICT_AFTER * 10), Room::WaitForRelease);
        // An evicted connection's release is a no-op; a real one frees its slot.
        s.release(b);
        assert_eq!(s.len(), 3);
        s.release(c);
        assert_eq!(s.make_room(later), Room::Free);
        s.release(a);
        s.release(d);
        assert!(s.is_empty());
    }

    #[test]
    fn idle_connections_give_way_in_the_order_they_came() {
        let t0 = Instant::now();
        let mut s: Slots<u32> = Slots::new(2);
        s.take(1, t0);
        s.take(2, t0);
        let late = t0 + EVICT_AFTER;
        assert_eq!(s.make_room(late), Room::Evict(1));
        let n3 = s.take(3, late);
        assert_eq!(s.make_room(late), Room::Evict(2));
        let n4 = s.take(4, late);
        // The newcomers are young again: nothing gives way before they have had their time
        // (SILENT_GRACE while they have sent nothing, EVICT_AFTER once they have begun).
        assert_eq!(s.make_room(late), Room::WaitUntil(late + SILENT_GRACE));
        for id in [n3, n4] {
            s.spoke_flag(id).unwrap().store(true, Ordering::Relaxed);
        }
        assert_eq!(s.make_room(late), Room::WaitUntil(late + EVICT_AFTER));
    }
}
