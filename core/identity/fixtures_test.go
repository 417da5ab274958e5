package identity

import (
	"strings"
	"testing"
)

// Fixtures restated from the published contract vectors and spec examples, so
// unit tests and fuzz seeds read as values, not files (the files themselves are
// in testdata/reference).
const (
	testSeedA5 = "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"
	testKeyA5  = "29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55"
	testKeyB6  = "805440ee48051fc82ea64d905acabff0d21780f7fcaba6900e0e41387b1d4a57"

	vectorHop0     = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhY3RvclB1YmxpY0tleSI6IjI5ZTU4MzNhOTE1YTY0MjlhNGUzYTc5NDg0NzVjMzM4ZWY0MzZlYjgyYmU4OWM5MmYwNTk3MDQ0MDNkYjlkNTUiLCJwcmV2SGFzaCI6bnVsbH0.UdDNsBBdWnD09-_qQoH1SYv-APhcYZUCJS6gGml2YakXq-I3pLsHBn4zDmG0MZTFVLfZnEOj5XNiD_dTHPkLBg"
	vectorHop1     = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhY3RvclB1YmxpY0tleSI6IjgwNTQ0MGVlNDgwNTFmYzgyZWE2NGQ5MDVhY2FiZmYwZDIxNzgwZjdmY2FiYTY5MDBlMGU0MTM4N2IxZDRhNTciLCJwcmV2SGFzaCI6ImUxYTliMmVhNjQ3ZWExNzFjOTNkMjhkMTc0ZmI0MzY0N2Q2ZGU1YmUyZmJiZWI4Y2RhYWNiN2IxY2Y0ZGUwM2QifQ.BiPx2kQy-o2hQjDuAeUHDrrGbFcVc5O0wLdTlHV9Fbti2QCBsKz7bl4np2RCA78C2Fxoijt_F2BCwhnX6jQRDg"
	vectorDispatch = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhY3RvclB1YmxpY0tleSI6IjgwNTQ0MGVlNDgwNTFmYzgyZWE2NGQ5MDVhY2FiZmYwZDIxNzgwZjdmY2FiYTY5MDBlMGU0MTM4N2IxZDRhNTciLCJwcmV2SGFzaCI6ImUxYTliMmVhNjQ3ZWExNzFjOTNkMjhkMTc0ZmI0MzY0N2Q2ZGU1YmUyZmJiZWI4Y2RhYWNiN2IxY2Y0ZGUwM2QiLCJkaXNwYXRjaGVkVG8iOnsicHJvdmlkZXJLZXkiOiIyNWZjMzJjNDc4YTVhNGY4NGU0NTU3YTAzNDJlMDgyNzhjODgzNjQxYjYxNDliZGIwYjRhOTg2YWI2YzJjYjc4IiwibmFtZSI6InRyYW5zbGF0b3IifX0.diOeTiS2WvTiBEDPr_ZkpUBpfh0D_RFhR7UvHHnkvCROhWVsJEcTW7J1eTM3ZI64HQ8c4SSytmfwLK2USHq-DQ"

	// The KYOK token vector (testdata/reference/).
	kyokExampleSecret = "vectors-only-signing-secret"
	kyokExampleToken  = "eyJydW5JZCI6ICJydW4tMSIsICJwcm92aWRlcktleSI6ICIyOWU1ODMzYTkxNWE2NDI5YTRlM2E3OTQ4NDc1YzMzOGVmNDM2ZWI4MmJlODljOTJmMDU5NzA0NDAzZGI5ZDU1IiwgImFnZW50TmFtZSI6ICJ0cmFuc2xhdG9yIiwgImV4cCI6IDk5OTk5OTk5OTl9.4c45c00fc2a8ebd7cd55e66279431c9959044487bed38a642784fb537b6c12b9"
)

var kyokExampleClaims = KyokClaims{RunID: "run-1", ProviderKey: testKeyA5, AgentName: "translator", Exp: 9999999999}

// signerOf builds the signer whose seed is the byte b repeated 32 times.
func signerOf(t testing.TB, b string) *Signer {
	t.Helper()
	s, err := NewSignerFromSeedHex(strings.Repeat(b, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flipHex changes the lowercase hex digit at i to a different one.
func flipHex(s string, i int) string {
	c := byte('0')
	if s[i] == '0' {
		c = '1'
	}
	return s[:i] + string(c) + s[i+1:]
}
