package handshake

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReasonsFitACloseFrame(t *testing.T) {
	for _, r := range []string{
		reasonNoHello, reasonNotHello, reasonTooLarge, reasonNoVersion, reasonNoPublicKey,
		reasonNoTicket, reasonNoNonce, reasonNoProof, reasonMaxRuns, reasonNonceColon,
		reasonUnknown, reasonBadProof, reasonStoreDown, reasonShuttingDown,
	} {
		if len(r) > MaxReasonBytes || !utf8.ValidString(r) || r == "" {
			t.Errorf("reason %q: %d bytes (max %d), valid UTF-8 %v", r, len(r), MaxReasonBytes, utf8.ValidString(r))
		}
	}
	if !strings.Contains(reasonNoVersion, "v4") || !strings.Contains(reasonNoVersion, "ticket") {
		t.Errorf("reasonNoVersion %q should name wire v4 and the ticket handshake", reasonNoVersion)
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("—", 50) // 3 bytes each
	got := truncate(s, MaxReasonBytes)
	if len(got) > MaxReasonBytes || !utf8.ValidString(got) || len(got) != 123 {
		t.Fatalf("truncate: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := truncate("a—", 2); got != "a" {
		t.Fatalf("truncate(a—, 2) = %q", got)
	}
	if got := clip("abcdef", 5); got != "ab…" {
		t.Fatalf("clip = %q", got)
	}
	if got := clip("abc", 5); got != "abc" {
		t.Fatalf("clip = %q", got)
	}
}
