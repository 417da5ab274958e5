// Package identity holds funduq's Ed25519 identity primitives and the exact
// byte layouts they sign: lowercase-hex keys, signatures and fingerprints; the
// signed payload families of the provider link and the caller doors
// (provider-connect, funduq-connect, kyok-call, cancel, view, resolution and the
// gateway's presenter proof) with their ±60 s freshness rule; the actor chain of
// compact EdDSA JWS hops, verified hop by hop and extended with funduq's own
// dispatch hop; and the HMAC-SHA256 KYOK bearer token. Every layout is
// byte-compatible with the Python reference implementation, so the published
// contract vectors reproduce exactly; all refusals are typed errors wrapped with
// context so callers can map them to a status with errors.Is.
package identity
