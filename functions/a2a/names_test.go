package a2a_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"testing"
	"time"

	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/nodejs"
)

// The door's method names and error codes are the official JavaScript
// SDK's own: its v0.3 method constants map to the v1.0 names the door
// pairs them with, every v1.0 name is one the SDK knows, and the error
// code table is the SDK's A2A_ERROR_CODE exactly.
func TestNamesMatchOfficialSDK(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@a2a-js/sdk")
	var v10 []string
	for _, m := range a2a.Methods {
		if m.V10 != "" {
			v10 = append(v10, m.V10)
		}
	}
	arg, _ := json.Marshal(v10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "names.mjs", string(arg))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node names.mjs: %v", err)
	}
	var sdk struct {
		LegacyToV1 map[string]string `json:"legacyToV1"`
		V1         map[string]bool   `json:"v1"`
		ErrorCodes map[string]int    `json:"errorCodes"`
	}
	if err := json.Unmarshal(out, &sdk); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	ours := map[string]string{}
	for _, m := range a2a.Methods {
		if m.V03 != "" {
			ours[m.V03] = m.V10
		}
	}
	if !reflect.DeepEqual(ours, sdk.LegacyToV1) {
		t.Errorf("v0.3 → v1.0 method names:\n door %v\n sdk  %v", ours, sdk.LegacyToV1)
	}
	for name, known := range sdk.V1 {
		if !known {
			t.Errorf("the SDK does not know the v1.0 method %q", name)
		}
	}
	if !reflect.DeepEqual(a2a.ErrorCodes, sdk.ErrorCodes) {
		t.Errorf("error codes:\n door %v\n sdk  %v", a2a.ErrorCodes, sdk.ErrorCodes)
	}
}
