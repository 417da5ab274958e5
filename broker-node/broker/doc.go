// Package broker is the heart of the broker node: the roster of provider
// links and their capacity buckets, one lane per active run, taking queued
// runs from the shared database (the intake listener's notices and the
// catch-up), the sweep and the quality counters (design.md §The
// shape, §Counters, §Timers). Every run owns one goroutine whose only wait is its
// own command queue; everything that happens to a run — a chance to be
// offered, an answer, an event, a finish, a cancel, its provider leaving, a
// verdict of the sweep — is said into that queue, and the run decides. All of
// the broker's work runs under one leadership context and one epoch: when
// leadership ends, every lane stops and every link is closed, and the next
// leader reads the runs back from PostgreSQL.
//
// # A lane's states
//
// A lane is in one of five states, read from its fields (lane.go):
// waiting (no offer out and nobody holds the run; the record says queued),
// offering (l.offer is out; offering), claimed (l.claimedBy holds it;
// running, or cancelling once a cancel was passed on), held (l.orphan: a
// provider may come back and re-adopt it; running or cancelling under an
// older epoch or a lost link) and ended (forget ran; the lane stops
// reading). In outline:
//
//	              +------ handBack -------+
//	              v                       |
//	take ----> waiting --- tryCmd ---> offering --- accepted ---> claimed ---> ended
//	              |                                               ^  |  ^
//	              +---------- late ack (claimByReport) -----------+  v  | re-adopted
//	takeover (adoptLater) -----------------------------------------> held
//
// The outline draws only the claimed run's end: waiting, offering and held
// reach ended too (a cancel, the unserved clock, a fail verdict, a refused
// offer or claim, the grace's end), as the list below says.
//
// The commands (commands.go) that move it, as handle dispatches them:
//
//	waiting  -- tryCmd [thread head or the live target of an interjection,
//	            agent served, a place on its key] ------------------> offering
//	waiting  -- tryCmd, the frame not sent or the offering write refused
//	            -----------------------------------------------------> waiting
//	waiting  -- tryCmd, the offering write finds the run no longer queued -> ended
//	waiting  -- eventCmd, finishCmd or verdictCmd accepted from the key
//	            serving the agent (the late ack, claimByReport) -----> claimed
//	waiting  -- cancelCmd -------------------------------------------> ended cancelled
//	waiting  -- expireCmd, still unserved ---------------------------> ended failed
//	            (no_provider_took_it)
//	waiting  -- failCmd (agent_offline, interjection_target_lost), the
//	            verdict still so as the lane reads it ----------------> ended failed
//	            (a stale one — the run offered, claimed or served since —
//	            is dropped: verdictStands)
//	offering -- verdictCmd accepted, or eventCmd or finishCmd from the
//	            offer's link (claimByReport) ------------------------> claimed
//	offering -- verdictCmd declined, lapseCmd, goneCmd of the offer's
//	            link (handBack) -------------------------------------> waiting
//	offering -- lapseCmd read late (the broker ran late): put off once -> offering
//	offering -- offeringDueCmd (out OfferingAfter, unanswered): the
//	            offering write; refused, the offer retracted --------> ended
//	            (until then the record says queued; a hand-back reads
//	            it instead, stillQueued, and ends a run no longer queued)
//	offering -- verdictCmd refused ----------------------------------> ended failed
//	offering -- the claim refused by the record, the run no longer
//	            waiting (claimRefused): the offer retracted ----------> ended
//	claimed  -- eventCmd: relayed (admitted, persisted, published) --> claimed
//	claimed  -- a report from a newer link of the holder's key -----> claimed (passed on;
//	            a pending cancel sent anew there, as on a pass at close)
//	claimed  -- cancelCmd: cancelling, the cancel frame sent (once
//	            per link: asked again, nothing more is sent) ---------> claimed
//	claimed  -- finishCmd, or events with their finish behind them --> ended (the funnel)
//	claimed  -- a malformed or over-limit event ---------------------> ended failed
//	claimed  -- storedEndCmd (the sweep: its terminal event is stored) -> ended (the funnel)
//	claimed  -- goneCmd of a link lost without a close frame, a link
//	            grace, no terminal event stored ---------------------> held
//	claimed  -- goneCmd otherwise -----------------------------------> ended failed
//	            (provider_left_holding_it, abandoned counted)
//	held     -- eventCmd, finishCmd or verdictCmd accepted from its key
//	            (claimByReport: re-adopted; a pending cancel recorded,
//	            cancelling, and sent) --------------------------------> claimed
//	held     -- a report from its key whose re-adoption the record
//	            refuses, the run no longer held (claimRefused) --------> ended
//	held     -- cancelCmd: noted, sent once re-adopted --------------> held
//	held     -- reattachCmd: its key registered the run's agent within
//	            the link grace (onReattach): the link grace again,
//	            from the register, for its report ---------------------> held
//	held     -- storedEndCmd (its terminal event is stored) ---------> ended (the funnel)
//	held     -- orphanCmd (provider_grace or the link grace passed;
//	            one of a timer a re-attach replaced is stale) -------> ended failed
//	            (orphaned_by_funduq_restart; provider_left_holding_it
//	            and abandoned counted after a lost link)
//
// A finishCmd that claims the run (from the offer's link, a late ack or a
// re-adoption) ends it at once by the funnel. While an offer is out only
// its answer is read (answers): the other commands wait behind it, in
// order, and are read once it closes. Every road to ended that writes the
// run's end runs through conclude (end.go), and on each a run whose
// terminal event is stored ends by the funnel instead of failing (D15);
// the ones that write nothing — the offering write or the claim finding
// the run no longer waiting, its end already recorded — only forget the
// lane.
//
// # Where each phase lives
//
//	take.go     entering a lane: a notice, a run read by id, the catch-up's pages (take)
//	offer.go    waiting → offering and the answers to an offer (try, onVerdict, onLapse)
//	claim.go    → claimed: an accept, a late ack, a re-adoption (claim, claimByReport)
//	relay.go    claimed: events admitted and relayed (onEvents)
//	persist.go  the one write of a round (persist) and the live feed's publish
//	cancel.go   a cancel requested (onCancel) and passed on (sendCancel)
//	hold.go     → held and out of it: a lost link (onGone), the grace's end (onOrphanTimeout)
//	end.go      → ended: the funnel, failures, conclude and forget
//	sweep.go    the sweep's clocks and their verdicts (onExpire, verdictStands)
//	recover.go  a takeover: reading the runs back (recover, adoptLater)
//	index.go    the broker's indexes of lanes by thread, link and addressed run
//	lane.go     the lane's fields, its loop and the command dispatch (handle)
package broker
