package run

// Reason is why a run failed. It is stored with the failed run and carried in
// its terminal RUN_ERROR event. A provider's own refusal reason is recorded
// verbatim, so Reason is an open string type; the constants below are the
// reasons funduq itself authors. A provider may write the same text, so
// the text alone does not say whose it is: the record says so beside it
// (store.Run.FailureByProvider, design.md §Counters).
type Reason string

const (
	// ReasonAgentOffline: the run was taken into a lane while nobody served
	// its agent (D8: the broker decides "served").
	ReasonAgentOffline Reason = "agent_offline"
	// ReasonNoProviderTookIt: a queued run's agent stayed unserved past the
	// unserved window, clocked from the later of queued-at and unserved-since.
	ReasonNoProviderTookIt Reason = "no_provider_took_it"
	// ReasonProviderLeftHoldingIt: the provider holding a claimed run went
	// away; it also counts abandoned against that provider.
	ReasonProviderLeftHoldingIt Reason = "provider_left_holding_it"
	// ReasonStreamEndedWithoutFinishing: finish arrived with no RUN_FINISHED,
	// no cancel requested, and no RUN_ERROR of the provider's own.
	ReasonStreamEndedWithoutFinishing Reason = "provider_stream_ended_without_finishing"
	// ReasonMalformedEvent: a known AG-UI event failed validation, or an
	// event had no type string.
	ReasonMalformedEvent Reason = "provider sent a malformed AG-UI event"
	// ReasonEventLimit: the provider sent more events in one run round
	// than the broker's limit (config BrokerLimits.MaxEventsPerRun).
	ReasonEventLimit Reason = "provider_exceeded_event_limit"
	// ReasonEventTooLarge: the provider sent an event larger than the
	// broker's limit (config BrokerLimits.MaxEventBytes).
	ReasonEventTooLarge Reason = "provider_sent_an_oversized_event"
	// ReasonOrphanedByRestart: a held run nobody re-adopted after the broker
	// restarted or failed over (within provider_grace, D7).
	ReasonOrphanedByRestart Reason = "orphaned_by_funduq_restart"
	// ReasonInterjectionTargetLost: a queued interjection whose target run
	// did not survive a restart or failover.
	ReasonInterjectionTargetLost Reason = "interjection_target_lost"
	// ReasonPausedNoResume: named by the seeds for a paused run given up on.
	// funduq-go never writes it (D1: a pause has no deadline of funduq's); it
	// is kept so records written by other implementations read back.
	ReasonPausedNoResume Reason = "paused_no_resume"
	// ReasonProviderDidNotAnswer: named by funduq's original settings for an
	// offer past deliver_timeout. Its lane requeues such a run and counts
	// unanswered instead (design.md §Counters), which is what funduq-go does; kept for the
	// same reason as ReasonPausedNoResume.
	ReasonProviderDidNotAnswer Reason = "provider_did_not_answer"
	// ReasonStalledNoActivity: the retired silence clock ("silence is not a
	// verdict"). Never written; kept for reading old records.
	ReasonStalledNoActivity Reason = "stalled_no_activity"
)

// FunduqReasons lists every reason funduq itself may author or read back.
var FunduqReasons = []Reason{
	ReasonAgentOffline,
	ReasonNoProviderTookIt,
	ReasonProviderLeftHoldingIt,
	ReasonStreamEndedWithoutFinishing,
	ReasonMalformedEvent,
	ReasonEventLimit,
	ReasonEventTooLarge,
	ReasonOrphanedByRestart,
	ReasonInterjectionTargetLost,
	ReasonPausedNoResume,
	ReasonProviderDidNotAnswer,
	ReasonStalledNoActivity,
}

// StreamEndedMessage is the human message of the synthesized RUN_ERROR for
// ReasonStreamEndedWithoutFinishing (the reason rides as its code).
const StreamEndedMessage = "the agent's stream ended without finishing"

// sentences are the human messages of the RUN_ERROR funduq writes for its
// own reasons; the reason itself rides as the event's code.
var sentences = map[Reason]string{
	ReasonAgentOffline:                "nobody serves this agent right now",
	ReasonNoProviderTookIt:            "no provider took the run before the unserved window ended",
	ReasonProviderLeftHoldingIt:       "the provider left while it was running this run",
	ReasonStreamEndedWithoutFinishing: StreamEndedMessage,
	ReasonMalformedEvent:              "the provider sent an AG-UI event that does not validate",
	ReasonEventLimit:                  "the provider sent more events than one run may hold",
	ReasonEventTooLarge:               "the provider sent an event larger than funduq accepts",
	ReasonOrphanedByRestart:           "funduq restarted and the provider did not come back for this run in time",
	ReasonInterjectionTargetLost:      "the run this interjection addressed did not survive a funduq restart",
}

// Sentence is the human message for a reason funduq wrote: a sentence for
// its own reasons, the reason itself otherwise. A provider's refusal is its
// own sentence and never passes through here, even in funduq's words.
func Sentence(reason Reason) string {
	if s, ok := sentences[reason]; ok {
		return s
	}
	return string(reason)
}
