// Package intake tells the broker node when runs need its attention. The
// doors insert run rows and pg_notify one of store.Channels in the same
// transaction, with the run id as the payload (a queued notice adds the run
// as queued when it fits, store.QueuedPayload, read into Notice.Run); a
// Listener holds one
// dedicated PostgreSQL connection that LISTENs on those channels and hands each
// notification to a Handler, in arrival order. Because NOTIFY is lost while a
// listener is disconnected, the notification is only a hint: the Handler is
// also told to catch up — to query the table itself — right after every
// (re)connect, once the LISTENs are active so nothing falls in the gap, and
// every PollInterval as a safety poll even while healthy. The Listener
// interrupts its wait every PingInterval to ping the connection (a silently
// dropped socket would otherwise hang the wait forever) and reconnects with
// exponential backoff and jitter, forever, until its context is cancelled.
package intake
