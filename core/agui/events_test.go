package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

func TestRunError(t *testing.T) {
	cases := []struct{ message, code, want string }{
		{"the agent's stream ended without finishing", "provider_stream_ended_without_finishing",
			`{"type":"RUN_ERROR","message":"the agent's stream ended without finishing","code":"provider_stream_ended_without_finishing"}`},
		{"agent is currently offline", "", `{"type":"RUN_ERROR","message":"agent is currently offline"}`},
		{"", "", `{"type":"RUN_ERROR","message":""}`},
		{"<b>&\"é\"\n", "x<y", `{"type":"RUN_ERROR","message":"<b>&\"é\"\n","code":"x<y"}`},
	}
	for _, tc := range cases {
		got := agui.RunError(tc.message, tc.code)
		if string(got) != tc.want {
			t.Errorf("RunError(%q, %q) = %s, want %s", tc.message, tc.code, got, tc.want)
		}
		info, err := agui.Validate(got)
		if err != nil || !info.RunError || info.ErrorMessage != tc.message || info.ErrorCode != tc.code {
			t.Errorf("Validate(RunError(%q, %q)) = %+v, %v", tc.message, tc.code, info, err)
		}
	}
}
