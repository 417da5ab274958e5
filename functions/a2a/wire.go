package a2a

import (
	"time"
)

// Wire encodings of the task view, per protocol version: v0.3 (lowercase
// states, "kind" discriminators, a "final" flag on status updates) and
// v1.0 (ProtoJSON enums, stream items wrapped by their oneof name).

type wirePart struct {
	Kind string `json:"kind,omitempty"`
	Text string `json:"text"`
}

type wireMessage struct {
	Kind      string     `json:"kind,omitempty"`
	MessageID string     `json:"messageId"`
	Role      string     `json:"role"`
	Parts     []wirePart `json:"parts"`
	ContextID string     `json:"contextId,omitempty"`
	TaskID    string     `json:"taskId,omitempty"`
}

type wireArtifact struct {
	ArtifactID string     `json:"artifactId"`
	Parts      []wirePart `json:"parts"`
}

type wireStatus struct {
	State     string       `json:"state"`
	Message   *wireMessage `json:"message,omitempty"`
	Timestamp string       `json:"timestamp,omitempty"`
}

type wireTask struct {
	Kind      string         `json:"kind,omitempty"`
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    wireStatus     `json:"status"`
	Artifacts []wireArtifact `json:"artifacts,omitempty"`
	History   []wireMessage  `json:"history"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type wireStatusUpdate struct {
	Kind      string         `json:"kind,omitempty"`
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Status    wireStatus     `json:"status"`
	Final     *bool          `json:"final,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type wireArtifactUpdate struct {
	Kind      string       `json:"kind,omitempty"`
	TaskID    string       `json:"taskId"`
	ContextID string       `json:"contextId"`
	Artifact  wireArtifact `json:"artifact"`
	Append    bool         `json:"append"`
	LastChunk bool         `json:"lastChunk"`
}

func kind(v Version, k string) string {
	if v == V03 {
		return k
	}
	return ""
}

func textPart(v Version, s string) []wirePart { return []wirePart{{Kind: kind(v, "text"), Text: s}} }

func encodeMessage(v Version, m textMessage) wireMessage {
	role := m.Role
	if v == V10 {
		role = "ROLE_USER"
		if m.Role == "agent" {
			role = "ROLE_AGENT"
		}
	}
	return wireMessage{Kind: kind(v, "message"), MessageID: m.ID, Role: role, Parts: textPart(v, m.Text),
		ContextID: m.ContextID, TaskID: m.TaskID}
}

func encodeArtifact(v Version, a artifact) wireArtifact {
	return wireArtifact{ArtifactID: a.ID, Parts: textPart(v, a.Text)}
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

func encodeStatus(v Version, state TaskState, msg *textMessage, ts time.Time) wireStatus {
	ws := wireStatus{State: state.Name(v), Timestamp: timestamp(ts)}
	if msg != nil {
		m := encodeMessage(v, *msg)
		ws.Message = &m
	}
	return ws
}

func encodeTask(v Version, t taskView) wireTask {
	wt := wireTask{Kind: kind(v, "task"), ID: t.ID, ContextID: t.ContextID,
		Status: encodeStatus(v, t.State, t.StatusMsg, t.Timestamp), History: []wireMessage{}}
	for _, a := range t.Artifacts {
		wt.Artifacts = append(wt.Artifacts, encodeArtifact(v, a))
	}
	for _, m := range t.History {
		wt.History = append(wt.History, encodeMessage(v, m))
	}
	if len(t.Meta) > 0 {
		wt.Metadata = t.Meta
	}
	return wt
}

// streamTask is the opening item of a stream.
func streamTask(v Version, t taskView) any {
	wt := encodeTask(v, t)
	if v == V10 {
		return map[string]any{"task": wt}
	}
	return wt
}

func streamStatus(v Version, taskID, contextID string, state TaskState, msg *textMessage, ts time.Time,
	final bool, meta map[string]any) any {
	su := wireStatusUpdate{Kind: kind(v, "status-update"), TaskID: taskID, ContextID: contextID,
		Status: encodeStatus(v, state, msg, ts)}
	if len(meta) > 0 {
		su.Metadata = meta
	}
	if v == V03 {
		su.Final = &final
		return su
	}
	return map[string]any{"statusUpdate": su}
}

func streamArtifact(v Version, taskID, contextID string, a artifact, appendTo bool) any {
	au := wireArtifactUpdate{Kind: kind(v, "artifact-update"), TaskID: taskID, ContextID: contextID,
		Artifact: encodeArtifact(v, a), Append: appendTo}
	if v == V10 {
		return map[string]any{"artifactUpdate": au}
	}
	return au
}

// sendResult is message/send's result: the Task (v0.3), {task} (v1.0).
func sendResult(v Version, t taskView) any {
	wt := encodeTask(v, t)
	if v == V10 {
		return map[string]any{"task": wt}
	}
	return wt
}
